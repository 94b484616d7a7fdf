//! Actors: what a domain spawns with `@skein/worker`, each with its own VM built from the
//! domain's plan on a thread of its own, reached only through bounded message queues.
//!
//! Scripts know them as workers (the `@skein/worker` module, its `Worker` handles and its
//! texts keep that name); in Rust a "worker" is always a pool thread, so every Rust name here
//! says "actor". This module owns the domain side: the set of a domain's actors ([`Actors`]),
//! the `@skein/worker` module of the engine VM, and the Luau handle ([`ActorHandle`]). The
//! thread side is in `lane`; what both threads see of one actor (its outbox, state and byte
//! bound) is in `outbox`; the actor side of `shareServices` is in `service_link`.
//!
//! The engine thread never blocks on an actor: `Worker:receive(timeout)` and `Worker:join`
//! park the calling task on a promise that the actor settles (through the domain mailbox)
//! when it replies or ends, or that a timer settles when the time is up. The timer is capped
//! at what is left of the waiting run's budget, and when that cap ends the wait the call
//! raises the budget's own error, as a loop past its budget would. An actor never blocks
//! on the domain: its replies go to an outbox the domain reads when it likes.
//!
//! Teardown (the domain's stop, restart or drop) closes every actor, interrupts a running
//! handler through its cancel token, and joins the thread: no actor outlives its generation.

mod error;
mod lane;
mod outbox;
mod service_link;

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crossbeam_channel::{Sender, TrySendError};
use mlua::{Function, Lua, MetaMethod, Table, UserData, UserDataMethods, Value};

pub use error::{ActorError, ActorStage, FailurePolicy};
use outbox::{ActorShared, Queued, Reply, Unobserved, FAILED, MAX_WAITING, RUNNING, STOPPED};
pub(crate) use outbox::{MAX_ACTOR_BYTES, MAX_LIVE_ACTORS};

use crate::domain::events::emit::install_off_engine_events;
use crate::domain::DomainMailbox;
use crate::jobs::{reserve_vms, PoolShared, PrincipalShared};
use crate::ledger::{format_bytes, Ledger};
use crate::principal::capability::{self, Authority, CapabilityId, CapabilitySet};
use crate::principal::diagnostic::Attribution;
use crate::value::read::{Reader, Refusal};
use crate::value::{Limits, Message, TransferError};
use crate::vm::{self, await_function, promise_of, CancelToken, Embedded, Outcome, VmCore};

/// The capability `worker.spawn` needs: spawning an actor.
pub const ACTOR_SPAWN: &str = "worker.spawn";

/// Registry key of the `@skein/worker` table of a VM that has one (the engine VM, an actor).
const MODULE_KEY: &str = "skein.worker";
/// Registry keys of the Luau halves of `receive` and `join`.
const RECEIVE_KEY: &str = "skein.worker.receive";
const JOIN_KEY: &str = "skein.worker.join";

// The refusals in the words of the `@skein/worker` specification (Skein's context, a worker's
// name, follows them).
const UNKNOWN_OPTION: &str = "capabilities, memory, name, shareServices, or source";

/// The longest name `worker.spawn`'s `name` option takes, in bytes: every failure and report
/// of the worker carries it.
const MAX_NAME_BYTES: usize = 256;

/// The least memory limit `worker.spawn`'s `memory` option may give an actor's VM: 1 MiB.
pub(crate) const MIN_ACTOR_MEMORY: usize = 1 << 20;
const NEEDS_SOURCE: &str = "worker.spawn needs source, the worker module's Luau source";
const SPAWN_IN_ACTOR: &str = "inside a worker, worker.spawn is for a domain's own code";
const SPAWN_OUTSIDE: &str =
    "worker.spawn: this VM is no domain's engine VM; only a domain's own code spawns workers";
const SEND_OUTSIDE: &str = "in a domain's own code, worker.send is for a worker's own code; a \
                            domain sends through the handle worker.spawn returned";
const SEND_FULL: &str = "worker.send: the domain's queue is full: 1024 messages wait for it to \
                         receive them; send fewer, or reply less often";

/// A count of a domain's live actor threads, for hosts and tests that check none outlives
/// its domain. Not part of the stable surface.
#[doc(hidden)]
#[derive(Clone, Debug, Default)]
pub struct LiveActors(Arc<AtomicUsize>);

impl LiveActors {
    /// How many actor threads of the domain have not returned yet.
    pub fn get(&self) -> usize {
        self.0.load(Ordering::Acquire)
    }
}

/// One actor, seen from the engine thread.
struct ActorEntry {
    shared: Arc<ActorShared>,
    /// The sending end of its queue; `None` once closed.
    inbox: RefCell<Option<Sender<Queued>>>,
    /// Whether sends are stamped for the profile.
    stamped: bool,
    cancel: Arc<CancelToken>,
    thread: RefCell<Option<JoinHandle<()>>>,
}

impl ActorEntry {
    fn close(&self) {
        self.inbox.borrow_mut().take();
    }

    /// Joins the actor's thread if it has returned, which gives back its stack; answers
    /// whether nothing of the thread is left. Never waits: a thread still running (or still
    /// returning, just after it published its end) is left for a later look.
    fn reap(&self) -> bool {
        let mut thread = self.thread.borrow_mut();
        match thread.as_ref() {
            None => true,
            Some(running) if !running.is_finished() => false,
            Some(_) => {
                if let Some(thread) = thread.take() {
                    // A lane contains its own panics; a join error has nothing left to report.
                    let _ = thread.join();
                }
                true
            }
        }
    }
}

/// The actors one generation of a domain spawned. Each generation has its own set (so a
/// reload's candidate can be torn down alone); the count of live threads, the failures and the
/// numbering of unnamed actors are the domain's, shared by every set.
pub(crate) struct Actors {
    principal: Arc<PrincipalShared>,
    /// Where an actor's `jobs.dispatch` and `jobs.parallelFor` send their items.
    pool: Arc<PoolShared>,
    /// The pool's memory budget, which holds each actor's VM limit while its thread runs.
    vm_memory: Arc<Ledger>,
    policy: FailurePolicy,
    /// The per-run budget of a handler; never more than the principal's deadline cap.
    budget: Duration,
    live: LiveActors,
    failures: Arc<Mutex<Vec<ActorError>>>,
    /// The actors with failures no code observed yet, reported when a run ends.
    unobserved: Arc<Unobserved>,
    entries: RefCell<Vec<Rc<ActorEntry>>>,
    /// Numbers the actors spawned without a name.
    spawned: Rc<Cell<u64>>,
}

impl Actors {
    pub(crate) fn new(
        principal: Arc<PrincipalShared>,
        pool: Arc<PoolShared>,
        vm_memory: Arc<Ledger>,
        policy: FailurePolicy,
        budget: Duration,
    ) -> Rc<Actors> {
        Rc::new(Actors {
            principal,
            pool,
            vm_memory,
            policy,
            budget,
            live: LiveActors::default(),
            failures: Arc::default(),
            unobserved: Arc::default(),
            entries: RefCell::default(),
            spawned: Rc::default(),
        })
    }

    /// The (empty) set of the generation `principal` runs as, sharing the domain's count,
    /// failures and numbering with this one.
    pub(crate) fn next_generation(&self, principal: Arc<PrincipalShared>) -> Rc<Actors> {
        Rc::new(Actors {
            principal,
            pool: self.pool.clone(),
            vm_memory: self.vm_memory.clone(),
            policy: self.policy,
            budget: self.budget,
            live: self.live.clone(),
            failures: self.failures.clone(),
            unobserved: self.unobserved.clone(),
            entries: RefCell::default(),
            spawned: self.spawned.clone(),
        })
    }

    pub(crate) fn live(&self) -> LiveActors {
        self.live.clone()
    }

    pub(crate) fn take_failures(&self) -> Vec<ActorError> {
        std::mem::take(&mut *self.failures.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// The failures of the domain's actors that no code received or joined, as `(label, text)`
    /// reports, each once: for the end of a run, when no code is left to observe them.
    pub(crate) fn take_unobserved(&self) -> Vec<(String, String)> {
        self.unobserved.take()
    }

    /// Joins the threads of the actors that ended and forgets them. A thread that returned
    /// but was never joined keeps its stack mapped (2 MiB of address space, and the pages it
    /// touched), so without this every actor a domain ever spawned would stay in the
    /// process until the domain's teardown.
    fn reap(&self) {
        self.entries.borrow_mut().retain(|entry| !entry.reap());
    }

    /// Closes every actor, interrupts what each is running, and joins its thread.
    pub(crate) fn teardown(&self) {
        let entries = std::mem::take(&mut *self.entries.borrow_mut());
        for entry in &entries {
            entry.close();
            entry.cancel.store(true, Ordering::Release);
            entry.shared.interrupt();
        }
        for entry in &entries {
            if let Some(thread) = entry.thread.borrow_mut().take() {
                // A lane contains its own panics; a join error has nothing left to report.
                let _ = thread.join();
            }
            if entry.shared.state() == RUNNING {
                entry.shared.finish(STOPPED);
            }
        }
    }

    /// `worker.spawn(options)`.
    fn spawn(self: &Rc<Self>, lua: &Lua, options: Value) -> mlua::Result<ActorHandle> {
        let principal = self.principal.clone();
        if !principal.is_alive() {
            return Err(mlua::Error::runtime(format!(
                "worker.spawn: {}",
                principal.end_reason()
            )));
        }
        capability::require_capability(ACTOR_SPAWN)?;
        self.reap();
        let options = SpawnOptions::read(options)?;
        let current = capability::current_or(&principal.authority);
        let wanted = match options.capabilities {
            Some(wanted) => wanted,
            None => current.grant().capabilities().clone(),
        };
        let who = current.attribution().to_string();
        let delegated = current
            .grant()
            .narrowed(&who, &wanted)
            .map_err(|e| mlua::Error::runtime(format!("worker.spawn: {e}")))?;
        let name = match options.name {
            Some(name) => name,
            None => {
                let n = self.spawned.get() + 1;
                self.spawned.set(n);
                vm::with_caller_source(lua, |source| match source {
                    Some(source) => format!("{source} #{n}"),
                    None => format!("worker #{n}"),
                })
            }
        };
        let authority = Arc::new(Authority::new(
            delegated,
            Attribution {
                domain_name: current.attribution().domain_name.clone(),
                domain: principal.id.domain,
                generation: principal.id.generation,
                context: None,
                actor: Some(name.clone()),
            },
            current.denials().clone(),
        ));
        let shared = Arc::new(ActorShared::new(
            name.clone(),
            DomainMailbox::of(&principal),
            principal.memory.clone(),
        ));
        let most = principal.plan.memory_limit_bytes();
        let limit = match options.memory {
            Some(asked) if asked > most => {
                return Err(mlua::Error::runtime(format!(
                    "worker.spawn: memory must be at most the domain's VM limit of {}, got {asked}",
                    format_bytes(most)
                )))
            }
            Some(asked) => asked,
            None => most,
        };
        let vm_memory = reserve_vms(
            &self.vm_memory,
            &format!("worker '{name}'"),
            1,
            limit,
            "its own VM",
        )
        .map_err(|e| mlua::Error::runtime(format!("worker.spawn: not enough memory: {e}")))?;
        let (tx, rx) = crossbeam_channel::bounded(MAX_WAITING);
        let cancel = Arc::new(CancelToken::new(false));
        let setup = lane::LaneSetup {
            vm_memory,
            shared: shared.clone(),
            inbox: rx,
            plan: principal.plan.clone().memory_limit(limit),
            source: options.source,
            authority,
            deadline: self.budget.min(principal.max_deadline),
            policy: self.policy,
            cancel: cancel.clone(),
            principal: principal.clone(),
            pool: self.pool.clone(),
            share_services: options.share_services,
            profile: principal.profile.clone(),
            live: self.live.0.clone(),
            failures: self.failures.clone(),
            unobserved: self.unobserved.clone(),
        };
        // Taken before the thread starts; given back when it returns (the lane's guard) or here
        // when it could not start.
        let taken = self
            .live
            .0
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |live| {
                (live < MAX_LIVE_ACTORS).then_some(live + 1)
            });
        if taken.is_err() {
            return Err(mlua::Error::runtime(format!(
                "worker.spawn: the domain has {MAX_LIVE_ACTORS} workers alive, the most it may \
                 have; join or close one before spawning '{name}'"
            )));
        }
        let thread = thread::Builder::new()
            .name(format!("skein-actor {name}"))
            .spawn(move || lane::run(setup));
        let thread = match thread {
            Ok(thread) => thread,
            Err(e) => {
                self.live.0.fetch_sub(1, Ordering::AcqRel);
                return Err(mlua::Error::runtime(format!(
                    "worker.spawn: could not start worker '{name}': {e}"
                )));
            }
        };
        let entry = Rc::new(ActorEntry {
            shared,
            inbox: RefCell::new(Some(tx)),
            stamped: principal.profile.is_some(),
            cancel,
            thread: RefCell::new(Some(thread)),
        });
        self.entries.borrow_mut().push(entry.clone());
        Ok(ActorHandle(entry))
    }
}

/// `worker.spawn`'s options, checked.
struct SpawnOptions {
    source: String,
    name: Option<String>,
    capabilities: Option<CapabilitySet>,
    /// `shareServices`: the actor's VM gets the domain's engine services.
    share_services: bool,
    /// `memory`: the memory limit of the actor's VM, when it asks for less than the domain's.
    memory: Option<usize>,
}

impl SpawnOptions {
    fn read(options: Value) -> mlua::Result<SpawnOptions> {
        let refuse = |text: String| mlua::Error::runtime(format!("worker.spawn: {text}"));
        let Value::Table(table) = options else {
            return Err(refuse(format!(
                "options must be a table {{ source, name?, capabilities?, shareServices?, memory? }}, got {}",
                vm::a_type(&options)
            )));
        };
        // The unknown key named is the least, so a table with several always names the same
        // one; only a handle on it is kept, whatever the table's size.
        let mut unknown: Option<Value> = None;
        for pair in table.pairs::<Value, Value>() {
            let (key, _) = pair?;
            let known = match &key {
                Value::String(s) => matches!(
                    &s.as_bytes()[..],
                    b"source" | b"name" | b"capabilities" | b"shareServices" | b"memory"
                ),
                _ => false,
            };
            if known {
                continue;
            }
            let least = match (&unknown, &key) {
                (None, _) => true,
                (Some(Value::String(was)), Value::String(new)) => new.as_bytes() < was.as_bytes(),
                // A key that is not a string is named first.
                (Some(Value::String(_)), _) => true,
                _ => false,
            };
            if least {
                unknown = Some(key);
            }
        }
        if let Some(key) = unknown {
            return Err(mlua::Error::runtime(vm::unknown_option(
                "worker.spawn",
                "options",
                &key,
                UNKNOWN_OPTION,
            )));
        }
        let source = match table.raw_get::<Value>("source")? {
            // Measured before it is copied: a source past the bound is never loaded.
            Value::String(s) if s.as_bytes().len() > vm::source::MAX_SOURCE_BYTES => {
                return Err(refuse(format!(
                    "source must be at most {} bytes of Luau source, got {} bytes",
                    vm::source::MAX_SOURCE_BYTES,
                    s.as_bytes().len()
                )))
            }
            Value::String(s) => match s.to_str() {
                Ok(text) => text.to_owned(),
                Err(_) => return Err(refuse("source must be UTF-8 text".to_owned())),
            },
            Value::Nil => return Err(mlua::Error::runtime(NEEDS_SOURCE)),
            other => {
                return Err(refuse(format!(
                    "source must be a string of Luau source, got {}",
                    vm::a_type(&other)
                )))
            }
        };
        let name = match table.raw_get::<Value>("name")? {
            Value::Nil => None,
            Value::String(s) if (1..=MAX_NAME_BYTES).contains(&s.as_bytes().len()) => {
                Some(s.to_string_lossy())
            }
            Value::String(s) => {
                return Err(refuse(format!(
                "name must be a string of 1 to {MAX_NAME_BYTES} bytes, got a string of {} bytes",
                s.as_bytes().len()
            )))
            }
            other => {
                return Err(refuse(format!(
                    "name must be a string of 1 to {MAX_NAME_BYTES} bytes, got {}",
                    vm::a_type(&other)
                )))
            }
        };
        let capabilities = match table.raw_get::<Value>("capabilities")? {
            Value::Nil => None,
            Value::Table(list) => {
                let mut set = Vec::new();
                for item in list.sequence_values::<Value>() {
                    match item? {
                        // Text that is not UTF-8 is refused as the name it reads as.
                        Value::String(s) => set.push(
                            CapabilityId::new(&s.to_string_lossy())
                                .map_err(|e| refuse(e.to_string()))?,
                        ),
                        other => {
                            return Err(refuse(format!(
                                "capabilities must be a list of capability names, got {} in it",
                                vm::a_type(&other)
                            )))
                        }
                    }
                }
                Some(CapabilitySet::from_iter(set))
            }
            other => {
                return Err(refuse(format!(
                    "capabilities must be a list of capability names, got {}",
                    vm::a_type(&other)
                )))
            }
        };
        let share_services = match table.raw_get::<Value>("shareServices")? {
            Value::Nil => false,
            Value::Boolean(share) => share,
            other => {
                return Err(refuse(format!(
                    "shareServices must be a boolean, got {}",
                    vm::a_type(&other)
                )))
            }
        };
        let memory = match table.raw_get::<Value>("memory")? {
            Value::Nil => None,
            Value::Integer(n) => Some(n as f64),
            Value::Number(n) => Some(n),
            other => {
                return Err(refuse(format!(
                    "memory must be a number of bytes, got {}",
                    vm::a_type(&other)
                )))
            }
        };
        let memory = match memory {
            None => None,
            // NaN fails both comparisons, and so is refused with the rest.
            Some(n)
                if n >= MIN_ACTOR_MEMORY as f64 && n <= usize::MAX as f64 && n.fract() == 0.0 =>
            {
                Some(n as usize)
            }
            Some(n) => {
                return Err(refuse(format!(
                    "memory must be a whole number of bytes, at least {MIN_ACTOR_MEMORY} (1 MiB), \
                     got {n}"
                )))
            }
        };
        Ok(SpawnOptions {
            source,
            name,
            capabilities,
            share_services,
            memory,
        })
    }
}

/// A message argument read off the stack (so a whole number stays a number and an integer an
/// integer), its refusal kept for [`read`](Self::read) to name.
struct SendArg(Result<Message, Refusal>);

impl SendArg {
    /// The message, or the refusal with its path starting at `root`.
    fn read(self, root: &str) -> Result<Message, TransferError> {
        self.0.map_err(|r| r.into_error(root))
    }
}

impl mlua::FromLua for SendArg {
    fn from_lua(value: Value, _lua: &Lua) -> mlua::Result<Self> {
        // Only reached for values mlua already popped; the stack path below is the usual one.
        Message::from_lua(&value, "message")
            .map(|m| SendArg(Ok(m)))
            .map_err(|e| mlua::Error::runtime(e.to_string()))
    }

    unsafe fn from_stack(idx: std::ffi::c_int, lua: &mlua::state::RawLua) -> mlua::Result<Self> {
        // SAFETY: mlua hands us a valid index on `lua`'s current stack.
        let read = unsafe { Reader::new(lua, Limits::MAX_MESSAGE_BYTES).read_at(idx) };
        Ok(SendArg(read))
    }
}

/// The Luau handle of one actor: `Worker:send`, `receive`, `close`, `join`.
struct ActorHandle(Rc<ActorEntry>);

impl ActorHandle {
    fn send(&self, message: SendArg) -> mlua::Result<()> {
        let message = message
            .read("message")
            .map_err(|e| mlua::Error::runtime(format!("Worker:send: {e}")))?;
        let name = &self.0.shared.name;
        let stopped = || {
            mlua::Error::runtime(format!(
                "the worker is stopped; it takes no more messages (Worker:send to worker '{name}')"
            ))
        };
        if self.0.shared.state() != RUNNING {
            return Err(stopped());
        }
        let inbox = self.0.inbox.borrow();
        let Some(tx) = inbox.as_ref() else {
            return Err(stopped());
        };
        let charge = self.0.shared.charge(&message).map_err(|e| {
            mlua::Error::runtime(format!(
                "Worker:send: {e}; receive its replies, or send less"
            ))
        })?;
        let sent = self.0.stamped.then(Instant::now);
        match tx.try_send(Queued {
            message,
            charge,
            sent,
        }) {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(_)) => Err(mlua::Error::runtime(format!(
                "the worker's queue is full: {MAX_WAITING} messages wait for its handler; \
                 receive its replies, or send fewer (Worker:send to worker '{name}')"
            ))),
            Err(TrySendError::Disconnected(_)) => Err(stopped()),
        }
    }
}

impl UserData for ActorHandle {
    fn add_fields<F: mlua::UserDataFields<Self>>(fields: &mut F) {
        fields.add_field_method_get("name", |lua, this| lua.create_string(&this.0.shared.name));
        // The methods that may wait are Luau (a Rust callback cannot yield).
        fields.add_field_function_get("receive", |lua, _| {
            lua.named_registry_value::<Function>(RECEIVE_KEY)
        });
        fields.add_field_function_get("join", |lua, _| {
            lua.named_registry_value::<Function>(JOIN_KEY)
        });
    }

    fn add_methods<M: UserDataMethods<Self>>(methods: &mut M) {
        methods.add_meta_method(MetaMethod::ToString, |_, this, ()| {
            Ok(format!("Worker('{}')", this.0.shared.name))
        });
        // `self` is an argument of its own, so `w.send(1)` is refused naming the method.
        methods.add_function("send", |_, (this, message): (Value, SendArg)| {
            ActorHandle(entry_of(&this, "send")?).send(message)
        });
        methods.add_function("close", |_, this: Value| {
            entry_of(&this, "close")?.close();
            Ok(())
        });
    }
}

/// The actor of a method's `self`, refused naming the method when it is no worker handle.
fn entry_of(value: &Value, method: &str) -> mlua::Result<Rc<ActorEntry>> {
    let handle = match value {
        Value::UserData(ud) => ud.borrow::<ActorHandle>().ok().map(|h| h.0.clone()),
        _ => None,
    };
    handle.ok_or_else(|| vm::not_self(&format!("Worker:{method}"), "worker", value))
}

/// The waiting halves of `receive` and `join`, in Luau because they yield.
static WAITS: Embedded = Embedded::new("=skein worker", include_str!("waits.luau"));

/// The time origin `P.now` counts from: any fixed instant will do.
fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

fn state_name(state: u8) -> &'static str {
    match state {
        STOPPED => "stopped",
        FAILED => "failed",
        _ => "running",
    }
}

/// The primitives `waits.luau` is built on.
fn wait_primitives(lua: &Lua) -> mlua::Result<Table> {
    let p = lua.create_table()?;
    p.raw_set(
        "take",
        lua.create_function(|_, this: Value| {
            let entry = entry_of(&this, "receive")?;
            match entry.shared.take() {
                // Taken: its place in the actor's byte bound is free (the copy is built in
                // this VM at once).
                Some(Reply::Value {
                    message, charge, ..
                }) => {
                    drop(charge);
                    Ok((true, message))
                }
                Some(Reply::Failed { error, .. }) => Err(mlua::Error::runtime(error.to_string())),
                None => Ok((false, Message::Nil)),
            }
        })?,
    )?;
    p.raw_set(
        "park",
        lua.create_function(|lua, (this, end_only): (Value, bool)| {
            let entry = entry_of(&this, "receive")?;
            let core = VmCore::of(lua)?;
            let cell = core.promises.borrow_mut().make("Worker:receive");
            if entry.shared.park(cell.id(), end_only) {
                return vm::promise_handle(lua, cell);
            }
            // Never awaited: out of the pending table.
            core.settle_if_pending(lua, cell.id(), Outcome::Cancelled);
            Ok(Value::Nil)
        })?,
    )?;
    p.raw_set(
        "expire",
        lua.create_function(|lua, promise: Value| {
            if let Some(handle) = promise_of(lua, &promise) {
                VmCore::of(lua)?.settle_if_pending(
                    lua,
                    handle.id(),
                    Outcome::Resolved(Message::Nil),
                );
            }
            Ok(())
        })?,
    )?;
    p.raw_set(
        "state",
        lua.create_function(|_, (this, joining): (Value, bool)| {
            let entry = entry_of(&this, "join")?;
            let state = entry.shared.state();
            if state != RUNNING {
                // An actor seen to end gives its thread back now if it can, not only when
                // the domain next spawns.
                entry.reap();
            }
            if joining && state == FAILED {
                entry.shared.observe_end();
            }
            Ok(state_name(state))
        })?,
    )?;
    p.raw_set(
        "close",
        lua.create_function(|_, this: Value| {
            entry_of(&this, "join")?.close();
            Ok(())
        })?,
    )?;
    p.raw_set(
        "late",
        lua.create_function(|_, this: Value| {
            let entry = entry_of(&this, "join")?;
            Ok(format!(
                "Worker:join: worker '{}' did not end within the timeout",
                entry.shared.name
            ))
        })?,
    )?;
    p.raw_set(
        "limit",
        lua.create_function(|_, ()| {
            // Read inside the run that waits: what is left of its budget now.
            Ok(match vm::run_left() {
                Some((left, budget)) => (
                    Some(epoch().elapsed().as_secs_f64() + left.as_secs_f64()),
                    Some(vm::DeadlineMessage(budget).to_string()),
                ),
                None => (None, None),
            })
        })?,
    )?;
    p.raw_set(
        "now",
        lua.create_function(|_, ()| Ok(epoch().elapsed().as_secs_f64()))?,
    )?;
    p.raw_set(
        "seconds",
        lua.create_function(|_, (method, timeout): (String, Value)| match timeout {
            Value::Integer(i) if i >= 0 => Ok(i as f64),
            Value::Number(x) if x >= 0.0 => Ok(x),
            other => Err(mlua::Error::runtime(format!(
                "{method}: timeout must be a number of seconds, 0 or more, got {}",
                match other {
                    Value::Integer(i) => i.to_string(),
                    Value::Number(x) => x.to_string(),
                    other => vm::a_type(&other),
                }
            ))),
        })?,
    )?;
    Ok(p)
}

/// Installs `@skein/worker` in a domain's engine VM.
pub(crate) fn install_engine(lua: &Lua, actors: &Rc<Actors>) -> mlua::Result<()> {
    let (receive, join): (Function, Function) = WAITS
        .load(lua)?
        .call((wait_primitives(lua)?, await_function(lua)?))?;
    lua.set_named_registry_value(RECEIVE_KEY, receive)?;
    lua.set_named_registry_value(JOIN_KEY, join)?;
    let module = lua.create_table()?;
    let spawner = actors.clone();
    module.raw_set(
        "spawn",
        lua.create_function(move |lua, options: Value| spawner.spawn(lua, options))?,
    )?;
    module.raw_set(
        "send",
        lua.create_function(|_, _: mlua::MultiValue| -> mlua::Result<()> {
            Err(mlua::Error::runtime(SEND_OUTSIDE))
        })?,
    )?;
    module.set_readonly(true);
    lua.set_named_registry_value(MODULE_KEY, module)
}

/// Installs `@skein/worker` in an actor's own VM: `send` reaches the domain, `spawn` refuses.
fn install_lane_module(lua: &Lua, shared: Arc<ActorShared>) -> mlua::Result<()> {
    // The actor emits domain events through the mailbox of the generation that spawned it.
    install_off_engine_events(lua, shared.mailbox().clone(), None)?;
    let module = lua.create_table()?;
    module.raw_set(
        "spawn",
        lua.create_function(|_, _: mlua::MultiValue| -> mlua::Result<()> {
            Err(mlua::Error::runtime(SPAWN_IN_ACTOR))
        })?,
    )?;
    module.raw_set(
        "send",
        lua.create_function(move |_, message: SendArg| {
            let message = message
                .read("message")
                .map_err(|e| mlua::Error::runtime(format!("worker.send: {e}")))?;
            let charge = shared.charge(&message).map_err(|e| {
                mlua::Error::runtime(format!(
                    "worker.send: {e}; send less, or wait for the domain to receive"
                ))
            })?;
            shared
                .progress(message, charge)
                .map_err(|_| mlua::Error::runtime(SEND_FULL))
        })?,
    )?;
    module.set_readonly(true);
    lua.set_named_registry_value(MODULE_KEY, module)
}

/// What `require("@skein/worker")` answers: the VM's own module, or (in a pool worker's VM)
/// one whose functions say where they belong.
pub(crate) fn module(lua: &Lua) -> mlua::Result<Value> {
    vm::registered_or_refusing(
        lua,
        MODULE_KEY,
        &[("spawn", SPAWN_OUTSIDE), ("send", SEND_OUTSIDE)],
    )
}
