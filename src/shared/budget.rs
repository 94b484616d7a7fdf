//! The byte budget of one shared store: what its tables and queues hold together.
//!
//! A plain counter with a ceiling, shared (behind an `Arc`) by the store's tables and every
//! queue it made, so a script that spreads its data over many names meets the same bound as one
//! that piles it into one.

use crate::sync::{AtomicUsize, Ordering};

/// Bytes held against a ceiling; a reservation past it is refused and takes nothing.
#[derive(Debug)]
pub(crate) struct ByteBudget {
    held: AtomicUsize,
    max: usize,
}

impl ByteBudget {
    pub(crate) fn new(max: usize) -> ByteBudget {
        ByteBudget {
            held: AtomicUsize::new(0),
            max,
        }
    }

    /// The ceiling.
    pub(crate) fn max(&self) -> usize {
        self.max
    }

    /// Takes `n` bytes, or answers what would have been held and takes nothing.
    pub(crate) fn reserve(&self, n: usize) -> Result<(), usize> {
        let max = self.max;
        self.held
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
                held.checked_add(n).filter(|&total| total <= max)
            })
            .map(|_| ())
            .map_err(|held| held.saturating_add(n))
    }

    /// Takes `n` bytes whatever the ceiling: for a value that was held before and comes back
    /// (a queue's give-back), which must not be lost.
    pub(crate) fn force(&self, n: usize) {
        self.held.fetch_add(n, Ordering::AcqRel);
    }

    /// Gives `n` bytes back.
    pub(crate) fn release(&self, n: usize) {
        self.held.fetch_sub(n, Ordering::AcqRel);
    }

    /// Bytes held now.
    pub(crate) fn held(&self) -> usize {
        self.held.load(Ordering::Acquire)
    }
}
