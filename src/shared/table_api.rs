//! `jobs.shared.table`, `atomic`, `snapshot`, `revision`: the Luau side of shared tables.

use mlua::{Lua, Table};

use super::StoreCore;
use crate::sync::Arc;

/// Adds the table functions to `jobs.shared`.
pub(crate) fn install(_lua: &Lua, _shared: &Table, _store: &Arc<StoreCore>) -> mlua::Result<()> {
    Ok(())
}
