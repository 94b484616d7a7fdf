//! The `(module, entry)` pairs the host dispatched to lately, resolved, as a generation keeps
//! them ([`HostTargets`]): issuing many items to one entry resolves the module and allocates the
//! entry's name once. Its invariants: at most [`HOST_TARGETS_KEPT`] pairs, the most recent last;
//! every pair was resolved in the source epoch it is read in (a change of source clears them).

use std::sync::Arc;

use crate::jobs::JobTarget;
use crate::vm;

/// How many `(module, entry)` pairs a generation keeps resolved for host dispatch.
const HOST_TARGETS_KEPT: usize = 8;

/// The pairs the host dispatched to lately, so issuing many items to one entry resolves the
/// module and allocates the entry's name once, not once per item. Trusted while the source
/// epoch is the one they were resolved in, as the engine VM's own resolutions are.
#[derive(Default)]
pub(crate) struct HostTargets {
    epoch: u64,
    /// Most recently added last; at most [`HOST_TARGETS_KEPT`].
    kept: Vec<Arc<JobTarget>>,
}

impl HostTargets {
    pub(crate) fn find(&mut self, module: &str, entry: &str) -> Option<&Arc<JobTarget>> {
        let epoch = vm::source_epoch();
        if self.epoch != epoch {
            self.epoch = epoch;
            self.kept.clear();
        }
        self.kept
            .iter()
            .rev()
            .find(|t| &*t.spec == module && &*t.entry == entry)
    }

    pub(crate) fn keep(&mut self, target: Arc<JobTarget>) {
        if self.kept.len() == HOST_TARGETS_KEPT {
            self.kept.remove(0);
        }
        self.kept.push(target);
    }
}
