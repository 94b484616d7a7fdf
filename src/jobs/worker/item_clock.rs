//! The clocks of one pool item on its worker thread: the wait a registered job's tally counts
//! ([`count_wait`]), and the profile of the item: when it started there, and how long it had
//! waited since its dispatch. The profile is kept only when the item's domain has a profile
//! sink, so a domain without one pays one branch on an `Option` per item and reads no clock.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::jobs::protocol::item::Item;
use crate::jobs::protocol::job::JobShared;
use crate::jobs::protocol::principal_shared::PrincipalShared;
use crate::principal::profile::{self, ProfileKind};

/// A started item's clock, finished (and sent to the sink) when the item ends.
pub(crate) struct ItemClock {
    started: Instant,
    queue_delay: Option<Duration>,
}

impl ItemClock {
    /// Starts the clock of `item` on this thread, if its domain profiles.
    pub(crate) fn start(item: &Item) -> Option<ItemClock> {
        item.principal.profile.as_ref()?;
        let started = Instant::now();
        Some(ItemClock {
            started,
            queue_delay: item
                .queued_at
                .map(|at| started.saturating_duration_since(at)),
        })
    }

    /// Sends the item's [`ProfileKind::PoolItem`] event, measured up to now, on this thread.
    pub(crate) fn finish(self, principal: &PrincipalShared, job: &JobShared) {
        if let Some(sink) = &principal.profile {
            let attribution = principal.authority.attribution().clone();
            let (kind, name) = (ProfileKind::PoolItem, job.label());
            profile::emit(
                &**sink,
                kind,
                attribution,
                name,
                self.started,
                self.queue_delay,
            );
        }
    }
}

/// Adds the time a registered job's item waited, from queueing to its start, to the job's tally.
pub(super) fn count_wait(item: &Item) {
    if let (Some(tally), Some(at)) = (&item.job.tally, item.queued_at) {
        let waited = u64::try_from(at.elapsed().as_nanos()).unwrap_or(u64::MAX);
        tally.waited_ns.fetch_add(waited, Ordering::Relaxed);
    }
}
