//! The root cell of a named table: the one place a version is published.
//!
//! In normal builds it is an `arc_swap::ArcSwap`: a load never blocks and never waits on a
//! writer, and a publish is one compare-and-swap. Under `cfg(loom)` arc-swap (which loom does
//! not model) is swapped for a loom `Mutex<Arc<Node>>` with the same load / compare-and-swap
//! contract, so the loom models check *our* protocol around the cell (who publishes what,
//! what is re-checked on a lost race), not arc-swap's own algorithm.

use std::sync::Arc;

use super::node::Node;
#[cfg(loom)]
use crate::sync::Mutex;

/// A version as loaded: cheap to hold for one operation, derefs to the node.
#[cfg(not(loom))]
pub(crate) type Loaded = arc_swap::Guard<Arc<Node>>;
#[cfg(loom)]
pub(crate) type Loaded = Arc<Node>;

#[cfg(not(loom))]
pub(crate) struct VersionCell(arc_swap::ArcSwap<Node>);

#[cfg(not(loom))]
impl VersionCell {
    pub(crate) fn new(node: Arc<Node>) -> VersionCell {
        VersionCell(arc_swap::ArcSwap::new(node))
    }

    /// The current version. Never blocks.
    pub(crate) fn load(&self) -> Loaded {
        self.0.load()
    }

    /// Publishes `next` if `seen` is still the current version; answers whether it did.
    pub(crate) fn publish(&self, seen: &Arc<Node>, next: Arc<Node>) -> bool {
        let previous = self.0.compare_and_swap(seen, next);
        Arc::ptr_eq(&previous, seen)
    }

    /// Replaces the version whatever it is (the store ended).
    pub(crate) fn store(&self, node: Arc<Node>) {
        self.0.store(node);
    }
}

#[cfg(loom)]
pub(crate) struct VersionCell(Mutex<Arc<Node>>);

#[cfg(loom)]
impl VersionCell {
    pub(crate) fn new(node: Arc<Node>) -> VersionCell {
        VersionCell(Mutex::new(node))
    }

    pub(crate) fn load(&self) -> Loaded {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub(crate) fn publish(&self, seen: &Arc<Node>, next: Arc<Node>) -> bool {
        let mut current = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if Arc::ptr_eq(&current, seen) {
            *current = next;
            true
        } else {
            false
        }
    }

    pub(crate) fn store(&self, node: Arc<Node>) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = node;
    }
}
