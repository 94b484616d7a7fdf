//! Shared tables: named, versioned tables every VM of a domain reads and writes, with readers
//! that never block.
//!
//! Each named table is a root cell holding one version of its structure (a tree of
//! [`node::Node`]s), whose keys hold nested tables or value cells ([`value_cell`]). A write of a
//! value of a key's shape changes its cell in place; any other write publishes a new version with
//! the table's gate ([`gate`]) closed. See [`root`] for the protocols and `README.md` beside this
//! file for why it is built this way. This module holds no Luau: the Luau side is `table_api`,
//! and the loom models in `loom-tests` check this code.

pub(crate) mod cell;
pub(crate) mod error;
pub(crate) mod gate;
pub(crate) mod handle;
pub(crate) mod key;
pub(crate) mod node;
pub(crate) mod root;
pub(crate) mod trie;
pub(crate) mod value_cell;

use std::collections::HashMap;

use bytes::Bytes;

use crate::shared::StoreCore;
use crate::sync::{Arc, AtomicBool, Mutex, Ordering};
use error::{SharedTableError, SharedTableErrorKind};
pub(crate) use root::{TableLimits, TableRoot};

/// Every shared table of one store, by name.
pub(crate) struct Tables {
    limits: TableLimits,
    by_name: Mutex<HashMap<Bytes, Arc<TableRoot>>>,
    /// Set once when the store ends: every use checks it first.
    ended: AtomicBool,
    reason: Mutex<Option<std::sync::Arc<str>>>,
}

impl Tables {
    pub(crate) fn new() -> Tables {
        Tables::with_limits(TableLimits::DEFAULT)
    }

    /// Tables with other bounds per named table (tests use small ones).
    pub(crate) fn with_limits(limits: TableLimits) -> Tables {
        Tables {
            limits,
            by_name: Mutex::new(HashMap::new()),
            ended: AtomicBool::new(false),
            reason: Mutex::new(None),
        }
    }

    /// The table named `name`, made on first use. `store` is the store these tables are part
    /// of (for the name count and the byte budget).
    pub(crate) fn open(
        &self,
        store: &StoreCore,
        name: &[u8],
    ) -> Result<Arc<TableRoot>, SharedTableError> {
        const WHAT: &str = "jobs.shared.table";
        store
            .check_name(name, WHAT)
            .map_err(|m| SharedTableError::new(SharedTableErrorKind::BadName, m))?;
        let shown: std::sync::Arc<str> = String::from_utf8_lossy(name).into();
        self.check_ended(|| format!("'{shown}'"))?;
        let mut by_name = self.by_name.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(root) = by_name.get(name) {
            return Ok(root.clone());
        }
        store
            .reserve_name(WHAT)
            .map_err(|m| SharedTableError::new(SharedTableErrorKind::Limit, m))?;
        let root = TableRoot::new(shown, self.limits);
        let empty = root.load().bytes;
        if let Err(m) = store.reserve_bytes(empty, WHAT) {
            return Err(SharedTableError::new(SharedTableErrorKind::Limit, m));
        }
        let root = Arc::new(root);
        by_name.insert(Bytes::copy_from_slice(name), root.clone());
        Ok(root)
    }

    /// Refuses when the store has ended, naming `what` (computed only then) and the reason.
    pub(crate) fn check_ended(
        &self,
        what: impl FnOnce() -> String,
    ) -> Result<(), SharedTableError> {
        if !self.ended.load(Ordering::Acquire) {
            return Ok(());
        }
        Err(self.ended_error(what()))
    }

    #[cold]
    fn ended_error(&self, what: String) -> SharedTableError {
        let reason = self
            .reason
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .unwrap_or_else(|| "the store ended".into());
        SharedTableError::new(
            SharedTableErrorKind::Ended,
            format!("shared table {what} is gone: {reason}"),
        )
    }

    /// The store ended: every later use of a table raises naming `reason`, and the tables'
    /// contents are let go even while handles to them are still held.
    pub(crate) fn end(&self, reason: &str) {
        *self.reason.lock().unwrap_or_else(|e| e.into_inner()) = Some(reason.into());
        self.ended.store(true, Ordering::Release);
        let roots: Vec<_> = self
            .by_name
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain()
            .map(|(_, root)| root)
            .collect();
        for root in roots {
            root.forget();
        }
    }
}

#[cfg(test)]
mod table_tests;

/// What the loom models need beyond the public API: a store without a domain, and a look at the
/// turn.
#[cfg(loom)]
pub mod loom_support {
    use crate::shared::{SharedLimits, SharedStore, SharedTableRef, StoreCore};
    use crate::sync::Arc;

    /// A store with the default bounds, owned by no domain.
    pub fn new_store() -> SharedStore {
        SharedStore::new(Arc::new(StoreCore::new(SharedLimits::DEFAULT)))
    }

    /// Whether an `atomic` call holds `table`'s turn now.
    pub fn turn_taken(table: &SharedTableRef) -> bool {
        table.root.turn_taken()
    }
}
