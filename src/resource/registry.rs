//! The export registry of one host: each loaded resource's phase and, while it runs, its
//! exported functions with the authority and deadline they run under; and the one path every
//! cross-resource call takes ([`Registry::call`]).
//!
//! The registry holds the target's functions, so a call made from inside a running callback
//! reaches the target without going back through the [`ResourceHost`](super::ResourceHost),
//! which the host's own call (a start, a stop) may be holding. A function keeps only a weak
//! handle on its VM: the domain owns the VM, and a stop clears the resource's records, so
//! nothing here keeps a stopped resource's VM alive.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use mlua::{Function, Lua, Variadic};

use crate::principal::capability::{self, Authority};
use crate::value::{MapKey, Message, MessageArgs, TransferError};
use crate::vm::budget::{RunGuard, RunTokens};
use crate::vm::{error_message, Embedded};

/// Cross-resource calls in progress at once, nested (`a` calls `b`, which calls `c`...), at
/// most: the 17th is refused naming the chain.
pub(crate) const MAX_CALL_DEPTH: usize = 16;

/// How deep tables in a call's arguments and results may nest (a top-level table is 1).
pub(crate) const MAX_VALUE_DEPTH: usize = 16;

/// Where a loaded resource is in its life, as calls into it see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Not running: calls into it fail until it starts.
    Stopped,
    /// Its scripts are running; its exports are not resolved yet.
    Starting,
    /// Its exports answer calls.
    Running,
    /// Its `stop` handlers are running; calls into it are refused, its own calls go out.
    Stopping,
}

/// One loaded resource's record.
pub(crate) struct Slot {
    pub(crate) phase: Phase,
    /// A reload is under way (the old generation stopping or the new one starting).
    pub(crate) reloading: bool,
    /// The declared exports, resolved to functions while running (empty otherwise).
    exports: HashMap<Arc<str>, Function>,
    /// The call wrapper (`call.luau`) in the running generation's VM, loaded once at publish
    /// rather than looked up by name on every call.
    wrapper: Option<Function>,
    authority: Option<Arc<Authority>>,
    deadline: Duration,
}

/// The records of every loaded resource and the chain of calls in progress.
#[derive(Default)]
pub(crate) struct Registry {
    slots: RefCell<HashMap<Arc<str>, Slot>>,
    /// The resources of the calls in progress: the first caller, then each callee.
    chain: RefCell<Vec<Arc<str>>>,
}

/// A call's wrapper in the target VM: `xpcall` with the callee's traceback.
static CALL: Embedded = Embedded::new("=skein resources call", include_str!("call.luau"));

impl Registry {
    /// Records a loaded resource, stopped.
    pub(crate) fn add(&self, name: &Arc<str>) {
        self.slots.borrow_mut().insert(
            name.clone(),
            Slot {
                phase: Phase::Stopped,
                reloading: false,
                exports: HashMap::new(),
                wrapper: None,
                authority: None,
                deadline: Duration::ZERO,
            },
        );
    }

    /// Moves a resource to `phase`; leaving `Running` forgets its exports (and with them the
    /// last handles on its VM's functions).
    pub(crate) fn set_phase(&self, name: &str, phase: Phase, reloading: bool) {
        if let Some(slot) = self.slots.borrow_mut().get_mut(name) {
            slot.phase = phase;
            slot.reloading = reloading;
            if phase != Phase::Running {
                slot.exports.clear();
                slot.wrapper = None;
                slot.authority = None;
            }
        }
    }

    /// Publishes a started resource's exports: it answers calls from now on. `lua` is its
    /// engine VM, where the call wrapper is loaded once for the generation.
    ///
    /// # Errors
    /// The wrapper failed to load (out of memory): the resource is not published.
    pub(crate) fn publish(
        &self,
        name: &str,
        lua: &Lua,
        exports: HashMap<Arc<str>, Function>,
        authority: Arc<Authority>,
        deadline: Duration,
    ) -> mlua::Result<()> {
        let wrapper = CALL.load(lua)?;
        if let Some(slot) = self.slots.borrow_mut().get_mut(name) {
            slot.phase = Phase::Running;
            slot.reloading = false;
            slot.exports = exports;
            slot.wrapper = Some(wrapper);
            slot.authority = Some(authority);
            slot.deadline = deadline;
        }
        Ok(())
    }

    /// The phase of `name`, if loaded.
    pub(crate) fn phase(&self, name: &str) -> Option<Phase> {
        self.slots.borrow().get(name).map(|s| s.phase)
    }

    /// Forgets every record: the host is going away.
    pub(crate) fn clear(&self) {
        self.slots.borrow_mut().clear();
    }

    /// Calls `function` of resource `target` with `args`, as resource `caller`: the whole
    /// cross-resource call, answering the results or the error text the caller raises.
    pub(crate) fn call(
        &self,
        caller: &Arc<str>,
        target: &str,
        function: &str,
        args: Vec<Message>,
    ) -> Result<Vec<Message>, String> {
        // Texts are made only for a refusal: a call that passes formats nothing.
        let named = |why: String| format!("{target}.{function}: {why}");
        let (f, wrapper, authority, deadline, target_name) = {
            let slots = self.slots.borrow();
            let Some((target_name, slot)) = slots.get_key_value(target) else {
                return Err(named(format!("no resource named '{target}' is loaded")));
            };
            match (slot.phase, slot.reloading) {
                (Phase::Running, _) => {}
                (Phase::Stopped, _) => {
                    return Err(named(format!("resource '{target}' is stopped")));
                }
                (Phase::Starting, false) => {
                    return Err(named(format!(
                        "resource '{target}' is starting: its exports answer once its scripts have run"
                    )));
                }
                (Phase::Starting, true) | (Phase::Stopping, true) => {
                    return Err(named(format!(
                        "resource '{target}' is reloading: call again once it has started"
                    )));
                }
                (Phase::Stopping, false) => {
                    return Err(named(format!("resource '{target}' is stopping")));
                }
            }
            let Some(f) = slot.exports.get(function) else {
                let mut names: Vec<&str> = slot.exports.keys().map(|k| &**k).collect();
                names.sort_unstable();
                return Err(named(format!(
                    "resource '{target}' does not export '{function}' (its exports: {})",
                    if names.is_empty() {
                        "none".to_owned()
                    } else {
                        names.join(", ")
                    }
                )));
            };
            let (Some(authority), Some(wrapper)) = (slot.authority.clone(), slot.wrapper.clone())
            else {
                return Err(named(format!("resource '{target}' is stopped")));
            };
            (
                f.clone(),
                wrapper,
                authority,
                slot.deadline,
                target_name.clone(),
            )
        };
        let _depth = self.enter(caller, &target_name).map_err(named)?;
        for (i, arg) in args.iter().enumerate() {
            arg.check_within(|| format!("args[{}]", i + 1), MAX_VALUE_DEPTH, false)
                .map_err(|e| named(e.to_string()))?;
        }
        let Some(lua) = f.weak_lua().try_upgrade() else {
            return Err(named(format!("resource '{target}' is stopped")));
        };
        let (ok, results) = {
            let _authority = capability::install(Some(&authority));
            let _run = RunGuard::start(&lua, deadline, RunTokens::default());
            wrapper
                .call::<(bool, MessageArgs)>((f, Variadic::from(args)))
                .map_err(|e| named(error_message(&e)))?
        };
        if !ok {
            let text = match results.0.into_iter().next().map(|a| a.0) {
                Some(Ok(Message::String(s))) => String::from_utf8_lossy(&s).into_owned(),
                _ => "an error that is not a string".to_owned(),
            };
            return Err(named(text));
        }
        let results = results.into_list().map_err(|e| named(renamed(e)))?;
        for (i, result) in results.iter().enumerate() {
            result
                .check_within(|| format!("results[{}]", i + 1), MAX_VALUE_DEPTH, false)
                .map_err(|e| named(e.to_string()))?;
        }
        Ok(results)
    }

    /// Enters one more call of the chain, or refuses the 17th nested one naming the chain.
    fn enter(&self, caller: &Arc<str>, target: &Arc<str>) -> Result<Depth<'_>, String> {
        let mut chain = self.chain.borrow_mut();
        let first = chain.is_empty();
        if first {
            chain.push(caller.clone());
        }
        if chain.len() > MAX_CALL_DEPTH {
            let mut names: Vec<&str> = chain.iter().map(|n| &**n).collect();
            names.push(&**target);
            let text = format!(
                "cross-resource calls nested deeper than {MAX_CALL_DEPTH}: {}",
                names.join(" -> ")
            );
            if first {
                chain.clear();
            }
            return Err(text);
        }
        chain.push(target.clone());
        Ok(Depth {
            chain: &self.chain,
            first,
        })
    }
}

/// One call's place in the chain, given back when the call ends.
struct Depth<'a> {
    chain: &'a RefCell<Vec<Arc<str>>>,
    first: bool,
}

impl Drop for Depth<'_> {
    fn drop(&mut self) {
        let mut chain = self.chain.borrow_mut();
        chain.pop();
        if self.first {
            chain.clear();
        }
    }
}

/// A refusal of the results, named `results[i]` rather than the reader's `args[i]`.
fn renamed(mut e: TransferError) -> String {
    if let Some(rest) = e.path.strip_prefix("args") {
        e.path = format!("results{rest}");
    }
    e.to_string()
}

/// Results as a forwarded answer: `{ ok = true, n = count, values = { ... } }` (`n` keeps the
/// count past nils), or `{ ok = false, err = text }`.
pub(crate) fn answer(result: Result<Vec<Message>, String>) -> Message {
    let key = |k: &str| MapKey::String(bytes::Bytes::copy_from_slice(k.as_bytes()));
    match result {
        Ok(values) => Message::Map(vec![
            (key("ok"), Message::Boolean(true)),
            (key("n"), Message::Number(values.len() as f64)),
            (key("values"), Message::List(values)),
        ]),
        Err(text) => Message::Map(vec![
            (key("ok"), Message::Boolean(false)),
            (key("err"), Message::String(text.into())),
        ]),
    }
}
