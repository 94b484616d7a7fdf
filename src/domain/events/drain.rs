//! The receiving end of the current generation's mailbox, as the [`GenerationState`] part
//! handles it: each [`DomainEvent`] a worker, an actor or a host thread posted is handled here
//! on the engine thread (promises settled, reports kept, forwarded queries answered and
//! recorded commands applied under the authority of the work that made them, registered jobs'
//! traffic handed to the registry). The parts a handling touches beyond the generation (the
//! engine services and their counts, the reports, the pool) are explicit arguments.
//!
//! Its invariants: events are handled in the order they were sent; settlements in a row are
//! settled together, before the next event of another kind and at the end of a drain, so
//! nothing can tell them from settlements one by one; what a message makes the engine thread
//! do runs under the authority it was sent with (the generation's whole grant when it carries
//! none); every settlement of an engine VM promise is counted in the services' `settled`.
//!
//! This is the per-dispatch hot path: a drain that finds no settlement allocates nothing.

use std::sync::Arc;

use crate::domain::frame::engine_services::EngineServices;
use crate::domain::generation::GenerationState;
use crate::domain::reporting::Reporting;
use crate::domain::{Report, ReportKind};
use crate::jobs::{self, DomainEvent, JobShared, PoolShared, Query, ReplyTo};
use crate::principal::capability::{self, Authority, Installed};
use crate::shared;
use crate::vm;

impl GenerationState {
    /// Installs the authority a message from another thread was sent under, or the generation's
    /// whole grant when it carries none, for as long as the guard lives: what the message makes
    /// the engine thread do runs as the work that sent it.
    fn install_sent<'a>(&'a self, authority: &'a Option<Arc<Authority>>) -> Installed<'a> {
        capability::install(Some(
            authority.as_ref().unwrap_or(&self.principal.authority),
        ))
    }

    /// Delivers the engine events logged since the last drain to the engine VM's watchers: the
    /// drain is the engine VM's start point for them. Answers whether it delivered anything.
    #[inline]
    pub(crate) fn deliver_engine_events(&self) -> bool {
        jobs::deliver_events(
            &self.vm,
            &self.principal.events,
            self.principal.max_deadline,
        )
    }

    /// Handles every event in the mailbox, in the order sent: each take is one swap of the
    /// whole queue, repeated until one finds nothing. Settlements in a row are settled
    /// together, before the next event of another kind and at the end (settling runs no Luau,
    /// so nothing can tell them from settlements one by one). Answers whether it handled
    /// anything.
    pub(crate) fn drain_mailbox(
        &self,
        services: &EngineServices,
        reporting: &Reporting,
        pool: &PoolShared,
    ) -> bool {
        let vm = &self.vm;
        // The kept buffer is taken at the first settlement: a drain that finds none costs
        // nothing more.
        let mut settles = Vec::new();
        let handled = self.rx.drain(|event| match event {
            DomainEvent::Settle { promise, outcome } => {
                if settles.capacity() == 0 {
                    settles = vm.settle_buffer();
                }
                settles.push((promise, outcome));
                let settled = &services.settled;
                settled.set(settled.get() + 1);
            }
            other => {
                vm.settle_all(&mut settles);
                self.handle(other, services, reporting, pool);
            }
        });
        if settles.capacity() > 0 {
            vm.settle_all(&mut settles);
            vm.keep_settle_buffer(settles);
        }
        handled > 0
    }

    /// Handles one event of the mailbox.
    fn handle(
        &self,
        event: DomainEvent,
        services: &EngineServices,
        reporting: &Reporting,
        pool: &PoolShared,
    ) {
        match event {
            DomainEvent::Settle { promise, outcome } => self.vm.settle_reply(promise, outcome),
            DomainEvent::Report { label, failure } => {
                reporting.keep(Report::new(ReportKind::of_label(&label), label, failure))
            }
            DomainEvent::Note { label, text } => {
                reporting.keep(Report::new(ReportKind::Note, label, text))
            }
            DomainEvent::Parcel(parcel) => shared::receive_parcel(&self.vm.lua, parcel),
            DomainEvent::Query(query) => {
                let Query {
                    service,
                    args,
                    commands,
                    reply,
                    job,
                    authority,
                } = *query;
                // A forwarded call runs as the work that made it: a service's
                // `require_capability` sees the item's authority (a context's part, when a
                // handler dispatched it), not the domain's whole grant.
                let _authority = self.install_sent(&authority);
                apply(services, reporting, commands, None);
                let answer = services.answer(&service, args);
                if let Some(job) = job {
                    self.registry.count_forwarded(job);
                }
                self.deliver(reply, vm::Outcome::Resolved(answer), services, pool);
            }
            DomainEvent::Registered(registration) => self.registry.add_remote(*registration),
            DomainEvent::RegisteredDone {
                job,
                commands,
                failure,
                authority,
            } => {
                if !commands.is_empty() {
                    // As the job's call ran: under the authority it was registered with.
                    let _authority = self.install_sent(&authority);
                    let source = self.registry.source(job);
                    apply_as(services, reporting, commands, &source);
                }
                self.registry.remote_done(job, failure);
            }
            DomainEvent::RegisteredControl { job, control } => self.registry.control(job, control),
            DomainEvent::Apply {
                commands,
                then,
                authority,
            } => {
                let _authority = self.install_sent(&authority);
                apply(
                    services,
                    reporting,
                    commands,
                    then.as_ref().map(|s| s.job()),
                );
                if let Some(mut settlement) = then {
                    if let Some((to, outcome)) = settlement.take() {
                        self.deliver(to, outcome, services, pool);
                    }
                    // Dropping it now releases a keyed item's turn, after the reply.
                    drop(settlement);
                }
            }
        }
    }

    /// Delivers an outcome on the engine thread: a promise of this VM directly (counted in
    /// `services`), anything else the way a worker replies.
    fn deliver(
        &self,
        to: ReplyTo,
        outcome: vm::Outcome,
        services: &EngineServices,
        pool: &PoolShared,
    ) {
        match to {
            ReplyTo::Engine(promise) => {
                let settled = &services.settled;
                settled.set(settled.get() + 1);
                self.vm.settle_reply(promise, outcome)
            }
            other => jobs::reply(&self.principal, other, outcome, pool),
        }
    }
}

/// Applies recorded commands in order; a failure is reported, naming the job, and the rest
/// still apply.
fn apply(
    services: &EngineServices,
    reporting: &Reporting,
    commands: Vec<vm::ServiceCall>,
    job: Option<&JobShared>,
) {
    if commands.is_empty() {
        return;
    }
    let source = match job {
        Some(job) => job.to_string(),
        None => "engine services".to_owned(),
    };
    apply_as(services, reporting, commands, &source);
}

/// Applies commands in order, reporting each failure as `source`'s.
fn apply_as(
    services: &EngineServices,
    reporting: &Reporting,
    commands: Vec<vm::ServiceCall>,
    source: &str,
) {
    for failure in services.apply(commands) {
        reporting.keep(Report::new(ReportKind::Service, source, failure));
    }
}
