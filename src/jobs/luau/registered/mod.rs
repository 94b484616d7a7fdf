//! Registered jobs (`jobs.register`): work a script declares once and the engine runs every
//! frame, phase by phase, until it is cancelled.
//!
//! The registry lives on a domain's engine thread (it holds engine-VM functions) and is reached
//! from Luau through the VM's app data, from the domain directly. Worker and kernel jobs go to
//! the pool as ordinary items whose outcome lands in a host slot; the registry looks at the slot
//! each frame, so a result is applied in the first frame after it lands and the engine thread
//! never waits for a worker.
//!
//! Which jobs are registered, and the references their handles hold, are the generation's
//! `JobDirectory`'s (`jobs/leaves/registered/directory.rs`): a job leaves the registry when its
//! last reference is dropped there.

mod descriptor;
pub(crate) mod lua;
pub(crate) mod remote;

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::path::Path;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mlua::{Function, Lua, MultiValue, Value};

use crate::error::{Error, NameRefusal, Result};
use crate::jobs::leaves::options::MAX_KEY_BYTES;
use crate::jobs::leaves::outcome_slot::{OutcomeSlot, SlotState};
use crate::jobs::protocol::item::{Item, ItemArgs, Kernel, KernelCall};
use crate::jobs::protocol::job::{JobShared, JobTally, JobTarget};
use crate::jobs::protocol::messages::WorkerMsg;
use crate::jobs::protocol::pool_shared::PoolShared;
use crate::jobs::protocol::principal_shared::PrincipalShared;
use crate::jobs::protocol::reply::ReplyTo;
use crate::principal::capability::{self, Authority};
use crate::value::{ExactValue, Message};
use crate::vm::{self, FailureKind, JobFailure, Outcome, Owner, OwnerIdentity, TaskFailure, Vm};

use crate::jobs::leaves::registered::directory::Dropped;
use crate::jobs::leaves::registered::info::{JobInfo, JobOrder, JobStatus, WorkerCalls};
use crate::jobs::leaves::registered::order::{Declared, PhaseOrder, Placed, UnorderedWrite};
use crate::jobs::leaves::registered::remote_job::{Control, RemoteOp, RemoteRegistration};
pub(crate) use descriptor::JobBody;

/// What the registry asks of its domain while it runs a phase.
pub(crate) trait PhaseHost {
    /// Waits until every one of `slots` has settled, serving the domain's mailbox meanwhile (an
    /// item may forward a query, or record commands the engine applies before it settles), or
    /// until the wait's bound passes. Answers how long it waited.
    fn settle(&self, slots: &[Arc<OutcomeSlot>]) -> Duration;
    /// Reports jobs `first` and `second` of `phase`, which both write `name` with nothing
    /// ordering them.
    fn unordered_write(&self, phase: &str, first: &str, second: &str, name: &str);
}

/// Where a registered job's failures go: the domain's reports, as (source, message, and the
/// failure taken apart).
pub(crate) type FailureSink = Rc<dyn Fn(String, String, Option<JobFailure>)>;

/// A domain's registered jobs and the kernels its host registered.
pub(crate) struct RegisteredJobs {
    /// Live jobs, in registration order.
    jobs: RefCell<Vec<Rc<RegisteredJob>>>,
    /// Phases in the order their first job registered. A phase keeps its place once seen.
    phases: RefCell<Vec<Arc<str>>>,
    kernels: RefCell<HashMap<Arc<str>, Kernel>>,
    /// Worker-registered jobs their own VM cancelled while a call ran: that call's end (and
    /// its writes) is still to come, which `run_until_idle` waits for.
    draining: RefCell<HashSet<u64>>,
    /// The write/write pairs reported already: each pair is reported once.
    reported_writes: RefCell<HashSet<UnorderedWrite>>,
    principal: Arc<PrincipalShared>,
    pool: Arc<PoolShared>,
    sink: FailureSink,
}

/// One registered job.
pub(crate) struct RegisteredJob {
    id: u64,
    name: Option<String>,
    phase: Arc<str>,
    origin: String,
    metadata: Option<Message>,
    /// Its `reads`, `writes`, `after`, `before` and `pure`.
    declared: Arc<Declared>,
    body: JobBody,
    /// The authority of the code that registered it: its `run`, `input` and `apply` and its
    /// items all run under it, so a job never holds more than the code that registered it.
    authority: Arc<Authority>,
    tally: Arc<JobTally>,
    state: RefCell<JobState>,
    /// Its place in its phase, as the registry last read the phase's order.
    placed: Cell<Option<Placed>>,
}

/// What changes as a job runs.
#[derive(Default)]
struct JobState {
    paused: bool,
    errored: bool,
    last_error: Option<String>,
    forwarded: u64,
    calls: u64,
    failed: u64,
    /// Frames that found a worker-registered job's call still running.
    late: u64,
    /// A call of a worker-registered job was posted and its end has not arrived.
    remote_in_flight: bool,
    /// A task of the job (a luau `run`, or an `apply`) has started and not ended.
    task_running: bool,
    /// The slot of the item on a worker whose result `apply` waits for. The registry polls it
    /// each frame and never waits on it; cancelling the job drops it, and the item's late
    /// result with it.
    in_flight: Option<Arc<OutcomeSlot>>,
}

impl RegisteredJob {
    /// How reports and rejections name the job.
    fn label(&self) -> String {
        match &self.name {
            Some(name) => name.clone(),
            None => format!("#{}", self.id),
        }
    }
}

impl RegisteredJobs {
    pub(crate) fn new(
        principal: Arc<PrincipalShared>,
        pool: Arc<PoolShared>,
        sink: FailureSink,
    ) -> Rc<RegisteredJobs> {
        Rc::new(RegisteredJobs {
            jobs: RefCell::new(Vec::new()),
            phases: RefCell::new(Vec::new()),
            kernels: RefCell::new(HashMap::new()),
            draining: RefCell::default(),
            reported_writes: RefCell::default(),
            principal,
            pool,
            sink,
        })
    }

    /// The registry of the next generation: no jobs (their functions lived in the old engine
    /// VM), the same host kernels.
    pub(crate) fn next_generation(&self, principal: Arc<PrincipalShared>) -> Rc<RegisteredJobs> {
        let next = RegisteredJobs::new(principal, self.pool.clone(), self.sink.clone());
        *next.kernels.borrow_mut() = self.kernels.borrow().clone();
        next
    }

    /// Registers a kernel under `name`; refused when the name is empty, too long or taken.
    pub(crate) fn register_kernel(&self, name: &str, kernel: Kernel) -> Result<()> {
        if name.is_empty() || name.len() > MAX_KEY_BYTES {
            return Err(Error::Name {
                refusal: NameRefusal::KernelName,
                message: format!(
                    "register_kernel: a kernel name must be 1 to {} bytes, got {}",
                    MAX_KEY_BYTES,
                    name.len()
                ),
            });
        }
        let mut kernels = self.kernels.borrow_mut();
        if kernels.contains_key(name) {
            return Err(Error::Name {
                refusal: NameRefusal::KernelTaken,
                message: format!("register_kernel: kernel '{name}' is registered already"),
            });
        }
        kernels.insert(Arc::from(name), kernel);
        Ok(())
    }

    fn kernel(&self, name: &str) -> Option<Kernel> {
        self.kernels.borrow().get(name).cloned()
    }

    /// Checks a descriptor and registers its job. Nothing is registered when it is refused.
    fn register(&self, lua: &Lua, descriptor: &Value) -> Result<u64, String> {
        let d = descriptor::read(
            lua,
            descriptor,
            |n| {
                self.kernel(n).ok_or_else(|| {
                    format!(
                        "jobs.register: executor.kernel {} is not a registered kernel",
                        vm::quoted(n.as_bytes())
                    )
                })
            },
            self.principal.max_deadline,
        )?;
        // The engine keeps the job's one copy of its fields.
        let held = d.hold(&self.principal.memory, 1)?;
        let id = self
            .principal
            .jobs
            .reserve(d.name.as_deref(), &d.phase, &d.declared, held)?;
        self.add(RegisteredJob {
            id,
            name: d.name,
            phase: d.phase,
            origin: d.origin,
            metadata: d.metadata,
            declared: d.declared,
            body: d.body,
            authority: capability::current_or(&self.principal.authority),
            tally: Arc::new(JobTally {
                id,
                ..JobTally::default()
            }),
            state: RefCell::new(JobState::default()),
            placed: Cell::new(None),
        });
        Ok(id)
    }

    fn add(&self, job: RegisteredJob) {
        let mut phases = self.phases.borrow_mut();
        if !phases.contains(&job.phase) {
            phases.push(job.phase.clone());
        }
        self.jobs.borrow_mut().push(Rc::new(job));
    }

    /// Adds a job a worker VM registered (its id and name were reserved at the call). One that
    /// VM cancelled before it got here is dropped.
    pub(crate) fn add_remote(&self, r: RemoteRegistration) {
        if r.shared.cancelled.load(Ordering::Acquire) {
            return;
        }
        let id = r.shared.id;
        self.add(RegisteredJob {
            id,
            name: r.name,
            phase: r.phase,
            origin: r.origin,
            metadata: r.metadata,
            declared: r.declared,
            body: JobBody::Remote {
                kind: r.kind,
                worker: r.worker,
                vm: r.vm,
                shared: r.shared,
            },
            // Its calls run in its worker VM under the authority it was registered with there;
            // the engine runs nothing of it.
            authority: self.principal.authority.clone(),
            tally: Arc::new(JobTally {
                id,
                ..JobTally::default()
            }),
            state: RefCell::new(JobState::default()),
            placed: Cell::new(None),
        });
    }

    /// A call of worker-registered job `id` ended (its commands are applied already): the job
    /// may be called again, or is errored with `failure`.
    pub(crate) fn remote_done(&self, id: u64, failure: Option<String>) {
        self.draining.borrow_mut().remove(&id);
        let Some(job) = self.get(id) else { return };
        job.state.borrow_mut().remote_in_flight = false;
        match failure {
            Some(message) => self.fail(&job, &message, true),
            None => mirror(&job),
        }
    }

    /// What a handle in a worker VM asked for job `id`.
    pub(crate) fn control(&self, id: u64, control: Control) {
        match control {
            Control::Pause => drop(self.set_paused(id, true)),
            Control::Resume => drop(self.set_paused(id, false)),
            Control::Unregister => {
                if self
                    .get(id)
                    .is_some_and(|j| j.state.borrow().remote_in_flight)
                {
                    self.draining.borrow_mut().insert(id);
                }
                self.unregister(id);
            }
        }
    }

    /// Drops from the registry the jobs a collected handle freed since the last look (see
    /// `jobs/leaves/registered/directory.rs`). Called at each access from Luau, at each frame and
    /// before each job's turn in it, so a job freed that way runs in no later turn.
    pub(crate) fn reap(&self) {
        for id in self.principal.jobs.take_collected() {
            self.unregister(id);
        }
    }

    /// Whether registered jobs keep the domain busy: a job live and neither paused nor
    /// errored, or the last call of a job its VM cancelled still to end.
    pub(crate) fn has_work(&self) -> bool {
        self.reap();
        !self.draining.borrow().is_empty()
            || self.jobs.borrow().iter().any(|j| {
                let state = j.state.borrow();
                !state.paused && !state.errored
            })
    }

    fn get(&self, id: u64) -> Option<Rc<RegisteredJob>> {
        self.jobs.borrow().iter().find(|j| j.id == id).cloned()
    }

    /// How reports name job `id`: `job '<name>'`, or `job '#<id>'` for an anonymous one.
    pub(crate) fn source(&self, id: u64) -> String {
        match self.get(id) {
            Some(job) => format!("job '{}'", job.label()),
            None => format!("job '#{id}'"),
        }
    }

    /// The live job named `name`: one a worker VM registered counts once it has reached the
    /// engine.
    fn find(&self, name: &str) -> Option<u64> {
        let id = self.principal.jobs.named(name)?;
        self.get(id).map(|j| j.id)
    }

    /// A reference to job `id` for a handle `jobs.find` answers; false when it is not
    /// registered.
    fn hold(&self, id: u64) -> bool {
        self.principal.jobs.add_reference(id)
    }

    /// A handle's cancel: drops the reference it held, and unregisters the job when that was
    /// the last. Answers whether the job was registered.
    fn cancel(&self, id: u64) -> bool {
        match self.principal.jobs.drop_reference(id) {
            Dropped::NotRegistered => false,
            Dropped::StillHeld => true,
            Dropped::Last => {
                self.unregister(id);
                true
            }
        }
    }

    /// Unregisters a job whatever references remain: later frames never run it, and the result
    /// of an item in flight is never applied.
    fn unregister(&self, id: u64) {
        let removed = {
            let mut jobs = self.jobs.borrow_mut();
            let at = jobs.iter().position(|j| j.id == id);
            at.map(|at| jobs.remove(at))
        };
        self.principal.jobs.release(id);
        let Some(job) = removed else {
            return;
        };
        if let JobBody::Remote {
            worker, vm, shared, ..
        } = &job.body
        {
            shared.cancelled.store(true, Ordering::Release);
            self.pool.exec.post(
                *worker,
                WorkerMsg::Registered {
                    principal: self.principal.clone(),
                    vm: *vm,
                    job: id,
                    op: RemoteOp::Forget,
                },
            );
        }
    }

    /// Pauses or resumes a job (resuming also clears its error). Answers whether it is
    /// registered.
    fn set_paused(&self, id: u64, paused: bool) -> bool {
        let Some(job) = self.get(id) else {
            return false;
        };
        {
            let mut state = job.state.borrow_mut();
            state.paused = paused;
            if !paused {
                state.errored = false;
            }
        }
        mirror(&job);
        true
    }

    /// Counts a query that an item of job `id` forwarded and the engine thread answered.
    pub(crate) fn count_forwarded(&self, id: u64) {
        if let Some(job) = self.get(id) {
            job.state.borrow_mut().forwarded += 1;
        }
    }

    /// A snapshot of job `id`.
    fn info(&self, id: u64) -> Option<JobInfo> {
        let job = self.get(id)?;
        self.order(&job.phase);
        Some(info_of(&job))
    }

    /// The order of `phase`, each of its jobs told its place.
    fn order(&self, phase: &Arc<str>) -> Arc<PhaseOrder> {
        let order = self.principal.jobs.order(phase);
        for job in self.jobs.borrow().iter().filter(|j| j.phase == *phase) {
            job.placed.set(order.of(job.id));
        }
        order
    }

    /// How many jobs are live.
    pub(crate) fn len(&self) -> usize {
        self.reap();
        self.jobs.borrow().len()
    }

    /// Snapshots of the live jobs, in registration order, of one phase or of all.
    pub(crate) fn list(&self, phase: Option<&str>) -> Vec<JobInfo> {
        self.reap();
        let phases: Vec<Arc<str>> = self.phases.borrow().clone();
        for known in phases.iter().filter(|q| phase.is_none_or(|p| &***q == p)) {
            self.order(known);
        }
        self.jobs
            .borrow()
            .iter()
            .filter(|j| phase.is_none_or(|p| &*j.phase == p))
            .map(|j| info_of(j))
            .collect()
    }

    /// Runs every phase (in the order their first job registered), or only `phase`, each wave by
    /// wave in its resolved order (`jobs/leaves/registered/order.rs`): each job applies a result
    /// that landed, then starts its next run or item. The items a wave's worker and kernel jobs
    /// started run on the pool at once; before the next wave starts, `host` waits for them to
    /// settle and their results are applied, so a job reads what the jobs before it wrote this
    /// frame. Answers whether the phase is known.
    pub(crate) fn run(self: &Rc<Self>, vm: &Vm, phase: Option<&str>, host: &dyn PhaseHost) -> bool {
        let phases: Vec<Arc<str>> = match phase {
            Some(p) => match self.phases.borrow().iter().find(|q| &***q == p) {
                Some(known) => vec![known.clone()],
                None => return false,
            },
            None => self.phases.borrow().clone(),
        };
        for phase in phases {
            let order = self.order(&phase);
            self.report_unordered(&phase, &order, host);
            let waves = order.waves();
            for (at, wave) in waves.iter().enumerate() {
                // A job an earlier job of this frame cancelled (or whose last handle it dropped)
                // does not run; a job a worker VM registered that has not reached the engine yet
                // is not here.
                self.reap();
                let jobs: Vec<Rc<RegisteredJob>> =
                    wave.iter().filter_map(|id| self.get(*id)).collect();
                let mut started = Vec::new();
                for job in &jobs {
                    self.reap();
                    if self.get(job.id).is_some() && self.tick(vm, job) {
                        started.push(job.clone());
                    }
                }
                if at + 1 < waves.len() {
                    self.settle_wave(vm, &phase, at + 1, &started, host);
                }
            }
        }
        true
    }

    /// Waits for the pool items a wave's jobs started in this frame (`started`) and applies
    /// their results, before the next wave of the phase starts. An item still running when
    /// `host` gives up stays in flight, is reported, and applies in a later frame; later
    /// frames do not wait for it again.
    fn settle_wave(
        self: &Rc<Self>,
        vm: &Vm,
        phase: &str,
        wave: usize,
        jobs: &[Rc<RegisteredJob>],
        host: &dyn PhaseHost,
    ) {
        let slots: Vec<Arc<OutcomeSlot>> = jobs
            .iter()
            .filter_map(|j| j.state.borrow().in_flight.clone())
            .collect();
        if slots.is_empty() {
            return;
        }
        let waited = host.settle(&slots);
        for job in jobs {
            if self.get(job.id).is_none() {
                continue;
            }
            let pending = job
                .state
                .borrow()
                .in_flight
                .as_ref()
                .is_some_and(|slot| slot.is_pending());
            if pending {
                let source = format!("job '{}'", job.label());
                let text = format!(
                    "{source}: wave {wave} of phase '{phase}' ended without its item, still \
                     running after {:.3} s; the next wave started and the item applies in a \
                     later frame",
                    waited.as_secs_f64()
                );
                (self.sink)(source, text, None);
            } else {
                self.land(vm, job);
            }
        }
    }

    /// Reports, once each, the pairs of `phase`'s jobs that write a name with nothing
    /// ordering them.
    fn report_unordered(&self, phase: &str, order: &PhaseOrder, host: &dyn PhaseHost) {
        for pair in &order.unordered_writes {
            if self.reported_writes.borrow().contains(pair) {
                continue;
            }
            self.reported_writes.borrow_mut().insert(pair.clone());
            let label = |id: u64| match self.get(id) {
                Some(job) => job.label(),
                None => format!("#{id}"),
            };
            host.unordered_write(phase, &label(pair.first), &label(pair.second), &pair.name);
        }
    }

    /// One frame of one job: takes the result of its last call ([`land`](Self::land)), then
    /// starts this frame's call unless the job is paused or errored or its last call still
    /// runs. Answers whether it started an item on the pool.
    fn tick(self: &Rc<Self>, vm: &Vm, job: &Rc<RegisteredJob>) -> bool {
        self.land(vm, job);
        if let JobBody::Remote { worker, vm, .. } = &job.body {
            self.tick_remote(job, *worker, *vm);
            return false;
        }
        {
            let state = job.state.borrow();
            if state.paused || state.errored || state.task_running || state.in_flight.is_some() {
                return false;
            }
        }
        match &job.body {
            JobBody::Remote { .. } => {}
            JobBody::Luau { run } => {
                job.state.borrow_mut().calls += 1;
                self.start_task(vm, job, run.clone(), Value::Nil);
            }
            JobBody::Worker { .. } => self.queue_worker_call(job),
            JobBody::Kernel { .. } => self.queue_kernel_call(job),
        }
        job.state.borrow().in_flight.is_some()
    }

    /// Takes the result of the job's call in the pool, if it has landed: runs `apply` over a
    /// value (a worker job's, or a kernel job's that has one), or errors the job with a
    /// failure. A cancelled call (the domain is ending) is dropped.
    fn land(self: &Rc<Self>, vm: &Vm, job: &Rc<RegisteredJob>) {
        let landed = {
            let mut state = job.state.borrow_mut();
            match state.in_flight.as_ref().map(|slot| slot.take()) {
                None | Some(SlotState::Pending) => None,
                Some(SlotState::Settled(outcome)) => {
                    state.in_flight = None;
                    Some(outcome)
                }
                // Only the registry takes from the slot: an emptied one ends the call unread.
                Some(SlotState::Taken) => {
                    state.in_flight = None;
                    None
                }
            }
        };
        match landed {
            Some(Outcome::Resolved(result)) => {
                let apply = match &job.body {
                    JobBody::Worker { apply, .. } => Some(apply.clone()),
                    JobBody::Kernel { apply, .. } => apply.clone(),
                    JobBody::Luau { .. } | JobBody::Remote { .. } => None,
                };
                if let Some(apply) = apply {
                    match result.to_lua(&vm.lua) {
                        Ok(value) => self.start_task(vm, job, apply, value),
                        Err(e) => self.fail(job, &vm::error_message(&e), true),
                    }
                }
            }
            Some(Outcome::Rejected(failure)) => {
                let mut message = failure.message.clone();
                if let Some(tb) = failure.traceback.as_deref().filter(|t| !t.is_empty()) {
                    message = format!("{message}\n{tb}");
                }
                self.fail(job, &message, true);
            }
            // Cancelled: the domain is ending; nothing to apply or report.
            Some(Outcome::Cancelled) | None => {}
        }
    }

    /// This frame's call of a worker job: runs `input()` here, then queues an item of the
    /// module's entry over its value (in its key's lane when it has a key).
    fn queue_worker_call(&self, job: &Rc<RegisteredJob>) {
        let JobBody::Worker {
            path,
            spec,
            entry,
            input,
            key,
            deadline,
            ..
        } = &job.body
        else {
            return;
        };
        let Some(input) = self.input(job, Some(input)) else {
            return;
        };
        let target = JobTarget::new(spec.clone(), path.clone(), entry.clone());
        let shared = JobShared::registered(
            job.label(),
            target,
            self.pool.clone(),
            self.principal.id,
            key.clone(),
            job.tally.clone(),
        );
        let item = self.item(job, shared, *deadline);
        let (item, slot) = item(ItemArgs::Plain(input));
        let queued = match key {
            Some(key) => self.pool.dispatch_keyed(
                (self.principal.id, key.clone()),
                item,
                false,
                "jobs.register: executor.key",
            ),
            None => {
                self.pool.inject(item);
                Ok(())
            }
        };
        self.queued(job, queued, slot);
    }

    /// This frame's call of a kernel job: runs `input()` here (when it has one), then queues
    /// the kernel over its value.
    fn queue_kernel_call(&self, job: &Rc<RegisteredJob>) {
        let JobBody::Kernel {
            name,
            kernel,
            input,
            ..
        } = &job.body
        else {
            return;
        };
        let Some(input) = self.input(job, input.as_ref()) else {
            return;
        };
        let path: Arc<Path> = Arc::from(Path::new(&format!("kernel:{name}")));
        let target = JobTarget::new(name.clone(), path, name.clone());
        let shared = JobShared::registered(
            job.label(),
            target,
            self.pool.clone(),
            self.principal.id,
            None,
            job.tally.clone(),
        );
        let item = self.item(job, shared, self.principal.max_deadline);
        let (item, slot) = item(ItemArgs::Kernel(Box::new(KernelCall {
            kernel: kernel.clone(),
            input,
        })));
        self.pool.inject(item);
        self.queued(job, Ok(()), slot);
    }

    /// One frame of a job registered from a worker VM: post its call to that VM and go on, or
    /// count a late call when the last one has not ended.
    fn tick_remote(&self, job: &Rc<RegisteredJob>, worker: usize, vm: u64) {
        {
            let mut state = job.state.borrow_mut();
            if state.paused || state.errored {
                return;
            }
            if state.remote_in_flight {
                state.late += 1;
            } else {
                state.remote_in_flight = true;
                state.calls += 1;
                self.pool.exec.post(
                    worker,
                    WorkerMsg::Registered {
                        principal: self.principal.clone(),
                        vm,
                        job: job.id,
                        op: RemoteOp::Run,
                    },
                );
            }
        }
        mirror(job);
    }

    /// Makes an item of `registered` around its arguments, replying to a fresh host slot. The
    /// item runs under the job's authority.
    fn item(
        &self,
        registered: &RegisteredJob,
        job: Arc<JobShared>,
        deadline: Duration,
    ) -> impl FnOnce(ItemArgs) -> (Item, Arc<OutcomeSlot>) + '_ {
        let authority = registered.authority.clone();
        move |args| {
            let slot = OutcomeSlot::new();
            let item = Item {
                principal: self.principal.clone(),
                authority,
                job,
                args,
                deadline,
                reply: ReplyTo::Slot(slot.clone()),
                queued_at: Some(Instant::now()),
                charge: None,
            };
            (item, slot)
        }
    }

    /// Records an item handed to the pool (or its refusal, which errors the job).
    fn queued(&self, job: &RegisteredJob, queued: Result<(), String>, slot: Arc<OutcomeSlot>) {
        match queued {
            Ok(()) => {
                let mut state = job.state.borrow_mut();
                state.calls += 1;
                state.in_flight = Some(slot);
            }
            Err(refusal) => self.fail(job, &refusal, false),
        }
    }

    /// Runs `input()` on this thread, under the job's authority, and copies its value. `None`
    /// when there is nothing to queue: it answered nil, or it failed (which errors the job).
    /// Without an `input`, the item runs over nil.
    fn input(&self, job: &RegisteredJob, input: Option<&Function>) -> Option<Message> {
        let Some(input) = input else {
            return Some(Message::Nil);
        };
        // Read with its type kept: a number `input` answers reaches the entry as a number.
        let called = {
            let _authority = capability::install(Some(&job.authority));
            input.call::<ExactValue>(())
        };
        let value = match called {
            Ok(ExactValue(value)) => value,
            Err(e) => {
                let message = format!("input: {}", vm::error_message(&e));
                self.fail(job, &message, false);
                return None;
            }
        };
        if value.is_nil() {
            return None;
        }
        match Message::from_lua(&value, "input") {
            Ok(message) => Some(message),
            Err(e) => {
                self.fail(job, &e.to_string(), false);
                None
            }
        }
    }

    /// Starts `f(arg)` as a task of the engine VM for `job`, under its authority; a failure
    /// errors the job.
    fn start_task(self: &Rc<Self>, vm: &Vm, job: &Rc<RegisteredJob>, f: Function, arg: Value) {
        job.state.borrow_mut().task_running = true;
        let weak = Rc::downgrade(job);
        let registry = Rc::downgrade(self);
        let completion: vm::Completion = Box::new(move |_lua: &Lua, result, _commands| {
            let (Some(job), Some(registry)) = (weak.upgrade(), registry.upgrade()) else {
                return;
            };
            job.state.borrow_mut().task_running = false;
            let message = match result {
                Ok(_) | Err(TaskFailure::Cancelled) => return,
                Err(TaskFailure::Raised { message, traceback }) if !traceback.is_empty() => {
                    format!("{message}\n{traceback}")
                }
                Err(TaskFailure::Raised { message, .. }) => message,
                Err(other) => other.to_string(),
            };
            // A job cancelled while its task ran is gone: nothing to mark or report.
            if registry.get(job.id).is_some() {
                registry.fail(&job, &message, true);
            }
        });
        let identity: Arc<dyn OwnerIdentity> = Arc::new(format!("job '{}'", job.label()));
        let owner = Owner::new(identity, self.principal.max_deadline, Some(completion))
            .with_authority(job.authority.clone());
        let owner = Rc::new(owner);
        if let Err(e) = vm.start(f, MultiValue::from_iter([arg]), owner.clone()) {
            let failure = TaskFailure::raised(vm::error_message(&e), String::new());
            owner.complete(&vm.lua, Err(failure));
        }
    }

    /// Marks `job` errored, keeps the error and reports it once. `counted`: the failure ended a
    /// started run or item, which `failed_calls` counts.
    fn fail(&self, job: &RegisteredJob, message: &str, counted: bool) {
        {
            let mut state = job.state.borrow_mut();
            state.errored = true;
            state.last_error = Some(message.to_owned());
            if counted {
                state.failed += 1;
            }
        }
        mirror(job);
        let source = format!("job '{}'", job.label());
        let text = format!("{source} failed: {message}");
        (self.sink)(source, text, Some(job_failure(job, message)));
    }
}

/// `message` (an error, then its stack) as the structured failure of `job`.
fn job_failure(job: &RegisteredJob, message: &str) -> JobFailure {
    let (error, traceback) = match message.find("\nstack traceback:") {
        Some(at) => (&message[..at], Some(message[at + 1..].to_owned())),
        None => (message, None),
    };
    let (module, entry) = match &job.body {
        JobBody::Worker { path, entry, .. } => (Some(path.to_path_buf()), Some(entry.to_string())),
        _ => (None, None),
    };
    JobFailure {
        job: job.label(),
        module,
        entry,
        kind: FailureKind::Raised,
        message: error.to_owned(),
        traceback,
    }
}

/// Publishes a worker-registered job's info for the handles in its VM.
fn mirror(job: &RegisteredJob) {
    if let JobBody::Remote { shared, .. } = &job.body {
        shared.publish(info_of(job));
    }
}

/// The job's info as the registry sees it now.
fn info_of(job: &RegisteredJob) -> JobInfo {
    let state = job.state.borrow();
    let order = JobOrder::placed(&job.declared, job.placed.get());
    let status = if state.errored {
        JobStatus::Errored
    } else if state.task_running || state.in_flight.is_some() || state.remote_in_flight {
        JobStatus::Running
    } else {
        JobStatus::Pending
    };
    JobInfo {
        id: job.id,
        name: job.name.clone(),
        phase: job.phase.to_string(),
        kind: job.body.kind(),
        status,
        paused: state.paused,
        origin: job.origin.clone(),
        metadata: job.metadata.clone(),
        order,
        last_error: state.last_error.clone(),
        forwarded_calls: state.forwarded,
        waited_for_vm: Duration::from_nanos(job.tally.waited_ns.load(Ordering::Relaxed)),
        calls: state.calls,
        failed_calls: state.failed,
        worker: matches!(job.body, JobBody::Remote { .. }).then_some(WorkerCalls {
            calls: state.calls,
            late_calls: state.late,
            failed_calls: state.failed,
        }),
    }
}

impl fmt::Debug for RegisteredJobs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RegisteredJobs")
            .field("jobs", &self.jobs.borrow().len())
            .finish_non_exhaustive()
    }
}
