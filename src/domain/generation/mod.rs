//! Generations: the parts one generation owns (`GenerationState`), building and installing the
//! next one, `ScriptDomain::restart`, the end of a generation (restart, reload or stop), the
//! mailboxes of ended generations, and engine events raised by the host.
//!
//! Each generation has its own mailbox. Everything of a generation that can post to the engine
//! thread (its items, its worker VMs, their settlements and forwarded queries) reaches it
//! through its principal, so after a restart what the old generation still sends lands in the
//! old mailbox, never in the new one. The domain keeps the old receivers and, each time it
//! drains, discards what they hold unapplied and unanswered, counting it
//! ([`ScriptDomain::stale_events`]); a receiver is let go once its last sender is gone.
//!
//! Beside it: what a new generation runs (`load.rs`), reload beside the running generation
//! (`reload.rs`), the host promises a generation rejects when it ends (`host_promises.rs`),
//! and what host services own for the domain's code, released per generation (`owned.rs`).

pub(crate) mod host_promises;
pub(crate) mod load;
pub(crate) mod owned;
mod reload;

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;

use crate::domain::events::handlers as event_handlers;
use crate::domain::frame::{engine_services, phases};
use crate::domain::host_dispatch::HostTargets;
use crate::domain::reports::Reports;
use crate::domain::{
    actor, interfaces, DomainState, InterruptTarget, Load, Report, ReportKind, ScriptDomain,
};
use crate::error::{Error, Halt, NameRefusal, Result};
use crate::jobs::{
    self, HomeKind, JobsHome, MailboxReceiver, MailboxSender, Pool, PrincipalShared,
    RegisteredJobs, MAX_DEADLINE,
};
use crate::principal::profile::ProfileKind;
use crate::principal::{Generation, Phase};
use crate::value::Message;
use crate::vm::{self, FailureKind, JobFailure, Outcome, TaskFailure, Vm};

/// Everything one generation of a domain has of its own: its principal (id, mailbox, shared
/// store), its engine VM, the receiving end of its mailbox, its registered jobs, the handlers
/// its scripts bound to contexts, the workers it spawned and the host promises it handed out.
/// The rest of a [`ScriptDomain`] is the host's and outlives generations.
///
/// Not called `Generation`: that is the public generation *number*
/// ([`principal::Generation`](crate::lifecycle::Generation)), which this value carries in its principal.
///
/// A domain holds exactly one, its current generation; a restart or reload replaces it whole
/// ([`install_generation`](ScriptDomain::install_generation)), and a reload trades it with its
/// candidate for the length of the candidate's load
/// ([`swap_generation`](ScriptDomain::swap_generation)). A part added to a generation is a field
/// here and nothing more.
///
/// # Drop order
/// What a generation owns must not outlive it. [`ScriptDomain::end_generation`] ends the
/// principal, joins the actors, refuses the queued items and rejects the host promises while
/// the value is still in place; [`install_generation`](ScriptDomain::install_generation) then
/// drops the ended engine VM first (its tasks end, and the promises they held may post to the
/// ended mailbox), keeps the receiver among the stale ones so that what those drops posted is
/// discarded and counted, and drops the rest after that drain. The fields drop in the order
/// they are declared when the whole value goes (the domain's own drop, a discarded candidate).
pub(crate) struct GenerationState {
    pub(crate) principal: Arc<PrincipalShared>,
    pub(crate) vm: Vm,
    pub(crate) rx: MailboxReceiver,
    /// The jobs its scripts registered (`jobs.register`) and the host's kernels.
    pub(crate) registry: Rc<RegisteredJobs>,
    /// The host's contexts and the handlers scripts bound to them.
    pub(crate) bindings: Rc<phases::Bindings>,
    /// The workers (`@skein/worker`) its code spawned; torn down when it ends.
    pub(crate) actors: Rc<actor::Actors>,
    /// Host promises of this generation that may be pending: rejected when it ends.
    pub(crate) host_promises: RefCell<host_promises::HostPromises>,
    /// The `(module, entry)` pairs host dispatch resolved in its engine VM's modules.
    pub(crate) host_targets: RefCell<HostTargets>,
    /// Whether its `startup` phase has run: the first advance or frame of a generation runs it
    /// when nothing has.
    pub(crate) started_up: Cell<bool>,
}

/// The host's parts of a domain that a generation's engine VM is built against.
pub(crate) struct EngineSetup<'a> {
    pub(crate) pool: &'a Pool,
    /// Where the VM's unawaited failures and its registered jobs' failures go.
    pub(crate) reports: &'a Rc<RefCell<Reports>>,
    /// The named-event handlers, routes and event queue its `@skein/events` reaches.
    pub(crate) event_handlers: &'a Rc<event_handlers::EventHandlers>,
    pub(crate) domain_name: &'a str,
    /// Gives the engine VM the domain's interrupt token.
    pub(crate) interrupt: &'a InterruptTarget,
}

impl GenerationState {
    pub(crate) fn generation(&self) -> Generation {
        self.principal.id.generation
    }

    /// Drops the generation but the receiving end of its mailbox, which is answered: the rest
    /// goes now, in declaration order, so what its drops post is in the receiver.
    pub(crate) fn into_rx(self) -> MailboxReceiver {
        self.rx
    }

    /// Builds the engine VM of `principal` and installs in it what every generation has: its
    /// registry (`jobs.register`, as app data), `@skein/context` over `bindings`,
    /// `@skein/events`, `@skein/interfaces` and `@skein/worker` over `actors`. The first
    /// generation's parts come from the spec ([`ScriptDomain::new`]), a later one's from the
    /// generation before it ([`build_generation`](ScriptDomain::build_generation)).
    ///
    /// # Errors
    /// [`Error::Vm`] when the VM can't be built.
    pub(crate) fn assemble(
        host: &EngineSetup<'_>,
        principal: Arc<PrincipalShared>,
        rx: MailboxReceiver,
        registry: Rc<RegisteredJobs>,
        bindings: Rc<phases::Bindings>,
        actors: Rc<actor::Actors>,
    ) -> Result<GenerationState> {
        let generation = principal.id.generation;
        let vm = engine_vm(&principal, host.pool, host.reports)?;
        // An `InterruptHandle` stops every run of the domain's engine VMs with this token.
        vm.set_halt(host.interrupt.engine_token());
        vm.lua.set_app_data(registry.clone());
        phases::install_context_module(&vm.lua, &bindings)?;
        event_handlers::install_events_module(&vm.lua, host.event_handlers, generation)?;
        interfaces::install_interfaces_module(&vm.lua, host.domain_name, generation)?;
        actor::install_engine(&vm.lua, &actors)?;
        Ok(GenerationState {
            principal,
            vm,
            rx,
            registry,
            bindings,
            actors,
            host_promises: RefCell::default(),
            host_targets: RefCell::default(),
            started_up: Cell::new(false),
        })
    }
}

impl ScriptDomain {
    /// Moves the domain to its next generation, runs `load` in it, and answers the generation.
    ///
    /// First the old generation's `shutdown` handlers run (in its engine VM; a failure becomes a
    /// report), and every handler bound with `@skein/context` is dropped. Then the old
    /// generation ends with the reason `domain '<name>' restarted`: its queued pool
    /// items are refused unrun, its workers (`@skein/worker`) are closed and joined, its worker
    /// VMs are dropped, its shared store ends (a handle kept
    /// past this raises naming the reason), its key bindings and warm entries are forgotten,
    /// what it [owns](Self::own) is released, and its engine VM is dropped with its tasks and
    /// their promises. Every host
    /// [`Promise`](crate::Promise) of the old generation that is still pending rejects with the
    /// reason. None of the old generation's recorded commands is applied, and none of its
    /// forwarded queries is answered, even when they were already waiting in the mailbox:
    /// they are discarded and counted in [`stale_events`](Self::stale_events).
    ///
    /// Its registered jobs end with it: their functions lived in the old engine VM. The
    /// handlers scripts bound to contexts and to named events end with it too; the context
    /// declarations and the host's event handlers and routes carry over.
    ///
    /// Then `load` runs in the new engine VM (see [`Load`]). When it ends well, a domain that
    /// was [`Running`](crate::lifecycle::DomainState::Running) starts again: the `startup` phase runs (its
    /// failures become reports) and the domain is `Running`; any other domain is
    /// [`Ready`](crate::lifecycle::DomainState::Ready).
    ///
    /// A restart is destructive: the old generation is gone before the load runs. When the
    /// load fails, the domain is [`Failed`](crate::lifecycle::DomainState::Failed) in the new generation,
    /// with nothing of the old one; what the load did before it failed stays, as after a main
    /// script that fails. Another restart recovers. To keep the old generation when the new
    /// code is broken, use [`reload`](Self::reload).
    ///
    /// What carries over: the domain's id, name and plan, its engine services and kernels (they
    /// belong to the host), its contexts, its frame counter and frame time, and the reports not taken yet. The new
    /// generation has a fresh engine VM, shared store and engine-event log.
    ///
    /// ```
    /// use skein::lifecycle::{DomainState, Load};
    /// use skein::{DomainSpec, Message, Pool, ScriptDomain};
    ///
    /// let pool = Pool::new(1);
    /// let mut domain = ScriptDomain::new(&pool, DomainSpec::new("game"))?;
    /// domain.exec("score = 10")?;
    /// let before = domain.generation();
    /// let after = domain.restart(Load::source("level 2", "level = 2"))?;
    /// assert_eq!(after.get(), before.get() + 1);
    /// // The engine VM is new: its globals start over, with what the load set.
    /// assert_eq!(domain.eval("return score")?, Message::Nil);
    /// assert_eq!(domain.eval("return level")?, Message::Number(2.0));
    ///
    /// // A load that fails leaves the domain failed, in a generation that has moved on.
    /// let err = domain.restart(Load::source("level 3", "error('no map')")).unwrap_err();
    /// assert!(err.to_string().contains("no map"), "{err}");
    /// assert_eq!(domain.state(), DomainState::Failed);
    /// assert_eq!(domain.generation().get(), after.get() + 1);
    /// assert_eq!(domain.eval("return level")?, Message::Nil);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::Script`] with the load's error text when the load fails (the generation has
    /// moved on, see above; the failure is also a [`Report`](crate::Report) with source
    /// `restart`). [`Error::Vm`] when the new engine VM can't be built, and [`Error::Name`]
    /// ([`NameRefusal::ServicePath`]) when an engine service can't be installed in it; either
    /// way nothing has changed and the old generation runs on. [`Error::Stopped`] for a domain
    /// that is [`Stopped`](DomainState::Stopped): a stop is final, and nothing changes.
    pub fn restart(&mut self, load: Load) -> Result<Generation> {
        self.refuse_if_stopped("restart")?;
        let was_running = self.life.state.get() == DomainState::Running;
        let next = self.build_generation()?;
        // The old generation's shutdown handlers run in its own engine VM, before it ends.
        self.shut_down();
        self.end_generation(&format!("domain '{}' restarted", self.name), true);
        self.install_generation(next);
        self.life.state.set(DomainState::Loading);
        match self.run_load(&load) {
            Ok(()) => {
                self.start_again(was_running);
                Ok(self.generation())
            }
            Err(failure) => {
                self.life.state.set(DomainState::Failed);
                self.reporting.keep(Report::new(
                    ReportKind::Load,
                    "restart",
                    failure.message.clone(),
                ));
                Err(Error::Script(failure.message))
            }
        }
    }

    /// Refuses `entry` on a stopped domain: its event queue is closed and its handlers gone for
    /// good, so a stopped domain is never brought back (make a new one).
    pub(crate) fn refuse_if_stopped(&self, entry: &'static str) -> Result<()> {
        if self.life.state.get() == DomainState::Stopped {
            return Err(Error::Stopped {
                entry,
                domain: self.name.clone(),
                state: Halt::Stopped,
                new_generation: true,
            });
        }
        Ok(())
    }

    /// Builds the next generation beside the current one, which it does not touch: a new
    /// principal and mailbox, an engine VM with the domain's modules, engine services and
    /// kernels installed, no handlers and no workers. Its number is used from here on, even
    /// if it is later discarded.
    ///
    /// # Errors
    /// As [`restart`](Self::restart) when the VM can't be built.
    pub(crate) fn build_generation(&self) -> Result<GenerationState> {
        let generation = Generation(self.life.last_generation.get().get() + 1);
        let (mailbox, rx) = MailboxSender::new();
        let principal = Arc::new(self.current.principal.next_generation(generation, mailbox));
        debug_assert_eq!(principal.id.generation, generation);
        let registry = self.current.registry.next_generation(principal.clone());
        let bindings = self.current.bindings.next_generation();
        let actors = self.current.actors.next_generation(principal.clone());
        let host = EngineSetup {
            pool: &self.pool,
            reports: self.reporting.reports(),
            event_handlers: &self.event_handlers,
            domain_name: &self.name,
            interrupt: &self.life.interrupt,
        };
        let next = GenerationState::assemble(&host, principal, rx, registry, bindings, actors)?;
        for (name, _) in next.principal.services.since(0) {
            let f = engine_services::engine_function(
                &next.vm.lua,
                self.frames.services.clone(),
                name.clone(),
            )?;
            jobs::install_at(&next.vm.lua, &name, f).map_err(|e| Error::Name {
                refusal: NameRefusal::ServicePath,
                message: format!("restart: {e}"),
            })?;
        }
        self.life.last_generation.set(generation);
        Ok(next)
    }

    /// Trades the domain's current generation with `other` in one move: after it, the domain
    /// runs as the generation `other` held, and `other` holds the one it ran as.
    pub(crate) fn swap_generation(&mut self, other: &mut GenerationState) {
        std::mem::swap(&mut self.current, other);
        self.life.owned.set_running(self.generation());
        self.life.interrupt.follow(&self.current.principal);
    }

    /// Makes `next` the current generation for good, after the current one has ended: its
    /// mailbox joins the ended ones (drained into `stale_events`), its engine VM is dropped
    /// with its tasks, and what waits in the event queue for it is discarded and counted.
    pub(crate) fn install_generation(&mut self, next: GenerationState) {
        let ended = std::mem::replace(&mut self.current, next);
        self.life.owned.set_running(self.generation());
        self.life.interrupt.follow(&self.current.principal);
        let generation = self.generation();
        // The order below is the generation's drop order (see `GenerationState`): the
        // receiver first joins the stale ones, then the engine VM goes, ending its tasks and
        // the promises they awaited, and what that posted is drained before the rest goes.
        self.life.stale_rx.get_mut().push(ended.rx);
        drop(ended.vm);
        self.event_handlers.queue().advance(generation);
        self.event_handlers.next_generation(generation);
        self.drain_stale();
    }

    /// A generation has loaded: a domain that was running runs `startup` and is `Running`
    /// again; any other is `Ready`.
    pub(crate) fn start_again(&self, was_running: bool) {
        self.life.state.set(DomainState::Ready);
        if was_running {
            if let Ok(_entered) = self.enter("startup") {
                self.current.started_up.set(true);
                self.broadcast_reporting(Phase::Startup);
            }
        }
    }

    /// How many events of ended generations reached the domain and were discarded: replies,
    /// forwarded queries (never answered), recorded commands (never applied), reports, and
    /// raw and named events queued for an ended generation (a restart discards what waits in
    /// the event queue; a post through an old generation's mailbox is discarded too).
    pub fn stale_events(&self) -> u64 {
        self.life.stale.get()
    }

    /// Raises the engine event `name` with `payload` on the current generation. Every
    /// `engine.on(name, fn)` watcher registered before this call sees it once, as a fresh Luau
    /// value, when its VM next reaches its start point: a worker VM when it starts its next
    /// item, the engine VM at its next frame or pump.
    ///
    /// The log holds the last [`EVENT_LOG_BOUND`](crate::DomainSpec::EVENT_LOG_BOUND) events; a VM that
    /// reaches its start point later than that delivers the ones still held and reports
    /// (source `engine events`) how many it missed.
    ///
    /// ```
    /// use skein::{DomainSpec, Message, Pool, ScriptDomain};
    ///
    /// let pool = Pool::new(1);
    /// let domain = ScriptDomain::new(&pool, DomainSpec::new("game"))?;
    /// domain.exec("seen = {} engine.on('spawned', function(name) table.insert(seen, name) end)")?;
    /// domain.raise_engine_event("spawned", Message::String("orc".into()))?;
    /// // The engine VM delivers at its next frame.
    /// domain.frame(std::time::Duration::from_millis(16));
    /// assert_eq!(domain.eval("return seen[1]")?, Message::String("orc".into()));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::Name`] ([`NameRefusal::EventName`]) when `name` is not 1 to 256 bytes.
    pub fn raise_engine_event(&self, name: &str, payload: Message) -> Result<()> {
        jobs::check_event_name(name.as_bytes(), "raise_engine_event").map_err(|message| {
            Error::Name {
                refusal: NameRefusal::EventName,
                message,
            }
        })?;
        self.current.principal.events.raise(name, payload);
        Ok(())
    }

    /// Ends the current generation: its principal, its key bindings (their queued items are
    /// refused unrun, naming `reason`), when `reject_pending` every host promise of the
    /// generation still pending, and then the resources it owns ([`ScriptDomain::own`]). A job
    /// of the generation that is running on a worker is interrupted at its next interrupt
    /// check (its VM runs with the principal's token, and every worker's signal is raised), and
    /// a stop leaves it to settle as it ends (a worker that drops the job's VM fails it, naming
    /// the reason); a restart rejects it now.
    pub(crate) fn end_generation(&self, reason: &str, reject_pending: bool) {
        let ending = std::time::Instant::now();
        self.current.principal.end(reason);
        // After the end above, so every run of the principal's worker VMs reads its token as
        // set; other domains' runs take one slow path and go on.
        self.pool.shared().interrupt_runs();
        // No worker outlives its generation: each is closed, interrupted and joined.
        self.current.actors.teardown();
        let id = self.current.principal.id;
        let pool = self.pool.shared();
        for item in pool.lanes.forget(|(principal, _)| *principal == id) {
            let failure = JobFailure {
                job: item.job.label(),
                module: Some(item.module.to_path_buf()),
                entry: Some(item.entry.to_string()),
                kind: FailureKind::Refused,
                message: reason.to_owned(),
                traceback: None,
            };
            let outcome = Outcome::Rejected(Arc::new(failure));
            jobs::reply(&item.principal, item.reply, outcome, pool);
        }
        if reject_pending {
            self.current.host_promises.borrow_mut().reject_all(reason);
        }
        // What the generation owns is released last, newest first, after everything that might
        // still have used it has stopped.
        for failure in self.life.owned.end_generation(id.generation) {
            self.report_release_failure(failure);
        }
        // A stop's teardown is part of its `DomainStopped`; a restart's or reload's is its own
        // event, attributed to the generation that ended (still the principal here).
        if self.life.state.get() != DomainState::Stopping {
            let kind = ProfileKind::GenerationEnded;
            self.profiled(kind, None, None, ending);
        }
    }

    /// Counts `n` stale events, and profiles each as an instant.
    pub(crate) fn count_stale(&self, n: u64) {
        self.life.stale.set(self.life.stale.get() + n);
        if self.current.principal.profile.is_some() {
            let now = std::time::Instant::now();
            for _ in 0..n {
                self.profiled(ProfileKind::StaleEvent, None, None, now);
            }
        }
    }

    /// Discards what reached the mailboxes of ended generations, counting it. Dropping a held
    /// settlement rejects its promise, which is how a job's host promise learns why.
    pub(crate) fn drain_stale(&self) {
        let discarded = self.event_handlers.queue().take_discarded();
        self.count_stale(discarded);
        let mut receivers = self.life.stale_rx.borrow_mut();
        receivers.retain(|rx| {
            let mut events = Vec::new();
            let connected = rx.take_into(&mut events);
            for event in events {
                self.count_stale(1);
                drop(event);
            }
            connected
        });
    }
}

/// Builds the engine VM of `principal` on this thread, with the `jobs` API installed and the
/// failures of its unawaited tasks going to `reports`.
pub(crate) fn engine_vm(
    principal: &Arc<PrincipalShared>,
    pool: &Pool,
    reports: &Rc<RefCell<Reports>>,
) -> Result<Vm> {
    let sink = reports.clone();
    let reporter: vm::Reporter = Box::new(move |label: &str, failure: &TaskFailure| {
        sink.borrow_mut().push(Report::new(
            ReportKind::of_label(label),
            label,
            failure.to_string(),
        ));
    });
    let home = JobsHome::new(principal.clone(), pool.shared().clone(), HomeKind::Engine);
    let vm = Vm::build(&principal.plan, reporter, MAX_DEADLINE, |lua| {
        jobs::install(lua, home)
    })
    .map_err(|e| Error::Vm(vm::error_message(&e)))?;
    vm.set_authority(principal.authority.clone());
    Ok(vm)
}

/// Where a registered job's failures go: the domain's reports.
pub(crate) fn report_sink(reports: &Rc<RefCell<Reports>>) -> jobs::FailureSink {
    let sink = reports.clone();
    Rc::new(move |source, message, failure| {
        let report = Report::new(ReportKind::Job, source, message);
        let report = match failure {
            Some(failure) => report.with_job_failure(failure),
            None => report,
        };
        sink.borrow_mut().push(report)
    })
}

/// The shared store a generation ends, seen through its queues' Luau binding (`shared/queue_api.rs`):
/// a whole domain is needed to reach it, so the test lives here rather than in `shared`.
#[cfg(all(test, not(loom)))]
mod tests {
    use crate::{DomainSpec, Message, Pool, ScriptDomain};

    fn text(domain: &ScriptDomain, source: &str) -> String {
        match domain.eval(source) {
            Ok(Message::String(s)) => String::from_utf8_lossy(&s).into_owned(),
            other => panic!("expected a string, got {other:?}"),
        }
    }

    /// The error `body` raises, as the code that caught it reads it: one line.
    #[track_caller]
    fn raised(domain: &ScriptDomain, body: &str) -> String {
        let full = text(
            domain,
            &format!(
                "local ok, err = pcall(function() {body} end) \
                 assert(not ok, 'expected an error') return tostring(err)"
            ),
        );
        assert!(
            !full.contains('\n'),
            "a caught error is its text alone: {full:?}"
        );
        full
    }

    #[test]
    fn ending_the_store_rejects_a_parked_pop_and_every_later_use_naming_the_reason() {
        let pool = Pool::new(1);
        let domain = ScriptDomain::new(&pool, DomainSpec::new("main")).unwrap();
        domain
            .exec(
                r#"
                kept = jobs.shared.queue("kept")
                kept:push(1)
                parked = nil
                task.spawn(function()
                    local ok, err = pcall(function() return jobs.shared.queue("w"):pop() end)
                    parked = tostring(err)
                end)
                "#,
            )
            .unwrap();
        domain.shared().core.end("domain 'main' restarted");
        let start = std::time::Instant::now();
        while domain.eval("return parked").unwrap() == Message::Nil {
            assert!(start.elapsed() < std::time::Duration::from_secs(5));
            domain.pump();
        }
        let parked = text(&domain, "return parked");
        assert!(
            parked.contains("SharedQueue:pop: queue 'w' has ended: domain 'main' restarted"),
            "{parked}"
        );
        let ended = |method: &str| {
            format!("SharedQueue:{method}: queue 'kept' has ended: domain 'main' restarted")
        };
        assert_eq!(raised(&domain, "kept:push(2)"), ended("push"));
        assert_eq!(raised(&domain, "kept:pop()"), ended("pop"));
        assert_eq!(raised(&domain, "kept:tryPop()"), ended("tryPop"));
        assert_eq!(raised(&domain, "kept:popMany(1)"), ended("popMany"));
        assert_eq!(raised(&domain, "kept:len()"), ended("len"));
        assert_eq!(raised(&domain, "kept:close()"), ended("close"));
        assert_eq!(
            raised(&domain, r#"jobs.shared.queue("new")"#),
            "jobs.shared.queue: the shared store has ended: domain 'main' restarted"
        );
        assert_eq!(domain.tasks(), 0, "the parked task finished");
    }
}
