//! The thread of one actor: it builds the actor's VM from the domain's plan, loads the
//! actor's module, then calls its handler once per message until the queue closes, the
//! handler fails (under [`FailurePolicy::Stop`]), or the domain tears it down.
//!
//! The VM is built here and dropped here: `mlua::Lua` never leaves this thread. Only plain
//! data crosses: `Message`s through the inbox channel and the [`ActorShared`] outbox, and the
//! replies to the actor's own `jobs` (and its shared-queue deliveries) through its wake
//! channel, which the lane reads whenever it would otherwise sleep.

use std::cell::RefCell;
use std::fmt;
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use mlua::{Function, Lua, MultiValue, Value};

use super::error::{ActorError, ActorStage, FailurePolicy};
use super::outbox::{ActorShared, Queued, Reply, Unobserved, FAILED, STOPPED};
use super::service_link::ServiceLink;
use super::SendArg;
use crate::jobs::{self, ActorWake, HomeKind, JobsHome, PoolShared, PrincipalShared};
use crate::ledger::Charge;
use crate::principal::capability::Authority;
use crate::principal::diagnostic::Attribution;
use crate::principal::profile::{self, Profile, ProfileKind};
use crate::shared::receive_parcel;
use crate::value::{Message, TransferError};
use crate::vm::{self, source, CancelToken, Owner, OwnerIdentity, Plan, TaskFailure, Vm};

/// The longest the lane sleeps between looks at its teardown flag while a handler, or a task
/// it left behind, waits on something (a timer, a promise).
const IDLE_LOOK: Duration = Duration::from_millis(20);

/// Calls the handler on a message and keeps its first result as the reply.
const CALL_SOURCE: &str =
    "local keep = ... return function(handler, message) keep((handler(message))) end";

/// Everything a lane needs, all `Send`: it is moved onto the new thread.
pub(crate) struct LaneSetup {
    pub(crate) shared: Arc<ActorShared>,
    pub(crate) inbox: Receiver<Queued>,
    pub(crate) plan: Plan,
    pub(crate) source: String,
    pub(crate) authority: Arc<Authority>,
    pub(crate) deadline: Duration,
    pub(crate) policy: FailurePolicy,
    /// Set by the domain's teardown: stop now, dropping what is queued.
    pub(crate) cancel: Arc<CancelToken>,
    /// The domain's profile sink: the actor's start, calls and end are measured here.
    pub(crate) profile: Profile,
    /// The generation the actor belongs to: its `jobs` run as it, and (with
    /// `shareServices = true`) its engine services answer.
    pub(crate) principal: Arc<PrincipalShared>,
    /// Where the actor's `jobs` items go.
    pub(crate) pool: Arc<PoolShared>,
    /// `shareServices = true`: the VM gets the domain's engine services.
    pub(crate) share_services: bool,
    /// The domain's count of live actor threads; this lane holds one until it returns.
    pub(crate) live: Arc<AtomicUsize>,
    /// The actor VM's memory limit, held on the pool's budget until the lane returns.
    pub(crate) vm_memory: Charge,
    /// Where the host reads structured failures.
    pub(crate) failures: Arc<Mutex<Vec<ActorError>>>,
    /// The domain's actors with failures no code observed yet.
    pub(crate) unobserved: Arc<Unobserved>,
}

/// Counts the thread out however it ends, panics included.
struct LiveGuard(Arc<AtomicUsize>);

impl Drop for LiveGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// How the actor's tasks are named and cancelled.
struct ActorIdentity {
    name: String,
    cancel: Arc<CancelToken>,
}

impl fmt::Display for ActorIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "worker '{}'", self.name)
    }
}

impl OwnerIdentity for ActorIdentity {
    fn cancel_token(&self) -> Option<&CancelToken> {
        Some(&self.cancel)
    }
}

/// The lane's body. The live count was taken by the spawner; it is given back on return.
pub(crate) fn run(setup: LaneSetup) {
    let live = LiveGuard(setup.live.clone());
    let shared = setup.shared.clone();
    let state = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| serve(&setup))) {
        Ok(state) => state,
        Err(payload) => {
            fail(
                &setup,
                ActorStage::Handler,
                format!("host code panicked: {}", vm::panic_message(&payload)),
            );
            FAILED
        }
    };
    if let Some(sink) = &setup.profile {
        let attribution = setup.authority.attribution().clone();
        profile::instant(
            &**sink,
            ProfileKind::ActorStopped,
            attribution,
            shared.name.clone(),
        );
    }
    // The actor's place among the domain's live actors is given back before its end is
    // published, so code that saw it end (a join) may spawn another at once.
    drop(live);
    drop(setup.vm_memory);
    shared.finish(state);
}

/// Measures the actor's start (its VM and module) and sends it to the profile once, when
/// [`done`](Self::done) is called or, for a start that failed part way, when dropped.
struct StartClock<'a> {
    setup: &'a LaneSetup,
    started: Instant,
    sent: bool,
}

impl StartClock<'_> {
    fn done(&mut self) {
        if std::mem::replace(&mut self.sent, true) {
            return;
        }
        if let Some(sink) = &self.setup.profile {
            profile::emit(
                &**sink,
                ProfileKind::ActorSpawned,
                self.setup.authority.attribution().clone(),
                self.setup.shared.name.clone(),
                self.started,
                None,
            );
        }
    }
}

impl Drop for StartClock<'_> {
    fn drop(&mut self) {
        self.done();
    }
}

/// The module name failures give: the chunk the actor's source loads as.
fn module_name(name: &str) -> String {
    format!("worker:{name}")
}

/// Records a failure for the host and hands it to the domain's next `receive`; it is reported
/// if no code observes it.
fn fail(setup: &LaneSetup, stage: ActorStage, message: String) {
    let attribution: Attribution = setup.authority.attribution().clone();
    let error = ActorError {
        attribution,
        module: module_name(&setup.shared.name),
        stage,
        message,
    };
    setup
        .failures
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(error.clone());
    setup.shared.fail(error, &setup.unobserved);
}

/// How a step of the lane goes on: `Err(state)` ends the lane in `state` ([`STOPPED`], or
/// [`FAILED`] with the failure already reported).
type Step<T> = Result<T, u8>;

/// Reports a failure (see [`fail`]) and answers the state it ends the lane in.
fn failed(setup: &LaneSetup, stage: ActorStage, message: String) -> u8 {
    fail(setup, stage, message);
    FAILED
}

/// Reports the engine services that could not be installed in the actor's VM.
fn report_refused(shared: &ActorShared, refused: Vec<String>) {
    for refused in refused {
        shared.report(shared.label(), refused);
    }
}

/// Builds the VM, loads the module and serves messages; answers the final state.
fn serve(setup: &LaneSetup) -> u8 {
    let mut start = StartClock {
        setup,
        started: Instant::now(),
        sent: false,
    };
    setup.shared.set_signal(vm::current_signal());
    let link = setup.share_services.then(|| {
        ServiceLink::new(
            setup.principal.clone(),
            setup.cancel.clone(),
            setup.shared.name.clone(),
        )
    });
    // Replies to the actor's own `jobs` promises, and its shared-queue deliveries.
    let (wake_tx, wakes) = crossbeam_channel::unbounded();
    let vm = match build_vm(setup, link.clone(), wake_tx) {
        Ok(vm) => vm,
        Err(state) => return state,
    };
    let lane = Lane {
        setup,
        vm: &vm,
        wakes: &wakes,
        link,
        identity: Arc::new(ActorIdentity {
            name: setup.shared.name.clone(),
            cancel: setup.cancel.clone(),
        }),
    };
    let handler = match lane.load_handler() {
        Ok(handler) => handler,
        Err(state) => return state,
    };
    let call = match HandlerCall::new(&vm.lua) {
        Ok(call) => call,
        Err(e) => return failed(setup, ActorStage::Start, vm::error_message(&e)),
    };
    start.done();
    lane.serve_messages(&handler, &call)
}

/// Builds the actor's VM from the domain's plan, with its `jobs` (their replies coming back
/// through `wakes`), its `@skein/worker` module and, with `shareServices`, the engine services
/// registered so far; then gives it the actor's authority.
fn build_vm(
    setup: &LaneSetup,
    link: Option<Rc<ServiceLink>>,
    wakes: Sender<ActorWake>,
) -> Step<Vm> {
    let reporter_shared = setup.shared.clone();
    let reporter: vm::Reporter = Box::new(move |label: &str, failure: &TaskFailure| {
        reporter_shared.report(
            format!("worker '{}' {label}", reporter_shared.name),
            failure.to_string(),
        );
    });
    let home = JobsHome::new(
        setup.principal.clone(),
        setup.pool.clone(),
        HomeKind::Actor { wakes },
    );
    let shared = setup.shared.clone();
    let built = Vm::build(&setup.plan, reporter, setup.deadline, move |lua| {
        jobs::install(lua, home)?;
        super::install_lane_module(lua, shared.clone())?;
        if let Some(link) = link {
            report_refused(&shared, link.install_new(lua));
        }
        Ok(())
    });
    let vm = built.map_err(|e| failed(setup, ActorStage::Start, vm::error_message(&e)))?;
    vm.set_authority(setup.authority.clone());
    Ok(vm)
}

/// What a handler's reply is kept in until the lane takes it.
type Kept = Rc<RefCell<Option<Result<Message, TransferError>>>>;

/// The Luau function that calls the handler on one message, and where it keeps the reply.
///
/// The reply is read off the Luau stack (as `worker.send` reads its message), so a whole
/// number stays a number and an integer an integer.
struct HandlerCall {
    function: Function,
    kept: Kept,
}

impl HandlerCall {
    fn new(lua: &Lua) -> mlua::Result<HandlerCall> {
        let kept: Kept = Rc::default();
        let keeper = kept.clone();
        let keep = lua.create_function(move |_, reply: SendArg| {
            *keeper.borrow_mut() = Some(reply.read("reply"));
            Ok(())
        })?;
        let function = lua
            .load(CALL_SOURCE)
            .set_name("=skein worker call")
            .call::<Function>(keep)?;
        Ok(HandlerCall { function, kept })
    }

    /// The reply the last call kept, if it kept one.
    fn take_reply(&self) -> Option<Result<Message, TransferError>> {
        self.kept.borrow_mut().take()
    }
}

/// What the lane's steps need: the VM, where its replies arrive, its services, and the
/// identity its tasks run under.
struct Lane<'a> {
    setup: &'a LaneSetup,
    vm: &'a Vm,
    wakes: &'a Receiver<ActorWake>,
    link: Option<Rc<ServiceLink>>,
    identity: Arc<ActorIdentity>,
}

impl Lane<'_> {
    /// Loads the actor's module and answers the handler function it returns.
    fn load_handler(&self) -> Step<Function> {
        let setup = self.setup;
        let chunk = source::compile(
            &self.vm.lua,
            setup.source.as_bytes(),
            &format!("={}", module_name(&setup.shared.name)),
        )
        .map_err(|e| failed(setup, ActorStage::Load, vm::error_message(&e)))?;
        match self.run_task(chunk, MultiValue::new()) {
            None => Err(STOPPED),
            Some(Err(failure)) => Err(failed(setup, ActorStage::Load, failure)),
            Some(Ok(values)) => match values.into_iter().next() {
                Some(Value::Function(f)) => Ok(f),
                other => {
                    let got = vm::a_type(&other.unwrap_or(Value::Nil));
                    Err(failed(
                        setup,
                        ActorStage::Load,
                        format!("the module returned {got}, not a handler function(message)"),
                    ))
                }
            },
        }
    }

    /// Calls the handler once per message until the queue closes, the domain tears the actor
    /// down, or a failure stops it; answers the final state.
    fn serve_messages(&self, handler: &Function, call: &HandlerCall) -> u8 {
        loop {
            let Some(queued) = self.next_message() else {
                return STOPPED;
            };
            if let Err(state) = self.handle(handler, call, queued) {
                return state;
            }
        }
    }

    /// One message: built in the VM, handed to the handler, its reply kept for the domain.
    fn handle(&self, handler: &Function, call: &HandlerCall, queued: Queued) -> Step<()> {
        let setup = self.setup;
        let Queued {
            message,
            charge,
            sent,
        } = queued;
        let arg = message
            .to_lua(&self.vm.lua)
            .map_err(|e| failed(setup, ActorStage::Handler, vm::error_message(&e)))?;
        // The message lives in the VM now: its copy and what it held of the bound go.
        drop((message, charge));
        if let Some(link) = &self.link {
            // Services the host registered since the last message.
            report_refused(&setup.shared, link.install_new(&self.vm.lua));
        }
        // Each message is the actor VM's start point for engine events, as an item is a pool
        // worker VM's: `engine.on` watchers see what was raised since, before the handler.
        jobs::deliver_events(self.vm, &setup.principal.events, setup.deadline);
        let args = MultiValue::from_iter([Value::Function(handler.clone()), arg]);
        let called = Instant::now();
        let ran = self.run_task(call.function.clone(), args);
        self.profile_call(called, sent);
        let ran = ran.ok_or(STOPPED)?;
        if let Some((stage, message)) = self.keep_reply(ran, call) {
            fail(setup, stage, message);
            if setup.policy == FailurePolicy::Stop {
                return Err(FAILED);
            }
        }
        self.check_memory()
    }

    /// Sends the profile's event for one handler call that started at `called`, its queue
    /// delay counted from the message's `sent` stamp.
    fn profile_call(&self, called: Instant, sent: Option<Instant>) {
        let setup = self.setup;
        if let Some(sink) = &setup.profile {
            let delay = sent.map(|sent| called.saturating_duration_since(sent));
            profile::emit(
                &**sink,
                ProfileKind::ActorCall,
                setup.authority.attribution().clone(),
                setup.shared.name.clone(),
                called,
                delay,
            );
        }
    }

    /// Puts a handler's reply (other than nil) in the outbox; answers the stage and text of
    /// the failure when the handler raised or its reply can't go.
    fn keep_reply(
        &self,
        ran: Result<MultiValue, String>,
        call: &HandlerCall,
    ) -> Option<(ActorStage, String)> {
        let shared = &self.setup.shared;
        match ran {
            Err(failure) => Some((ActorStage::Handler, failure)),
            Ok(_) => match call.take_reply() {
                Some(Ok(Message::Nil)) | None => None,
                Some(Ok(message)) => match shared.charge(&message) {
                    Ok(charge) => {
                        shared.reply(Reply::Value {
                            message,
                            progress: false,
                            charge,
                        });
                        None
                    }
                    Err(e) => Some((ActorStage::Reply, e)),
                },
                Some(Err(e)) => Some((ActorStage::Reply, e.to_string())),
            },
        }
    }

    /// Stops the actor when its VM reached its memory limit. Such a VM keeps what filled it
    /// (tasks the handler spawned, module state) and would fail every later message: the
    /// actor stops, whatever its failure policy, as a pool worker's VM is retired. Its VM is
    /// its state, so it is not rebuilt behind the domain's back.
    fn check_memory(&self) -> Step<()> {
        if !self.vm.core.hit_memory_limit() {
            return Ok(());
        }
        Err(failed(
            self.setup,
            ActorStage::Handler,
            format!(
                "{}; the worker stops, since its VM can't serve on",
                self.vm.core.out_of_memory_text()
            ),
        ))
    }

    /// Settles a promise or delivers a parcel that reached the actor's VM.
    fn wake(&self, wake: ActorWake) {
        match wake {
            ActorWake::Settle { promise, outcome } => self.vm.settle_reply(promise, outcome),
            ActorWake::Parcel(parcel) => receive_parcel(&self.vm.lua, parcel),
        }
    }

    /// Applies every wake that has arrived.
    fn wake_all(&self) {
        while let Ok(wake) = self.wakes.try_recv() {
            self.wake(wake);
        }
    }

    /// The next message, running the VM's background tasks (timers a handler left, tasks
    /// awaiting its jobs) while it waits. `None` once the queue is closed and empty, or the
    /// domain tears the actor down.
    fn next_message(&self) -> Option<Queued> {
        let setup = self.setup;
        loop {
            if setup.cancel.load(Ordering::Acquire) {
                return None;
            }
            self.wake_all();
            self.release_engine_waits();
            while self.vm.step() {}
            // With no timer pending the lane sleeps until a message or a wake comes, or the
            // queue closes (a close, or the teardown, which closes before it cancels). A VM with
            // no task left has nothing a wake could settle: it waits on the inbox alone, since
            // a `select!` over two channels made every message round trip 5 to 10 times slower
            // (measured by `benches/domain.rs`); wakes that came meanwhile are applied at the
            // next message.
            // A task in `engine.wait` looks at the event log again after IDLE_LOOK: nothing
            // tells the lane that an engine event was raised.
            let next = match self.vm.next_wake() {
                None if self.vm.has_signal_waits() => Some(Instant::now() + IDLE_LOOK),
                next => next,
            };
            match next {
                None if self.vm.tasks() == 0 => return setup.inbox.recv().ok(),
                None => crossbeam_channel::select! {
                    recv(setup.inbox) -> message => return message.ok(),
                    recv(self.wakes) -> wake => if let Ok(wake) = wake { self.wake(wake) },
                },
                Some(at) => {
                    let wait = at.saturating_duration_since(Instant::now()).min(IDLE_LOOK);
                    crossbeam_channel::select! {
                        recv(setup.inbox) -> message => return message.ok(),
                        recv(self.wakes) -> wake => if let Ok(wake) = wake { self.wake(wake) },
                        default(wait) => {}
                    }
                }
            }
        }
    }

    /// Releases this VM's tasks in `engine.wait` for the engine events raised since they began
    /// waiting; answers whether any was.
    fn release_engine_waits(&self) -> bool {
        self.vm.has_signal_waits()
            && jobs::release_engine_waits(self.vm, &self.setup.principal.events)
    }

    /// Runs `f(args)` as a task until it ends; `None` when the domain tore the actor down
    /// first.
    fn run_task(&self, f: Function, args: MultiValue) -> Option<Result<MultiValue, String>> {
        type Slot = Rc<RefCell<Option<Result<MultiValue, String>>>>;
        let (setup, vm) = (self.setup, self.vm);
        let slot: Slot = Rc::new(RefCell::new(None));
        let out = slot.clone();
        let completion: vm::Completion = Box::new(move |_lua: &Lua, result, _commands| {
            *out.borrow_mut() = Some(result.map_err(|failure| failure_text(&failure)));
        });
        let task_owner = Rc::new(
            Owner::new(self.identity.clone(), setup.deadline, Some(completion))
                .with_authority(setup.authority.clone()),
        );
        if let Err(e) = vm.start(f, args, task_owner.clone()) {
            return Some(Err(vm::error_message(&e)));
        }
        loop {
            // A teardown interrupts the handler (its owner's cancel token): that is no
            // failure, unless it cut a query short, which the handler was counting on.
            if setup.cancel.load(Ordering::Acquire) {
                vm.drop_owner(&task_owner);
                let cut = self
                    .link
                    .as_ref()
                    .and_then(|link| link.cut.borrow_mut().take());
                return cut.map(Err);
            }
            if let Some(result) = slot.borrow_mut().take() {
                return Some(result);
            }
            self.wake_all();
            if self.release_engine_waits() || vm.step() || vm.has_ready() {
                continue;
            }
            let wait = match vm.next_wake() {
                Some(at) => at.saturating_duration_since(Instant::now()).min(IDLE_LOOK),
                None => IDLE_LOOK,
            };
            if let Ok(wake) = self.wakes.recv_timeout(wait) {
                self.wake(wake);
            }
        }
    }
}

/// A task failure as the actor reports it: the message, with the Luau stack when there is one.
fn failure_text(failure: &TaskFailure) -> String {
    match failure {
        TaskFailure::Raised { message, .. } => message.clone(),
        other => other.to_string(),
    }
}
