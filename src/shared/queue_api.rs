//! `jobs.shared.queue` and the queue handle's methods: the Luau side of shared queues.

use mlua::{Lua, Table};

use super::StoreCore;
use crate::sync::Arc;

/// Adds the queue functions to `jobs.shared`.
pub(crate) fn install(_lua: &Lua, _shared: &Table, _store: &Arc<StoreCore>) -> mlua::Result<()> {
    Ok(())
}
