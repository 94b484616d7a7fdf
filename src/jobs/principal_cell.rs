//! A principal's cross-thread state ([`PrincipalCell`]), and the mailbox that reaches its domain.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender};

use super::event_log::EventLog;
use super::job::MAX_JOB_BYTES;
use super::messages::DomainEvent;
use super::registered::directory::JobDirectory;
use super::service_names::ServiceNames;
use super::warm::WarmRegistry;
use crate::principal::capability::{Attribution, Authority, Grant};
use crate::principal::event_queue::{EventQueue, Routing};
use crate::principal::{EventTarget, Generation, Logs, PostRefused, Principal, Profile};
use crate::shared::{SharedLimits, StoreCore};
use crate::sync::Arc as SyncArc;
use crate::value::{ByteBudget, Message};
use crate::vm::{Liveness, Plan};

/// The `Send` handle through which other threads reach a domain's engine thread.
///
/// Workers post replies (settled promises, reports) here; the domain drains it when it pumps.
/// A host posts domain events here too: raw ones ([`post`](Self::post)) for a context's
/// `event` phase handlers, named ones ([`post_named`](Self::post_named)) for the handlers bound
/// to a name. Both wait in the domain's one event queue until its next
/// [`drain_events`](crate::ScriptDomain::drain_events) or [`advance`](crate::ScriptDomain::advance).
///
/// A mailbox belongs to one generation of its domain: what it posts after a restart is
/// discarded and counted in [`stale_events`](crate::ScriptDomain::stale_events).
///
/// ```
/// fn assert_send<T: Send + Sync>() {}
/// assert_send::<skein::DomainMailbox>();
/// ```
#[derive(Clone)]
pub struct DomainMailbox {
    pub(crate) tx: Sender<DomainEvent>,
    /// The domain's event queue, shared by the mailboxes of all its generations.
    events: Arc<EventQueue>,
    /// The generation this mailbox posts for: the stamp on its envelopes.
    generation: Generation,
}

impl DomainMailbox {
    pub(crate) fn new(
        events: Arc<EventQueue>,
        generation: Generation,
    ) -> (DomainMailbox, Receiver<DomainEvent>) {
        let (tx, rx) = crossbeam_channel::unbounded();
        (
            DomainMailbox {
                tx,
                events,
                generation,
            },
            rx,
        )
    }

    /// Sends an engine-thread event; answers false when the domain is gone.
    pub(crate) fn send(&self, event: DomainEvent) -> bool {
        self.tx.send(event).is_ok()
    }

    /// Sends an engine-thread event; hands it back when the domain is gone.
    pub(crate) fn post_or_return(&self, event: DomainEvent) -> Result<(), Box<DomainEvent>> {
        self.tx.send(event).map_err(|e| Box::new(e.into_inner()))
    }

    /// Queues a raw event for the `event` phase handlers of `target`.
    ///
    /// A raw post is the host's own: it always queues, and counts toward the queue's
    /// [`EventLimits`](crate::EventLimits) (so named events may be refused after it) without
    /// being held to them.
    ///
    /// ```
    /// use skein::{ContextSpec, DomainSpec, EventTarget, Message, Phase, Pool, ScriptDomain};
    ///
    /// let pool = Pool::new(1);
    /// let spec = DomainSpec::new("game").context(ContextSpec::new("ui").phases([Phase::Event]))?;
    /// let domain = ScriptDomain::new(&pool, spec)?;
    /// domain.exec(r#"require("@skein/context").bind("ui", { event = function(e) got = e end })"#)?;
    /// domain.mailbox().post(EventTarget::Context("ui".into()), Message::Integer(7))?;
    /// assert_eq!(domain.drain_events().delivered, 1);
    /// assert_eq!(domain.eval("return got")?, Message::Number(7.0));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// [`PostRefused::Stopped`] once the domain is stopped.
    pub fn post(&self, target: EventTarget, payload: Message) -> Result<(), PostRefused> {
        self.events.push_raw(self.generation, target, payload)
    }

    /// Queues the named event `name` for every handler bound to it, if it fits.
    ///
    /// # Errors
    /// [`PostRefused::Name`] when the name is empty or longer than
    /// [`EventLimits::name`](crate::EventLimits::name); [`PostRefused::Full`] when one more event
    /// or its bytes would pass the queue's limits; [`PostRefused::Stopped`] once the domain is
    /// stopped. A refused event is not queued, and comes back in the error.
    pub fn post_named(&self, name: &str, payload: Message) -> Result<(), PostRefused> {
        self.events.push_named(self.generation, name, payload)
    }

    /// Queues the named event `name` as emitted by a worker VM or actor of this mailbox's
    /// generation: as [`post_named`](Self::post_named), and the drain that delivers it also
    /// posts its copies to the domain's routes (the engine VM's `emit` does that itself).
    pub(crate) fn emit_named(&self, name: &str, payload: Message) -> Result<(), PostRefused> {
        self.events
            .push_routed(self.generation, name, payload, Routing::AtDrain)
    }

    /// The domain's event queue, for the limits and room an emit reads its payload within.
    pub(crate) fn event_queue(&self) -> &Arc<EventQueue> {
        &self.events
    }

    /// Queues a raw event on behalf of work that `generation` asked for: a host service that
    /// captured the generation when the work was requested posts its late completion here, and
    /// if the domain has restarted since, the event is discarded and counted as stale instead of
    /// reaching code that never asked for it.
    ///
    /// ```
    /// use skein::{DomainSpec, EventTarget, Message, Pool, ScriptDomain};
    ///
    /// let pool = Pool::new(1);
    /// let mut domain = ScriptDomain::new(&pool, DomainSpec::new("game"))?;
    /// let asked = domain.generation();
    /// let mailbox = domain.mailbox();
    /// domain.restart(skein::Load::Nothing)?;
    /// // The work finishes after the restart: its completion goes nowhere.
    /// mailbox.post_for(asked, EventTarget::All, Message::Nil)?;
    /// assert_eq!(domain.pending_events(), 0);
    /// domain.mailbox().post_for(domain.generation(), EventTarget::All, Message::Nil)?;
    /// assert_eq!(domain.pending_events(), 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// [`PostRefused::Stopped`] once the domain is stopped.
    pub fn post_for(
        &self,
        generation: Generation,
        target: EventTarget,
        payload: Message,
    ) -> Result<(), PostRefused> {
        self.events.push_raw(generation, target, payload)
    }

    /// The generation this mailbox posts for.
    pub fn generation(&self) -> Generation {
        self.generation
    }
}

impl fmt::Debug for DomainMailbox {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DomainMailbox").finish_non_exhaustive()
    }
}

/// The shared, `Send + Sync` part of a principal that travels with its items.
pub(crate) struct PrincipalCell {
    pub(crate) id: Principal,
    pub(crate) plan: Plan,
    pub(crate) mailbox: DomainMailbox,
    /// The default (and longest) deadline of one run of one of its items.
    pub(crate) max_deadline: Duration,
    /// The principal's shared tables and queues (`jobs.shared`).
    pub(crate) shared: SyncArc<StoreCore>,
    /// What the principal's jobs hold in the host: their arguments and results
    /// ([`MAX_JOB_BYTES`]).
    pub(crate) job_bytes: Arc<ByteBudget>,
    /// How long one warm entry may take, waits included ([`WARM_BOUND`](super::WARM_BOUND)
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
    /// whichever VM (engine or worker) calls it.
    pub(crate) jobs: JobDirectory,
    /// The domain's profile sink: worker threads send their pool-item events to it.
    pub(crate) profile: Profile,
    /// The domain's log sink: `@skein/log` in its engine and worker VMs writes to it.
    pub(crate) logs: Logs,
    /// The evidence that its VMs still progress, when its host asked for a stall check
    /// ([`DomainSpec::detect_stalls`](crate::DomainSpec::detect_stalls)): every VM of the
    /// principal reports its resumes and timers to it.
    pub(crate) liveness: Option<Arc<Liveness>>,
    alive: AtomicBool,
    /// Why the principal ended, once it has.
    ended: Mutex<Option<String>>,
}

impl PrincipalCell {
    pub(crate) fn new(
        id: Principal,
        plan: Plan,
        mailbox: DomainMailbox,
        max_deadline: Duration,
        warm_bound: Duration,
    ) -> Self {
        PrincipalCell {
            id,
            plan,
            mailbox,
            max_deadline,
            shared: SyncArc::new(StoreCore::new(SharedLimits::DEFAULT)),
            job_bytes: Arc::new(ByteBudget::new(MAX_JOB_BYTES)),
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
                    worker: None,
                },
                Arc::default(),
            )),
            jobs: JobDirectory::default(),
            profile: None,
            logs: None,
            liveness: None,
            alive: AtomicBool::new(true),
            ended: Mutex::new(None),
        }
    }

    /// The principal of a later generation of the domain, the one `mailbox` posts for (a
    /// failed reload may have used a number in between): the same domain, plan, bounds and
    /// frame counter, the same engine-service names (services belong to the host, not to a
    /// generation), and everything else fresh: an empty shared store, no warm entries, an
    /// empty event log.
    pub(crate) fn next_generation(&self, mailbox: DomainMailbox) -> PrincipalCell {
        let id = Principal {
            domain: self.id.domain,
            generation: mailbox.generation(),
        };
        let mut next = PrincipalCell::new(
            id,
            self.plan.clone(),
            mailbox,
            self.max_deadline,
            self.warm_bound,
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
        self.alive.load(Ordering::Acquire)
    }

    /// Ends the principal; its queued items will be refused with `reason`.
    pub(crate) fn end(&self, reason: &str) {
        *self.ended.lock().unwrap_or_else(|e| e.into_inner()) = Some(reason.to_owned());
        self.alive.store(false, Ordering::Release);
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
