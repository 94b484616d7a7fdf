//! The export registry of one host: each loaded resource's stage and, while it runs, its
//! exported functions with the authority and deadline they run under; and the one path every
//! cross-resource call takes ([`ExportRegistry::call`], and its faster way for an engine VM's
//! arguments that copies them straight into the callee's VM, [`ExportRegistry::call_copied`]).
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

use std::ffi::c_int;

use mlua::{ffi, Function, Lua, Variadic};

use crate::principal::capability::{self, Authority};
use crate::value::{
    copy_values, Copied, MapKey, Message, MessageArgs, TransferError, SOURCE_STACK_NEEDED,
};
use crate::vm::budget::{CancelToken, RunGuard, RunTokens};
use crate::vm::{error_message, Embedded};

/// Cross-resource calls in progress at once, nested (`a` calls `b`, which calls `c`...), at
/// most: the 17th is refused naming the chain.
pub(crate) const MAX_CALL_DEPTH: usize = 16;

/// How deep tables in a call's arguments and results may nest (a top-level table is 1).
pub(crate) const MAX_VALUE_DEPTH: usize = 16;

/// Where a loaded resource is in its life, as calls into it see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ResourceStage {
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
pub(crate) struct ResourceRecord {
    pub(crate) stage: ResourceStage,
    /// A reload is under way (the old generation stopping or the new one starting).
    pub(crate) reloading: bool,
    /// The declared exports, resolved to functions while running (empty otherwise).
    exports: HashMap<Arc<str>, Function>,
    /// The call wrapper (`call.luau`) in the running generation's VM, loaded once at publish
    /// rather than looked up by name on every call.
    wrapper: Option<Function>,
    authority: Option<Arc<Authority>>,
    /// The engine VM's interrupt token: an export runs with it, so interrupting the
    /// resource's domain stops its exports too.
    halt: Option<Arc<CancelToken>>,
    deadline: Duration,
}

/// The records of every loaded resource and the chain of calls in progress.
#[derive(Default)]
pub(crate) struct ExportRegistry {
    records: RefCell<HashMap<Arc<str>, ResourceRecord>>,
    /// The resources of the calls in progress: the first caller, then each callee.
    chain: RefCell<Vec<Arc<str>>>,
}

/// A call's wrapper in the target VM: `xpcall` with the callee's traceback.
static CALL: Embedded = Embedded::new("=skein resources call", include_str!("call.luau"));

impl ExportRegistry {
    /// Records a loaded resource, stopped.
    pub(crate) fn add(&self, name: &Arc<str>) {
        self.records.borrow_mut().insert(
            name.clone(),
            ResourceRecord {
                stage: ResourceStage::Stopped,
                reloading: false,
                exports: HashMap::new(),
                wrapper: None,
                authority: None,
                halt: None,
                deadline: Duration::ZERO,
            },
        );
    }

    /// Moves a resource to `stage`; leaving `Running` forgets its exports (and with them the
    /// last handles on its VM's functions).
    pub(crate) fn set_stage(&self, name: &str, stage: ResourceStage, reloading: bool) {
        if let Some(record) = self.records.borrow_mut().get_mut(name) {
            record.stage = stage;
            record.reloading = reloading;
            if stage != ResourceStage::Running {
                record.exports.clear();
                record.wrapper = None;
                record.authority = None;
                record.halt = None;
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
        halt: Arc<CancelToken>,
        deadline: Duration,
    ) -> mlua::Result<()> {
        let wrapper = CALL.load(lua)?;
        if let Some(record) = self.records.borrow_mut().get_mut(name) {
            record.stage = ResourceStage::Running;
            record.reloading = false;
            record.exports = exports;
            record.wrapper = Some(wrapper);
            record.authority = Some(authority);
            record.halt = Some(halt);
            record.deadline = deadline;
        }
        Ok(())
    }

    /// The stage of `name`, if loaded.
    pub(crate) fn stage(&self, name: &str) -> Option<ResourceStage> {
        self.records.borrow().get(name).map(|s| s.stage)
    }

    /// Forgets every record: the host is going away.
    pub(crate) fn clear(&self) {
        self.records.borrow_mut().clear();
    }

    /// What a call of `target.function` reaches, or the refusal (texts are made only then).
    fn resolve(&self, target: &str, function: &str) -> Result<Resolved, String> {
        let named = |why: String| format!("{target}.{function}: {why}");
        let records = self.records.borrow();
        let Some((target_name, record)) = records.get_key_value(target) else {
            return Err(named(format!("no resource named '{target}' is loaded")));
        };
        match (record.stage, record.reloading) {
            (ResourceStage::Running, _) => {}
            (ResourceStage::Stopped, _) => {
                return Err(named(format!("resource '{target}' is stopped")));
            }
            (ResourceStage::Starting, false) => {
                return Err(named(format!(
                    "resource '{target}' is starting: its exports answer once its scripts have run"
                )));
            }
            (ResourceStage::Starting, true) | (ResourceStage::Stopping, true) => {
                return Err(named(format!(
                    "resource '{target}' is reloading: call again once it has started"
                )));
            }
            (ResourceStage::Stopping, false) => {
                return Err(named(format!("resource '{target}' is stopping")));
            }
        }
        let Some(f) = record.exports.get(function) else {
            let mut names: Vec<&str> = record.exports.keys().map(|k| &**k).collect();
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
        let (Some(authority), Some(wrapper), Some(halt)) = (
            record.authority.clone(),
            record.wrapper.clone(),
            record.halt.clone(),
        ) else {
            return Err(named(format!("resource '{target}' is stopped")));
        };
        let Some(lua) = f.weak_lua().try_upgrade() else {
            return Err(named(format!("resource '{target}' is stopped")));
        };
        Ok(Resolved {
            f: f.clone(),
            wrapper,
            lua,
            authority,
            halt,
            deadline: record.deadline,
            name: target_name.clone(),
        })
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
        let named = |why: String| format!("{target}.{function}: {why}");
        let to = self.resolve(target, function)?;
        let _depth = self.enter(caller, &to.name).map_err(named)?;
        for (i, arg) in args.iter().enumerate() {
            arg.check_within(|| format!("args[{}]", i + 1), MAX_VALUE_DEPTH, false)
                .map_err(|e| named(e.to_string()))?;
        }
        let answer = {
            let _authority = capability::install(Some(&to.authority));
            let tokens = RunTokens {
                job: None,
                vm: Some(&to.halt),
            };
            let _run = RunGuard::start(&to.lua, to.deadline, tokens);
            to.wrapper
                .call::<(bool, MessageArgs)>((to.f, Variadic::from(args)))
                .map_err(|e| named(error_message(&e)))?
        };
        answered(answer).map_err(named)
    }

    /// [`call`](Self::call) with the `count` arguments at `first..` of `source` (the caller's
    /// engine VM, running this call's callback) copied straight into the target's VM, no
    /// `Message` in between ([`copy_values`]). Answers `None`, having run nothing of the
    /// target, for a call this path does not take: a refusal before the callee runs (the
    /// `Message` path makes it again, in its order, with its text), a value the copy declines,
    /// and a target in the caller's own VM.
    ///
    /// # Safety
    /// `first..first + count` are valid absolute indices of `source`'s stack, which this call
    /// leaves as it found it.
    pub(crate) unsafe fn call_copied(
        &self,
        caller: &Arc<str>,
        target: &str,
        function: &str,
        (source, first, count): (*mut ffi::lua_State, c_int, c_int),
    ) -> Option<Result<Vec<Message>, String>> {
        let to = self.resolve(target, function).ok()?;
        let _depth = self.enter(caller, &to.name).ok()?;
        // SAFETY: reserving the source's stack only grows it (the reader does the same, from
        // the same callback).
        if unsafe { ffi::lua_checkstack(source, SOURCE_STACK_NEEDED) } == 0 {
            return None;
        }
        let mut copied = Copied::Declined;
        let answer = {
            let _authority = capability::install(Some(&to.authority));
            let tokens = RunTokens {
                job: None,
                vm: Some(&to.halt),
            };
            let _run = RunGuard::start(&to.lua, to.deadline, tokens);
            // SAFETY: the closure runs in a protected call on the target's state, with the
            // wrapper and the export as its two arguments; it holds only references and plain
            // values, so a raise (a memory error, or the call's own) skips no destructor. The
            // source belongs to another VM: the caller's main thread is not the target's.
            unsafe {
                to.lua
                    .exec_raw::<(bool, MessageArgs)>((&to.wrapper, &to.f), |state| {
                        if ffi::lua_mainthread(state) == ffi::lua_mainthread(source) {
                            return;
                        }
                        copied = copy_values(source, first, count, state, MAX_VALUE_DEPTH);
                        if copied == Copied::All {
                            ffi::lua_call(state, count + 1, ffi::LUA_MULTRET);
                        }
                    })
            }
        };
        if copied == Copied::Declined {
            return None;
        }
        let named = |why: String| format!("{target}.{function}: {why}");
        Some(
            answer
                .map_err(|e| named(error_message(&e)))
                .and_then(|answer| answered(answer).map_err(named)),
        )
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

/// What a call reaches: the target's export, its VM, and what it runs under.
struct Resolved {
    f: Function,
    wrapper: Function,
    lua: Lua,
    authority: Arc<Authority>,
    halt: Arc<CancelToken>,
    deadline: Duration,
    name: Arc<str>,
}

/// The wrapper's answer (`true, results...` or `false, message-with-traceback`) as the
/// results, checked against the depth bound, or the callee's error text.
fn answered((ok, results): (bool, MessageArgs)) -> Result<Vec<Message>, String> {
    if !ok {
        return Err(match results.0.into_iter().next().map(|a| a.0) {
            Some(Ok(Message::String(s))) => String::from_utf8_lossy(&s).into_owned(),
            _ => "an error that is not a string".to_owned(),
        });
    }
    let results = results.into_list().map_err(renamed)?;
    for (i, result) in results.iter().enumerate() {
        result
            .check_within(|| format!("results[{}]", i + 1), MAX_VALUE_DEPTH, false)
            .map_err(|e| e.to_string())?;
    }
    Ok(results)
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
