//! The domain event queue: one FIFO of raw and named events, its [`EventLimits`], and the
//! refusals a post can meet ([`PostRefused`]).
//!
//! This is the `Send` half of domain events: any thread posts through a
//! [`DomainMailbox`](crate::DomainMailbox), which holds the queue; the engine thread takes a
//! drain's worth at a time (`domain/events/handlers.rs` delivers them). It never touches a Luau value
//! and never runs a handler.
//!
//! The queue outlives generations, but it only ever holds envelopes of the current one: each
//! envelope carries the generation of the mailbox that posted it, a restart discards (and
//! counts) what is queued, and a post through an ended generation's mailbox is discarded and
//! counted the same way. These are domain events, apart from the engine events a host raises
//! for `engine.on` watchers (`jobs/leaves/event_log.rs`).

use std::collections::VecDeque;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};

use super::diagnostic::Diagnostic;
use crate::principal::Generation;
use crate::value::Message;

/// The most `queue full` refusals of workers' emits kept for the next drain's report; past it
/// they are only counted, so a worker spinning on a full queue can't grow memory without bound.
pub(crate) const REFUSALS_KEPT: usize = 256;

/// The most distinct event names a queue keeps shared; past it the set starts over. A host or
/// script that invents names without end costs memory only up to this.
const NAMES_KEPT: usize = 256;

/// Bounds on a domain's event queue, set with
/// [`DomainSpec::event_limits`](crate::DomainSpec::event_limits).
///
/// Bytes are counted as [`Message::queue_weight`] of the payload plus the bytes of a named
/// event's name (its envelope holds a copy).
///
/// ```
/// use skein::event::EventLimits;
/// let limits = EventLimits::default();
/// assert_eq!((limits.pending, limits.bytes), (65_536, 64 << 20));
/// assert_eq!((limits.per_drain, limits.name), (4_096, 256));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EventLimits {
    /// The most events that may wait; a named event past it is refused.
    pub pending: usize,
    /// The most payload bytes that may wait; a named event past it is refused.
    pub bytes: usize,
    /// The most events one drain delivers; the rest wait, in order, for the next.
    pub per_drain: usize,
    /// The longest event name, in bytes.
    pub name: usize,
}

impl Default for EventLimits {
    fn default() -> Self {
        EventLimits {
            pending: 65_536,
            bytes: 64 << 20,
            per_drain: 4_096,
            name: 256,
        }
    }
}

/// Where a raw event goes: the `event` phase handlers of one context, or of every context.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EventTarget {
    /// The context of this name (a context nobody declared handles nothing).
    Context(String),
    /// Every context, in scheduler order.
    All,
}

/// Which bound of [`EventLimits`] refused an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueueBound {
    /// [`EventLimits::pending`].
    Pending,
    /// [`EventLimits::bytes`].
    Bytes,
}

/// Why a post did not queue its event; the payload comes back, so nothing is lost.
///
/// ```
/// use skein::event::{EventLimits, PostRefused};
/// use skein::{DomainSpec, Message, Pool, ScriptDomain};
///
/// let pool = Pool::new(1);
/// let limits = EventLimits { pending: 1, ..EventLimits::default() };
/// let domain = ScriptDomain::new(&pool, DomainSpec::new("game").event_limits(limits))?;
/// let mailbox = domain.mailbox();
/// mailbox.post_named("hit", Message::Integer(1)).unwrap();
/// let refused = mailbox.post_named("hit", Message::Integer(2)).unwrap_err();
/// assert!(matches!(refused, PostRefused::Full { .. }));
/// assert_eq!(
///     refused.to_string(),
///     "queue full: the queue holds its limit of 1 pending events (EventLimits::pending)"
/// );
/// assert_eq!(refused.into_payload(), Message::Integer(2));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum PostRefused {
    /// The event does not fit under the queue's limits.
    Full {
        /// The bound it would pass.
        bound: QueueBound,
        /// That bound's value.
        limit: usize,
        /// What was posted.
        payload: Message,
    },
    /// The domain is stopped: nothing will ever drain its queue.
    Stopped {
        /// What was posted.
        payload: Message,
    },
    /// The name is empty or longer than [`EventLimits::name`].
    Name {
        /// The name's length in bytes.
        len: usize,
        /// The longest name allowed.
        max: usize,
        /// What was posted.
        payload: Message,
    },
}

impl PostRefused {
    /// The payload that was not queued.
    pub fn into_payload(self) -> Message {
        match self {
            PostRefused::Full { payload, .. }
            | PostRefused::Stopped { payload }
            | PostRefused::Name { payload, .. } => payload,
        }
    }
}

impl fmt::Display for PostRefused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PostRefused::Full {
                bound: QueueBound::Pending,
                limit,
                ..
            } => write!(
                f,
                "queue full: the queue holds its limit of {limit} pending events (EventLimits::pending)"
            ),
            PostRefused::Full {
                bound: QueueBound::Bytes,
                limit,
                ..
            } => write!(
                f,
                "queue full: the event does not fit in the {limit} bytes the queue may hold (EventLimits::bytes)"
            ),
            PostRefused::Stopped { .. } => f.write_str("the domain is stopped"),
            PostRefused::Name { len, max, .. } => {
                write!(f, "an event name must be 1 to {max} bytes, got {len}")
            }
        }
    }
}

impl std::error::Error for PostRefused {}

/// Whether the drain still owes a named event's copies to the domain's routes.
///
/// The engine VM's `emit` posts the route copies itself, at emit time, since it holds the
/// routes; a host's `post_named` is not an emit, so it has none. A worker VM or actor can't
/// see the routes (they are the engine thread's), so what it emits is routed by the drain that
/// takes it: copies leave when the event is delivered, and an event of an ended generation,
/// never delivered, is never routed either.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Routing {
    /// Nothing left to route.
    Settled,
    /// The drain posts a copy to every route of the name.
    AtDrain,
}

/// What an envelope carries: the two kinds never pass for each other.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum QueuedEvent {
    /// For the `event` phase handlers of `target`.
    Raw {
        target: EventTarget,
        payload: Message,
    },
    /// For every handler bound to `name`.
    Named {
        name: Arc<str>,
        payload: Message,
        routing: Routing,
    },
}

/// One queued event, stamped with the generation whose mailbox posted it.
pub(crate) struct Envelope {
    pub(crate) generation: Generation,
    pub(crate) event: QueuedEvent,
    /// Its share of the byte count, given back when it leaves the queue.
    weight: usize,
    /// When it was queued: a handler's profile event measures its queue delay from here.
    pub(crate) posted: std::time::Instant,
}

/// What [`QueueContents::admits`] says of a post.
enum Admit {
    /// The queue has stopped: the post is refused with its payload.
    Stopped,
    /// The post belongs to a generation the queue no longer takes: dropped, counted.
    Stale,
    /// The post may go in, if it fits.
    Open,
}

/// Whether the queue still takes events.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum QueueState {
    Open,
    /// The domain stopped.
    Stopped,
}

/// What the queue holds under its lock: the envelopes, their bytes, the generations it takes
/// and what it counted since the last drain.
struct QueueContents {
    envelopes: VecDeque<Envelope>,
    bytes: usize,
    /// The generation whose envelopes are live.
    generation: Generation,
    /// A generation being built beside the live one (`ScriptDomain::reload`): its envelopes
    /// queue too, and become live or are discarded when the reload ends.
    candidate: Option<Generation>,
    state: QueueState,
    /// Envelopes of ended generations thrown away since the domain last asked.
    discarded: u64,
    /// `queue full` refusals of emits made off the engine thread, for the next drain's report.
    refusals: Vec<Diagnostic>,
    /// Refusals past [`REFUSALS_KEPT`] since the last drain.
    refusals_dropped: usize,
    /// The names of recent named events, so envelopes of one name share one allocation (and
    /// the drain's per-name caches see the same pointer). At most [`NAMES_KEPT`].
    names: rustc_hash::FxHashSet<Arc<str>>,
}

impl QueueContents {
    /// The shared copy of `name`.
    fn intern(&mut self, name: &str) -> Arc<str> {
        if let Some(shared) = self.names.get(name) {
            return shared.clone();
        }
        if self.names.len() >= NAMES_KEPT {
            self.names.clear();
        }
        let shared: Arc<str> = Arc::from(name);
        self.names.insert(shared.clone());
        shared
    }

    /// Whether an envelope of `generation` may queue.
    fn takes(&self, generation: Generation) -> bool {
        generation == self.generation || Some(generation) == self.candidate
    }

    /// Whether a post of `generation` goes in; a post of an older generation is counted as
    /// discarded here.
    fn admits(&mut self, generation: Generation) -> Admit {
        if self.state == QueueState::Stopped {
            Admit::Stopped
        } else if self.takes(generation) {
            Admit::Open
        } else {
            self.discarded += 1;
            Admit::Stale
        }
    }

    /// Queues `event` at the back, its `weight` counted.
    fn enqueue(&mut self, generation: Generation, event: QueuedEvent, weight: usize) {
        self.bytes = self.bytes.saturating_add(weight);
        self.envelopes.push_back(Envelope {
            generation,
            event,
            weight,
            posted: std::time::Instant::now(),
        });
    }

    /// Drops (and counts) every envelope whose generation `which` selects, keeping the order
    /// of the rest.
    fn discard_where(&mut self, which: impl Fn(Generation) -> bool) {
        let before = self.envelopes.len();
        let mut freed = 0;
        self.envelopes.retain(|e| {
            let gone = which(e.generation);
            if gone {
                freed += e.weight;
            }
            !gone
        });
        self.bytes = self.bytes.saturating_sub(freed);
        self.discarded += (before - self.envelopes.len()) as u64;
    }
}

/// The FIFO every mailbox of a domain posts its events to.
pub(crate) struct EventQueue {
    limits: EventLimits,
    inner: Mutex<QueueContents>,
}

impl EventQueue {
    pub(crate) fn new(limits: EventLimits, generation: Generation) -> Arc<EventQueue> {
        Arc::new(EventQueue {
            limits,
            inner: Mutex::new(QueueContents {
                envelopes: VecDeque::new(),
                bytes: 0,
                generation,
                candidate: None,
                state: QueueState::Open,
                discarded: 0,
                refusals: Vec::new(),
                refusals_dropped: 0,
                names: Default::default(),
            }),
        })
    }

    pub(crate) fn limits(&self) -> EventLimits {
        self.limits
    }

    /// The lock; a panic while it was held left the queue consistent (every change is one
    /// push or pop), so a poisoned lock is taken as it is.
    fn lock(&self) -> MutexGuard<'_, QueueContents> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Refuses a name outside `1..=limits.name`.
    pub(crate) fn check_name(&self, name: &str, payload: Message) -> Result<Message, PostRefused> {
        if name.is_empty() || name.len() > self.limits.name {
            return Err(PostRefused::Name {
                len: name.len(),
                max: self.limits.name,
                payload,
            });
        }
        Ok(payload)
    }

    /// Queues a raw event: past the limits too, since the host chose to send it.
    pub(crate) fn push_raw(
        &self,
        generation: Generation,
        target: EventTarget,
        payload: Message,
    ) -> Result<(), PostRefused> {
        let weight = payload.queue_weight();
        let mut inner = self.lock();
        match inner.admits(generation) {
            Admit::Stopped => return Err(PostRefused::Stopped { payload }),
            Admit::Stale => return Ok(()),
            Admit::Open => {}
        }
        inner.enqueue(generation, QueuedEvent::Raw { target, payload }, weight);
        Ok(())
    }

    /// Queues a named event if it fits under the limits; refuses it whole otherwise.
    pub(crate) fn push_named(
        &self,
        generation: Generation,
        name: &str,
        payload: Message,
    ) -> Result<(), PostRefused> {
        self.push_routed(generation, name, payload, Routing::Settled)
    }

    /// As [`push_named`](Self::push_named), marking whether the drain routes the event.
    pub(crate) fn push_routed(
        &self,
        generation: Generation,
        name: &str,
        payload: Message,
        routing: Routing,
    ) -> Result<(), PostRefused> {
        let payload = self.check_name(name, payload)?;
        let weight = payload.queue_weight().saturating_add(name.len());
        let mut inner = self.lock();
        match inner.admits(generation) {
            Admit::Stopped => return Err(PostRefused::Stopped { payload }),
            Admit::Stale => return Ok(()),
            Admit::Open => {}
        }
        if inner.envelopes.len() >= self.limits.pending {
            return Err(PostRefused::Full {
                bound: QueueBound::Pending,
                limit: self.limits.pending,
                payload,
            });
        }
        if inner.bytes.saturating_add(weight) > self.limits.bytes {
            return Err(PostRefused::Full {
                bound: QueueBound::Bytes,
                limit: self.limits.bytes,
                payload,
            });
        }
        let name = inner.intern(name);
        let event = QueuedEvent::Named {
            name,
            payload,
            routing,
        };
        inner.enqueue(generation, event, weight);
        Ok(())
    }

    /// How many more events, and how many more bytes, fit now.
    pub(crate) fn room(&self) -> (usize, usize) {
        let inner = self.lock();
        (
            self.limits.pending.saturating_sub(inner.envelopes.len()),
            self.limits.bytes.saturating_sub(inner.bytes),
        )
    }

    /// Takes up to `max` envelopes from the front, in order.
    pub(crate) fn take(&self, max: usize) -> Vec<Envelope> {
        let mut inner = self.lock();
        let n = max.min(inner.envelopes.len());
        let batch: Vec<Envelope> = inner.envelopes.drain(..n).collect();
        let freed = batch.iter().map(|e| e.weight).sum::<usize>();
        inner.bytes = inner.bytes.saturating_sub(freed);
        batch
    }

    /// How many events wait, and their bytes.
    pub(crate) fn pending(&self) -> (usize, usize) {
        let inner = self.lock();
        (inner.envelopes.len(), inner.bytes)
    }

    /// Makes `generation` the live one, discarding (and counting) every queued envelope of
    /// another generation. Only a reload's candidate can have queued any of `generation`'s.
    pub(crate) fn advance(&self, generation: Generation) {
        let mut inner = self.lock();
        inner.discard_where(|g| g != generation);
        inner.generation = generation;
        inner.candidate = None;
    }

    /// Takes the envelopes of `candidate` too, beside the live generation's, until
    /// [`advance`](Self::advance) makes it live or [`drop_candidate`](Self::drop_candidate)
    /// discards it.
    pub(crate) fn begin_candidate(&self, candidate: Generation) {
        self.lock().candidate = Some(candidate);
    }

    /// Discards (and counts) what the candidate `candidate` queued; it takes nothing more.
    pub(crate) fn drop_candidate(&self, candidate: Generation) {
        let mut inner = self.lock();
        inner.discard_where(|g| g == candidate);
        if inner.candidate == Some(candidate) {
            inner.candidate = None;
        }
    }

    /// Stops taking events and drops what waits: nothing will drain it again.
    /// Answers how many queued envelopes it dropped undelivered.
    pub(crate) fn stop(&self) -> usize {
        let mut inner = self.lock();
        inner.state = QueueState::Stopped;
        inner.bytes = 0;
        let dropped = inner.envelopes.len();
        let envelopes = std::mem::take(&mut inner.envelopes);
        drop(inner);
        drop(envelopes); // payloads freed outside the lock
        dropped
    }

    /// Keeps a `queue full` refusal of a worker's or actor's emit for the engine thread's next
    /// drain, which reports it as it reports the engine VM's own.
    pub(crate) fn note_refusal(&self, refusal: Diagnostic) {
        let mut inner = self.lock();
        if inner.refusals.len() < REFUSALS_KEPT {
            inner.refusals.push(refusal);
        } else {
            inner.refusals_dropped += 1;
        }
    }

    /// The refusals kept since the last call, the last one saying how many more there were.
    pub(crate) fn take_refusals(&self) -> Vec<Diagnostic> {
        let mut inner = self.lock();
        let mut refusals = std::mem::take(&mut inner.refusals);
        let dropped = std::mem::take(&mut inner.refusals_dropped);
        if dropped > 0 {
            if let Some(last) = refusals.last() {
                let summary = Diagnostic {
                    message: format!(
                        "events.emit: {dropped} more emits were refused (queue full) and not kept"
                    ),
                    ..last.clone()
                };
                refusals.push(summary);
            }
        }
        refusals
    }

    /// The envelopes of ended generations discarded since the last call.
    pub(crate) fn take_discarded(&self) -> u64 {
        std::mem::take(&mut self.lock().discarded)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::principal::{Attribution, DiagnosticKind, DomainId};

    fn name_of(envelope: &Envelope) -> Arc<str> {
        match &envelope.event {
            QueuedEvent::Named { name, .. } => name.clone(),
            QueuedEvent::Raw { .. } => panic!("a raw event"),
        }
    }

    #[test]
    fn envelopes_of_one_name_share_it_and_the_shared_names_stay_bounded() {
        let queue = EventQueue::new(EventLimits::default(), Generation(1));
        queue
            .push_named(Generation(1), "tick", Message::Nil)
            .unwrap();
        queue
            .push_named(Generation(1), "tock", Message::Nil)
            .unwrap();
        queue
            .push_named(Generation(1), "tick", Message::Nil)
            .unwrap();
        let batch = queue.take(10);
        let names: Vec<Arc<str>> = batch.iter().map(name_of).collect();
        assert_eq!(
            names.iter().map(|n| &**n).collect::<Vec<_>>(),
            ["tick", "tock", "tick"]
        );
        assert!(Arc::ptr_eq(&names[0], &names[2]));
        assert!(!Arc::ptr_eq(&names[0], &names[1]));
        // The weight still counts the name's bytes, as if each envelope held its own copy.
        queue
            .push_named(Generation(1), "tick", Message::Nil)
            .unwrap();
        assert_eq!(queue.pending(), (1, Message::Nil.queue_weight() + 4));
        queue.take(10);
        for i in 0..NAMES_KEPT * 2 + 3 {
            queue
                .push_named(Generation(1), &format!("n{i}"), Message::Nil)
                .unwrap();
            assert!(queue.lock().names.len() <= NAMES_KEPT);
        }
        let batch = queue.take(NAMES_KEPT * 3);
        assert_eq!(batch.len(), NAMES_KEPT * 2 + 3);
        assert_eq!(
            &*name_of(&batch[NAMES_KEPT + 1]),
            format!("n{}", NAMES_KEPT + 1)
        );
    }

    #[test]
    fn named_refusals_change_nothing_and_raw_posts_pass_the_limits() {
        let limits = EventLimits {
            pending: 2,
            bytes: 1_000,
            per_drain: 10,
            name: 4,
        };
        let queue = EventQueue::new(limits, Generation(1));
        queue.push_named(Generation(1), "a", Message::Nil).unwrap();
        queue.push_named(Generation(1), "bb", Message::Nil).unwrap();
        let before = queue.pending();
        assert_eq!(before, (2, 16 + 1 + 16 + 2));
        let err = queue
            .push_named(Generation(1), "c", Message::Integer(3))
            .unwrap_err();
        assert_eq!(err.clone().into_payload(), Message::Integer(3));
        assert!(matches!(
            err,
            PostRefused::Full {
                bound: QueueBound::Pending,
                limit: 2,
                ..
            }
        ));
        assert_eq!(queue.pending(), before);
        queue
            .push_raw(Generation(1), EventTarget::All, Message::Nil)
            .unwrap();
        assert_eq!(queue.pending().0, 3);
        let err = queue
            .push_named(Generation(1), "toolong", Message::Nil)
            .unwrap_err();
        assert_eq!(err.to_string(), "an event name must be 1 to 4 bytes, got 7");
        let batch = queue.take(2);
        assert_eq!(batch.len(), 2);
        assert_eq!(queue.pending(), (1, 16));
    }

    #[test]
    fn refusals_are_kept_up_to_their_bound_then_counted() {
        let queue = EventQueue::new(EventLimits::default(), Generation(1));
        let refusal = |n: usize| {
            let attribution = Attribution {
                domain_name: "game".to_owned(),
                domain: DomainId(1),
                generation: Generation(1),
                context: None,
                actor: None,
            };
            Diagnostic::new(
                DiagnosticKind::QueueFull,
                attribution,
                format!("refused {n}"),
            )
        };
        for n in 0..REFUSALS_KEPT + 3 {
            queue.note_refusal(refusal(n));
        }
        let kept = queue.take_refusals();
        assert_eq!(kept.len(), REFUSALS_KEPT + 1);
        assert_eq!(kept[0].message, "refused 0");
        assert_eq!(
            kept[REFUSALS_KEPT - 1].message,
            format!("refused {}", REFUSALS_KEPT - 1)
        );
        assert_eq!(
            kept[REFUSALS_KEPT].message,
            "events.emit: 3 more emits were refused (queue full) and not kept"
        );
        assert!(queue.take_refusals().is_empty());
    }

    #[test]
    fn an_ended_generation_is_discarded_and_counted() {
        let queue = EventQueue::new(EventLimits::default(), Generation(1));
        queue.push_named(Generation(1), "a", Message::Nil).unwrap();
        queue.advance(Generation(2));
        queue.push_named(Generation(1), "b", Message::Nil).unwrap();
        assert_eq!(queue.pending(), (0, 0));
        assert_eq!(queue.take_discarded(), 2);
        assert_eq!(queue.take_discarded(), 0);
        // A candidate's envelopes queue beside the live ones; advancing to it keeps them.
        queue.begin_candidate(Generation(3));
        queue.push_named(Generation(2), "c", Message::Nil).unwrap();
        queue.push_named(Generation(3), "d", Message::Nil).unwrap();
        queue.push_named(Generation(4), "e", Message::Nil).unwrap();
        assert_eq!(queue.pending().0, 2);
        assert_eq!(queue.take_discarded(), 1);
        queue.advance(Generation(3));
        assert_eq!(queue.pending(), (1, 16 + 1));
        assert_eq!(queue.take_discarded(), 1);
        // A dropped candidate's envelopes go, the live ones stay.
        queue.begin_candidate(Generation(4));
        queue.push_named(Generation(4), "f", Message::Nil).unwrap();
        queue.drop_candidate(Generation(4));
        queue.push_named(Generation(4), "g", Message::Nil).unwrap();
        assert_eq!(queue.pending(), (1, 16 + 1));
        assert_eq!(queue.take_discarded(), 2);
        assert_eq!(queue.stop(), 1, "the one envelope still queued");
        let err = queue
            .push_raw(Generation(2), EventTarget::All, Message::Nil)
            .unwrap_err();
        assert_eq!(err.to_string(), "the domain is stopped");
    }
}
