//! Where a domain's costs go: the [`ProfileSink`] a host sets with
//! [`DomainSpec::profile`](crate::DomainSpec::profile), and the [`ProfileEvent`]s it receives.
//!
//! Events come from the engine thread (domain lifecycle, context calls, stale events, the end of
//! a generation), from pool threads (pool items), from `@skein/worker` threads (their start,
//! handler calls and end) and from whichever thread was denied a capability, so a sink is
//! `Send + Sync` and is called on whichever thread the cost was paid. Without a sink nothing is measured: the worker's only cost is one branch on an
//! `Option` per item. This module owns the event shape, the process epoch its times count from,
//! and the thread labels; it never buffers or writes anything (that is a sink's business, such
//! as [`ChromeTrace`](crate::profile::ChromeTrace)).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use super::diagnostic::Attribution;

/// Receives a domain's [`ProfileEvent`]s, on the thread that paid each cost.
///
/// ```
/// use std::sync::{Arc, Mutex};
/// use skein::profile::{ProfileEvent, ProfileKind, ProfileSink};
/// use skein::{DomainSpec, Pool, ScriptDomain};
///
/// #[derive(Default)]
/// struct Kinds(Mutex<Vec<ProfileKind>>);
/// impl ProfileSink for Kinds {
///     fn event(&self, e: &ProfileEvent) {
///         self.0.lock().unwrap().push(e.kind);
///     }
/// }
///
/// let kinds = Arc::new(Kinds::default());
/// let pool = Pool::new(1);
/// let domain = ScriptDomain::new(&pool, DomainSpec::new("main").profile(kinds.clone()))?;
/// drop(domain);
/// assert_eq!(*kinds.0.lock().unwrap(), [ProfileKind::DomainCreated, ProfileKind::DomainStopped]);
/// # Ok::<(), skein::Error>(())
/// ```
pub trait ProfileSink: Send + Sync {
    /// Takes one event. Called on engine and worker threads alike, so it should be quick and
    /// must not call back into the domain.
    fn event(&self, e: &ProfileEvent);
}

/// What a [`ProfileEvent`] measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ProfileKind {
    /// [`ScriptDomain::new`](crate::ScriptDomain::new) built the domain (its engine VM and
    /// modules): the duration is the construction.
    DomainCreated,
    /// The domain's first phase, advance or frame moved it to running (an instant).
    DomainStarted,
    /// The domain stopped: the duration is its `shutdown` phase and teardown.
    DomainStopped,
    /// One handler call of a context (a phase of `run_phase`/`advance`, a raw event, or a
    /// named event): the duration is the call up to its return or first yield; the queue delay
    /// runs from the phase's start, or from the event's post.
    ContextCall,
    /// One pool item (a dispatch, a `parallelFor` chunk, a kernel or registered job's call) on
    /// a worker thread: from its start there to its end, waits inside it included. The queue
    /// delay is the time from its dispatch to that start.
    PoolItem,
    /// An event of an ended generation reached the domain and was discarded (an instant).
    StaleEvent,
    /// An actor (`@skein/worker`) started, on its own thread: the duration is building its VM
    /// and loading its module, whether or not that succeeded. Named and attributed to the
    /// actor.
    ActorSpawned,
    /// One call of an actor's handler on the actor's thread, up to its return (waits inside
    /// included). The queue delay is the time from the `Worker:send` of its message to the
    /// call's start: a message is measured there and has no event of its own.
    ActorCall,
    /// An actor's thread ended (an instant): its queue closed, it failed, or its domain tore it
    /// down.
    ActorStopped,
    /// A restart ended a generation: the duration is the ending (closing and joining its
    /// actors, refusing its queued items, releasing what it owned), attributed to the
    /// generation that ended. A stop's ending is inside [`DomainStopped`](Self::DomainStopped).
    GenerationEnded,
    /// A capability check was denied (an instant), on the thread that asked; the name is the
    /// capability.
    Denial,
    /// One run of the engine VM's Luau on the engine thread, from a resume to the task's next
    /// yield or its end: a main script's, a handler's, a task's or a timer's. Named for what it
    /// runs for (`script main.luau`) and attributed to the authority it ran under. A handler's
    /// first run is inside its [`ContextCall`](Self::ContextCall); a run that resumes another
    /// task holds that task's run.
    EngineRun,
}

/// One measured cost of a domain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProfileEvent {
    /// What was measured.
    pub kind: ProfileKind,
    /// Who paid for it.
    pub attribution: Attribution,
    /// What ran: `ui.update`, `./noise:fill` (a job's `module:entry`, or its `opts.name`),
    /// the domain's name for lifecycle events.
    pub name: String,
    /// When it began, in microseconds since the process epoch (the first time Skein read the
    /// clock for profiling): comparable across threads and domains.
    pub start: u64,
    /// How long it took; zero for instants.
    pub duration: Duration,
    /// The thread it ran on.
    pub thread: ProfileThread,
    /// How long it waited before it started: a pool item from its dispatch; a context call of a
    /// phase from the phase's start (the handlers before it), of a raw or named event from the
    /// event's post; a worker call from its message's send.
    pub queue_delay: Option<Duration>,
}

/// The OS thread an event ran on: a small process-unique number and the thread's name
/// (`skein-worker-0` for pool threads).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ProfileThread {
    /// Unique within the process, given to threads in the order they first profile, from 1.
    pub id: u64,
    /// The thread's name, if it has one.
    pub name: Option<Arc<str>>,
}

static EPOCH: OnceLock<Instant> = OnceLock::new();
static NEXT_THREAD: AtomicU64 = AtomicU64::new(1);

thread_local! {
    static THREAD: ProfileThread = ProfileThread {
        id: NEXT_THREAD.fetch_add(1, Ordering::Relaxed),
        name: std::thread::current().name().map(Arc::from),
    };
}

/// Microseconds from the process epoch to `at` (zero for instants before it).
pub(crate) fn micros(at: Instant) -> u64 {
    let epoch = *EPOCH.get_or_init(Instant::now);
    u64::try_from(at.saturating_duration_since(epoch).as_micros()).unwrap_or(u64::MAX)
}

/// The calling thread's label.
pub(crate) fn this_thread() -> ProfileThread {
    THREAD.with(ProfileThread::clone)
}

/// A domain's sink, if it has one: what engine and worker code hold and test.
pub(crate) type Profile = Option<Arc<dyn ProfileSink>>;

/// A [`Profile`] that a `#[derive(Debug, Clone)]` spec can hold.
#[derive(Clone, Default)]
pub(crate) struct ProfileSlot(pub(crate) Profile);

impl std::fmt::Debug for ProfileSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Some(<ProfileSink>)"
        } else {
            "None"
        })
    }
}

/// Sends one event to `sink`, measured on this thread from `started` to now.
pub(crate) fn emit(
    sink: &dyn ProfileSink,
    kind: ProfileKind,
    attribution: Attribution,
    name: String,
    started: Instant,
    queue_delay: Option<Duration>,
) {
    let duration = started.elapsed();
    sink.event(&ProfileEvent {
        kind,
        attribution,
        name,
        start: micros(started),
        duration,
        thread: this_thread(),
        queue_delay,
    });
}

/// Sends one instant (an event with no duration) to `sink`, on this thread.
pub(crate) fn instant(
    sink: &dyn ProfileSink,
    kind: ProfileKind,
    attribution: Attribution,
    name: String,
) {
    sink.event(&ProfileEvent {
        kind,
        attribution,
        name,
        start: micros(Instant::now()),
        duration: Duration::ZERO,
        thread: this_thread(),
        queue_delay: None,
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_get_distinct_ids_and_keep_their_names() {
        let here = this_thread();
        assert_eq!(here, this_thread());
        let there = std::thread::Builder::new()
            .name("probe".into())
            .spawn(this_thread)
            .unwrap()
            .join()
            .unwrap();
        assert_ne!(here.id, there.id);
        assert_eq!(there.name.as_deref(), Some("probe"));
    }

    #[test]
    fn micros_grow_with_the_clock() {
        micros(Instant::now()); // the epoch is set before `a`
        let a = Instant::now();
        let first = micros(a);
        let second = micros(a + Duration::from_millis(3));
        assert_eq!(second - first, 3000);
    }
}
