//! The Luau side of a pool thread ([`LuauWorker`], the executor's [`WorkerLogic`]): its VMs (one
//! per principal, `worker_vm.rs`), how it starts an item (the steps in `start.rs`, the end in
//! `completion.rs`; kernels in `kernel.rs`, `jobs.map` chunks in `map_chunk.rs`), how it lets a
//! VM go (`retire.rs`), and the warm passes that gate a new VM's items (`warm_pass.rs`).

use std::any::Any;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::panic::resume_unwind;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

mod completion;
mod item_clock;
mod kernel;
mod map_chunk;
mod retire;
mod start;
mod warm_pass;
mod worker_vm;

use super::leaves::registered::remote_job::RemoteOp;
use super::luau::api::run_release_watchers;
use super::luau::engine_events::release_waits as release_engine_waits;
use super::luau::registered::remote::on_op as run_remote_op;
use super::luau::service_stubs;
use super::protocol::item::{Item, ItemArgs, LaneKey};
use super::protocol::job::JobShared;
use super::protocol::keys::LaneTurn;
use super::protocol::messages::{DomainEvent, WorkerMsg};
use super::protocol::pool_shared::{NativeTallies, PoolShared, WarmRuns};
use super::protocol::principal_shared::PrincipalShared;
use super::protocol::warm::WarmEntry;
use crate::executor::lanes::KeyLanes;
use crate::executor::threads::{Housekeeping, Poll, WorkerContext, WorkerLogic};
use crate::principal::Principal;
use crate::shared::{receive_parcel, sweep_parked_pops};
use crate::vm::{self, FailureKind, SchedulerVm, Signal, Spare, TaskFailure};
use item_clock::{count_wait, ItemClock};
use retire::{end_of_principal, retire, VmEnd};

pub(crate) use retire::VM_RETIRED;
use start::{Claim, EntryMissing};
use warm_pass::ParkedItem;
use worker_vm::WorkerVm;

/// How long a worker without a spare state stays idle before it makes one, once it used its
/// first: about twice what making one takes (`Lua::new`, 110-150 µs here), so the next
/// item of a stream, or one that follows an answer, rarely finds the worker busy making it. A
/// new worker makes its first as soon as it is idle, while its host is still setting up.
const SPARE_AFTER_IDLE: Duration = Duration::from_micros(250);

/// How often a worker whose VMs have tasks waiting on frames looks at the domain's frame counter.
const FRAME_POLL: Duration = Duration::from_millis(2);

/// The per-thread logic of a pool worker.
pub(crate) struct LuauWorker {
    index: usize,
    vms: Vec<WorkerVm>,
    outbox: Rc<RefCell<Vec<Item>>>,
    pool: Option<Arc<PoolShared>>,
    signals: Arc<[OnceLock<Arc<Signal>>]>,
    lanes: Arc<KeyLanes<LaneKey, Item>>,
    warm_runs: WarmRuns,
    native: NativeTallies,
    /// Items a VM held back for its warm pass when a panic dropped the VM: started again (in
    /// the VM built next) on the next poll.
    replay: VecDeque<ParkedItem>,
    /// The state the next VM this worker builds starts from, made when the worker was idle
    /// (`on_idle`): at most one, whatever the scripts do, so a first item for a principal
    /// finds most of its VM's build done.
    spare: Option<Spare>,
    /// Whether the worker made a spare before: its first is made as soon as it is idle, the
    /// later ones after [`SPARE_AFTER_IDLE`].
    spared: bool,
}

impl LuauWorker {
    /// Runs on the new worker thread: registers its interrupt signal.
    pub(crate) fn new(
        index: usize,
        signals: &Arc<[OnceLock<Arc<Signal>>]>,
        lanes: &Arc<KeyLanes<LaneKey, Item>>,
        warm_runs: &WarmRuns,
        native: &NativeTallies,
    ) -> LuauWorker {
        let _ = signals[index].set(vm::current_signal());
        LuauWorker {
            index,
            vms: Vec::new(),
            outbox: Rc::new(RefCell::new(Vec::new())),
            pool: None,
            signals: signals.clone(),
            lanes: lanes.clone(),
            warm_runs: warm_runs.clone(),
            native: native.clone(),
            replay: VecDeque::new(),
            spare: None,
            spared: false,
        }
    }

    fn pool(&mut self, cx: &WorkerContext<'_, Self>) -> Arc<PoolShared> {
        self.pool
            .get_or_insert_with(|| {
                Arc::new(PoolShared {
                    exec: cx.executor().clone(),
                    signals: self.signals.clone(),
                    lanes: self.lanes.clone(),
                    warm_runs: self.warm_runs.clone(),
                    native: self.native.clone(),
                })
            })
            .clone()
    }

    fn vm_index(&self, principal: Principal) -> Option<usize> {
        self.vms.iter().position(|v| v.principal.id == principal)
    }

    /// The VM for the item's principal, built on first use through the principal's plan. A new
    /// VM starts its warm pass with every active warm entry of the principal.
    fn vm_for(
        &mut self,
        principal: &Arc<PrincipalShared>,
        cx: &WorkerContext<'_, Self>,
    ) -> Result<usize, String> {
        if let Some(i) = self.vm_index(principal.id) {
            return Ok(i);
        }
        let pool = self.pool(cx);
        let spare = self.spare.take();
        let wvm = WorkerVm::build(principal, pool.clone(), self.index, &self.outbox, spare)?;
        self.vms.push(wvm);
        cx.set_vms_held(self.vms.len());
        let slot = self.vms.len() - 1;
        // Nothing is parked in a VM this new: whatever the pass holds back comes later.
        let none = self.vms[slot].drive_warm(&pool, self.index);
        debug_assert!(none.is_empty());
        Ok(slot)
    }

    /// Hands items dispatched by this thread's VMs to its own deque, where idle siblings steal.
    #[inline]
    fn flush_outbox(&self, cx: &WorkerContext<'_, Self>) {
        // The common case, checked inline: the items run dispatched nothing.
        if !self.outbox.borrow().is_empty() {
            self.push_outbox(cx);
        }
    }

    #[cold]
    fn push_outbox(&self, cx: &WorkerContext<'_, Self>) {
        let items = std::mem::take(&mut *self.outbox.borrow_mut());
        for item in items {
            cx.push_local(item);
        }
    }

    /// Drops the VMs of principals that have ended. Items their warm passes held back are
    /// replayed, to be refused unrun like any other queued item of an ended principal. A job
    /// still running in such a VM fails now, naming why, so whoever awaits it is answered.
    fn drop_ended(&mut self, cx: &WorkerContext<'_, Self>) {
        if self.vms.iter().all(|v| v.principal.is_alive()) {
            return; // the common case, checked without rebuilding the list
        }
        let before = self.vms.len();
        let replay = &mut self.replay;
        self.vms.retain_mut(|v| {
            let alive = v.principal.is_alive();
            if !alive {
                replay.extend(end_of_principal(v));
            }
            alive
        });
        if self.vms.len() != before {
            cx.set_vms_held(self.vms.len());
        }
    }

    /// Retires the VMs that reached their memory limit: what keeps their memory (tasks the
    /// failed job spawned, module state) would fail every later item on them. A VM for the
    /// principal is built anew on its next item.
    #[inline]
    fn retire_exhausted(&mut self, cx: &WorkerContext<'_, Self>) {
        if self.vms.iter().any(|v| v.vm.core.hit_memory_limit()) {
            self.retire_now(cx);
        }
    }

    #[cold]
    fn retire_now(&mut self, cx: &WorkerContext<'_, Self>) {
        let (exhausted, kept): (Vec<WorkerVm>, Vec<WorkerVm>) = std::mem::take(&mut self.vms)
            .into_iter()
            .partition(|v| v.vm.core.hit_memory_limit());
        self.vms = kept;
        let pool = self.pool(cx);
        for wvm in exhausted {
            let text = wvm.vm.core.out_of_memory_text();
            let parked = retire(wvm, &VmEnd::OutOfMemory(&text), self.index, &pool);
            self.replay.extend(parked);
        }
        cx.set_vms_held(self.vms.len());
    }

    /// Starts `item` as the root task of a new owner in its principal's VM, step by step (each
    /// step is a function of `start.rs`). A keyed item brings its lane `turn`, which is dropped
    /// (settling the lane) after the item's reply, however the item ends.
    fn start(&mut self, item: Item, cx: &WorkerContext<'_, Self>, turn: Option<LaneTurn>) {
        if matches!(item.args, ItemArgs::Kernel(_)) {
            let pool = self.pool(cx);
            item.job.worker.store(self.index, Ordering::Release);
            kernel::run(item, &pool);
            drop(turn);
            return;
        }
        // A VM in its warm pass starts no item of its principal: hold the item, before it
        // counts as started, so a cancel meanwhile still refuses it unrun.
        // The slot found here is used again below: nothing between adds or removes a VM.
        let mut found_slot = None;
        if item.principal.is_alive() {
            if let Ok(slot) = self.vm_for(&item.principal, cx) {
                let warm = &mut self.vms[slot].warm;
                if warm.is_warming() {
                    warm.park((item, turn));
                    return;
                }
                found_slot = Some(slot);
            }
        }
        let pool = self.pool(cx);
        match start::claim(&item) {
            Claim::Run => {}
            Claim::Cancelled => return,
            Claim::Ended(reason) => {
                return start::reject(item, FailureKind::Refused, reason, &pool)
            }
        }
        count_wait(&item);
        let clock = ItemClock::start(&item);
        item.job.worker.store(self.index, Ordering::Release);
        let slot = match found_slot.map_or_else(|| self.vm_for(&item.principal, cx), Ok) {
            Ok(slot) => slot,
            Err(e) => return start::reject(item, FailureKind::Load, e, &pool),
        };
        let wvm = &mut self.vms[slot];
        start::prepare(wvm, &item);
        let entry = match start::find_entry(wvm, &item) {
            Ok(entry) => entry,
            Err(EntryMissing::Refused(kind, message)) => {
                return start::reject(item, kind, message, &pool)
            }
            Err(EntryMissing::Panicked(payload)) => {
                // Answer the item first, then let the panic end the VM (`on_panic`).
                let message = TaskFailure::Panicked(vm::panic_message(&payload)).to_string();
                start::reject(item, FailureKind::Panicked, message, &pool);
                resume_unwind(payload);
            }
        };
        start::launch(wvm, item, entry, (clock, turn), pool);
    }
}

impl LuauWorker {
    /// A new warm entry for `principal`: queue it in this worker's VM (built if need be).
    fn warm(
        &mut self,
        principal: &Arc<PrincipalShared>,
        entry: Arc<WarmEntry>,
        cx: &WorkerContext<'_, Self>,
    ) {
        if !principal.is_alive() {
            return; // its promises lived in the principal's VMs, which are gone
        }
        match self.vm_for(principal, cx) {
            Ok(slot) => {
                self.vms[slot].warm.enqueue(entry);
                let pool = self.pool(cx);
                let released = self.vms[slot].drive_warm(&pool, self.index);
                for (item, turn) in released {
                    self.start(item, cx, turn);
                }
            }
            Err(e) => {
                let pool = self.pool(cx);
                entry.record(principal, &pool, self.index, Err(e));
            }
        }
    }

    /// Moves every VM's warm pass on; starts the items of passes that ended. Answers whether
    /// any pass ended.
    fn drive_warm_passes(&mut self, cx: &WorkerContext<'_, Self>) -> bool {
        let pool = self.pool(cx);
        let mut released = VecDeque::new();
        let mut ended = false;
        for wvm in &mut self.vms {
            if wvm.warm.is_warming() {
                released.extend(wvm.drive_warm(&pool, self.index));
                ended |= !wvm.warm.is_warming();
            }
        }
        for (item, turn) in released {
            self.start(item, cx, turn);
        }
        ended
    }
}

impl LuauWorker {
    /// A job running in this worker's VM for `principal` was cancelled: end its parked tasks.
    fn cancel_running(&mut self, principal: Principal, job: &Arc<JobShared>) {
        if let Some(i) = self.vm_index(principal) {
            let wvm = &self.vms[i];
            let owner = wvm.running.borrow_mut().remove(&Arc::as_ptr(job));
            if let Some(owner) = owner {
                wvm.vm.drop_owner(&owner);
                job.handoff.finish();
                sweep_parked_pops(&wvm.vm.lua);
            }
        }
    }

    /// Runs (or forgets) registered job `job`, which lives in this worker's VM of serial `vm`.
    /// A VM that was dropped after a panic took the job with it: a run is answered as failed.
    fn run_registered(
        &mut self,
        principal: &Arc<PrincipalShared>,
        vm: u64,
        job: u64,
        op: RemoteOp,
    ) {
        match self.vm_index(principal.id) {
            Some(i) if self.vms[i].serial == vm => {
                let wvm = &mut self.vms[i];
                wvm.sync_services();
                run_remote_op(&wvm.vm, principal, job, op);
            }
            _ if op == RemoteOp::Run => {
                principal.mailbox.send(DomainEvent::RegisteredDone {
                    job,
                    commands: Vec::new(),
                    failure: Some(format!(
                        "the worker VM that registered it is gone (worker {} replaced it after \
                         host code panicked)",
                        self.index
                    )),
                    authority: None,
                });
            }
            _ => {}
        }
    }
}

impl WorkerLogic for LuauWorker {
    type Item = Item;
    type Message = WorkerMsg;

    fn run_item(&mut self, item: Item, cx: &WorkerContext<'_, Self>) {
        service_stubs::item_started();
        self.start(item, cx, None);
        self.retire_exhausted(cx);
        self.flush_outbox(cx);
    }

    fn on_message(&mut self, msg: WorkerMsg, cx: &WorkerContext<'_, Self>) {
        service_stubs::end_query_hold();
        match msg {
            WorkerMsg::Settle {
                principal,
                vm,
                promise,
                outcome,
            } => {
                if let Some(i) = self.vm_index(principal) {
                    if self.vms[i].serial == vm {
                        self.vms[i].vm.settle_reply(promise, outcome);
                    }
                }
            }
            WorkerMsg::Cancel { principal, job } => self.cancel_running(principal, &job),
            WorkerMsg::RunKeyed(item) => {
                service_stubs::item_started();
                let key = item.job.key.clone().unwrap_or_default();
                let waited = item.queued_at.map_or(Duration::ZERO, |at| at.elapsed());
                let turn = LaneTurn::new(self.pool(cx), item.principal.id, key, waited);
                cx.keyed_item_started(waited);
                self.start(item, cx, Some(turn));
            }
            WorkerMsg::Warm { principal, entry } => self.warm(&principal, entry, cx),
            WorkerMsg::Parcel { principal, parcel } => {
                // No VM for the principal (any more): the parcel drops, giving its value back.
                if let Some(i) = self.vm_index(principal) {
                    receive_parcel(&self.vms[i].vm.lua, parcel);
                }
            }
            WorkerMsg::Registered {
                principal,
                vm,
                job,
                op,
            } => {
                if !principal.is_alive() {
                    return; // the job ended with its generation
                }
                self.run_registered(&principal, vm, job, op);
            }
            // The round's poll drops the ended principals' VMs.
            WorkerMsg::Ended => {}
            WorkerMsg::Released { principal, key } => {
                if let Some(i) = self.vm_index(principal) {
                    let wvm = &mut self.vms[i];
                    wvm.keys_seen.remove(&key);
                    run_release_watchers(&wvm.vm, &key, wvm.principal.max_deadline);
                }
            }
        }
        self.retire_exhausted(cx);
        self.flush_outbox(cx);
    }

    fn hold_items_until(&self) -> Option<Instant> {
        service_stubs::query_hold_until()
    }

    fn poll(&mut self, cx: &WorkerContext<'_, Self>) -> Poll {
        self.drop_ended(cx);
        let mut busy = false;
        if !self.replay.is_empty() {
            busy = true;
            for (item, turn) in std::mem::take(&mut self.replay) {
                self.start(item, cx, turn);
            }
        }
        let mut wake_at: Option<Instant> = None;
        let mut warming = false;
        for wvm in &self.vms {
            warming |= wvm.warm.is_warming();
            if let Some(at) = wvm.warm.next_wake() {
                wake_at = Some(wake_at.map_or(at, |w| w.min(at)));
            }
            // A VM with nothing queued, timed or waiting on frames has nothing to step and no
            // wake time: one borrow instead of five on a busy worker's every round.
            if wvm.vm.core.scheduler().borrow().is_quiet() {
                continue;
            }
            if wvm.vm.has_frame_waits() {
                // Frames are the domain's: nothing tells this thread one passed, so a VM with
                // tasks waiting on frames looks again after FRAME_POLL.
                let frame = wvm.principal.frames.load(Ordering::Acquire);
                busy |= wvm.vm.wake_frames(frame);
                let at = Instant::now() + FRAME_POLL;
                wake_at = Some(wake_at.map_or(at, |w| w.min(at)));
            }
            if wvm.vm.has_signal_waits() {
                // As with frames: nothing tells this thread an engine event was raised, so a
                // VM with tasks in `engine.wait` reads the log again after FRAME_POLL.
                busy |= release_engine_waits(&wvm.vm, &wvm.principal.events);
                let at = Instant::now() + FRAME_POLL;
                wake_at = Some(wake_at.map_or(at, |w| w.min(at)));
            }
            busy |= wvm.vm.step();
            if wvm.vm.has_ready() {
                busy = true;
            }
            if let Some(at) = wvm.vm.next_wake() {
                wake_at = Some(wake_at.map_or(at, |w| w.min(at)));
            }
        }
        if warming {
            busy |= self.drive_warm_passes(cx);
        }
        self.retire_exhausted(cx);
        self.flush_outbox(cx);
        if busy {
            Poll::Busy
        } else {
            Poll::Idle { wake_at }
        }
    }

    fn on_panic(&mut self, payload: Box<dyn Any + Send>, cx: &WorkerContext<'_, Self>) {
        // Scheduler code contains panics from Luau callbacks itself; one reaching here escaped
        // Skein's own bookkeeping, so the VMs it touched can't be trusted: rebuild them lazily.
        let message = vm::panic_message(&payload);
        let why = VmEnd::Panicked(&message);
        let pool = self.pool(cx);
        for wvm in std::mem::take(&mut self.vms) {
            let parked = retire(wvm, &why, self.index, &pool);
            self.replay.extend(parked);
        }
        cx.set_vms_held(0);
        self.outbox.borrow_mut().clear();
    }

    fn on_idle(&mut self, idle_since: Instant, now: Instant) -> Housekeeping {
        if self.spare.is_some() {
            return Housekeeping::Nothing;
        }
        let due = idle_since + SPARE_AFTER_IDLE;
        if self.spared && now < due {
            return Housekeeping::At(due);
        }
        self.spare = Some(Spare::new());
        self.spared = true;
        Housekeeping::Done
    }

    fn on_shutdown(&mut self) {
        self.vms.clear();
        self.spare = None;
    }
}
