//! The worker side of `jobs.warm`: one VM's warm pass, and the items it holds back.
//!
//! A worker VM runs its principal's warm entries one after another, each as the root task of
//! an owner that names it as a warm. While an entry runs (it may wait on time), the VM starts no
//! item of its principal: the worker parks them here, in arrival order, and starts them when the
//! pass is over. Tasks the VM already holds go on between the entry's waits, as the scheduler
//! runs them anyway.
//!
//! Two bounds hold an entry: the per-run deadline every owner has (from a resume to the next
//! yield), and the warm bound on its whole run in wall time, read at each resume of its tasks
//! (the scheduler's check) and at each worker poll (so an entry parked on a long wait ends on
//! time). An entry that panics or passes either bound fails for the principal's life: it is
//! reported once and runs on no later VM. An entry that raises is reported naming its worker,
//! and the VM serves on. A panic outside the entry's own code (one that escapes into the worker:
//! the VM's boot, a watcher, another principal's module) drops the VM under the running entry:
//! the first time in the epoch the entry runs once more, first in the VM built next; the second
//! time it fails as a panic of its own would (`WarmEntry::ended_by_outside_panic`).
//!
//! This file never decides where an item runs: it only holds items the worker already took.

use std::cell::RefCell;
use std::collections::{HashSet, VecDeque};
use std::fmt;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mlua::{MultiValue, Value};

use crate::executor::stats::WarmRun;
use crate::jobs::leaves::entry::entry_function;
use crate::jobs::protocol::item::Item;
use crate::jobs::protocol::keys::LaneTurn;
use crate::jobs::protocol::messages::DomainEvent;
use crate::jobs::protocol::pool_shared::PoolShared;
use crate::jobs::protocol::principal_shared::PrincipalShared;
use crate::jobs::protocol::warm::WarmEntry;
use crate::vm::{self, Owner, OwnerIdentity, TaskFailure, Vm};

/// An item the worker took while its VM was warming, with its key's turn if it is keyed.
pub(crate) type ParkedItem = (Item, Option<LaneTurn>);

/// One worker VM's warm pass: the entries it has yet to run, the one running, and the items
/// waiting for the pass to end.
#[derive(Default)]
pub(crate) struct WarmPass {
    /// Entries queued or run in this VM: each runs once per VM.
    seen: HashSet<u64>,
    queue: VecDeque<Arc<WarmEntry>>,
    current: Option<WarmRunning>,
    parked: VecDeque<ParkedItem>,
}

/// The entry running now.
struct WarmRunning {
    entry: Arc<WarmEntry>,
    owner: Rc<Owner>,
    identity: Arc<WarmIdentity>,
    started: Instant,
    /// Filled by the owner's completion when the entry's root task ends.
    end: Rc<RefCell<Option<Result<(), TaskFailure>>>>,
}

/// The owner identity of a warm entry's tasks.
struct WarmIdentity {
    /// `"./registry".build`.
    quoted: String,
    /// True until the entry ends: the await refusal covers the entry's run only. Atomic only
    /// because owner identities are shared as `Arc`; it is read and written on one thread.
    running: AtomicBool,
}

impl fmt::Display for WarmIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "jobs.warm {}", self.quoted)
    }
}

impl OwnerIdentity for WarmIdentity {
    fn warm(&self) -> Option<&str> {
        self.running
            .load(Ordering::Relaxed)
            .then_some(self.quoted.as_str())
    }
}

/// What a pass needs from its worker to report runs.
pub(crate) struct PassContext<'a> {
    pub(crate) vm: &'a Vm,
    pub(crate) principal: &'a Arc<PrincipalShared>,
    pub(crate) pool: &'a PoolShared,
    pub(crate) worker: usize,
}

impl WarmPass {
    /// Queues `entry` unless this VM has queued or run it already.
    pub(crate) fn enqueue(&mut self, entry: Arc<WarmEntry>) {
        if self.seen.insert(entry.id) {
            self.queue.push_back(entry);
        }
    }

    /// Whether the VM is in a warm pass: no item of its principal may start.
    pub(crate) fn is_warming(&self) -> bool {
        self.current.is_some() || !self.queue.is_empty()
    }

    /// Holds an item until the pass ends.
    pub(crate) fn park(&mut self, item: ParkedItem) {
        self.parked.push_back(item);
    }

    /// The items held back, in arrival order, once the pass is over.
    pub(crate) fn take_parked(&mut self) -> VecDeque<ParkedItem> {
        std::mem::take(&mut self.parked)
    }

    /// When the running entry's bound passes, so a sleeping worker wakes to end it.
    pub(crate) fn next_wake(&self) -> Option<Instant> {
        self.current.as_ref().and_then(|r| r.owner.bound_at())
    }

    /// Moves the pass on as far as it goes without waiting: ends an entry that finished (or
    /// whose bound passed), starts the next. Answers whether the pass is over.
    pub(crate) fn advance(&mut self, cx: &PassContext<'_>) -> bool {
        loop {
            if let Some(running) = &self.current {
                if running.end.borrow().is_none() {
                    match running.owner.bound_passed(Instant::now()) {
                        Some(bound) => {
                            cx.vm.drop_owner(&running.owner);
                            running
                                .owner
                                .complete(&cx.vm.lua, Err(TaskFailure::Bound(bound)));
                        }
                        None => return false,
                    }
                }
                if let Some(running) = self.current.take() {
                    let result = running.end.borrow_mut().take().unwrap_or(Ok(()));
                    running.identity.running.store(false, Ordering::Relaxed);
                    running.owner.clear_bound();
                    let elapsed = running.started.elapsed();
                    conclude(cx, &running.entry, elapsed, result, Some(&running.owner));
                }
                continue;
            }
            let Some(entry) = self.queue.pop_front() else {
                return true;
            };
            if let Some(reason) = entry.failed() {
                // It failed elsewhere after this VM queued it: nothing runs, and the call hears
                // why from this worker too.
                entry.record(
                    cx.principal,
                    cx.pool,
                    cx.worker,
                    Err(format!("not run: {reason}")),
                );
                continue;
            }
            let entry_for_panic = entry.clone();
            let started =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| start_run(cx, entry)));
            match started {
                Ok(Ok(running)) => self.current = Some(running),
                Ok(Err((entry, failure))) => {
                    conclude(cx, &entry, Duration::ZERO, Err(failure), None)
                }
                Err(payload) => {
                    // Host code panicked outside any task (the module's top level): the entry
                    // fails, and the worker drops this VM as for any escaped panic.
                    let failure = TaskFailure::panicked(&payload);
                    conclude(cx, &entry_for_panic, Duration::ZERO, Err(failure), None);
                    std::panic::resume_unwind(payload);
                }
            }
        }
    }

    /// The VM is being dropped (after a panic, or retired at its memory limit): the running
    /// entry fails with `failure`, unless `outside_panic` (a panic outside the entry's own code
    /// ended the VM) and the entry is forgiven one such ending: then it runs again, first in the
    /// VM built next. Answers the parked items (to start again in the VM built next) and the
    /// entries this VM had yet to run (to queue again there).
    pub(crate) fn abandon(
        &mut self,
        cx: &PassContext<'_>,
        failure: TaskFailure,
        outside_panic: bool,
    ) -> (VecDeque<ParkedItem>, Vec<Arc<WarmEntry>>) {
        let mut again = None;
        if let Some(running) = &self.current {
            if running.end.borrow().is_none() {
                let why = failure.to_string();
                running.owner.complete(&cx.vm.lua, Err(failure));
                if outside_panic && running.entry.ended_by_outside_panic() {
                    again = self.current.take().map(|running| (running, why));
                }
            }
        }
        let mut queue: Vec<Arc<WarmEntry>> = Vec::with_capacity(self.queue.len() + 1);
        if let Some((running, why)) = again {
            running.identity.running.store(false, Ordering::Relaxed);
            cx.pool.record_warm_run(
                cx.worker,
                WarmRun {
                    name: running.entry.name(),
                    elapsed: running.started.elapsed(),
                    error: Some(format!(
                        "{why} outside the entry, which ended its VM; it runs again in the next VM"
                    )),
                },
            );
            queue.push(running.entry);
        }
        // Ends the entry as `advance` does; nothing new starts, the queue is handed back.
        queue.extend(self.queue.drain(..));
        self.advance(cx);
        (self.take_parked(), queue)
    }
}

/// Starts `entry` as the root task of a warm owner and runs it to its first yield.
fn start_run(
    cx: &PassContext<'_>,
    entry: Arc<WarmEntry>,
) -> Result<WarmRunning, (Arc<WarmEntry>, TaskFailure)> {
    let lua = &cx.vm.lua;
    let key = match lua.create_string(&*entry.entry) {
        Ok(key) => key,
        Err(e) => {
            let failure = TaskFailure::raised(vm::error_message(&e), String::new());
            return Err((entry, failure));
        }
    };
    let function = match entry_function(lua, cx.vm, &entry.module, &entry.entry, key) {
        Ok(f) => f,
        Err(e) => return Err((entry, TaskFailure::raised(e, String::new()))),
    };
    let identity = Arc::new(WarmIdentity {
        quoted: entry.quoted(),
        running: AtomicBool::new(true),
    });
    let end = Rc::new(RefCell::new(None));
    let filled = end.clone();
    let completion: vm::Completion = Box::new(move |_lua, result, _commands| {
        *filled.borrow_mut() = Some(result.map(|_| ()));
    });
    let owner_identity: Arc<dyn OwnerIdentity> = identity.clone();
    // As the code that asked for the warm: never more than its authority.
    let mut owner = Owner::new(owner_identity, cx.principal.max_deadline, Some(completion));
    if let Some(authority) = entry.authority.clone() {
        owner = owner.with_authority(authority);
    }
    let owner = Rc::new(owner);
    let started = Instant::now();
    owner.set_bound(started, cx.principal.warm_bound);
    if let Err(e) = cx
        .vm
        .start(function, MultiValue::from_iter([Value::Nil]), owner.clone())
    {
        let failure = TaskFailure::raised(vm::error_message(&e), String::new());
        owner.complete(lua, Err(failure));
    }
    Ok(WarmRunning {
        entry,
        owner,
        identity,
        started,
        end,
    })
}

/// Files one run's end: the stats row, the report, the entry's state and the call's promise.
fn conclude(
    cx: &PassContext<'_>,
    entry: &WarmEntry,
    elapsed: Duration,
    result: Result<(), TaskFailure>,
    owner: Option<&Rc<Owner>>,
) {
    let error = match result {
        Ok(()) => None,
        Err(failure) => {
            let short = match &failure {
                TaskFailure::Raised { message, .. } => message.clone(),
                other => other.to_string(),
            };
            let fatal = matches!(
                failure,
                TaskFailure::Panicked(_) | TaskFailure::Deadline(_) | TaskFailure::Bound(_)
            );
            // A run the call's promise waits for is logged as a note: its failure reaches the
            // code through the promise's rejection, which fails the run only if no code observes
            // it. A later run (a VM built after the promise settled) has no promise to carry it.
            let note = entry.awaited_run(cx.worker);
            let report = |label: String, failure: String| {
                cx.principal.mailbox.send(if note {
                    DomainEvent::Note {
                        label,
                        text: failure,
                    }
                } else {
                    DomainEvent::Report { label, failure }
                });
            };
            if fatal {
                // The tasks it left behind go with it: a warm that failed this way is over.
                if let Some(owner) = owner {
                    cx.vm.drop_owner(owner);
                }
                if entry.fail(&short) {
                    report(
                        format!("jobs.warm {}", entry.quoted()),
                        format!(
                            "{short} (on worker {}); it runs on no later VM of this domain",
                            cx.worker
                        ),
                    );
                }
            } else {
                report(
                    format!("jobs.warm {} on worker {}", entry.quoted(), cx.worker),
                    failure.to_string(),
                );
            }
            Some(short)
        }
    };
    cx.pool.record_warm_run(
        cx.worker,
        WarmRun {
            name: entry.name(),
            elapsed,
            error: error.clone(),
        },
    );
    let result = match error {
        None => Ok(()),
        Some(e) => Err(e),
    };
    entry.record(cx.principal, cx.pool, cx.worker, result);
}
