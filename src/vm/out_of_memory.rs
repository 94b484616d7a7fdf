//! Out-of-memory texts that name the VM: which VM (the engine's, a pool worker's), its limit,
//! and what was being made when the limit was reached, where that is known.
//!
//! Luau raises its own out-of-memory error with the bare text "not enough memory"; a script that
//! catches it with `pcall` inside Luau sees that text. Every out-of-memory error that reaches
//! Rust (a task that failed with it, a host call that could not allocate) is turned into the
//! text here. The VM also records that it hit its limit, so the layer that keeps it can retire
//! it: tasks that hold its memory would otherwise fail every later job on it.

use std::cell::{Cell, RefCell};
use std::ffi::{c_int, CStr};
use std::time::Instant;

use mlua::{ffi, Lua, LuaString};

use crate::ledger::format_bytes;

/// Who a VM is in out-of-memory texts, its limit, and whether it reached it.
pub(crate) struct MemoryLabel {
    /// "the engine VM", "the VM of worker 2": set by the layer that builds the VM.
    name: RefCell<String>,
    limit: usize,
    /// Set when an out-of-memory error reached Rust from this VM.
    hit: Cell<bool>,
    /// How many out-of-memory errors reached Rust from this VM.
    hits: Cell<u64>,
    /// Set with `hit`, cleared by a full collection that leaves the VM with room (see
    /// `collect_when_full`).
    collect: Cell<bool>,
    /// When the next full collection may run: ten times the last one's length after it, so a
    /// VM that stays full spends at most a tenth of its time collecting.
    next_collect: Cell<Option<Instant>>,
    /// The text an awaited promise's outcome is given when even its own text can't be made:
    /// made while the VM still has memory, so the await raises instead of the host panicking.
    outcome_text: RefCell<LuaString>,
}

/// What the VM was making when an awaited outcome could not be made.
const MAKING_OUTCOME: &str = "the outcome of an awaited promise";

impl MemoryLabel {
    pub(crate) fn new(lua: &Lua, limit: usize) -> mlua::Result<MemoryLabel> {
        let label = MemoryLabel {
            name: RefCell::new("the VM".to_owned()),
            limit,
            hit: Cell::new(false),
            hits: Cell::new(0),
            collect: Cell::new(false),
            next_collect: Cell::new(None),
            outcome_text: RefCell::new(lua.create_string(MAKING_OUTCOME)?),
        };
        label.remake_outcome_text(lua)?;
        Ok(label)
    }

    /// Names the VM ("the engine VM"). Call it before the memory limit is set: it makes the
    /// fallback outcome text anew.
    pub(crate) fn set_name(&self, lua: &Lua, name: String) -> mlua::Result<()> {
        *self.name.borrow_mut() = name;
        self.remake_outcome_text(lua)
    }

    fn remake_outcome_text(&self, lua: &Lua) -> mlua::Result<()> {
        let text = lua.create_string(self.text(Some(MAKING_OUTCOME)))?;
        *self.outcome_text.borrow_mut() = text;
        Ok(())
    }

    /// How the VM is named: "the engine VM", "the VM of worker 2".
    pub(crate) fn vm_name(&self) -> String {
        self.name.borrow().clone()
    }

    /// `out of memory: the engine VM reached its memory limit of 8 MiB[ while making WHAT]`.
    pub(crate) fn text(&self, making: Option<&str>) -> String {
        let mut text = format!(
            "out of memory: {} reached its memory limit of {}",
            self.name.borrow(),
            format_bytes(self.limit)
        );
        if let Some(what) = making {
            text.push_str(" while making ");
            text.push_str(what);
        }
        text
    }

    /// Records that the VM reached its limit and answers the text for it.
    pub(crate) fn hit(&self, making: Option<&str>) -> String {
        self.record_hit();
        self.text(making)
    }

    fn record_hit(&self) {
        self.hit.set(true);
        self.hits.set(self.hits.get() + 1);
        self.collect.set(true);
    }

    /// Runs a full collection when the VM is full: it reached its limit since it was last below
    /// three quarters of it, or it is above three quarters now (a script may catch Luau's own
    /// out-of-memory error, which never reaches Rust). Luau's collector steps only after an
    /// allocation succeeds, so a VM at its limit would never free the garbage that fills it.
    /// Collections are spaced by ten times the last one's length, so a VM that stays full
    /// (with live data) spends at most a tenth of its time collecting. Called after outermost
    /// resumes only: a spawn bomb's nested resumes would each collect a full heap.
    pub(crate) fn collect_when_full(&self, lua: &Lua) {
        if !self.collect.get() && lua.used_memory() <= self.three_quarters() {
            return;
        }
        let start = Instant::now();
        if self.next_collect.get().is_some_and(|next| start < next) {
            return;
        }
        // A full collection frees; it does not fail for want of memory.
        let _ = lua.gc_collect();
        let took = start.elapsed();
        self.next_collect.set(Some(Instant::now() + took * 10));
        if lua.used_memory() <= self.three_quarters() {
            self.collect.set(false);
        }
    }

    fn three_quarters(&self) -> usize {
        self.limit / 4 * 3
    }

    /// How many out-of-memory errors reached Rust from this VM so far.
    pub(crate) fn hits(&self) -> u64 {
        self.hits.get()
    }

    /// Whether an out-of-memory error reached Rust from this VM.
    pub(crate) fn was_hit(&self) -> bool {
        self.hit.get()
    }

    /// The ready-made outcome text, recording that the VM reached its limit.
    pub(crate) fn outcome_text(&self) -> LuaString {
        self.record_hit();
        self.outcome_text.borrow().clone()
    }
}

/// What `collectgarbage` raises for an option other than `"collect"` and `"count"`.
const COLLECT_OPTIONS: &CStr =
    c"collectgarbage: the option must be \"collect\" (a full collection) or \"count\" (the KiB in use)";

/// Puts Skein's `collectgarbage` in the VM's globals: `"count"` as Luau has it, and
/// `"collect"`, which mlua refuses in a sandboxed VM. A script that caught `not enough memory`
/// and dropped what it held can then free it without waiting for its task to yield. Call it
/// before the globals are made read-only.
pub(crate) fn install_collectgarbage(lua: &Lua) -> mlua::Result<()> {
    // SAFETY: `collect_garbage` follows the C function contract: it reads its arguments, pushes
    // at most one value and raises only through Luau.
    let function = unsafe { lua.create_c_function(collect_garbage) }?;
    lua.globals().raw_set("collectgarbage", function)
}

/// `collectgarbage(option?)`. A C function, not an mlua callback, so a VM at its memory limit
/// can call it: reading a constant option and collecting allocate nothing.
unsafe extern "C-unwind" fn collect_garbage(state: *mut ffi::lua_State) -> c_int {
    // SAFETY: Luau calls us with a valid `state`. Nothing with a destructor is live when a
    // raise leaves this frame: `option` borrows a string the stack keeps.
    unsafe {
        let option = CStr::from_ptr(ffi::luaL_optstring(state, 1, c"collect".as_ptr()));
        match option.to_bytes() {
            b"collect" => {
                ffi::lua_gc(state, ffi::LUA_GCCOLLECT, 0);
                0
            }
            b"count" => {
                let kib = ffi::lua_gc(state, ffi::LUA_GCCOUNT, 0) as ffi::lua_Number;
                let rest = ffi::lua_gc(state, ffi::LUA_GCCOUNTB, 0) as ffi::lua_Number;
                ffi::lua_pushnumber(state, kib + rest / 1024.0);
                1
            }
            _ => {
                ffi::lua_pushstring(state, COLLECT_OPTIONS.as_ptr());
                ffi::lua_error(state)
            }
        }
    }
}

/// Whether `err` is (or wraps) Luau's out-of-memory error.
pub(crate) fn is_memory_error(err: &mlua::Error) -> bool {
    match err {
        mlua::Error::MemoryError(_) => true,
        mlua::Error::CallbackError { cause, .. } | mlua::Error::WithContext { cause, .. } => {
            is_memory_error(cause)
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_text_names_the_vm_its_limit_and_what_was_made() {
        let lua = Lua::new();
        let label = MemoryLabel::new(&lua, 8 << 20).unwrap();
        assert_eq!(
            label.text(None),
            "out of memory: the VM reached its memory limit of 8 MiB"
        );
        label
            .set_name(&lua, "the VM of worker 3".to_owned())
            .unwrap();
        assert!(!label.hit.get());
        assert_eq!(
            label.hit(Some("a task for task.spawn")),
            "out of memory: the VM of worker 3 reached its memory limit of 8 MiB while making \
             a task for task.spawn"
        );
        assert!(label.hit.get());
        assert_eq!(
            label.outcome_text().to_str().unwrap(),
            "out of memory: the VM of worker 3 reached its memory limit of 8 MiB while making \
             the outcome of an awaited promise"
        );
    }

    #[test]
    #[allow(clippy::arc_with_non_send_sync)] // mlua's own wrapper holds its cause in an Arc
    fn a_memory_error_is_found_inside_the_wrappers() {
        let oom = mlua::Error::MemoryError("not enough memory".to_owned());
        let wrapped = mlua::Error::CallbackError {
            traceback: String::new(),
            cause: std::sync::Arc::new(oom.clone()),
        };
        assert!(is_memory_error(&oom));
        assert!(is_memory_error(&wrapped));
        assert!(!is_memory_error(&mlua::Error::runtime("not enough memory")));
    }
}
