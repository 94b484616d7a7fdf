//! The shared store of a domain: named shared tables and bounded shared queues, the only state
//! its VMs share, reached from the host's threads too.
//!
//! [`ScriptDomain::shared`](crate::ScriptDomain::shared) answers the domain's [`SharedStore`];
//! [`SharedStore::table`] and [`SharedStore::queue`] answer the same table and queue scripts
//! reach as `jobs.shared.table(name)` and `jobs.shared.queue(name)`. Every handle is `Send +
//! Sync` and cheap to clone. A table is read live ([`SharedTableRef`]) or at one version
//! ([`FrozenTable`]); a refusal hands back what it could not deliver ([`PushError`] keeps the
//! value), and each family of refusal has its own error and kind. A store belongs to one
//! generation of one domain: two domains never see each other's names, and a handle kept past
//! the generation's end is refused, naming why.
//!
//! ```
//! use skein::shared::PushErrorKind;
//! use skein::{DomainSpec, Message, Pool, ScriptDomain};
//!
//! let pool = Pool::new(1);
//! let domain = ScriptDomain::new(&pool, DomainSpec::new("main"))?;
//! let stats = domain.shared().table("stats")?;
//! stats.set("frames", Message::Integer(1))?;
//! assert_eq!(domain.eval("return jobs.shared.table('stats').frames")?, Message::Integer(1));
//! let inbox = domain.shared().queue("inbox", 1)?;
//! inbox.push(Message::Boolean(true))?;
//! let refused = inbox.push(Message::Integer(2)).unwrap_err(); // full: the value comes back
//! assert_eq!(refused.kind, PushErrorKind::Full);
//! assert_eq!(refused.into_inner(), Message::Integer(2));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

// The core (`table`, `queue`) holds no Luau, so the loom models in `loom-tests` check the code
// that ships; the Luau bindings (`table_api`, `queue_api`) sit beside it and convert at the edge.
// When the principal ends the store ends with it.

pub(crate) mod queue;
/// The userdata tags of Skein's own userdata (`lua_newuserdatatagged`): `mlua` uses 0 for its
/// userdata and 1 for one it has destructed.
pub(crate) mod userdata_tag {
    use std::ffi::c_int;

    /// A shared-table handle (`table_api/raw.rs`).
    pub(crate) const SHARED_TABLE: c_int = 64;
    /// A shared-queue handle (`queue_api/raw.rs`).
    pub(crate) const SHARED_QUEUE: c_int = 65;
}
mod queue_api;
mod queue_error;
pub(crate) mod queue_ref;
pub(crate) mod table;
mod table_api;

use std::fmt;

pub use table::error::{SharedTableError, SharedTableErrorKind};
pub use table::handle::{FrozenTable, SharedTableRef};

use mlua::{Lua, Table, Value};

pub(crate) use queue::MAX_QUEUE_BYTES;
pub(crate) use queue_api::{parked_pop_queue, receive_parcel, sweep_parked_pops, Courier, Parcel};
pub use queue_error::{
    PopError, PushError, PushErrorKind, QueueError, QueueOpenError, QueueOpenErrorKind,
};
pub use queue_ref::SharedQueueRef;

use crate::ledger::Ledger;
use crate::sync::{Arc, AtomicUsize, Mutex, Ordering};

/// The bounds of one shared store. Every write or creation past one raises and changes nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SharedLimits {
    /// Names (tables and queues together) one store holds.
    pub(crate) names: usize,
    /// Bytes one name may have.
    pub(crate) name_bytes: usize,
    /// Bytes every table and queue of the store holds together.
    pub(crate) store_bytes: usize,
}

impl SharedLimits {
    pub(crate) const DEFAULT: SharedLimits = SharedLimits {
        names: 4_096,
        name_bytes: 256,
        store_bytes: 256 << 20,
    };
}

/// The store's state, shared by the engine VM, every worker VM of the principal and the host.
pub(crate) struct StoreCore {
    pub(crate) limits: SharedLimits,
    /// Names made so far; a name is never given back during the generation.
    names: AtomicUsize,
    /// Bytes held by every table and queue of the store (queues hold a clone).
    budget: Arc<Ledger>,
    /// Why the store ended, once it has (a std `Arc`: loom's has no `Arc<str>`).
    ended: Mutex<Option<std::sync::Arc<str>>>,
    pub(crate) tables: table::Tables,
    pub(crate) queues: queue::Queues,
}

impl StoreCore {
    #[cfg(any(test, loom))]
    pub(crate) fn new(limits: SharedLimits) -> StoreCore {
        StoreCore::under(limits, None)
    }

    /// A store whose bytes are charged to `memory` too (its domain's host memory).
    pub(crate) fn under(limits: SharedLimits, memory: Option<std::sync::Arc<Ledger>>) -> StoreCore {
        let budget = Arc::new(Ledger::under(limits.store_bytes, memory));
        StoreCore {
            limits,
            names: AtomicUsize::new(0),
            budget: budget.clone(),
            ended: Mutex::new(None),
            tables: table::Tables::new(),
            queues: queue::Queues::new(budget),
        }
    }

    /// Checks a name's length: 1 to `limits.name_bytes` bytes. `what` names the call.
    pub(crate) fn check_name(&self, name: &[u8], what: &str) -> Result<(), String> {
        let max = self.limits.name_bytes;
        if name.is_empty() || name.len() > max {
            let n = name.len();
            let unit = if n == 1 { "byte" } else { "bytes" };
            return Err(format!(
                "{what}: a name must be 1 to {max} bytes, got {n} {unit}"
            ));
        }
        Ok(())
    }

    /// Takes one of the store's names for a new table or queue.
    pub(crate) fn reserve_name(&self, what: &str) -> Result<(), String> {
        let max = self.limits.names;
        self.names
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            })
            .map(|_| ())
            .map_err(|_| format!("{what}: the domain holds at most {max} shared names"))
    }

    /// Takes `n` bytes of the store's budget, or refuses and takes nothing.
    pub(crate) fn reserve_bytes(&self, n: usize, what: &str) -> Result<(), String> {
        self.reserve_bytes_for(n, || what.to_owned())
    }

    /// [`reserve_bytes`](Self::reserve_bytes) naming `what` only when it refuses, so a write
    /// that fits builds no text.
    pub(crate) fn reserve_bytes_for(
        &self,
        n: usize,
        what: impl FnOnce() -> String,
    ) -> Result<(), String> {
        self.budget.reserve(n).map_err(|refused| {
            let max = self.budget.max();
            let text = refused.text(|would| {
                format!(
                    "the domain's shared tables and queues would hold {would} bytes, past the bound of {max}"
                )
            });
            format!("{}: {text}", what())
        })
    }

    /// Gives `n` bytes back to the store's budget.
    pub(crate) fn release_bytes(&self, n: usize) {
        self.budget.release(n);
    }

    /// Bytes every table and queue of the store holds now.
    pub(crate) fn bytes(&self) -> usize {
        self.budget.held()
    }

    /// Why the store ended, if it has.
    pub(crate) fn ended(&self) -> Option<std::sync::Arc<str>> {
        self.ended.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Ends the store: tables refuse every later use and parked pops are rejected, naming
    /// `reason`. Only the first reason is kept.
    pub(crate) fn end(&self, reason: &str) {
        {
            let mut ended = self.ended.lock().unwrap_or_else(|e| e.into_inner());
            if ended.is_some() {
                return;
            }
            *ended = Some(std::sync::Arc::from(reason));
        }
        self.tables.end(reason);
        self.queues.end(reason);
    }
}

/// A domain's shared store, as the host reaches it: `ScriptDomain::shared`. `Send + Sync`, cheap
/// to clone; every clone is the same store.
///
/// ```
/// fn assert_send<T: Send + Sync>() {}
/// assert_send::<skein::shared::SharedStore>();
/// ```
#[derive(Clone)]
pub struct SharedStore {
    pub(crate) core: Arc<StoreCore>,
}

impl SharedStore {
    pub(crate) fn new(core: Arc<StoreCore>) -> SharedStore {
        SharedStore { core }
    }

    /// The shared queue called `name`, made on first use with `capacity`: the queue Luau code of
    /// the domain reaches as `jobs.shared.queue(name)`.
    ///
    /// ```
    /// use skein::{DomainSpec, Message, Pool, ScriptDomain};
    ///
    /// let pool = Pool::new(1);
    /// let domain = ScriptDomain::new(&pool, DomainSpec::new("main"))?;
    /// let queue = domain.shared().queue("work", 8)?;
    /// queue.push(Message::Integer(3))?;
    /// assert_eq!(domain.eval(r#"return jobs.shared.queue("work"):pop()"#)?, Message::Integer(3));
    /// let err = domain.shared().queue("work", 9).unwrap_err();
    /// assert_eq!(err.to_string(), "SharedStore::queue: queue 'work' exists with capacity 8, not 9");
    /// # Ok::<(), skein::Error>(())
    /// ```
    ///
    /// # Errors
    /// A [`QueueOpenError`] when the name is not 1 to 256 bytes, the capacity is not 1 to
    /// 65,536 (`MAX_QUEUE_CAPACITY`), the queue exists with another capacity, the domain's 4,096 names
    /// are taken, or the domain has ended; its [`kind`](QueueOpenError::kind) tells which.
    pub fn queue(&self, name: &str, capacity: usize) -> Result<SharedQueueRef, QueueOpenError> {
        const WHAT: &str = "SharedStore::queue";
        let core = &self.core;
        core.check_name(name.as_bytes(), WHAT)
            .map_err(|e| QueueOpenError::new(QueueOpenErrorKind::BadName, e))?;
        let queue = core.queues.get_or_make(
            name.as_bytes(),
            Some(capacity),
            || core.reserve_name(WHAT),
            WHAT,
        )?;
        Ok(SharedQueueRef { queue })
    }
}

impl fmt::Debug for SharedStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedStore")
            .field("bytes", &self.core.bytes())
            .field("ended", &self.core.ended())
            .finish_non_exhaustive()
    }
}

/// Installs `jobs.shared` into the `jobs` table of a VM of the store's principal, on first use:
/// most worker VMs never touch a shared table or queue, and building the module's functions is
/// about 7% of a worker VM's start.
///
/// The wrappers that let the base and `table` functions take a handle are installed now, while
/// the libraries can still be changed; a handle reaches a VM only through `jobs.shared`'s own
/// functions, so nothing needs them before the first use. Until then `jobs.shared` is answered
/// by the `jobs` table's `__index`, which builds the module and stores it in `jobs` itself, so
/// every later read is a plain field read, as if it had been there from the start. A chunk that
/// names `jobs.shared.<field>` builds it when it loads, since Luau resolves such paths at load
/// time. The metatable is locked (`__metatable`), so a script can neither read nor replace it.
pub(crate) fn install(lua: &Lua, jobs: &Table, store: Arc<StoreCore>) -> mlua::Result<()> {
    table_api::install_wrappers(lua)?;
    let meta = lua.create_table()?;
    let first_use = lua.create_function(move |lua, (jobs, key): (Table, Value)| {
        if !matches!(&key, Value::String(s) if s.as_bytes() == &b"shared"[..]) {
            return Ok(Value::Nil);
        }
        let shared = lua.create_table()?;
        table_api::install(lua, &shared, &store)?;
        queue_api::install(lua, &shared, &store)?;
        // The sandbox made `jobs` read-only for scripts; this VM's own code adds the field it
        // had promised, once.
        let readonly = jobs.is_readonly();
        jobs.set_readonly(false);
        let stored = jobs.raw_set("shared", &shared);
        jobs.set_readonly(readonly);
        stored?;
        Ok(Value::Table(shared))
    })?;
    meta.raw_set("__index", first_use)?;
    meta.raw_set("__metatable", "the jobs library's metatable is locked")?;
    meta.set_readonly(true);
    jobs.set_metatable(Some(meta))?;
    Ok(())
}
