//! [`ChromeTrace`]: a [`ProfileSink`] that keeps every event and writes them as a Chrome
//! trace-event JSON file, the format Perfetto (ui.perfetto.dev) and `chrome://tracing` open.
//!
//! Each event becomes one complete (`"ph":"X"`) slice on the track of the thread that ran it
//! (a worker's stop and a capability denial, which are moments, become instant markers,
//! `"ph":"i"`), and each thread gets a `thread_name` metadata record, so the timeline shows
//! every pool item on the worker that ran it beside the engine thread's context calls, and each
//! `@skein/worker` worker on its own track (`skein-actor <name>`). This module owns the
//! buffer and the file format; it measures nothing itself.
//!
//! The buffer is a ring bounded by the weight of what it holds ([`ChromeTrace::MAX_BYTES`] by
//! default): a run of millions of jobs keeps its most recent events, drops the oldest, and
//! writes how many it dropped into the trace, so a trace never grows the host without bound.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde_json::{json, Value};

use crate::principal::profile::{ProfileEvent, ProfileKind, ProfileSink};

/// A profile sink that buffers events and writes them as Chrome trace-event JSON.
///
/// ```
/// use std::sync::Arc;
/// use skein::profile::ChromeTrace;
/// use skein::{DomainSpec, Pool, ScriptDomain};
///
/// let trace = Arc::new(ChromeTrace::new());
/// let pool = Pool::new(2);
/// let domain = ScriptDomain::new(&pool, DomainSpec::new("main").profile(trace.clone()))?;
/// drop(domain);
/// let json: serde_json::Value = serde_json::from_str(&trace.to_json())?;
/// let names: Vec<&str> = json["traceEvents"].as_array().unwrap().iter()
///     .filter(|e| e["ph"] == "X")
///     .map(|e| e["cat"].as_str().unwrap())
///     .collect();
/// assert_eq!(names, ["domain.created", "domain.stopped"]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// A trace made with [`to_file`](Self::to_file) writes itself when it is dropped, so a host
/// that ends early (a script error, a panic that unwinds) still leaves its timeline behind.
///
/// It keeps at most [`MAX_BYTES`](Self::MAX_BYTES) of events (or what
/// [`max_bytes`](Self::max_bytes) sets), weighed by their fixed part and their text. Past that
/// the oldest go: [`dropped`](Self::dropped) counts them, and the written trace says how many
/// in its `otherData` and in a marker at the start of what it kept.
#[derive(Debug)]
pub struct ChromeTrace {
    events: Mutex<Ring>,
    /// Where the trace writes itself on drop, if anywhere.
    on_drop: Option<PathBuf>,
}

/// The kept events, oldest first, with their weight and what was dropped to keep within it.
#[derive(Debug)]
struct Ring {
    events: VecDeque<ProfileEvent>,
    bytes: usize,
    max_bytes: usize,
    dropped: u64,
}

impl Ring {
    fn new(max_bytes: usize) -> Ring {
        Ring {
            events: VecDeque::new(),
            bytes: 0,
            max_bytes,
            dropped: 0,
        }
    }

    /// Keeps `e`, dropping the oldest events until it fits; an event heavier than the whole
    /// bound is dropped itself.
    fn push(&mut self, e: &ProfileEvent) {
        let weight = weight(e);
        if weight > self.max_bytes {
            self.dropped += 1;
            return;
        }
        while self.bytes + weight > self.max_bytes {
            match self.events.pop_front() {
                Some(old) => {
                    self.bytes -= self::weight(&old);
                    self.dropped += 1;
                }
                None => break,
            }
        }
        self.bytes += weight;
        self.events.push_back(e.clone());
    }
}

/// What an event weighs in the ring: its fixed part and the text it owns.
fn weight(e: &ProfileEvent) -> usize {
    let a = &e.attribution;
    std::mem::size_of::<ProfileEvent>()
        + e.name.len()
        + a.domain_name.len()
        + a.context.as_ref().map_or(0, String::len)
        + a.actor.as_ref().map_or(0, String::len)
}

impl Default for ChromeTrace {
    fn default() -> ChromeTrace {
        ChromeTrace {
            events: Mutex::new(Ring::new(Self::MAX_BYTES)),
            on_drop: None,
        }
    }
}

impl ChromeTrace {
    /// The most a trace keeps by default, by the weight of its events: 64 MiB (some 400,000
    /// pool items' events). Past it the oldest events are dropped and counted.
    pub const MAX_BYTES: usize = 64 << 20;

    /// An empty trace that writes only when asked ([`write_to`](Self::write_to)).
    pub fn new() -> ChromeTrace {
        ChromeTrace::default()
    }

    /// An empty trace that writes itself to `path` when dropped (a failure to write is printed
    /// on stderr then, as a drop has no one to answer).
    pub fn to_file(path: impl Into<PathBuf>) -> ChromeTrace {
        ChromeTrace {
            events: Mutex::new(Ring::new(Self::MAX_BYTES)),
            on_drop: Some(path.into()),
        }
    }

    /// Keeps at most `bytes` of events (the fixed part of each and its text) instead of
    /// [`MAX_BYTES`](Self::MAX_BYTES), dropping the oldest past it.
    ///
    /// ```
    /// use skein::profile::ChromeTrace;
    /// let trace = ChromeTrace::new().max_bytes(1 << 20);
    /// assert_eq!(trace.dropped(), 0);
    /// ```
    pub fn max_bytes(self, bytes: usize) -> ChromeTrace {
        self.lock().max_bytes = bytes;
        self
    }

    /// How many events the trace holds.
    pub fn len(&self) -> usize {
        self.lock().events.len()
    }

    /// How many events were dropped, oldest first, to keep within the bound.
    pub fn dropped(&self) -> u64 {
        self.lock().dropped
    }

    /// Whether the trace holds no event.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The trace as Chrome trace-event JSON: `{"traceEvents":[...]}`, times in microseconds.
    pub fn to_json(&self) -> String {
        let ring = self.lock();
        let events = &ring.events;
        let mut out = Vec::with_capacity(events.len() + 9);
        if ring.dropped > 0 {
            // A global marker where the kept timeline begins, so the viewer shows the gap.
            out.push(json!({
                "name": format!(
                    "{} earlier events dropped: the trace keeps {} bytes of events",
                    ring.dropped, ring.max_bytes
                ),
                "cat": "trace.dropped",
                "ph": "i",
                "s": "g",
                "ts": events.front().map_or(0, |e| e.start),
                "pid": 1,
                "tid": 0,
                "args": { "dropped": ring.dropped },
            }));
        }
        let mut named = std::collections::BTreeMap::new();
        for e in events.iter() {
            named
                .entry(e.thread.id)
                .or_insert_with(|| e.thread.name.clone());
            out.push(slice(e));
        }
        for (tid, name) in named {
            let name = name.map_or_else(|| format!("thread {tid}"), |n| n.to_string());
            out.push(json!({
                "name": "thread_name", "ph": "M", "pid": 1, "tid": tid,
                "args": { "name": name },
            }));
        }
        json!({
            "traceEvents": out,
            "displayTimeUnit": "ms",
            "otherData": { "dropped_events": ring.dropped, "max_bytes": ring.max_bytes },
        })
        .to_string()
    }

    /// Writes the trace to `path` now (it keeps its events).
    ///
    /// # Errors
    /// The I/O error when the file can't be written.
    pub fn write_to(&self, path: impl AsRef<Path>) -> std::io::Result<()> {
        std::fs::write(path, self.to_json())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Ring> {
        // A sink that panicked mid-push left a whole ring behind: keep using it.
        self.events.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl ProfileSink for ChromeTrace {
    fn event(&self, e: &ProfileEvent) {
        self.lock().push(e);
    }
}

impl Drop for ChromeTrace {
    fn drop(&mut self) {
        if let Some(path) = &self.on_drop {
            if let Err(e) = self.write_to(path) {
                eprintln!("skein: could not write the trace {}: {e}", path.display());
            }
        }
    }
}

/// The category a trace viewer can filter on.
fn category(kind: ProfileKind) -> &'static str {
    match kind {
        ProfileKind::DomainCreated => "domain.created",
        ProfileKind::DomainStarted => "domain.started",
        ProfileKind::DomainStopped => "domain.stopped",
        ProfileKind::ContextCall => "context.call",
        ProfileKind::PoolItem => "pool.item",
        ProfileKind::StaleEvent => "stale.event",
        ProfileKind::ActorSpawned => "worker.spawned",
        ProfileKind::ActorCall => "worker.call",
        ProfileKind::ActorStopped => "worker.stopped",
        ProfileKind::GenerationEnded => "generation.ended",
        ProfileKind::Denial => "capability.denied",
        ProfileKind::EngineRun => "engine.run",
    }
}

/// Whether a kind is a moment rather than a span: shown as an instant marker on its track.
fn is_instant(kind: ProfileKind) -> bool {
    matches!(kind, ProfileKind::ActorStopped | ProfileKind::Denial)
}

fn slice(e: &ProfileEvent) -> Value {
    let mut args = json!({
        "domain": e.attribution.domain.get(),
        "generation": e.attribution.generation.get(),
    });
    if let Some(context) = &e.attribution.context {
        args["context"] = json!(context);
    }
    if let Some(actor) = &e.attribution.actor {
        args["worker"] = json!(actor);
    }
    if let Some(delay) = e.queue_delay {
        args["queue_delay_us"] = json!(delay.as_secs_f64() * 1e6);
    }
    if is_instant(e.kind) {
        // Thread-scoped: the marker sits on the track of the thread that saw it.
        return json!({
            "name": e.name,
            "cat": category(e.kind),
            "ph": "i",
            "s": "t",
            "ts": e.start,
            "pid": 1,
            "tid": e.thread.id,
            "args": args,
        });
    }
    json!({
        "name": e.name,
        "cat": category(e.kind),
        "ph": "X",
        "ts": e.start,
        // Fractional microseconds, so a short item is not shown as taking no time at all.
        "dur": e.duration.as_secs_f64() * 1e6,
        "pid": 1,
        "tid": e.thread.id,
        "args": args,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::principal::profile::this_thread;
    use crate::principal::Attribution;
    use crate::principal::{DomainId, Generation};
    use std::time::Duration;

    fn event(kind: ProfileKind, name: &str) -> ProfileEvent {
        ProfileEvent {
            kind,
            attribution: Attribution {
                domain_name: "game".into(),
                domain: DomainId(3),
                generation: Generation(2),
                context: Some("ui \"main\"".into()),
                actor: None,
            },
            name: name.into(),
            start: 1500,
            duration: Duration::from_micros(250),
            thread: this_thread(),
            queue_delay: Some(Duration::from_micros(40)),
        }
    }

    #[test]
    fn writes_one_slice_per_event_and_names_each_thread_once() {
        let trace = ChromeTrace::new();
        trace.event(&event(ProfileKind::PoolItem, "./a:run"));
        trace.event(&event(ProfileKind::ContextCall, "ui.update"));
        let json: Value = serde_json::from_str(&trace.to_json()).unwrap();
        let events = json["traceEvents"].as_array().unwrap();
        assert_eq!(events.len(), 3);
        let first = &events[0];
        assert_eq!(first["name"], "./a:run");
        assert_eq!(first["cat"], "pool.item");
        assert_eq!(first["ph"], "X");
        assert_eq!(first["ts"], 1500);
        assert_eq!(first["dur"], 250.0);
        assert_eq!(first["tid"], this_thread().id);
        assert_eq!(first["args"]["context"], "ui \"main\"");
        assert_eq!(first["args"]["domain"], 3);
        assert_eq!(first["args"]["generation"], 2);
        assert_eq!(first["args"]["queue_delay_us"], 40.0);
        assert_eq!(events[2]["ph"], "M");
        assert_eq!(events[2]["name"], "thread_name");
        assert_eq!(events[2]["tid"], this_thread().id);
    }

    #[test]
    fn actor_events_carry_the_actor_and_moments_are_instants() {
        let trace = ChromeTrace::new();
        let mut call = event(ProfileKind::ActorCall, "decoder");
        call.attribution.actor = Some("decoder".into());
        trace.event(&call);
        trace.event(&event(ProfileKind::Denial, "input.observe"));
        let json: Value = serde_json::from_str(&trace.to_json()).unwrap();
        let events = json["traceEvents"].as_array().unwrap();
        assert_eq!(events[0]["cat"], "worker.call");
        assert_eq!(events[0]["ph"], "X");
        assert_eq!(events[0]["args"]["worker"], "decoder");
        assert_eq!(events[1]["cat"], "capability.denied");
        assert_eq!(events[1]["name"], "input.observe");
        assert_eq!(
            (&events[1]["ph"], &events[1]["s"]),
            (&json!("i"), &json!("t"))
        );
        assert!(events[1].get("dur").is_none());
    }

    #[test]
    fn keeps_the_newest_events_within_its_bound_and_counts_the_dropped() {
        let one = weight(&event(ProfileKind::PoolItem, "job 0"));
        // At the bound: three events fit exactly, and none is dropped.
        let trace = ChromeTrace::new().max_bytes(3 * one);
        for i in 0..3 {
            trace.event(&event(ProfileKind::PoolItem, &format!("job {i}")));
        }
        assert_eq!((trace.len(), trace.dropped()), (3, 0));
        let json: Value = serde_json::from_str(&trace.to_json()).unwrap();
        assert_eq!(json["otherData"]["dropped_events"], 0);
        assert_eq!(json["traceEvents"][0]["name"], "job 0");
        // One past it: the oldest goes, counted, and the trace says so.
        trace.event(&event(ProfileKind::PoolItem, "job 3"));
        assert_eq!((trace.len(), trace.dropped()), (3, 1));
        let json: Value = serde_json::from_str(&trace.to_json()).unwrap();
        assert_eq!(json["otherData"]["dropped_events"], 1);
        assert_eq!(json["otherData"]["max_bytes"], 3 * one);
        let events = json["traceEvents"].as_array().unwrap();
        assert_eq!(events[0]["cat"], "trace.dropped");
        assert_eq!(
            events[0]["name"],
            format!(
                "1 earlier events dropped: the trace keeps {} bytes of events",
                3 * one
            )
        );
        let names: Vec<&str> = events[1..4]
            .iter()
            .map(|e| e["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["job 1", "job 2", "job 3"]);
        // An event heavier than the whole bound is dropped itself, and the rest stay.
        trace.event(&event(ProfileKind::PoolItem, &"x".repeat(3 * one)));
        assert_eq!((trace.len(), trace.dropped()), (3, 2));
    }

    #[test]
    fn many_events_stay_within_the_bound() {
        let trace = ChromeTrace::new().max_bytes(1 << 20);
        for i in 0..200_000u32 {
            trace.event(&event(ProfileKind::PoolItem, &format!("job {i}")));
        }
        let kept = trace.len();
        assert!(kept * weight(&event(ProfileKind::PoolItem, "job 199999")) <= 1 << 20);
        assert_eq!(kept as u64 + trace.dropped(), 200_000);
        let json: Value = serde_json::from_str(&trace.to_json()).unwrap();
        let last = json["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .rev()
            .find(|e| e["ph"] == "X");
        assert_eq!(last.unwrap()["name"], "job 199999");
    }

    #[test]
    fn writes_itself_on_drop() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.json");
        let trace = ChromeTrace::to_file(&path);
        trace.event(&event(ProfileKind::StaleEvent, "main"));
        drop(trace);
        let json: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(json["traceEvents"][0]["cat"], "stale.event");
    }
}
