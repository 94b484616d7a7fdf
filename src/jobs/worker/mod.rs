//! The Luau side of a pool thread: its VMs (one per principal), and how it runs items.

use std::any::Any;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::path::Path;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
// Fx, not SipHash: these maps are read and written on every item (the entry's key, the
// running job's pointer), where SipHash cost about 400 instructions an item.
use mlua::{Lua, MultiValue, Value};
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

mod item_clock;
mod kernel;
mod warm_pass;

use super::api::{install, run_release_watchers};
use super::engine_events::deliver as deliver_events;
use super::entry::entry_function;
use super::home::{HomeKind, JobsHome};
use super::item::{Item, ItemArgs, LaneKey};
use super::job::JobShared;
use super::keys::LaneTurn;
use super::messages::{DomainEvent, WorkerMsg};
use super::pool_shared::{PoolShared, WarmRuns};
use super::principal_cell::PrincipalCell;
use super::registered::remote::{on_op as run_remote_op, vm_lost};
use super::registered::remote_job::RemoteOp;
use super::reply::{reply, ReplyTo, Settlement};
use super::service_stubs::install_stubs;
use super::warm::WarmEntry;
use crate::pool::executor::{Poll, WorkerContext, WorkerLogic};
use crate::pool::lanes::KeyLanes;
use crate::principal::capability::Authority;
use crate::principal::Principal;
use crate::shared::{receive_parcel, sweep_parked_pops};
use crate::value::Message;
use crate::vm::{
    self, FailureKind, JobFailure, Outcome, Owner, ServiceCall, Signal, TaskFailure, Vm,
};
use item_clock::{count_wait, ItemClock};
use warm_pass::{ParkedItem, PassContext, WarmPass};

/// The source of a report that a worker VM was retired (it reached its memory limit): what
/// failed there is answered or reported on its own, so the note is not a failure
/// ([`Report::is_failure`](crate::Report::is_failure)).
pub const VM_RETIRED: &str = "worker VM retired";

/// How many entry names a worker VM keeps as Luau strings.
const ENTRY_KEYS: usize = 256;

/// How often a worker whose VMs have tasks waiting on frames looks at the domain's frame counter.
const FRAME_POLL: Duration = Duration::from_millis(2);

/// Serials of worker VMs, process-wide.
static NEXT_VM_SERIAL: AtomicU64 = AtomicU64::new(1);

/// One VM a worker keeps for one principal.
struct WorkerVm {
    principal: Arc<PrincipalCell>,
    /// Unique in the process: replies to this VM's promises carry it.
    serial: u64,
    vm: Vm,
    /// The jobs running in this VM, so a cancel can end their parked tasks.
    running: Rc<RefCell<HashMap<*const JobShared, Rc<Owner>>>>,
    /// The source epoch this VM's module cache last checked.
    sources_seen: u64,
    /// Entry names as Luau strings, so looking up an entry does not intern its name each time.
    /// The lookup itself still reads the module table: a module may replace its functions.
    entry_keys: HashMap<Arc<str>, mlua::LuaString>,
    /// Keys that ran an item in this VM since they bound here: `jobs.context().fresh` is true
    /// for a key not in it.
    keys_seen: HashSet<Bytes>,
    /// The `jobs.warm` entries this VM runs before its principal's items, and the items that
    /// wait for them.
    warm: WarmPass,
    /// How many of the principal's engine-service names have their stubs in this VM.
    services_installed: usize,
}

impl WorkerVm {
    /// Installs the stubs of engine services registered since this VM last looked.
    fn sync_services(&mut self) {
        if self.principal.services.len() != self.services_installed {
            self.services_installed = vm::with_open_globals(&self.vm.lua, || {
                install_stubs(
                    &self.vm.lua,
                    &self.principal.services,
                    self.services_installed,
                )
            });
        }
    }
}

impl WorkerVm {
    /// Moves the VM's warm pass on; answers the items it held back once the pass is over.
    fn drive_warm(&mut self, pool: &PoolShared, worker: usize) -> VecDeque<ParkedItem> {
        if !self.warm.is_warming() {
            return VecDeque::new();
        }
        let cx = PassContext {
            vm: &self.vm,
            principal: &self.principal,
            pool,
            worker,
        };
        if self.warm.advance(&cx) {
            self.warm.take_parked()
        } else {
            VecDeque::new()
        }
    }
}

/// Why a worker drops one of its VMs and builds it anew.
enum VmEnd<'a> {
    /// Host code panicked outside the scheduler's containment (the panic's message).
    Panicked(&'a str),
    /// The VM reached its memory limit (the out-of-memory text naming the VM and the limit).
    OutOfMemory(&'a str),
}

impl VmEnd<'_> {
    /// How a job that was running in the VM fails.
    fn failure(&self) -> TaskFailure {
        match self {
            VmEnd::Panicked(message) => TaskFailure::Panicked((*message).to_owned()),
            VmEnd::OutOfMemory(text) => {
                TaskFailure::raised(format!("its worker VM was retired: {text}"), String::new())
            }
        }
    }

    /// The end of "the worker VM that registered it was ...".
    fn replaced(&self) -> String {
        match self {
            VmEnd::Panicked(message) => format!("replaced after host code panicked: {message}"),
            VmEnd::OutOfMemory(text) => format!("retired: {text}"),
        }
    }

    /// What the domain's report says happened.
    fn report(&self) -> String {
        match self {
            VmEnd::Panicked(message) => format!("host code panicked: {message}"),
            VmEnd::OutOfMemory(text) => text.to_string(),
        }
    }
}

/// The per-thread logic of a pool worker.
pub(crate) struct LuauWorker {
    index: usize,
    vms: Vec<WorkerVm>,
    outbox: Rc<RefCell<Vec<Item>>>,
    pool: Option<Arc<PoolShared>>,
    signals: Arc<[OnceLock<Arc<Signal>>]>,
    lanes: Arc<KeyLanes<LaneKey, Item>>,
    warm_runs: WarmRuns,
    /// Items a VM held back for its warm pass when a panic dropped the VM: started again (in
    /// the VM built next) on the next poll.
    replay: VecDeque<ParkedItem>,
}

impl LuauWorker {
    /// Runs on the new worker thread: registers its interrupt signal.
    pub(crate) fn new(
        index: usize,
        signals: &Arc<[OnceLock<Arc<Signal>>]>,
        lanes: &Arc<KeyLanes<LaneKey, Item>>,
        warm_runs: &WarmRuns,
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
            replay: VecDeque::new(),
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
        principal: &Arc<PrincipalCell>,
        cx: &WorkerContext<'_, Self>,
    ) -> Result<usize, String> {
        if let Some(i) = self.vm_index(principal.id) {
            return Ok(i);
        }
        let pool = self.pool(cx);
        let mailbox = principal.mailbox.clone();
        let reporter: vm::Reporter = Box::new(move |label: &str, failure: &TaskFailure| {
            mailbox.send(DomainEvent::Report {
                label: label.to_owned(),
                failure: failure.to_string(),
            });
        });
        let serial = NEXT_VM_SERIAL.fetch_add(1, Ordering::Relaxed);
        let home = JobsHome::new(
            principal.clone(),
            pool,
            HomeKind::Worker {
                index: self.index,
                vm: serial,
                outbox: self.outbox.clone(),
            },
        );
        let plan = &principal.plan;
        let built = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            Vm::build(plan, reporter, principal.max_deadline, |lua| {
                install(lua, home)
            })
        }));
        let vm = match built {
            Ok(Ok(vm)) => {
                vm.set_authority(principal.authority.clone());
                vm::close_globals(&vm.lua);
                vm
            }
            Ok(Err(e)) => {
                return Err(format!(
                    "could not build a worker VM: {}",
                    vm::error_message(&e)
                ))
            }
            Err(panic) => {
                return Err(format!(
                    "could not build a worker VM: the plan panicked: {}",
                    vm::panic_message(&panic)
                ))
            }
        };
        self.vms.push(WorkerVm {
            principal: principal.clone(),
            serial,
            vm,
            running: Rc::new(RefCell::new(HashMap::default())),
            sources_seen: vm::source_epoch(),
            entry_keys: HashMap::default(),
            keys_seen: HashSet::default(),
            warm: WarmPass::default(),
            services_installed: 0,
        });
        self.vms.last_mut().expect("just pushed").sync_services();
        cx.set_vms_held(self.vms.len());
        let slot = self.vms.len() - 1;
        let wvm = &mut self.vms[slot];
        for entry in principal.warms.active() {
            wvm.warm.enqueue(entry);
        }
        // Nothing is parked in a VM this new: whatever the pass holds back comes later.
        let pool = self.pool(cx);
        let none = self.vms[slot].drive_warm(&pool, self.index);
        debug_assert!(none.is_empty());
        Ok(slot)
    }

    /// Hands items dispatched by this thread's VMs to its own deque, where idle siblings steal.
    fn flush_outbox(&self, cx: &WorkerContext<'_, Self>) {
        let items = std::mem::take(&mut *self.outbox.borrow_mut());
        for item in items {
            cx.push_local(item);
        }
    }

    /// Drops the VMs of principals that have ended. Items their warm passes held back are
    /// replayed, to be refused unrun like any other queued item of an ended principal. A job
    /// still running in such a VM fails now, naming why, so whoever awaits it is answered.
    fn drop_ended(&mut self, cx: &WorkerContext<'_, Self>) {
        let before = self.vms.len();
        let replay = &mut self.replay;
        self.vms.retain_mut(|v| {
            let alive = v.principal.is_alive();
            if !alive {
                replay.extend(v.warm.take_parked());
                let owners: Vec<Rc<Owner>> =
                    v.running.borrow_mut().drain().map(|(_, o)| o).collect();
                let reason = v.principal.end_reason();
                for owner in owners {
                    v.vm.drop_owner(&owner);
                    let failure = TaskFailure::raised(reason.clone(), String::new());
                    owner.complete(&v.vm.lua, Err(failure));
                }
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
    fn retire_exhausted(&mut self, cx: &WorkerContext<'_, Self>) {
        if !self.vms.iter().any(|v| v.vm.core.hit_memory_limit()) {
            return;
        }
        let (exhausted, kept): (Vec<WorkerVm>, Vec<WorkerVm>) = std::mem::take(&mut self.vms)
            .into_iter()
            .partition(|v| v.vm.core.hit_memory_limit());
        self.vms = kept;
        for wvm in exhausted {
            let text = wvm.vm.core.out_of_memory_text();
            self.retire(wvm, &VmEnd::OutOfMemory(&text), cx);
        }
        cx.set_vms_held(self.vms.len());
    }

    /// Drops a worker VM taken out of `self.vms`, answering everything that lived in it: its
    /// running jobs and its registered jobs fail naming `why`; a warm entry running in it fails
    /// too, and the items the pass held back and the entries it had yet to run go to the VM
    /// built next. The keys bound here stay bound to this worker: the next VM has seen none of
    /// them, so each key's next item runs with `jobs.context().fresh` true.
    fn retire(&mut self, mut wvm: WorkerVm, why: &VmEnd<'_>, cx: &WorkerContext<'_, Self>) {
        let pool = self.pool(cx);
        let pass = PassContext {
            vm: &wvm.vm,
            principal: &wvm.principal,
            pool: &pool,
            worker: self.index,
        };
        let (parked, unrun) = wvm.warm.abandon(&pass, why.failure());
        self.replay.extend(parked);
        for entry in unrun {
            pool.exec.post(
                self.index,
                WorkerMsg::Warm {
                    principal: wvm.principal.clone(),
                    entry,
                },
            );
        }
        let owners: Vec<Rc<Owner>> = wvm.running.borrow_mut().drain().map(|(_, o)| o).collect();
        for owner in owners {
            owner.complete(&wvm.vm.lua, Err(why.failure()));
        }
        // Jobs registered from this VM lived in it: each is errored, naming why.
        let lost = format!("the worker VM that registered it was {}", why.replaced());
        vm_lost(&wvm.vm.lua, &wvm.principal, &lost);
        let keys = dropped_keys(&wvm.keys_seen);
        wvm.principal.mailbox.send(DomainEvent::Report {
            label: VM_RETIRED.to_owned(),
            failure: format!(
                "worker {}: {}; the worker's VM was replaced{keys}",
                self.index,
                why.report()
            ),
        });
    }

    /// Starts `item` as the root task of a new owner. A keyed item brings its lane `turn`, which
    /// is dropped (settling the lane) after the item's reply, however the item ends.
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
        let fail = |item: Item, kind: FailureKind, message: String| {
            let failure = JobFailure {
                job: item.job.label(),
                module: Some(item.module.to_path_buf()),
                entry: Some(item.entry.to_string()),
                kind,
                message,
                traceback: None,
            };
            item.job.handoff.finish();
            let outcome = Outcome::Rejected(Arc::new(failure));
            reply(&item.principal, item.reply, outcome, &pool);
        };
        if !item.job.handoff.try_start() {
            return; // cancelled while queued: the canceller settled the promise
        }
        if !item.principal.is_alive() {
            let reason = item.principal.end_reason();
            return fail(item, FailureKind::Refused, reason);
        }
        count_wait(&item);
        let clock = ItemClock::start(&item);
        item.job.worker.store(self.index, Ordering::Release);
        let slot = match found_slot.map_or_else(|| self.vm_for(&item.principal, cx), Ok) {
            Ok(slot) => slot,
            Err(e) => return fail(item, FailureKind::Load, e),
        };
        let wvm = &mut self.vms[slot];
        wvm.sync_services();
        // The item is this VM's start point for engine events: watchers run before its entry.
        deliver_events(&wvm.vm, &wvm.principal.events, wvm.principal.max_deadline);
        if let Some(key) = &item.job.key {
            let fresh = wvm.keys_seen.insert(key.clone());
            item.job.fresh.store(fresh, Ordering::Relaxed);
        }
        let epoch = vm::source_epoch();
        if wvm.sources_seen != epoch {
            wvm.sources_seen = epoch;
            wvm.vm.core.modules.invalidate_changed();
        }
        let lua = &wvm.vm.lua;
        let key = match wvm.entry_keys.get(&item.entry) {
            Some(key) => key.clone(),
            None => match lua.create_string(&*item.entry) {
                Ok(key) => {
                    if wvm.entry_keys.len() >= ENTRY_KEYS {
                        wvm.entry_keys.clear();
                    }
                    wvm.entry_keys.insert(item.entry.clone(), key.clone());
                    key
                }
                Err(e) => return fail(item, FailureKind::Load, vm::error_message(&e)),
            },
        };
        // Requiring the module runs its top level outside any task, where the scheduler can't
        // contain a panic: answer the item first, then let the panic end the VM (`on_panic`).
        let found = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            entry_function(lua, &wvm.vm, &item.module, &item.entry, key)
        }));
        let function = match found {
            Ok(Ok(f)) => f,
            Ok(Err(e)) => return fail(item, FailureKind::Load, e),
            Err(payload) => {
                let message = TaskFailure::Panicked(vm::panic_message(&payload)).to_string();
                fail(item, FailureKind::Panicked, message);
                std::panic::resume_unwind(payload);
            }
        };
        let args = match &item.args {
            // No `mlua::Value` carries a Luau integer: a top-level one is pushed straight when
            // the task starts (a scalar, so the push allocates nothing and cannot fail).
            ItemArgs::Plain(integer @ Message::Integer(_)) => vm::Resume::Message(integer.clone()),
            args => match args.to_lua(lua) {
                Ok(v) => vm::Resume::Args(MultiValue::from_iter([v])),
                Err(e) => {
                    let message =
                        format!("its arguments could not be read: {}", vm::error_message(&e));
                    return fail(item, FailureKind::Transfer, message);
                }
            },
        };
        let Item {
            principal,
            job,
            module,
            entry,
            deadline,
            reply: reply_to,
            authority,
            args: spent_args,
            charge: spent_charge,
            ..
        } = item;
        // The arguments live in the VM now: their copy, and what it held of the job budget,
        // go before the job runs (its result is charged when it returns).
        drop((spent_args, spent_charge));
        let running = wvm.running.clone();
        let key = Arc::as_ptr(&job);
        let owner_label: Arc<dyn vm::OwnerIdentity> = job.clone();
        let (completion_job, completion_running) = (job.clone(), running.clone());
        // The commands the job recorded apply as the job: under the authority it ran with.
        let command_authority = authority.clone();
        let completion: vm::Completion = Box::new(move |_lua: &Lua, result, commands| {
            completion_running.borrow_mut().remove(&key);
            completion_job.handoff.finish();
            let outcome = job_outcome(&completion_job, &module, &entry, result);
            if let Some(clock) = clock {
                clock.finish(&principal, &completion_job);
            }
            if commands.is_empty() {
                reply(&principal, reply_to, outcome, &pool);
                drop(turn);
            } else {
                let settlement = (reply_to, outcome, turn);
                settle_after_commands(
                    &principal,
                    completion_job,
                    (commands, command_authority),
                    settlement,
                    &pool,
                );
            }
        });
        let owner = Rc::new(
            Owner::new(owner_label, deadline, Some(completion))
                .with_commands()
                .with_authority(authority),
        );
        running.borrow_mut().insert(key, owner.clone());
        if let Err(e) = wvm.vm.start_with(function, args, owner.clone()) {
            running.borrow_mut().remove(&key);
            let failure = TaskFailure::raised(vm::error_message(&e), String::new());
            owner.complete(lua, Err(failure));
        }
    }
}

/// How many keys a retirement report names; the rest it counts.
const REPORTED_KEYS: usize = 8;

/// `; the state of keys 'a', 'b' and 3 more was dropped with it`, or nothing without keys.
fn dropped_keys(keys: &HashSet<Bytes>) -> String {
    if keys.is_empty() {
        return String::new();
    }
    let mut names: Vec<String> = keys
        .iter()
        .map(|k| format!("'{}'", String::from_utf8_lossy(k)))
        .collect();
    names.sort();
    let more = names.len().saturating_sub(REPORTED_KEYS);
    names.truncate(REPORTED_KEYS);
    let mut list = names.join(", ");
    if more > 0 {
        list.push_str(&format!(" and {more} more"));
    }
    format!("; the state of keys {list} was dropped with it")
}

/// Turns a finished job's result into the outcome its promise settles with.
fn job_outcome(
    job: &JobShared,
    module: &Path,
    entry: &str,
    result: Result<MultiValue, TaskFailure>,
) -> Outcome {
    let failure = |kind, message, traceback| {
        Outcome::Rejected(Arc::new(JobFailure {
            job: job.label(),
            module: Some(module.to_path_buf()),
            entry: Some(entry.to_owned()),
            kind,
            message,
            traceback,
        }))
    };
    match result {
        Ok(values) => {
            let first = values.into_iter().next().unwrap_or(Value::Nil);
            match Message::read_weighed(&first, "result") {
                Ok((message, weight)) => match job.charge_result(weight) {
                    Ok(()) => Outcome::Resolved(message),
                    Err(refusal) => {
                        failure(FailureKind::Transfer, format!("result: {refusal}"), None)
                    }
                },
                Err(e) => failure(FailureKind::Transfer, e.to_string(), None),
            }
        }
        Err(TaskFailure::Cancelled) => Outcome::Cancelled,
        Err(TaskFailure::Raised { message, traceback }) => {
            failure(FailureKind::Raised, message, Some(traceback))
        }
        Err(f @ (TaskFailure::Deadline(_) | TaskFailure::Bound(_))) => {
            failure(FailureKind::Deadline, f.to_string(), None)
        }
        Err(f @ TaskFailure::Panicked(_)) => failure(FailureKind::Panicked, f.to_string(), None),
    }
}

/// Sends a job that recorded commands to its engine thread, which applies them and only then
/// delivers the outcome. When the domain is gone nothing is applied, and the settlement, dropped
/// undelivered, rejects the promise.
fn settle_after_commands(
    principal: &Arc<PrincipalCell>,
    job: Arc<JobShared>,
    (commands, authority): (Vec<ServiceCall>, Arc<Authority>),
    settlement: (ReplyTo, Outcome, Option<LaneTurn>),
    pool: &Arc<PoolShared>,
) {
    let (reply_to, outcome, turn) = settlement;
    let then = Settlement::new(
        reply_to,
        outcome,
        job,
        principal.clone(),
        pool.clone(),
        turn,
    );
    if !principal.is_alive() {
        // The generation has ended: its commands are never applied, and the settlement,
        // dropped here, rejects the promise saying so.
        return drop(then);
    }
    // A refused post hands the event back; dropping it rejects the promise.
    drop(principal.mailbox.post_or_return(DomainEvent::Apply {
        commands,
        then: Some(then),
        authority: Some(authority),
    }));
}

impl LuauWorker {
    /// A new warm entry for `principal`: queue it in this worker's VM (built if need be).
    fn warm(
        &mut self,
        principal: &Arc<PrincipalCell>,
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

impl WorkerLogic for LuauWorker {
    type Item = Item;
    type Message = WorkerMsg;

    fn run_item(&mut self, item: Item, cx: &WorkerContext<'_, Self>) {
        self.start(item, cx, None);
        self.retire_exhausted(cx);
        self.flush_outbox(cx);
    }

    fn on_message(&mut self, msg: WorkerMsg, cx: &WorkerContext<'_, Self>) {
        match msg {
            WorkerMsg::Settle {
                principal,
                vm,
                promise,
                outcome,
            } => {
                if let Some(i) = self.vm_index(principal) {
                    if self.vms[i].serial == vm {
                        self.vms[i].vm.settle(promise, outcome);
                    }
                }
            }
            WorkerMsg::Cancel { principal, job } => {
                if let Some(i) = self.vm_index(principal) {
                    let wvm = &self.vms[i];
                    let owner = wvm.running.borrow_mut().remove(&Arc::as_ptr(&job));
                    if let Some(owner) = owner {
                        wvm.vm.drop_owner(&owner);
                        job.handoff.finish();
                        sweep_parked_pops(&wvm.vm.lua);
                    }
                }
            }
            WorkerMsg::RunKeyed(item) => {
                let key = item.job.key.clone().unwrap_or_default();
                let turn = LaneTurn::new(self.pool(cx), item.principal.id, key);
                cx.keyed_item_started(item.queued_at.map_or(Duration::ZERO, |at| at.elapsed()));
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
                match self.vm_index(principal.id) {
                    Some(i) if self.vms[i].serial == vm => {
                        let wvm = &mut self.vms[i];
                        wvm.sync_services();
                        run_remote_op(&wvm.vm, &principal, job, op);
                    }
                    // The VM that held the job was dropped (after a panic): the job can't run.
                    _ if op == RemoteOp::Run => {
                        principal.mailbox.send(DomainEvent::RegisteredDone {
                            job,
                            commands: Vec::new(),
                            failure: Some(format!(
                                "the worker VM that registered it is gone (worker {} replaced \
                                 it after host code panicked)",
                                self.index
                            )),
                            authority: None,
                        });
                    }
                    _ => {}
                }
            }
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
            if wvm.vm.has_frame_waits() {
                // Frames are the domain's: nothing tells this thread one passed, so a VM with
                // tasks waiting on frames looks again after FRAME_POLL.
                let frame = wvm.principal.frames.load(Ordering::Acquire);
                busy |= wvm.vm.wake_frames(frame);
                let at = Instant::now() + FRAME_POLL;
                wake_at = Some(wake_at.map_or(at, |w| w.min(at)));
            }
            busy |= wvm.vm.step();
            if wvm.vm.has_ready() {
                busy = true;
            }
            let next = [wvm.vm.next_wake(), wvm.warm.next_wake()];
            for at in next.into_iter().flatten() {
                wake_at = Some(wake_at.map_or(at, |w| w.min(at)));
            }
            warming |= wvm.warm.is_warming();
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
        for wvm in std::mem::take(&mut self.vms) {
            self.retire(wvm, &why, cx);
        }
        cx.set_vms_held(0);
        self.outbox.borrow_mut().clear();
    }

    fn on_shutdown(&mut self) {
        self.vms.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(names: &[&str]) -> HashSet<Bytes> {
        names
            .iter()
            .map(|n| Bytes::copy_from_slice(n.as_bytes()))
            .collect()
    }

    #[test]
    fn a_retirement_names_up_to_eight_keys_sorted_and_counts_the_rest() {
        assert_eq!(dropped_keys(&keys(&[])), "");
        assert_eq!(
            dropped_keys(&keys(&["b", "a"])),
            "; the state of keys 'a', 'b' was dropped with it"
        );
        let eight: Vec<String> = (1..=8).map(|i| format!("k{i}")).collect();
        let eight: Vec<&str> = eight.iter().map(String::as_str).collect();
        assert_eq!(
            dropped_keys(&keys(&eight)),
            "; the state of keys 'k1', 'k2', 'k3', 'k4', 'k5', 'k6', 'k7', 'k8' was dropped with it"
        );
        let nine: Vec<String> = (1..=9).map(|i| format!("k{i}")).collect();
        let nine: Vec<&str> = nine.iter().map(String::as_str).collect();
        assert_eq!(
            dropped_keys(&keys(&nine)),
            "; the state of keys 'k1', 'k2', 'k3', 'k4', 'k5', 'k6', 'k7', 'k8' and 1 more was \
             dropped with it"
        );
    }
}
