//! The `jobs` home of one VM ([`JobsHome`]): who its calls run as (the principal), how they
//! reach the pool, and where replies to its promises go. Every `jobs.*` binding starts here.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use crossbeam_channel::Sender;
use mlua::{Lua, LuaString};
use rustc_hash::{FxHashMap, FxHashSet};

use crate::jobs::protocol::item::Item;
use crate::jobs::protocol::job::{charge_job, JobTarget};
use crate::jobs::protocol::messages::ActorWake;
use crate::jobs::protocol::pool_shared::PoolShared;
use crate::jobs::protocol::principal_shared::PrincipalShared;
use crate::jobs::protocol::reply::ReplyTo;
use crate::ledger::{Charge, Ledger};
use crate::principal::capability::{current_arc, Authority};
use crate::vm::{free_collected, PromiseId, Resolved, VmCore};

/// Where the VM that calls `jobs.*` lives.
pub(crate) enum HomeKind {
    /// A domain's engine thread.
    Engine,
    /// A pool worker; items it dispatches go to its own deque through `outbox`.
    Worker {
        index: usize,
        /// This VM's serial: replies carry it, so a reply meant for a VM the worker has since
        /// replaced (after a panic) can't settle a promise of the new one that reuses its id.
        vm: u64,
        outbox: Rc<RefCell<Vec<Item>>>,
    },
    /// A `@skein/worker` worker's VM, on the worker's own thread: its items go to the pool's
    /// injector, and replies and shared-queue deliveries come back through `wakes`.
    Actor { wakes: Sender<ActorWake> },
}

impl HomeKind {
    /// How out-of-memory texts name the VM: "the engine VM", "the VM of worker 2".
    pub(crate) fn vm_name(&self) -> String {
        match self {
            HomeKind::Engine => "the engine VM".to_owned(),
            HomeKind::Worker { index, .. } => format!("the VM of worker {index}"),
            HomeKind::Actor { .. } => "the VM of a @skein/worker".to_owned(),
        }
    }
}

/// What the `jobs` bindings of one VM need: who they run as and how they reach the pool.
pub(crate) struct JobsHome {
    pub(crate) principal: Arc<PrincipalShared>,
    pub(crate) pool: Arc<PoolShared>,
    pub(crate) kind: HomeKind,
    /// Entry names this VM dispatched, shared by every item that names them.
    entries: RefCell<FxHashSet<Arc<str>>>,
    /// The same names by the address of the Luau string that named them, so a dispatch finds its
    /// entry without copying the string out of the VM (`to_str` clones a reference into the
    /// VM and allocates). The map holds each string, so no other string can take its address
    /// while it is a key.
    entry_strings: RefCell<FxHashMap<usize, (LuaString, Arc<str>)>>,
    /// The targets of this VM's recent dispatches, the most recent last: the jobs of one
    /// module and entry share one.
    targets: RefCell<Vec<Arc<JobTarget>>>,
}

/// How many entry names a VM interns before it starts over.
const INTERNED_ENTRIES: usize = 1024;

/// How many targets a VM keeps for its next dispatches.
const KEPT_TARGETS: usize = 16;

impl JobsHome {
    pub(crate) fn new(
        principal: Arc<PrincipalShared>,
        pool: Arc<PoolShared>,
        kind: HomeKind,
    ) -> Self {
        JobsHome {
            principal,
            pool,
            kind,
            entries: RefCell::new(FxHashSet::default()),
            entry_strings: RefCell::new(FxHashMap::default()),
            targets: RefCell::new(Vec::new()),
        }
    }

    /// What a dispatch of `entry` in `module` runs: the target of a recent dispatch to the same
    /// pair, found by the names' addresses (the resolver's and the interner's own, so equal
    /// names of one module generation are one allocation), or a new one, kept for the next.
    pub(crate) fn target(&self, module: Resolved, entry: Arc<str>) -> Arc<JobTarget> {
        let mut kept = self.targets.borrow_mut();
        let found = kept.iter().rev().find(|t| {
            Arc::ptr_eq(&t.entry, &entry)
                && Arc::ptr_eq(&t.path, &module.path)
                && Arc::ptr_eq(&t.spec, &module.spec)
        });
        if let Some(target) = found {
            return target.clone();
        }
        let made = JobTarget::new(module.spec, module.path, entry);
        if kept.len() >= KEPT_TARGETS {
            kept.remove(0);
        }
        kept.push(made.clone());
        made
    }

    /// Where a reply settling promise `promise` of this VM goes.
    pub(crate) fn reply_to(&self, promise: PromiseId) -> ReplyTo {
        match &self.kind {
            HomeKind::Engine => ReplyTo::Engine(promise),
            HomeKind::Worker { index, vm, .. } => ReplyTo::Worker {
                worker: *index,
                vm: *vm,
                promise,
            },
            HomeKind::Actor { wakes } => ReplyTo::Actor {
                wakes: wakes.clone(),
                promise,
            },
        }
    }

    /// The entry name interned for the Luau string at `address`, if one was (the map holds
    /// the string, so the address is still that string's).
    pub(crate) fn known_entry(&self, address: usize) -> Option<Arc<str>> {
        self.entry_strings
            .borrow()
            .get(&address)
            .map(|(_, known)| known.clone())
    }

    /// [`JobsHome::intern_entry`] for a Luau string, found by its address once it was seen.
    pub(crate) fn intern_entry_string(&self, name: &LuaString) -> Arc<str> {
        let address = name.to_pointer() as usize;
        if let Some((_, known)) = self.entry_strings.borrow().get(&address) {
            return known.clone();
        }
        let interned = match name.to_str() {
            Ok(text) => self.intern_entry(&text),
            Err(_) => self.intern_entry(&name.to_string_lossy()),
        };
        let mut strings = self.entry_strings.borrow_mut();
        if strings.len() >= INTERNED_ENTRIES {
            strings.clear();
        }
        strings.insert(address, (name.clone(), interned.clone()));
        interned
    }

    pub(crate) fn intern_entry(&self, name: &str) -> Arc<str> {
        let mut entries = self.entries.borrow_mut();
        if let Some(known) = entries.get(name) {
            return known.clone();
        }
        if entries.len() >= INTERNED_ENTRIES {
            entries.clear();
        }
        let name: Arc<str> = name.into();
        entries.insert(name.clone());
        name
    }
}

/// The principal of the VM's home, when the VM belongs to a domain.
pub(crate) fn home_principal(lua: &Lua) -> Option<Arc<PrincipalShared>> {
    lua.app_data_ref::<Rc<JobsHome>>()
        .map(|h| h.principal.clone())
}

/// The authority a callback registered now keeps for its calls: the running task's, or `None`
/// when that is the VM's own (the principal's), so a callback the domain's own code registers
/// runs under the VM's default authority, with no reference count moved per call.
pub(crate) fn registering_authority(lua: &Lua) -> Option<Arc<Authority>> {
    let current = current_arc()?;
    match home_principal(lua) {
        Some(principal) if Arc::ptr_eq(&current, &principal.authority) => None,
        _ => Some(current),
    }
}

pub(crate) fn home(lua: &Lua) -> mlua::Result<Rc<JobsHome>> {
    lua.app_data_ref::<Rc<JobsHome>>()
        .map(|h| h.clone())
        .ok_or_else(|| mlua::Error::runtime("jobs: this VM is not attached to a pool"))
}

/// Takes `n` bytes of the job budget for `what`; when the budget would refuse, first frees the
/// promises of this VM whose handles were collected (a handle is a table, so its promise's
/// charge goes back when the VM sees it gone, not at the collection itself), and if that is
/// not enough, runs one full collection and looks again: handles the script let go of but the
/// incremental collector has not reached yet (a loop that dispatched a burst, dropped it and
/// dispatches the next) must not count against the bound.
pub(crate) fn charge_or_reclaim(
    lua: &Lua,
    core: &VmCore,
    budget: &Arc<Ledger>,
    n: usize,
    what: &str,
) -> Result<Charge, String> {
    charge_job(budget, n, what)
        .or_else(|_| {
            free_collected(lua, core);
            charge_job(budget, n, what)
        })
        .or_else(|_| {
            // A collection that fails (out of memory) frees what it can; the charge decides.
            let _ = lua.gc_collect();
            free_collected(lua, core);
            charge_job(budget, n, what)
        })
}

/// A refusal of a `jobs` call, raised as a Luau error.
pub(crate) fn refuse(message: String) -> mlua::Error {
    mlua::Error::runtime(message)
}
