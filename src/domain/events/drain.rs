//! The receiving end of the current generation's mailbox: each [`DomainEvent`] a worker, an
//! actor or a host thread posted is handled here on the engine thread (promises settled,
//! reports kept, forwarded queries answered and recorded commands applied under the authority
//! of the work that made them, registered jobs' traffic handed to the registry).

use std::sync::Arc;

use crate::domain::{Report, ReportKind, ScriptDomain};
use crate::jobs::{self, DomainEvent, JobShared, ReplyTo};
use crate::principal::capability::{self, Authority, Installed};
use crate::shared;
use crate::vm;

impl ScriptDomain {
    /// Installs the authority a message from another thread was sent under, or the generation's
    /// whole grant when it carries none, for as long as the guard lives: what the message makes
    /// the engine thread do runs as the work that sent it.
    fn install_sent<'a>(&'a self, authority: &'a Option<Arc<Authority>>) -> Installed<'a> {
        capability::install(Some(
            authority
                .as_ref()
                .unwrap_or(&self.current.principal.authority),
        ))
    }

    /// Drains the mailbox once, after discarding what reached the mailboxes of ended
    /// generations. Answers whether it handled anything.
    pub(crate) fn drain(&self) -> bool {
        self.drain_stale();
        let any = self.drain_mailbox();
        // The drain is the engine VM's start point for engine events.
        let events = &self.current.principal.events;
        any | jobs::deliver_events(
            &self.current.vm,
            events,
            self.current.principal.max_deadline,
        )
    }

    /// Handles every event in the current generation's mailbox, in the order sent: each take
    /// is one swap of the whole queue, repeated until one finds nothing. Settlements in a row
    /// are settled together, before the next event of another kind and at the end (settling
    /// runs no Luau, so nothing can tell them from settlements one by one). Answers whether it
    /// handled anything.
    pub(crate) fn drain_mailbox(&self) -> bool {
        let vm = &self.current.vm;
        // The kept buffer is taken at the first settlement: a drain that finds none costs
        // nothing more.
        let mut settles = Vec::new();
        let handled = self.current.rx.drain(|event| match event {
            DomainEvent::Settle { promise, outcome } => {
                if settles.capacity() == 0 {
                    settles = vm.settle_buffer();
                }
                settles.push((promise, outcome));
                let settled = &self.frames.services.settled;
                settled.set(settled.get() + 1);
            }
            other => {
                vm.settle_all(&mut settles);
                self.handle(other);
            }
        });
        if settles.capacity() > 0 {
            vm.settle_all(&mut settles);
            vm.keep_settle_buffer(settles);
        }
        handled > 0
    }

    pub(crate) fn handle(&self, event: DomainEvent) {
        match event {
            DomainEvent::Settle { promise, outcome } => {
                self.current.vm.settle_reply(promise, outcome)
            }
            DomainEvent::Report { label, failure } => {
                self.reporting
                    .keep(Report::new(ReportKind::of_label(&label), label, failure))
            }
            DomainEvent::Note { label, text } => {
                self.reporting
                    .keep(Report::new(ReportKind::Note, label, text))
            }
            DomainEvent::Parcel(parcel) => shared::receive_parcel(&self.current.vm.lua, parcel),
            DomainEvent::Query {
                service,
                args,
                commands,
                reply,
                job,
                authority,
            } => {
                // A forwarded call runs as the work that made it: a service's
                // `require_capability` sees the item's authority (a context's part, when a
                // handler dispatched it), not the domain's whole grant.
                let _authority = self.install_sent(&authority);
                self.apply(commands, None);
                let answer = self.frames.services.answer(&service, args);
                if let Some(job) = job {
                    self.current.registry.count_forwarded(job);
                }
                self.deliver(reply, vm::Outcome::Resolved(answer));
            }
            DomainEvent::Registered(registration) => {
                self.current.registry.add_remote(*registration)
            }
            DomainEvent::RegisteredDone {
                job,
                commands,
                failure,
                authority,
            } => {
                if !commands.is_empty() {
                    // As the job's call ran: under the authority it was registered with.
                    let _authority = self.install_sent(&authority);
                    let source = self.current.registry.source(job);
                    self.apply_as(commands, &source);
                }
                self.current.registry.remote_done(job, failure);
            }
            DomainEvent::RegisteredControl { job, control } => {
                self.current.registry.control(job, control)
            }
            DomainEvent::Apply {
                commands,
                then,
                authority,
            } => {
                let _authority = self.install_sent(&authority);
                self.apply(commands, then.as_ref().map(|s| s.job()));
                if let Some(mut settlement) = then {
                    if let Some((to, outcome)) = settlement.take() {
                        self.deliver(to, outcome);
                    }
                    // Dropping it now releases a keyed item's turn, after the reply.
                    drop(settlement);
                }
            }
        }
    }

    /// Applies recorded commands in order; a failure is reported, naming the job, and the rest
    /// still apply.
    pub(crate) fn apply(&self, commands: Vec<vm::ServiceCall>, job: Option<&JobShared>) {
        if commands.is_empty() {
            return;
        }
        let source = match job {
            Some(job) => job.to_string(),
            None => "engine services".to_owned(),
        };
        self.apply_as(commands, &source);
    }

    /// Applies commands in order, reporting each failure as `source`'s.
    pub(crate) fn apply_as(&self, commands: Vec<vm::ServiceCall>, source: &str) {
        for failure in self.frames.services.apply(commands) {
            self.reporting
                .keep(Report::new(ReportKind::Service, source, failure));
        }
    }

    /// Delivers an outcome on the engine thread: a promise of this VM directly, anything else
    /// the way a worker replies.
    pub(crate) fn deliver(&self, to: ReplyTo, outcome: vm::Outcome) {
        match to {
            ReplyTo::Engine(promise) => {
                let settled = &self.frames.services.settled;
                settled.set(settled.get() + 1);
                self.current.vm.settle_reply(promise, outcome)
            }
            other => jobs::reply(&self.current.principal, other, outcome, self.pool.shared()),
        }
    }
}
