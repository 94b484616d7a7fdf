//! `@skein/interfaces`: the effective tables the packages of one domain generation compose.
//!
//! Each package of an application `provide`s the fields it contributes to a named interface,
//! and the interface is the union of them: the *effective table*, which every consumer reads
//! through `get` or `expect`. Composition never overrides: a field that another chunk already
//! provided is refused, naming who provided it first, so two packages can't silently fight over
//! one name. Consumers read a read-only table, so no package can rewrite another's fields.
//!
//! Interfaces are Luau values of the engine VM (functions, tables with identity), so they never
//! cross: this module owns them for one generation only. They live in the engine VM's app data,
//! and a restart, which drops that VM, starts the next generation with none. Worker VMs and
//! actors see a module whose functions raise. This module never touches the event queue or
//! the pool.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;

use mlua::{Lua, Table, Value};

use crate::principal::capability::current_arc;
use crate::principal::Generation;
use crate::vm::{self, with_caller_source};

/// Registry key of the engine VM's `@skein/interfaces` table.
pub(crate) const INTERFACES_KEY: &str = "skein.interfaces";

/// The longest interface name, in bytes.
pub(crate) const MAX_INTERFACE_NAME: usize = 256;

/// What `interfaces.provide` raises outside the engine VM.
pub(crate) const OUTSIDE_PROVIDE: &str =
    "interfaces.provide: interfaces live in the engine VM of their domain; a worker VM or actor has none";
/// What `interfaces.get` raises outside the engine VM.
pub(crate) const OUTSIDE_GET: &str =
    "interfaces.get: interfaces live in the engine VM of their domain; a worker VM or actor has none";
/// What `interfaces.expect` raises outside the engine VM.
pub(crate) const OUTSIDE_EXPECT: &str =
    "interfaces.expect: interfaces live in the engine VM of their domain; a worker VM or actor has none";
/// What `interfaces.list` raises outside the engine VM.
pub(crate) const OUTSIDE_LIST: &str =
    "interfaces.list: interfaces live in the engine VM of their domain; a worker VM or actor has none";

/// One interface as the host sees it: [`ScriptDomain::interfaces`](crate::ScriptDomain::interfaces).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InterfaceInfo {
    /// The interface's dotted name (`ui.hud`).
    pub name: String,
    /// Its fields, sorted by name, each with who provided it.
    pub fields: Vec<InterfaceField>,
}

impl InterfaceInfo {
    /// The longest interface name, in bytes: 256.
    pub const MAX_NAME: usize = MAX_INTERFACE_NAME;
}

/// One field of an effective interface table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InterfaceField {
    /// The field's key.
    pub name: String,
    /// Who provided it: the chunk that called `provide` (`chunk 'exec'`, `chunk
    /// '/game/hud.luau'`), and the context it ran in when there was one
    /// (`chunk 'exec' in context 'ui'`).
    pub provider: String,
}

/// One interface: its effective table (read-only to Luau) and the provider of each field.
struct Interface {
    table: Table,
    providers: BTreeMap<String, String>,
}

/// The interfaces of one generation, kept in its engine VM's app data.
pub(crate) struct Interfaces {
    domain_name: String,
    generation: Generation,
    /// By name, so `list` and the host's view come out sorted.
    book: RefCell<BTreeMap<String, Interface>>,
}

/// Checks an interface name: 1 to [`MAX_INTERFACE_NAME`] bytes of dotted segments, each a
/// lowercase letter followed by lowercase letters, digits or `_`.
fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > MAX_INTERFACE_NAME {
        return Err(format!(
            "an interface name must be 1 to {MAX_INTERFACE_NAME} bytes, got {}",
            name.len()
        ));
    }
    let good = name.split('.').all(|segment| {
        let mut bytes = segment.bytes();
        bytes.next().is_some_and(|b| b.is_ascii_lowercase())
            && bytes.all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
    });
    if !good {
        return Err(format!(
            "invalid interface name '{name}': each dotted segment must be a lowercase letter \
             followed by lowercase letters, digits or '_'"
        ));
    }
    Ok(())
}

/// The name argument of `function`, checked.
fn name_arg(function: &str, name: &Value) -> mlua::Result<String> {
    let name = match name {
        Value::String(s) => match s.to_str() {
            Ok(text) => text.to_owned(),
            Err(_) => {
                return Err(mlua::Error::runtime(format!(
                    "interfaces.{function}: name must be UTF-8 text"
                )))
            }
        },
        other => {
            return Err(mlua::Error::runtime(format!(
                "interfaces.{function}: name must be a string, got {}",
                vm::a_type(other)
            )))
        }
    };
    check_name(&name).map_err(|e| mlua::Error::runtime(format!("interfaces.{function}: {e}")))?;
    Ok(name)
}

/// The chunk of the nearest script function on the stack above the running callback: a
/// `provide` made through `pcall` belongs to the chunk that called `pcall`, not to `[C]` or to
/// Skein's own prelude.
fn calling_chunk(lua: &Lua) -> String {
    with_caller_source(lua, |source| {
        source.map_or_else(
            || "?".to_owned(),
            |s| s.trim_start_matches(['@', '=']).to_owned(),
        )
    })
}

/// Who is calling `provide`: the calling chunk, and the context whose handler runs, if any.
fn provider(lua: &Lua) -> String {
    let chunk = calling_chunk(lua);
    let context = current_arc().and_then(|authority| authority.attribution().context.clone());
    match context {
        Some(context) => format!("chunk '{chunk}' in context '{context}'"),
        None => format!("chunk '{chunk}'"),
    }
}

impl Interfaces {
    fn provide(&self, lua: &Lua, name: Value, fields: Value) -> mlua::Result<()> {
        let name = name_arg("provide", &name)?;
        let Value::Table(fields) = fields else {
            return Err(mlua::Error::runtime(format!(
                "interfaces.provide: fields must be a table, got {}",
                vm::a_type(&fields)
            )));
        };
        // Everything is read and checked before anything is written: a refusal adds nothing.
        let mut adding: BTreeMap<String, Value> = BTreeMap::new();
        for pair in fields.pairs::<Value, Value>() {
            let (key, value) = pair?;
            let Value::String(key) = key else {
                return Err(mlua::Error::runtime(format!(
                    "interfaces.provide: the fields of '{name}' must have string keys, got {}",
                    vm::a_type(&key)
                )));
            };
            let Ok(key) = key.to_str().map(|k| k.to_owned()) else {
                return Err(mlua::Error::runtime(format!(
                    "interfaces.provide: the fields of '{name}' must have UTF-8 text keys"
                )));
            };
            adding.insert(key, value);
        }
        let mut book = self.book.borrow_mut();
        if let Some(existing) = book.get(&name) {
            // BTreeMap order: the first clash named is the same one every time.
            if let Some((field, first)) = adding
                .keys()
                .find_map(|k| existing.providers.get_key_value(k))
            {
                return Err(mlua::Error::runtime(format!(
                    "interfaces.provide: field '{field}' of interface '{name}' is provided already, by {first}"
                )));
            }
        }
        let who = provider(lua);
        let interface = match book.entry(name) {
            std::collections::btree_map::Entry::Occupied(entry) => entry.into_mut(),
            std::collections::btree_map::Entry::Vacant(entry) => {
                let table = lua.create_table()?;
                table.set_readonly(true);
                entry.insert(Interface {
                    table,
                    providers: BTreeMap::new(),
                })
            }
        };
        // Luau code can't lift a freeze; the owner lifts it just long enough to compose.
        interface.table.set_readonly(false);
        let written = adding
            .iter()
            .try_for_each(|(key, value)| interface.table.raw_set(key.as_str(), value.clone()));
        if let Err(e) = written {
            // Only an allocation failure gets here: take back what went in, so nothing was added.
            for key in adding.keys() {
                let _ = interface.table.raw_set(key.as_str(), Value::Nil);
            }
            interface.table.set_readonly(true);
            return Err(e);
        }
        interface.table.set_readonly(true);
        for key in adding.into_keys() {
            interface.providers.insert(key, who.clone());
        }
        Ok(())
    }

    fn get(&self, name: Value) -> mlua::Result<Option<Table>> {
        let name = name_arg("get", &name)?;
        Ok(self.book.borrow().get(&name).map(|i| i.table.clone()))
    }

    fn expect(&self, name: Value) -> mlua::Result<Table> {
        let name = name_arg("expect", &name)?;
        match self.book.borrow().get(&name) {
            Some(interface) => Ok(interface.table.clone()),
            None => Err(mlua::Error::runtime(format!(
                "interfaces.expect: no interface '{name}' is provided in domain '{}' generation {}",
                self.domain_name,
                self.generation.get()
            ))),
        }
    }

    fn list(&self) -> Vec<String> {
        self.book.borrow().keys().cloned().collect()
    }

    /// What the host sees: every interface, sorted, with its fields and their providers.
    pub(crate) fn infos(&self) -> Vec<InterfaceInfo> {
        self.book
            .borrow()
            .iter()
            .map(|(name, interface)| InterfaceInfo {
                name: name.clone(),
                fields: interface
                    .providers
                    .iter()
                    .map(|(field, provider)| InterfaceField {
                        name: field.clone(),
                        provider: provider.clone(),
                    })
                    .collect(),
            })
            .collect()
    }
}

/// Installs `@skein/interfaces` in the engine VM of generation `generation` of the domain
/// `domain_name`, starting with no interface.
pub(crate) fn install_interfaces_module(
    lua: &Lua,
    domain_name: &str,
    generation: Generation,
) -> mlua::Result<()> {
    let interfaces = Rc::new(Interfaces {
        domain_name: domain_name.to_owned(),
        generation,
        book: RefCell::default(),
    });
    let module = lua.create_table()?;
    let store = interfaces.clone();
    module.raw_set(
        "provide",
        lua.create_function(move |lua, (name, fields): (Value, Value)| {
            store.provide(lua, name, fields)
        })?,
    )?;
    let store = interfaces.clone();
    module.raw_set(
        "get",
        lua.create_function(move |_, name: Value| store.get(name))?,
    )?;
    let store = interfaces.clone();
    module.raw_set(
        "expect",
        lua.create_function(move |_, name: Value| store.expect(name))?,
    )?;
    let store = interfaces.clone();
    module.raw_set("list", lua.create_function(move |_, ()| Ok(store.list()))?)?;
    module.set_readonly(true);
    lua.set_app_data(interfaces);
    lua.set_named_registry_value(INTERFACES_KEY, module)
}

/// `@skein/interfaces` as `require` answers it: the engine VM's, or (in a worker VM or an
/// actor) a module whose functions raise.
pub(crate) fn interfaces_module(lua: &Lua) -> mlua::Result<Value> {
    vm::registered_or_refusing(
        lua,
        INTERFACES_KEY,
        &[
            ("provide", OUTSIDE_PROVIDE),
            ("get", OUTSIDE_GET),
            ("expect", OUTSIDE_EXPECT),
            ("list", OUTSIDE_LIST),
        ],
    )
}

/// The host's view of the interfaces in `lua` (an engine VM).
pub(crate) fn infos(lua: &Lua) -> Vec<InterfaceInfo> {
    lua.app_data_ref::<Rc<Interfaces>>()
        .map(|interfaces| interfaces.infos())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_dotted_lowercase_segments_within_the_bound() {
        assert!(check_name("audio").is_ok());
        assert!(check_name("ui.hud_2").is_ok());
        assert!(check_name(&"a".repeat(MAX_INTERFACE_NAME)).is_ok());
        assert_eq!(
            check_name(&"a".repeat(MAX_INTERFACE_NAME + 1)).unwrap_err(),
            "an interface name must be 1 to 256 bytes, got 257"
        );
        assert_eq!(
            check_name("").unwrap_err(),
            "an interface name must be 1 to 256 bytes, got 0"
        );
        for bad in ["UI.hud", "ui..hud", "ui.", ".ui", "1ui", "ui-hud", "ui.Hud"] {
            assert_eq!(
                check_name(bad).unwrap_err(),
                format!(
                    "invalid interface name '{bad}': each dotted segment must be a lowercase \
                     letter followed by lowercase letters, digits or '_'"
                )
            );
        }
    }
}
