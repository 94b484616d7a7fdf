//! Shared tables: versioned, lock-free for readers. (Filled in by the shared-table work.)

/// Every shared table of one store, by name.
pub(crate) struct Tables {}

impl Tables {
    pub(crate) fn new() -> Tables {
        Tables {}
    }

    /// The store ended: every later use of a table raises naming `reason`.
    pub(crate) fn end(&self, _reason: &str) {}
}
