//! `require("@skein/resources")`: `import(name)` answers a proxy whose functions call another
//! resource's exports by name, and `this()` the name of the resource whose code runs.
//!
//! The module is registered in the plan of every resource (`vm`'s built-in registry), so
//! every VM of a resource serves it: its engine VM calls the target directly through the
//! host's [`ExportRegistry`]; a worker VM (a pool thread's, or an actor's) copies the arguments
//! and forwards the call to the engine thread as a query of the engine service
//! [`SERVICE`], which the resource's domain serves, and its task waits for the answer.

use std::ffi::c_int;
use std::rc::Rc;
use std::sync::Arc;

use mlua::state::RawLua;
use mlua::{ffi, FromLuaMulti, Function, Lua, LuaString, MultiValue, Table, Value, Variadic};

use super::registry::{answer, ExportRegistry, MAX_VALUE_DEPTH};
use crate::jobs;
use crate::value::{Message, MessageArgs};
use crate::vm::{await_function, error_message, registered_or_refusing, Builtin, Embedded};

/// The built-in module of the resource layer.
pub(crate) const BUILTINS: &[Builtin] = &[Builtin {
    name: "@skein/resources",
    build: module,
}];

/// The engine service a worker VM's proxy forwards its calls to: not a Luau path, so no
/// host service can take the name, and nothing is installed under it in any VM.
pub(crate) const SERVICE: &str = "@skein/resources.call";

/// The resource every VM of a resource's plan belongs to (set by the plan's setup step).
pub(crate) struct ResourceName(pub(crate) Arc<str>);

/// An engine VM's way to the host's registry (set on the engine VM when it starts).
pub(crate) struct EngineLink {
    pub(crate) registry: Rc<ExportRegistry>,
    pub(crate) name: Arc<str>,
}

static PROXY: Embedded = Embedded::new("=skein resources", include_str!("proxy.luau"));
const MODULE_KEY: &str = "skein.resources.module";

fn module(lua: &Lua) -> mlua::Result<Value> {
    if let Value::Table(t) = lua.named_registry_value::<Value>(MODULE_KEY)? {
        return Ok(Value::Table(t));
    }
    let Some(name) = lua.app_data_ref::<ResourceName>().map(|n| n.0.clone()) else {
        return registered_or_refusing(
            lua,
            MODULE_KEY,
            &[
                (
                    "import",
                    "@skein/resources: this VM does not belong to a resource",
                ),
                (
                    "this",
                    "@skein/resources: this VM does not belong to a resource",
                ),
            ],
        );
    };
    let engine = lua.app_data_ref::<EngineLink>().is_some();
    let (direct, forward): (Option<Function>, Option<Function>) = if engine {
        (Some(lua.create_function(direct_call)?), None)
    } else {
        (None, Some(lua.create_function(forward_call)?))
    };
    let isyieldable: Function = lua
        .globals()
        .get::<Table>("coroutine")?
        .get("isyieldable")?;
    let this = lua.create_function(move |_, ()| Ok(name.to_string()))?;
    let module: Value =
        PROXY
            .load(lua)?
            .call((direct, forward, await_function(lua)?, isyieldable, this))?;
    lua.set_named_registry_value(MODULE_KEY, &module)?;
    Ok(module)
}

fn text(s: &LuaString) -> String {
    String::from_utf8_lossy(&s.as_bytes()).into_owned()
}

/// The arguments of an engine VM's call, where they sit on its stack while the call runs
/// (mlua leaves a callback's arguments in place until it returns).
enum CallArgs {
    /// `count` values from absolute index `first` of `state`, the callback's own stack.
    Stack {
        state: *mut ffi::lua_State,
        first: c_int,
        count: c_int,
    },
    /// Values handed over as such (not by the callback path mlua takes today).
    Values(MultiValue),
}

impl FromLuaMulti for CallArgs {
    fn from_lua_multi(values: MultiValue, _lua: &Lua) -> mlua::Result<Self> {
        Ok(CallArgs::Values(values))
    }

    unsafe fn from_stack_multi(nvals: c_int, lua: &RawLua) -> mlua::Result<Self> {
        let state = lua.state();
        // SAFETY: mlua hands us `nvals` values on top of `state`'s stack.
        let first = unsafe { ffi::lua_gettop(state) } - nvals + 1;
        Ok(CallArgs::Stack {
            state,
            first,
            count: nvals,
        })
    }
}

/// The engine VM's call: copies the arguments, calls through the registry, answers `true` and
/// copies of the results, or `false` and the refusal (raised by the proxy, as a string).
///
/// The arguments go straight from this VM into the target's ([`ExportRegistry::call_copied`]);
/// a call that path does not take (a refusal, a value it declines) is made again the
/// `Message` way, whose reader and checks say every refusal.
fn direct_call(
    lua: &Lua,
    (target, function, args): (LuaString, LuaString, CallArgs),
) -> mlua::Result<(bool, Variadic<Message>)> {
    let (target, function) = (target.as_bytes(), function.as_bytes());
    let (target, function) = (
        String::from_utf8_lossy(&target),
        String::from_utf8_lossy(&function),
    );
    let refused = |why: String| (false, Variadic::from(vec![Message::String(why.into())]));
    let (registry, caller) = match lua.app_data_ref::<EngineLink>() {
        Some(link) => (link.registry.clone(), link.name.clone()),
        None => {
            return Ok(refused(format!(
                "{target}.{function}: this VM does not belong to a resource"
            )))
        }
    };
    let args = match args {
        CallArgs::Stack {
            state,
            first,
            count,
        } => {
            // SAFETY: the arguments stay at `first..` of this callback's stack until it
            // returns, and the call leaves that stack as it found it.
            let copied =
                unsafe { registry.call_copied(&caller, &target, &function, (state, first, count)) };
            if let Some(answer) = copied {
                return Ok(match answer {
                    Ok(results) => (true, Variadic::from(results)),
                    Err(why) => refused(why),
                });
            }
            // SAFETY: the same `count` values are still the top of this callback's stack.
            lua.exec_raw_lua(|raw| unsafe { MessageArgs::from_stack_multi(count, raw) })?
        }
        CallArgs::Values(values) => MessageArgs::from_lua_multi(values, lua)?,
    };
    let args = match args.into_list() {
        Ok(args) => args,
        Err(e) => return Ok(refused(format!("{target}.{function}: {e}"))),
    };
    Ok(match registry.call(&caller, &target, &function, args) {
        Ok(results) => (true, Variadic::from(results)),
        Err(why) => refused(why),
    })
}

/// A worker VM's call: copies and checks the arguments here, then forwards them to the
/// engine thread and answers the promise the proxy awaits, or nil and the refusal (raised by
/// the proxy, as a string).
fn forward_call(
    lua: &Lua,
    (target, function, yieldable, args): (LuaString, LuaString, bool, MessageArgs),
) -> mlua::Result<(Value, Option<String>)> {
    let (target, function) = (text(&target), text(&function));
    let refused = |why: String| Ok((Value::Nil, Some(format!("{target}.{function}: {why}"))));
    if !yieldable {
        return refused(
            "can't wait here: a call from a worker VM to a resource waits for the engine \
             thread; call it from a task, not from a metamethod or a module's top level"
                .to_owned(),
        );
    }
    let args = match args.into_list() {
        Ok(args) => args,
        Err(e) => return refused(e.to_string()),
    };
    for (i, arg) in args.iter().enumerate() {
        if let Err(e) = arg.check_within(|| format!("args[{}]", i + 1), MAX_VALUE_DEPTH, false) {
            return refused(e.to_string());
        }
    }
    let call = Message::List(vec![
        Message::String(target.clone().into()),
        Message::String(function.clone().into()),
        Message::List(args),
    ]);
    match jobs::forward_query(lua, SERVICE, call) {
        Ok(promise) => Ok((promise, None)),
        Err(e) => refused(error_message(&e)),
    }
}

/// The engine side of [`SERVICE`] for resource `caller`: answers `{ ok, n, ... }` or
/// `{ ok = false, err }` (see [`answer`]).
pub(crate) fn serve(registry: &Rc<ExportRegistry>, caller: &Arc<str>, call: Message) -> Message {
    let Message::List(mut parts) = call else {
        return answer(Err("a malformed resource call".to_owned()));
    };
    let (Some(Message::List(args)), Some(Message::String(function)), Some(Message::String(target))) =
        (parts.pop(), parts.pop(), parts.pop())
    else {
        return answer(Err("a malformed resource call".to_owned()));
    };
    let target = String::from_utf8_lossy(&target);
    let function = String::from_utf8_lossy(&function);
    answer(registry.call(caller, &target, &function, args))
}
