//! A principal's cross-thread state ([`PrincipalShared`]), and the sending end of the mailbox that
//! reaches its domain's engine thread.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::job::MAX_JOB_BYTES;
use super::messages::DomainEvent;
use super::warm::WarmRegistry;
use crate::executor::wake_queue::{wake_queue, WakeReceiver, WakeSender};
use crate::jobs::leaves::event_log::EventLog;
use crate::jobs::leaves::registered::directory::JobDirectory;
use crate::jobs::leaves::service_names::ServiceNames;
use crate::ledger::Ledger;
use crate::principal::capability::{Attribution, Authority, Grant};
use crate::principal::event_queue::EventQueue;
use crate::principal::{Generation, Logs, Principal, Profile};
use crate::shared::{SharedLimits, StoreCore};
use crate::sync::Arc as SyncArc;
use crate::vm::{CancelToken, Liveness, Plan};

/// The sending end of one generation's mailbox: what a pool thread, a worker VM or an actor
/// uses to reach the engine thread of the principal's domain (settled promises, reports,
/// forwarded queries, recorded commands). The domain's public
/// [`DomainMailbox`](crate::DomainMailbox) wraps it with the event queue.
///
/// The transport is a [`WakeSender`] (`executor/wake_queue.rs`): a send is a short critical section
/// that pushes the event, and only the send that finds the engine thread asleep wakes it; the
/// engine takes every event that arrived with one swap ([`MailboxReceiver`]). All events of a
/// generation travel in one queue, so they are handled in the order they were sent: a
/// settlement's commands before its reply, a report before what followed it.
#[derive(Clone)]
pub(crate) struct MailboxSender {
    tx: WakeSender<DomainEvent>,
}

/// The receiving end of one generation's mailbox, which the engine thread drains.
pub(crate) type MailboxReceiver = WakeReceiver<DomainEvent>;

impl MailboxSender {
    /// A new mailbox: its sending end and the receiving end the engine thread drains.
    pub(crate) fn new() -> (MailboxSender, MailboxReceiver) {
        let (tx, rx) = wake_queue();
        (MailboxSender { tx }, rx)
    }

    /// Sends an engine-thread event; answers false when the domain is gone.
    pub(crate) fn send(&self, event: DomainEvent) -> bool {
        self.tx.send(event).is_ok()
    }

    /// Sends an engine-thread event; hands it back when the domain is gone.
    pub(crate) fn post_or_return(&self, event: DomainEvent) -> Result<(), Box<DomainEvent>> {
        self.tx.send(event).map_err(Box::new)
    }
}

impl fmt::Debug for MailboxSender {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MailboxSender").finish_non_exhaustive()
    }
}

/// The shared, `Send + Sync` part of a principal that travels with its items.
pub(crate) struct PrincipalShared {
    pub(crate) id: Principal,
    pub(crate) plan: Plan,
    pub(crate) mailbox: MailboxSender,
    /// The domain's event queue, which the mailboxes of all its generations post to: with
    /// `mailbox` and `id.generation` it makes the domain's
    /// [`DomainMailbox`](crate::DomainMailbox) for this principal.
    pub(crate) event_queue: Arc<EventQueue>,
    /// The default (and longest) deadline of one run of one of its items.
    pub(crate) max_deadline: Duration,
    /// The principal's shared tables and queues (`jobs.shared`).
    pub(crate) shared: SyncArc<StoreCore>,
    /// What the principal's jobs hold in the host: their arguments and results
    /// ([`MAX_JOB_BYTES`]).
    pub(crate) job_bytes: Arc<Ledger>,
    /// The domain's host memory, shared by all its generations: `job_bytes`, the shared store
    /// and the actors' messages draw on it, and texts the domain's scripts make Skein keep
    /// (failures, reports, log lines, metadata) are charged to it.
    pub(crate) memory: Arc<Ledger>,
    /// How long one warm entry may take, waits included ([`WARM_BOUND`](super::warm::WARM_BOUND)
    /// unless a test shortened it).
    pub(crate) warm_bound: Duration,
    /// The principal's `jobs.warm` entries: they end with it.
    pub(crate) warms: WarmRegistry,
    /// The names and kinds of the domain's engine services, for the stubs of worker VMs.
    pub(crate) services: ServiceNames,
    /// The domain's frame counter, bumped by its engine thread once per frame; what
    /// `task.waitFrames` counts in every VM of the principal.
    pub(crate) frames: Arc<AtomicU64>,
    /// The generation's authority: the domain's grant. Worker VMs of the principal run their
    /// tasks under it, and items dispatched by host code carry it.
    pub(crate) authority: Arc<Authority>,
    /// The engine events the host raised on this generation, for `engine.on` watchers.
    pub(crate) events: EventLog,
    /// The ids and names of the generation's registered jobs, reserved at `jobs.register` in
    /// whichever VM (engine or worker) calls it, and the references their handles hold. Shared
    /// so that a collected handle gives its reference back without a VM's app data.
    pub(crate) jobs: Arc<JobDirectory>,
    /// The domain's profile sink: worker threads send their pool-item events to it.
    pub(crate) profile: Profile,
    /// The domain's log sink: `@skein/log` in its engine and worker VMs writes to it.
    pub(crate) logs: Logs,
    /// The evidence that its VMs still progress, when its host asked for a stall check
    /// ([`DomainSpec::detect_stalls`](crate::DomainSpec::detect_stalls)): every VM of the
    /// principal reports its resumes and timers to it.
    pub(crate) liveness: Option<Arc<Liveness>>,
    /// False while the principal runs work; set once when it ends. Its worker VMs run with it
    /// as their token ([`RunTokens::vm`](crate::vm::budget::RunTokens::vm)), so setting it and
    /// raising every worker's signal stops their runs at the next interrupt check.
    halt: Arc<CancelToken>,
    /// Why the principal ended, once it has.
    ended: Mutex<Option<String>>,
    /// Set while the domain's engine thread joins a frame's pool work (`domain/frame/join.rs`):
    /// a worker whose item forwards a query then leaves new items to its siblings for a
    /// moment (`service_stubs::QUERY_HOLD`), since the frame waits for every chunk.
    pub(crate) joining: AtomicBool,
}

impl PrincipalShared {
    pub(crate) fn new(
        id: Principal,
        plan: Plan,
        mailbox: MailboxSender,
        event_queue: Arc<EventQueue>,
        max_deadline: Duration,
        warm_bound: Duration,
        memory: Arc<Ledger>,
    ) -> Self {
        PrincipalShared {
            id,
            plan,
            mailbox,
            event_queue,
            max_deadline,
            shared: SyncArc::new(StoreCore::under(
                SharedLimits::DEFAULT,
                Some(memory.clone()),
            )),
            job_bytes: Arc::new(Ledger::under(MAX_JOB_BYTES, Some(memory.clone()))),
            memory,
            warm_bound,
            warms: WarmRegistry::default(),
            services: ServiceNames::default(),
            frames: Arc::new(AtomicU64::new(0)),
            events: EventLog::default(),
            authority: Arc::new(Authority::new(
                Grant::default(),
                Attribution {
                    domain_name: String::new(),
                    domain: id.domain,
                    generation: id.generation,
                    context: None,
                    actor: None,
                },
                Arc::default(),
            )),
            jobs: Arc::default(),
            profile: None,
            logs: None,
            liveness: None,
            halt: Arc::new(CancelToken::new(false)),
            ended: Mutex::new(None),
            joining: AtomicBool::new(false),
        }
    }

    /// The principal of a later generation of the domain, `generation`, posting through
    /// `mailbox` (a failed reload may have used a number in between): the same domain, plan, bounds and
    /// frame counter, the same engine-service names (services belong to the host, not to a
    /// generation), and everything else fresh: an empty shared store, no warm entries, an
    /// empty event log.
    pub(crate) fn next_generation(
        &self,
        generation: Generation,
        mailbox: MailboxSender,
    ) -> PrincipalShared {
        let id = Principal {
            domain: self.id.domain,
            generation,
        };
        let mut next = PrincipalShared::new(
            id,
            self.plan.clone(),
            mailbox,
            self.event_queue.clone(),
            self.max_deadline,
            self.warm_bound,
            self.memory.clone(),
        );
        next.frames = self.frames.clone();
        next.profile = self.profile.clone();
        next.logs = self.logs.clone();
        next.liveness = self.liveness.as_ref().map(|_| Arc::default());
        next.authority = Arc::new(self.authority.for_generation(id.generation));
        for (name, kind) in self.services.since(0) {
            // The names were unique in the old list, so none is refused here.
            let _ = next.services.add(&name, kind);
        }
        next
    }

    /// Whether the principal still runs work.
    pub(crate) fn is_alive(&self) -> bool {
        !self.halt.load(Ordering::Acquire)
    }

    /// The token a worker VM of the principal runs with: set when the principal ends.
    pub(crate) fn halt_token(&self) -> Arc<CancelToken> {
        self.halt.clone()
    }

    /// Ends the principal; its queued items will be refused with `reason`. Its running items
    /// stop at their next interrupt check once the caller raises the workers' signals
    /// ([`PoolShared::interrupt_runs`](super::pool_shared::PoolShared::interrupt_runs)).
    pub(crate) fn end(&self, reason: &str) {
        *self.ended.lock().unwrap_or_else(|e| e.into_inner()) = Some(reason.to_owned());
        self.halt.store(true, Ordering::Release);
        self.shared.end(reason);
    }

    /// Why the principal ended.
    pub(crate) fn end_reason(&self) -> String {
        self.ended
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .unwrap_or_else(|| format!("{} has ended", self.id))
    }
}
