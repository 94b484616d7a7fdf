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
use std::collections::VecDeque;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use mlua::{Function, Lua, MultiValue, Value};

use super::api::{home, registering_authority};
use crate::principal::capability::Authority;
use crate::value::Message;
use crate::vm::{Owner, OwnerIdentity, TaskFailure, Vm, VmCore};

/// How many events the log holds: a VM that has not reached a start point for more events than
/// this misses the oldest ones.
pub const EVENT_LOG_BOUND: usize = 4_096;

/// The longest event name, in bytes.
pub(crate) const MAX_EVENT_NAME: usize = 256;

/// One raised event.
pub(crate) struct EngineEvent {
    seq: u64,
    name: Arc<str>,
    payload: Message,
}

/// The principal's events: `Send + Sync`, shared by the engine thread (which raises and
/// delivers) and every worker VM of the principal (which deliver).
#[derive(Default)]
pub(crate) struct EventLog {
    /// The sequence number the next event gets; read without the lock on every item start.
    next: AtomicU64,
    ring: Mutex<VecDeque<Arc<EngineEvent>>>,
}

impl EventLog {
    /// Appends an event, dropping the oldest when the ring is full.
    pub(crate) fn raise(&self, name: &str, payload: Message) {
        let mut ring = self.ring.lock().unwrap_or_else(|e| e.into_inner());
        let seq = self.next.load(Ordering::Relaxed);
        ring.push_back(Arc::new(EngineEvent {
            seq,
            name: Arc::from(name),
            payload,
        }));
        if ring.len() > EVENT_LOG_BOUND {
            ring.pop_front();
        }
        // Published under the lock, so a reader that sees `next` finds the event in the ring.
        self.next.store(seq + 1, Ordering::Release);
    }

    /// The sequence number the next event will get.
    pub(crate) fn next_seq(&self) -> u64 {
        self.next.load(Ordering::Acquire)
    }

    /// The events from sequence number `from` on that the ring still holds, oldest first.
    fn since(&self, from: u64) -> Vec<Arc<EngineEvent>> {
        let ring = self.ring.lock().unwrap_or_else(|e| e.into_inner());
        let Some(first) = ring.front().map(|e| e.seq) else {
            return Vec::new();
        };
        let skip = usize::try_from(from.saturating_sub(first)).unwrap_or(usize::MAX);
        ring.iter().skip(skip).cloned().collect()
    }
}

/// Checks an event name: 1 to 256 bytes. `what` names the call in the refusal.
pub(crate) fn check_event_name(name: &[u8], what: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > MAX_EVENT_NAME {
        return Err(format!(
            "{what}: event name must be 1 to {MAX_EVENT_NAME} bytes, got {}",
            name.len()
        ));
    }
    Ok(())
}

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
    next_id: u64,
    list: Vec<Watcher>,
}

type WatchersCell = Rc<RefCell<Watchers>>;

/// Installs `engine.on` into `engine`, a table the caller publishes as the `engine` global.
pub(crate) fn install(lua: &Lua, engine: &mlua::Table, log: &EventLog) -> mlua::Result<()> {
    let watchers: WatchersCell = Rc::new(RefCell::new(Watchers {
        cursor: log.next_seq(),
        next_id: 1,
        list: Vec::new(),
    }));
    lua.set_app_data(watchers);
    engine.raw_set("on", lua.create_function(on)?)?;
    Ok(())
}

/// `engine.on(name, watcher) -> remover`.
fn on(lua: &Lua, (name, watcher): (Value, Value)) -> mlua::Result<Function> {
    let Value::String(name) = name else {
        return Err(mlua::Error::runtime(format!(
            "engine.on: event name must be a string, got {}",
            crate::vm::a_type(&name)
        )));
    };
    let name = name.as_bytes().to_vec();
    check_event_name(&name, "engine.on").map_err(mlua::Error::runtime)?;
    let Value::Function(f) = watcher else {
        return Err(mlua::Error::runtime(format!(
            "engine.on: watcher must be a function, got {}",
            crate::vm::a_type(&watcher)
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

impl std::fmt::Display for WatcherLabel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
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
pub(crate) fn deliver(vm: &Vm, log: &EventLog, deadline: std::time::Duration) -> bool {
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
        let completion: crate::vm::Completion = Box::new(move |lua: &Lua, result, _commands| {
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
            let failure = TaskFailure::raised(crate::vm::error_message(&e), String::new());
            vm.core.report(&label.to_string(), &failure);
        }
    }
    started
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ring_keeps_the_last_bound_events_in_order() {
        let log = EventLog::default();
        for i in 0..(EVENT_LOG_BOUND as i64 + 3) {
            log.raise("tick", Message::Integer(i));
        }
        assert_eq!(log.next_seq(), EVENT_LOG_BOUND as u64 + 3);
        let held = log.since(0);
        assert_eq!(held.len(), EVENT_LOG_BOUND);
        assert_eq!(held[0].seq, 3);
        assert_eq!(held[0].payload, Message::Integer(3));
        let tail = log.since(EVENT_LOG_BOUND as u64 + 1);
        let seqs: Vec<u64> = tail.iter().map(|e| e.seq).collect();
        assert_eq!(
            seqs,
            [EVENT_LOG_BOUND as u64 + 1, EVENT_LOG_BOUND as u64 + 2]
        );
        assert!(log.since(log.next_seq()).is_empty());
    }

    #[test]
    fn names_are_1_to_256_bytes() {
        assert!(check_event_name(b"a", "x").is_ok());
        assert!(check_event_name(&[b'a'; 256], "x").is_ok());
        assert_eq!(
            check_event_name(b"", "x").unwrap_err(),
            "x: event name must be 1 to 256 bytes, got 0"
        );
        assert_eq!(
            check_event_name(&[b'a'; 257], "x").unwrap_err(),
            "x: event name must be 1 to 256 bytes, got 257"
        );
    }
}
