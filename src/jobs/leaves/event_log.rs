//! The engine-event log of one generation: named values the host raises on a domain
//! (`ScriptDomain::raise_engine_event`), held in a bounded ring with a sequence number each, for
//! the `engine.on` watchers of every VM of the generation (`engine_events.rs`) to read.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::value::Message;

/// How many events the log holds: a VM that has not reached a start point for more events than
/// this misses the oldest ones.
pub(crate) const EVENT_LOG_BOUND: usize = 4_096;

/// The longest event name, in bytes.
pub(crate) const MAX_EVENT_NAME: usize = 256;

/// One raised event.
pub(crate) struct EngineEvent {
    pub(crate) seq: u64,
    pub(crate) name: Arc<str>,
    pub(crate) payload: Message,
}

/// The principal's events: `Send + Sync`, shared by the engine thread (which raises and
/// delivers) and every worker VM of the principal (which deliver).
#[derive(Default)]
pub(crate) struct EventLog {
    /// The sequence number the next event gets; read without the lock on every item start.
    next: AtomicU64,
    ring: Mutex<VecDeque<Arc<EngineEvent>>>,
}

impl EventLog {
    /// Appends an event, dropping the oldest when the ring is full.
    pub(crate) fn raise(&self, name: &str, payload: Message) {
        let mut ring = self.ring.lock().unwrap_or_else(|e| e.into_inner());
        let seq = self.next.load(Ordering::Relaxed);
        ring.push_back(Arc::new(EngineEvent {
            seq,
            name: Arc::from(name),
            payload,
        }));
        if ring.len() > EVENT_LOG_BOUND {
            ring.pop_front();
        }
        // Published under the lock, so a reader that sees `next` finds the event in the ring.
        self.next.store(seq + 1, Ordering::Release);
    }

    /// The sequence number the next event will get.
    pub(crate) fn next_seq(&self) -> u64 {
        self.next.load(Ordering::Acquire)
    }

    /// The events from sequence number `from` on that the ring still holds, oldest first.
    pub(crate) fn since(&self, from: u64) -> Vec<Arc<EngineEvent>> {
        let ring = self.ring.lock().unwrap_or_else(|e| e.into_inner());
        let Some(first) = ring.front().map(|e| e.seq) else {
            return Vec::new();
        };
        let skip = usize::try_from(from.saturating_sub(first)).unwrap_or(usize::MAX);
        ring.iter().skip(skip).cloned().collect()
    }
}

/// Checks an event name: 1 to 256 bytes. `what` names the call in the refusal.
pub(crate) fn check_event_name(name: &[u8], what: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > MAX_EVENT_NAME {
        return Err(format!(
            "{what}: event name must be 1 to {MAX_EVENT_NAME} bytes, got {}",
            name.len()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ring_keeps_the_last_bound_events_in_order() {
        let log = EventLog::default();
        for i in 0..(EVENT_LOG_BOUND as i64 + 3) {
            log.raise("tick", Message::Integer(i));
        }
        assert_eq!(log.next_seq(), EVENT_LOG_BOUND as u64 + 3);
        let held = log.since(0);
        assert_eq!(held.len(), EVENT_LOG_BOUND);
        assert_eq!(held[0].seq, 3);
        assert_eq!(held[0].payload, Message::Integer(3));
        let tail = log.since(EVENT_LOG_BOUND as u64 + 1);
        let seqs: Vec<u64> = tail.iter().map(|e| e.seq).collect();
        assert_eq!(
            seqs,
            [EVENT_LOG_BOUND as u64 + 1, EVENT_LOG_BOUND as u64 + 2]
        );
        assert!(log.since(log.next_seq()).is_empty());
    }

    #[test]
    fn names_are_1_to_256_bytes() {
        assert!(check_event_name(b"a", "x").is_ok());
        assert!(check_event_name(&[b'a'; 256], "x").is_ok());
        assert_eq!(
            check_event_name(b"", "x").unwrap_err(),
            "x: event name must be 1 to 256 bytes, got 0"
        );
        assert_eq!(
            check_event_name(&[b'a'; 257], "x").unwrap_err(),
            "x: event name must be 1 to 256 bytes, got 257"
        );
    }
}
