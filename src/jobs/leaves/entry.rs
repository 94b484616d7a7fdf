//! Finding an item's entry: requiring its module in a VM and reading the function out of the
//! module's table. Worker items, warm entries and the worker calls of registered jobs all start
//! this way.

use std::path::Path;

use mlua::{Function, Lua, LuaString, Table, Value};

use crate::vm::{a_type, error_message, Vm};

/// Requires `module` in the VM and finds its function `entry`.
pub(crate) fn entry_function(
    lua: &Lua,
    vm: &Vm,
    module: &Path,
    entry: &str,
    key: LuaString,
) -> Result<Function, String> {
    let table = module_table(lua, vm, module)?;
    entry_in(&table, module, entry, key)
}

/// Requires `module` in the VM: the table of functions it returned.
pub(crate) fn module_table(lua: &Lua, vm: &Vm, module: &Path) -> Result<Table, String> {
    let exports = vm.core.modules.require_path(lua, module).map_err(|e| {
        format!(
            "module {} could not be loaded: {}",
            module.display(),
            error_message(&e)
        )
    })?;
    match exports {
        Value::Table(t) => Ok(t),
        other => Err(format!(
            "module {} returned a {}, not a table of functions",
            module.display(),
            other.type_name()
        )),
    }
}

/// The function `entry` (named by `key`) of a module's `table`.
pub(crate) fn entry_in(
    table: &Table,
    module: &Path,
    entry: &str,
    key: LuaString,
) -> Result<Function, String> {
    match table.raw_get::<Value>(key) {
        Ok(Value::Function(f)) => Ok(f),
        Ok(other) => Err(format!(
            "entry '{entry}' of module {} is not a function (it is {})",
            module.display(),
            a_type(&other)
        )),
        Err(e) => Err(error_message(&e)),
    }
}
