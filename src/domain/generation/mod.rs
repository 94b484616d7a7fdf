//! The generation part: what one generation of a domain owns ([`GenerationState`]) and its
//! logic: building its engine VM ([`GenerationState::assemble`]), building the next
//! generation beside it ([`GenerationState::next`]), ending its work
//! ([`GenerationState::end`]), and raising engine events in it.
//!
//! Its invariants. Each generation has its own mailbox: everything of a generation that can
//! post to the engine thread (its items, its worker VMs, their settlements and forwarded
//! queries) reaches it through its principal, so after a restart what the old generation still
//! sends lands in the old mailbox, never in the new one; the domain keeps the old receivers
//! and, each time it drains, discards what they hold unapplied and unanswered, counting it
//! ([`ScriptDomain::stale_events`](crate::ScriptDomain::stale_events)). A generation's value
//! is never changed in place into another's: a restart or reload replaces it whole, in the drop
//! order [`GenerationState`] documents, and building the next one leaves the current one
//! untouched.
//!
//! Beside it: what a new generation runs (`load.rs`), the host promises a generation rejects
//! when it ends (`host_promises.rs`), and what host services own for the domain's code,
//! released per generation (`owned.rs`); building one is `assemble.rs`, and the cache of the
//! host dispatch's targets `host_targets.rs`. The domain's `facade_run.rs` puts these together
//! with the other parts into restart, reload and the end of a generation.

pub(crate) mod assemble;
pub(crate) mod host_promises;
pub(crate) mod host_targets;
pub(crate) mod load;
pub(crate) mod owned;

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;

use crate::domain::actor;
use crate::domain::frame::bindings;
use crate::error::{Error, NameRefusal, Result};
use crate::jobs::{self, MailboxReceiver, PoolShared, PrincipalShared, RegisteredJobs};
use crate::principal::Generation;
use crate::value::Message;
use crate::vm::{FailureKind, JobFailure, Outcome, Vm};
use host_targets::HostTargets;

/// Everything one generation of a domain has of its own: its principal (id, mailbox, shared
/// store), its engine VM, the receiving end of its mailbox, its registered jobs, the handlers
/// its scripts bound to contexts, the workers it spawned and the host promises it handed out.
/// The rest of a [`ScriptDomain`](crate::ScriptDomain) is the host's and outlives generations.
///
/// Not called `Generation`: that is the public generation *number*
/// ([`principal::Generation`](crate::lifecycle::Generation)), which this value carries in its principal.
///
/// A domain holds exactly one, its current generation; a restart or reload replaces it whole
/// ([`install_generation`](crate::ScriptDomain::install_generation)), and a reload trades it
/// with its candidate for the length of the candidate's load
/// ([`swap_generation`](crate::ScriptDomain::swap_generation)). A part added to a generation
/// is a field here and nothing more.
///
/// # Drop order
/// What a generation owns must not outlive it.
/// [`ScriptDomain::end_generation`](crate::ScriptDomain::end_generation) ends the principal,
/// joins the actors, refuses the queued items and rejects the host promises while the value is
/// still in place; [`install_generation`](crate::ScriptDomain::install_generation) then drops
/// the ended engine VM first (its tasks end, and the promises they held may post to the ended
/// mailbox), keeps the receiver among the stale ones so that what those drops posted is
/// discarded and counted, and drops the rest after that drain. The fields drop in the order
/// they are declared when the whole value goes (the domain's own drop, a discarded candidate).
pub(crate) struct GenerationState {
    pub(crate) principal: Arc<PrincipalShared>,
    pub(crate) vm: Vm,
    pub(crate) rx: MailboxReceiver,
    /// The jobs its scripts registered (`jobs.register`) and the host's kernels.
    pub(crate) registry: Rc<RegisteredJobs>,
    /// The host's contexts and the handlers scripts bound to them.
    pub(crate) bindings: Rc<bindings::Bindings>,
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

impl GenerationState {
    pub(crate) fn generation(&self) -> Generation {
        self.principal.id.generation
    }

    /// Drops the generation but the receiving end of its mailbox, which is answered: the rest
    /// goes now, in declaration order, so what its drops post is in the receiver.
    pub(crate) fn into_rx(self) -> MailboxReceiver {
        self.rx
    }

    /// Ends the generation's work, naming `reason`: its principal (a job of it running on a
    /// worker of `pool` is interrupted at its next interrupt check: its VM runs with the
    /// principal's token, and every worker's signal is raised), its workers (closed,
    /// interrupted and joined), its queued pool items (refused unrun), and when
    /// `reject_pending` every host promise of it still pending. What it owns is the domain's
    /// to release after this.
    pub(crate) fn end(&self, reason: &str, reject_pending: bool, pool: &Arc<PoolShared>) {
        self.principal.end(reason);
        // After the end above, so every run of the principal's worker VMs reads its token as
        // set; other domains' runs take one slow path and go on.
        pool.interrupt_runs();
        // No worker outlives its generation: each is closed, interrupted and joined.
        self.actors.teardown();
        let id = self.principal.id;
        for item in pool.lanes.forget(|(principal, _)| *principal == id) {
            let failure = JobFailure {
                job: item.job.label(),
                module: Some(item.module().to_path_buf()),
                entry: Some(item.entry().to_string()),
                kind: FailureKind::Refused,
                message: reason.to_owned(),
                traceback: None,
            };
            let outcome = Outcome::Rejected(Arc::new(failure));
            jobs::reply(&item.principal, item.reply, outcome, pool);
        }
        if reject_pending {
            self.host_promises.borrow_mut().reject_all(reason);
        }
    }

    /// Raises the engine event `name` with `payload` in the generation's event log, for its
    /// VMs' `engine.on` watchers.
    ///
    /// # Errors
    /// [`Error::Name`] ([`NameRefusal::EventName`]) when `name` is not 1 to 256 bytes.
    pub(crate) fn raise_engine_event(&self, name: &str, payload: Message) -> Result<()> {
        jobs::check_event_name(name.as_bytes(), "raise_engine_event").map_err(|message| {
            Error::Name {
                refusal: NameRefusal::EventName,
                message,
            }
        })?;
        self.principal.events.raise(name, payload);
        Ok(())
    }
}

/// The shared store a generation ends, seen through its queues' Luau binding (`shared/queue_api/`):
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
