//! [`DomainMailbox`]: the `Send` handle through which other threads and other domains reach a
//! domain's engine thread, one per generation.
//!
//! It is the generation's [`MailboxSender`] (what `jobs` posts settlements, reports, forwarded
//! queries and recorded commands through; it names no domain) together with the domain's one
//! event queue, where host posts and emits wait for the next drain.

use std::fmt;
use std::sync::Arc;

use crate::jobs::{DomainEvent, MailboxReceiver, MailboxSender, PrincipalShared};
use crate::principal::event_queue::{EventQueue, Routing};
use crate::principal::{EventTarget, Generation, PostRefused};
use crate::value::Message;

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
    /// The sending end of the generation's mailbox, which the engine thread drains.
    sender: MailboxSender,
    /// The domain's event queue, shared by the mailboxes of all its generations.
    events: Arc<EventQueue>,
    /// The generation this mailbox posts for: the stamp on its envelopes.
    generation: Generation,
}

impl DomainMailbox {
    /// A new mailbox of `generation`, posting events to `events`: the handle and the receiving
    /// end the engine thread drains.
    pub(crate) fn new(
        events: Arc<EventQueue>,
        generation: Generation,
    ) -> (DomainMailbox, MailboxReceiver) {
        let (sender, rx) = MailboxSender::new();
        let mailbox = DomainMailbox {
            sender,
            events,
            generation,
        };
        (mailbox, rx)
    }

    /// The mailbox of `principal`'s generation.
    pub(crate) fn of(principal: &PrincipalShared) -> DomainMailbox {
        DomainMailbox {
            sender: principal.mailbox.clone(),
            events: principal.event_queue.clone(),
            generation: principal.id.generation,
        }
    }

    /// The sending end alone, as a principal carries it.
    pub(crate) fn sender(&self) -> &MailboxSender {
        &self.sender
    }

    /// Sends an engine-thread event; answers false when the domain is gone.
    pub(crate) fn send(&self, event: DomainEvent) -> bool {
        self.sender.send(event)
    }

    /// Queues a raw event for the `event` phase handlers of `target`.
    ///
    /// A raw post is the host's own: it always queues, and counts toward the queue's
    /// [`EventLimits`](crate::event::EventLimits) (so named events may be refused after it) without
    /// being held to them.
    ///
    /// ```
    /// use skein::event::EventTarget;
    /// use skein::{ContextSpec, DomainSpec, Message, Phase, Pool, ScriptDomain};
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
    pub fn post(
        &self,
        target: EventTarget,
        payload: impl Into<Message>,
    ) -> Result<(), PostRefused> {
        self.events
            .push_raw(self.generation, target, payload.into())
    }

    /// Queues the named event `name` for every handler bound to it, if it fits.
    ///
    /// # Errors
    /// [`PostRefused::Name`] when the name is empty or longer than
    /// [`EventLimits::name`](crate::event::EventLimits::name); [`PostRefused::Full`] when one more event
    /// or its bytes would pass the queue's limits; [`PostRefused::Stopped`] once the domain is
    /// stopped. A refused event is not queued, and comes back in the error.
    pub fn post_named(&self, name: &str, payload: impl Into<Message>) -> Result<(), PostRefused> {
        self.events
            .push_named(self.generation, name, payload.into())
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
    /// use skein::event::EventTarget;
    /// use skein::{DomainSpec, Message, Pool, ScriptDomain};
    ///
    /// let pool = Pool::new(1);
    /// let mut domain = ScriptDomain::new(&pool, DomainSpec::new("game"))?;
    /// let asked = domain.generation();
    /// let mailbox = domain.mailbox();
    /// domain.restart(skein::lifecycle::Load::Nothing)?;
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
        payload: impl Into<Message>,
    ) -> Result<(), PostRefused> {
        self.events.push_raw(generation, target, payload.into())
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
