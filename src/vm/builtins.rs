//! The built-in modules a VM's `require` answers by name (`@skein/jobs`, `@skein/events`...):
//! a table of names and builders that the layers above fill, so this layer serves their modules
//! without naming them.
//!
//! The table travels in the [`Plan`](super::Plan): every VM of a domain (its engine VM, the
//! pool threads' VMs, `@skein/worker` VMs) is built from the domain's plan, so each sees the
//! same names, and a VM's registry is fixed once it is built. Whether a module does something in
//! a given VM is the module's own business: a builder may answer a table whose functions refuse
//! ([`registered_or_refusing`]). A name not in the table is not a built-in, and goes on to
//! the file loader as any other specifier.

use std::sync::Arc;

use mlua::{Lua, Value};

/// Builds (or finds, when the VM keeps it) a built-in module's value in one VM.
pub(crate) type BuildModule = fn(&Lua) -> mlua::Result<Value>;

/// One built-in module: the name `require` takes and the builder of its value.
#[derive(Clone, Copy)]
pub(crate) struct Builtin {
    pub(crate) name: &'static str,
    pub(crate) build: BuildModule,
}

/// The built-in modules of a plan, by name. Cloned into each VM the plan builds (an `Arc`).
#[derive(Clone, Default)]
pub(crate) struct Builtins {
    modules: Arc<[Builtin]>,
}

impl Builtins {
    /// These modules and `more`; a name given again takes the later builder, so a layer that
    /// registers twice (a plan passed down twice) changes nothing.
    pub(crate) fn with(&self, more: &[Builtin]) -> Builtins {
        let mut modules: Vec<Builtin> = self
            .modules
            .iter()
            .filter(|old| more.iter().all(|new| new.name != old.name))
            .copied()
            .collect();
        modules.extend_from_slice(more);
        Builtins {
            modules: modules.into(),
        }
    }

    /// The builder of the module named `name`, if it is a built-in.
    pub(crate) fn find(&self, name: &str) -> Option<BuildModule> {
        self.modules
            .iter()
            .find(|module| module.name == name)
            .map(|module| module.build)
    }
}

/// A built-in module that only some VMs serve: the one registered under `key` in this VM, or
/// else a read-only table whose functions each raise their fixed text (`refusals`), so a VM
/// without the module learns where it belongs instead of indexing nil.
pub(crate) fn registered_or_refusing(
    lua: &Lua,
    key: &str,
    refusals: &[(&str, &'static str)],
) -> mlua::Result<Value> {
    let module = lua.named_registry_value::<Value>(key)?;
    if !module.is_nil() {
        return Ok(module);
    }
    let module = lua.create_table()?;
    for &(name, text) in refusals {
        module.raw_set(
            name,
            lua.create_function(move |_, _: mlua::MultiValue| -> mlua::Result<()> {
                Err(mlua::Error::runtime(text))
            })?,
        )?;
    }
    module.set_readonly(true);
    Ok(Value::Table(module))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(_: &Lua) -> mlua::Result<Value> {
        Ok(Value::Integer(1))
    }

    fn two(_: &Lua) -> mlua::Result<Value> {
        Ok(Value::Integer(2))
    }

    #[test]
    fn a_name_is_found_and_a_later_registration_replaces_it() {
        let lua = Lua::new();
        let builtins = Builtins::default().with(&[
            Builtin {
                name: "@skein/a",
                build: one,
            },
            Builtin {
                name: "@skein/b",
                build: one,
            },
        ]);
        assert!(builtins.find("@skein/c").is_none());
        let again = builtins.with(&[Builtin {
            name: "@skein/a",
            build: two,
        }]);
        assert_eq!(again.modules.len(), 2);
        let build = again.find("@skein/a").unwrap();
        assert_eq!(build(&lua).unwrap(), Value::Integer(2));
        // The table it was made from is unchanged.
        let build = builtins.find("@skein/a").unwrap();
        assert_eq!(build(&lua).unwrap(), Value::Integer(1));
    }
}
