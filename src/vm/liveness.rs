//! Whether any VM of one principal can still make progress: what a stall check reads.
//!
//! Every piece of Luau runs as a task the scheduler resumes, and a task parked on a promise, a
//! queue or a wait runs again only when some other code runs (a resume that pushes, settles or
//! posts) or when a timer comes due. So, in a world where nothing outside the principal's own
//! code can wake it (no host thread posting, settling or pushing), the principal can never
//! progress again once no resume is under way in any of its VMs, none has happened for a while,
//! and no timer of any of its VMs comes due within [`STALL_HORIZON`].
//!
//! The counters here are that evidence. Each VM's scheduler holds the principal's `Liveness`
//! (only when the host asked for the check, so other hosts pay nothing) and reports to it:
//! a resume entering and leaving, a task made ready, and each timer it parks. Timers are
//! recorded as the latest due time seen (`fetch_max`), never withdrawn: a cancelled timer only
//! delays the verdict until its time has passed, which keeps the check free of false stalls.
//!
//! # Memory ordering
//!
//! The counters are read by the engine thread at two moments a quiet interval apart; each is
//! a single atomic and the verdict needs no order between them beyond what `SeqCst` gives
//! (a resume's `running` increment is seen before its `activity` bump, or the verdict sees the
//! activity change). The cost is two atomic adds per resume, only in principals that asked.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// The longest wait a stall check counts as ever ending: a timer due later than this (a
/// `task.delay(math.huge)`, a `task.wait(1e9)`) is counted as never coming due.
pub(crate) const STALL_HORIZON: Duration = Duration::from_secs(24 * 60 * 60);

/// How long every VM of the principal must have stayed still before a stall is declared: it
/// covers the hand-offs between threads (an item queued and not yet taken, a parcel posted and
/// not yet received), each of which ends in a resume well within it.
pub(crate) const STALL_QUIET: Duration = Duration::from_millis(500);

/// How long a frame wait counts one frame as: twice the 16 ms a `run_until_idle` round waits
/// at most while work is in flight, so a frame wait is never taken for a stall while frames
/// still pass.
const FRAME_ALLOWANCE: Duration = Duration::from_millis(32);

/// The evidence of progress of one principal's VMs (see the module docs).
#[derive(Debug)]
pub(crate) struct Liveness {
    /// What `timers_until` counts from.
    epoch: Instant,
    /// Resumes under way now, in any VM of the principal.
    running: AtomicUsize,
    /// Bumped by every resume's start and end and every task made ready.
    activity: AtomicU64,
    /// Milliseconds after `epoch` (rounded up) of the latest timer due within the horizon.
    timers_until: AtomicU64,
}

impl Default for Liveness {
    fn default() -> Self {
        Liveness {
            epoch: Instant::now(),
            running: AtomicUsize::new(0),
            activity: AtomicU64::new(0),
            timers_until: AtomicU64::new(0),
        }
    }
}

/// One look at a principal's liveness; two of them a quiet interval apart decide a stall.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Still {
    activity: u64,
}

impl Liveness {
    /// A resume starts.
    pub(crate) fn enter(&self) {
        self.running.fetch_add(1, Ordering::SeqCst);
        self.activity.fetch_add(1, Ordering::SeqCst);
    }

    /// A resume ended (returned, yielded, raised or panicked).
    pub(crate) fn leave(&self) {
        self.activity.fetch_add(1, Ordering::SeqCst);
        self.running.fetch_sub(1, Ordering::SeqCst);
    }

    /// A task was made ready (a promise settled, a parcel arrived): its resume follows.
    pub(crate) fn touch(&self) {
        self.activity.fetch_add(1, Ordering::SeqCst);
    }

    /// A task parked until `wake_at`; a time past the horizon is never.
    pub(crate) fn timer_at(&self, wake_at: Instant) {
        let now = Instant::now();
        if wake_at.saturating_duration_since(now) > STALL_HORIZON {
            return;
        }
        let ms = wake_at.saturating_duration_since(self.epoch).as_millis() + 1;
        let ms = u64::try_from(ms).unwrap_or(u64::MAX);
        self.timers_until.fetch_max(ms, Ordering::SeqCst);
    }

    /// A task parked for `frames` frames: counted as a timer [`FRAME_ALLOWANCE`] per frame away.
    pub(crate) fn frames_at(&self, frames: u64) {
        let per_frame = u32::try_from(frames).unwrap_or(u32::MAX);
        let away = FRAME_ALLOWANCE.saturating_mul(per_frame);
        self.timer_at(Instant::now() + away.min(STALL_HORIZON + FRAME_ALLOWANCE));
    }

    /// `Some` when nothing runs now and no timer within the horizon is still to come; two equal
    /// answers a quiet interval apart mean no resume happened in between.
    pub(crate) fn still(&self, now: Instant) -> Option<Still> {
        if self.running.load(Ordering::SeqCst) != 0 {
            return None;
        }
        let until = self.epoch + Duration::from_millis(self.timers_until.load(Ordering::SeqCst));
        if until > now {
            return None;
        }
        Some(Still {
            activity: self.activity.load(Ordering::SeqCst),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_resume_or_a_near_timer_breaks_stillness_and_a_far_timer_does_not() {
        let live = Liveness::default();
        let now = Instant::now();
        let first = live.still(now).expect("a fresh principal is still");
        assert_eq!(live.still(now), Some(first));
        live.enter();
        assert_eq!(live.still(now), None, "a resume under way");
        live.leave();
        assert_ne!(live.still(Instant::now()), Some(first), "a resume happened");
        let second = live.still(Instant::now()).unwrap();
        live.timer_at(Instant::now() + STALL_HORIZON + Duration::from_secs(1));
        assert_eq!(
            live.still(Instant::now()),
            Some(second),
            "past the horizon: never"
        );
        live.timer_at(Instant::now() + Duration::from_millis(50));
        assert_eq!(live.still(Instant::now()), None, "a timer still to come");
        let later = Instant::now() + Duration::from_millis(100);
        assert!(
            live.still(later).is_some(),
            "once it is due, stillness may return"
        );
    }
}
