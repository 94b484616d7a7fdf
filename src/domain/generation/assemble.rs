//! Building a generation: its engine VM with what every generation has installed
//! ([`GenerationState::assemble`]), and the next generation beside the current one
//! ([`GenerationState::next`]), against the host's parts of the domain ([`EngineSetup`]).
//!
//! Its invariants: building touches nothing of the current generation (a failed build leaves
//! the domain as it was); a new generation starts with no handlers and no actors, and with
//! the context declarations, engine services and kernels the host gave the domain.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;

use super::GenerationState;
use crate::domain::events::handlers as event_handlers;
use crate::domain::frame::{bindings, engine_services};
use crate::domain::reports::Reports;
use crate::domain::{actor, interfaces, InterruptTarget, Report, ReportKind};
use crate::error::{Error, NameRefusal, Result};
use crate::jobs::{
    self, HomeKind, JobsHome, MailboxReceiver, MailboxSender, Pool, PrincipalShared,
    RegisteredJobs, MAX_DEADLINE,
};
use crate::principal::Generation;
use crate::vm::{self, TaskFailure, Vm};

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
    /// Builds the engine VM of `principal` and installs in it what every generation has: its
    /// registry (`jobs.register`, as app data), `@skein/context` over `bindings`,
    /// `@skein/events`, `@skein/interfaces` and `@skein/worker` over `actors`. The first
    /// generation's parts come from the spec ([`ScriptDomain::new`](crate::ScriptDomain::new)),
    /// a later one's from the generation before it ([`next`](Self::next)).
    ///
    /// # Errors
    /// [`Error::Vm`] when the VM can't be built.
    pub(crate) fn assemble(
        host: &EngineSetup<'_>,
        principal: Arc<PrincipalShared>,
        rx: MailboxReceiver,
        registry: Rc<RegisteredJobs>,
        bindings: Rc<bindings::Bindings>,
        actors: Rc<actor::Actors>,
    ) -> Result<GenerationState> {
        let generation = principal.id.generation;
        let vm = engine_vm(&principal, host.pool, host.reports)?;
        // An `InterruptHandle` stops every run of the domain's engine VMs with this token.
        vm.set_halt(host.interrupt.engine_token());
        vm.lua.set_app_data(registry.clone());
        bindings::install_context_module(&vm.lua, &bindings)?;
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

    /// Builds the generation after this one, numbered `generation`, beside it and without
    /// touching it: a new principal and mailbox, an engine VM with the domain's modules,
    /// `services` (the host's engine services) and the kernels installed, the context
    /// declarations carried over, no handlers and no workers.
    ///
    /// # Errors
    /// [`Error::Vm`] when the VM can't be built; [`Error::Name`]
    /// ([`NameRefusal::ServicePath`]) when an engine service can't be installed in it.
    pub(crate) fn next(
        &self,
        generation: Generation,
        host: &EngineSetup<'_>,
        services: &Rc<engine_services::EngineServices>,
    ) -> Result<GenerationState> {
        let (mailbox, rx) = MailboxSender::new();
        let principal = Arc::new(self.principal.next_generation(generation, mailbox));
        debug_assert_eq!(principal.id.generation, generation);
        let registry = self.registry.next_generation(principal.clone());
        let bindings = self.bindings.next_generation();
        let actors = self.actors.next_generation(principal.clone());
        let next = GenerationState::assemble(host, principal, rx, registry, bindings, actors)?;
        next.install_services(services)?;
        Ok(next)
    }

    /// Installs in the engine VM a function for each engine service its principal knows of.
    fn install_services(&self, services: &Rc<engine_services::EngineServices>) -> Result<()> {
        for (name, _) in self.principal.services.since(0) {
            let f = engine_services::engine_function(&self.vm.lua, services.clone(), name.clone())?;
            jobs::install_at(&self.vm.lua, &name, f).map_err(|e| Error::Name {
                refusal: NameRefusal::ServicePath,
                message: format!("restart: {e}"),
            })?;
        }
        Ok(())
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
    if let Some(sink) = &principal.profile {
        vm.set_profile(sink.clone());
    }
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
