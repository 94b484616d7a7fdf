//! Loom models of Skein's lock-free protocols live in `tests/`; `README.md` lists them and the
//! mutants each must reject. This library holds what the models share.

use std::sync::atomic::{AtomicUsize, Ordering};

/// Counts, across every interleaving loom explored, how often each side of a race was taken: a
/// model whose race only ever went one way would check nothing. Plain `std` atomics, outside the
/// model; keep one in a `static` per test and call [`assert_both`](Self::assert_both) after
/// `loom::model` returns.
pub struct Branches([AtomicUsize; 2]);

impl Branches {
    /// No side seen yet.
    #[allow(clippy::new_without_default)]
    pub const fn new() -> Self {
        Branches([AtomicUsize::new(0), AtomicUsize::new(0)])
    }

    /// Side `side` (0 or 1) was taken in this interleaving.
    pub fn hit(&self, side: usize) {
        self.0[side].fetch_add(1, Ordering::Relaxed);
    }

    /// Side 1 was taken when `side_one`, side 0 otherwise.
    pub fn hit_if(&self, side_one: bool) {
        self.hit(usize::from(side_one));
    }

    /// Panics unless both sides were taken at least once.
    pub fn assert_both(&self) {
        let seen = self.0.each_ref().map(|a| a.load(Ordering::Relaxed));
        assert!(
            seen[0] > 0 && seen[1] > 0,
            "a side of the race was never explored: {seen:?}"
        );
    }
}
