//! Engine events: named values the host raises on a domain
//! (`ScriptDomain::raise_engine_event`), and the `engine.on` watchers that see them in every VM
//! of the domain's current generation.
//!
//! The principal keeps one [`EventLog`]: a bounded ring of the last [`EVENT_LOG_BOUND`] events,
//! each with a sequence number. Nothing is pushed to a VM: each VM reads the log at its own
//! *start point* and delivers what it has not delivered yet:
//!
//! - a worker VM, when it starts a pool item (before the item's entry runs);
//! - the engine VM, when its domain drains its mailbox (each frame or pump).
//!
//! A VM that has no watcher only moves its cursor (one atomic load on the item path). A VM
//! that fell so far behind that the ring dropped events it had not delivered delivers the ones
//! still held and reports the count of the missed ones once, as a failure named
//! `engine events`.
//!
//! The log belongs to one generation: a restart gives the new principal an empty one, and the
//! watchers of the old generation go with their VMs.

use std::cell::RefCell;
use std::fmt;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use mlua::{Function, Lua, MultiValue, Table, Value};

use super::home::{home, registering_authority};
use crate::jobs::leaves::event_log::{check_event_name, EventLog, EVENT_LOG_BOUND};
use crate::principal::capability::Authority;
use crate::vm::{
    self, a_type, error_message, Completion, Owner, OwnerIdentity, SignalKind, TaskFailure, Vm,
    VmCore,
};

/// One `engine.on` watcher of a VM.
struct Watcher {
    id: u64,
    name: Arc<str>,
    f: Function,
    /// The log's next sequence number when it registered: it sees only later events.
    since: u64,
    /// The authority of the task that registered it, which each of its runs holds: a watcher
    /// never holds more than the code that asked for it (`None`: the VM's own).
    authority: Option<Arc<Authority>>,
}

/// The watchers of one VM and how far it has delivered, kept in the VM's app data.
struct Watchers {
    /// The sequence number of the first event this VM has not delivered.
    cursor: u64,
    /// The sequence number of the first event `engine.wait`'s waiters have not been shown.
    waits_seen: u64,
    next_id: u64,
    list: Vec<Watcher>,
}

type WatchersCell = Rc<RefCell<Watchers>>;

/// Installs `engine.on` into `engine`, a table the caller publishes as the `engine` global.
pub(crate) fn install(lua: &Lua, engine: &Table, log: &EventLog) -> mlua::Result<()> {
    let watchers: WatchersCell = Rc::new(RefCell::new(Watchers {
        cursor: log.next_seq(),
        waits_seen: log.next_seq(),
        next_id: 1,
        list: Vec::new(),
    }));
    lua.set_app_data(watchers);
    engine.raw_set("on", lua.create_function(on)?)?;
    let park = lua.create_function(|lua, (name, timeout): (Value, Value)| {
        // It takes only events raised from now on.
        let since = home(lua)?.principal.events.next_seq();
        vm::park_signal(lua, SignalKind::Engine, &name, &timeout, since)
    })?;
    engine.raw_set("wait", vm::wait_function(lua, "engine.wait", park)?)?;
    Ok(())
}

/// Releases the tasks of `vm` that wait on engine events (`engine.wait`) for the events of
/// `log` raised since they began waiting: each waiter takes the first event of its name raised
/// after its call, in raise order, and waiters of one name are released in arrival order.
/// Answers whether any was released. A VM with no waiter costs one borrow.
pub(crate) fn release_waits(vm: &Vm, log: &EventLog) -> bool {
    let Some(earliest) = vm.signal_waits_since(SignalKind::Engine) else {
        return false;
    };
    let Some(cell) = vm.lua.app_data_ref::<WatchersCell>().map(|w| w.clone()) else {
        return false;
    };
    let next = log.next_seq();
    let from = {
        let mut w = cell.borrow_mut();
        let from = w.waits_seen.max(earliest);
        w.waits_seen = next;
        from
    };
    if from >= next {
        return false;
    }
    let mut released = 0;
    for event in log.since(from) {
        released += vm.release_signal(SignalKind::Engine, &event.name, event.seq, &event.payload);
    }
    released > 0
}

/// `engine.on(name, watcher) -> remover`.
fn on(lua: &Lua, (name, watcher): (Value, Value)) -> mlua::Result<Function> {
    let Value::String(name) = name else {
        return Err(mlua::Error::runtime(format!(
            "engine.on: event name must be a string, got {}",
            a_type(&name)
        )));
    };
    let name = name.as_bytes().to_vec();
    check_event_name(&name, "engine.on").map_err(mlua::Error::runtime)?;
    let Value::Function(f) = watcher else {
        return Err(mlua::Error::runtime(format!(
            "engine.on: watcher must be a function, got {}",
            a_type(&watcher)
        )));
    };
    let home = home(lua)?;
    let since = home.principal.events.next_seq();
    let cell = watchers(lua)?;
    let id = {
        let mut w = cell.borrow_mut();
        let id = w.next_id;
        w.next_id += 1;
        w.list.push(Watcher {
            id,
            name: Arc::from(String::from_utf8_lossy(&name).as_ref()),
            f,
            since,
            authority: registering_authority(lua),
        });
        id
    };
    lua.create_function(move |lua, ()| {
        watchers(lua)?.borrow_mut().list.retain(|w| w.id != id);
        Ok(())
    })
}

fn watchers(lua: &Lua) -> mlua::Result<WatchersCell> {
    lua.app_data_ref::<WatchersCell>()
        .map(|w| w.clone())
        .ok_or_else(|| mlua::Error::runtime("engine.on: this VM has no event watchers"))
}

/// How reports name a watcher's task: `engine event 'name' watcher`.
struct WatcherLabel(Arc<str>);

impl fmt::Display for WatcherLabel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "engine event '{}' watcher", self.0)
    }
}

impl OwnerIdentity for WatcherLabel {}

/// How reports name a VM that missed events.
const MISSED_LABEL: &str = "engine events";

/// Delivers to `vm`'s watchers the events of `log` raised since the VM last delivered: each
/// (watcher, event) pair, in raise order and then registration order, starts as a task of its
/// own, under the authority of the task that registered the watcher, and runs to its first
/// yield here. Answers whether any watcher started.
pub(crate) fn deliver(vm: &Vm, log: &EventLog, deadline: Duration) -> bool {
    let released = release_waits(vm, log);
    deliver_watchers(vm, log, deadline) | released
}

/// The `engine.on` part of [`deliver`].
fn deliver_watchers(vm: &Vm, log: &EventLog, deadline: Duration) -> bool {
    let Some(cell) = vm.lua.app_data_ref::<WatchersCell>().map(|w| w.clone()) else {
        return false;
    };
    let next = log.next_seq();
    let runs = {
        let mut w = cell.borrow_mut();
        if w.cursor >= next {
            return false;
        }
        if w.list.is_empty() {
            w.cursor = next;
            return false;
        }
        let events = log.since(w.cursor);
        // Only events some watcher registered in time for count as missed.
        let earliest = w.list.iter().map(|x| x.since).min().unwrap_or(next);
        let wanted_from = w.cursor.max(earliest);
        let held_from = events.first().map_or(next, |e| e.seq);
        let missed = held_from.saturating_sub(wanted_from);
        w.cursor = events.last().map_or(next, |e| e.seq + 1);
        if missed > 0 {
            vm.core.report_failure(
                MISSED_LABEL,
                &format!(
                    "{missed} engine events were dropped from the log before this VM could \
                     deliver them (the log holds the last {EVENT_LOG_BOUND})"
                ),
            );
        }
        let mut runs = Vec::new();
        for event in &events {
            for watcher in &w.list {
                if *watcher.name == *event.name && watcher.since <= event.seq {
                    runs.push((watcher.f.clone(), watcher.authority.clone(), event.clone()));
                }
            }
        }
        runs
    };
    let started = !runs.is_empty();
    for (f, authority, event) in runs {
        let label = Arc::new(WatcherLabel(event.name.clone()));
        let reported = label.clone();
        // A root task's failure goes to its completion: report it, naming the event.
        let completion: Completion = Box::new(move |lua: &Lua, result, _commands| {
            if let Err(failure) = result {
                if !failure.is_cancelled() {
                    if let Ok(core) = VmCore::of(lua) {
                        core.report(&reported.to_string(), &failure);
                    }
                }
            }
        });
        let mut owner = Owner::new(label.clone(), deadline, Some(completion));
        if let Some(authority) = authority {
            owner = owner.with_authority(authority);
        }
        let owner = Rc::new(owner);
        let started = event
            .payload
            .to_lua(&vm.lua)
            .and_then(|payload| vm.start(f, MultiValue::from_iter([payload]), owner));
        if let Err(e) = started {
            let failure = TaskFailure::raised(error_message(&e), String::new());
            vm.core.report(&label.to_string(), &failure);
        }
    }
    started
}
