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

use mlua::{ffi, Lua, LuaString, Table, WeakLua};

use super::caught_error;
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
    /// Set while the collector is paced for a heap past half its limit (see
    /// [`pace`](Self::pace)).
    paced: Cell<bool>,
    /// Set while the VM may use its reserve (see [`reserve`](MemoryLabel::reserve)).
    reserve_open: Cell<bool>,
    /// The VM, to move its allocator's limit when the reserve opens and closes.
    lua: WeakLua,
    /// The text an awaited promise's outcome is given when even its own text can't be made:
    /// made while the VM still has memory, so the await raises instead of the host panicking.
    outcome_text: RefCell<LuaString>,
    /// Slot 1 holds the text `pcall` and `xpcall` answer for a caught out-of-memory error
    /// ([`text`](Self::text) without what was made), made ahead for the same reason; the table
    /// is the upvalue of the prelude's `caughtOutOfMemory`, so a new name reaches it. Slot 2
    /// holds the function that turns a caught Rust error into its text
    /// ([`caught_error::TEXT_SLOT`]).
    caught_text: Table,
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
            paced: Cell::new(false),
            reserve_open: Cell::new(false),
            lua: lua.weak(),
            outcome_text: RefCell::new(lua.create_string(MAKING_OUTCOME)?),
            caught_text: lua.create_table()?,
        };
        label
            .caught_text
            .raw_set(caught_error::TEXT_SLOT, caught_error::text_function(lua)?)?;
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
        self.caught_text.raw_set(1, self.text(None))
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
    /// half of it, or it is above half now (a script may catch Luau's own
    /// out-of-memory error, which never reaches Rust). Luau's collector steps only after an
    /// allocation succeeds, so a VM at its limit would never free the garbage that fills it.
    /// Collections are spaced by ten times the last one's length, so a VM that stays full
    /// (with live data) spends at most a tenth of its time collecting. Called after outermost
    /// resumes only: a spawn bomb's nested resumes would each collect a full heap.
    pub(crate) fn collect_when_full(&self, lua: &Lua) {
        if !self.collect.get() && lua.used_memory() <= self.half() {
            if self.paced.get() || self.reserve_open.get() {
                // SAFETY: `lua.state()` is the VM's state, on its own thread, between resumes.
                unsafe { self.pace(lua.state()) };
            }
            return;
        }
        let start = Instant::now();
        if self.next_collect.get().is_some_and(|next| start < next) {
            return;
        }
        // SAFETY: as above; a full collection frees, it does not fail for want of memory.
        unsafe { self.collect_and_pace(lua.state()) };
        let took = start.elapsed();
        self.next_collect.set(Some(Instant::now() + took * 10));
        if lua.used_memory() <= self.half() {
            self.collect.set(false);
        }
    }

    /// Paces the collector after a full collection, from how full it left the VM. Under half
    /// the limit the collector keeps Luau's own pacing (a cycle when the heap has doubled).
    /// Above it, each cycle ends a quarter of the way from the live heap to the limit, and each
    /// step finishes its phase. Luau collects only as allocations
    /// step it, a step's work is set by its size rather than by the bytes allocated since the
    /// last one, and the limit raises `not enough memory` without collecting: with Luau's own
    /// pacing, what a script drops in a VM whose live heap is past half its limit is found
    /// only after the limit is reached. The cost is a full cycle per quarter of the room left,
    /// and only while the heap stays past half its limit.
    ///
    /// # Safety
    /// `state` is this VM's state, used on its own thread and not inside a collection step.
    unsafe fn pace(&self, state: *mut ffi::lua_State) {
        let limit = self.limit;
        // SAFETY: as the caller promises.
        unsafe {
            let used = (ffi::lua_gc(state, ffi::LUA_GCCOUNT, 0) as usize) << 10;
            let near = used > limit / 2;
            let (goal, step_kib, step_mul) = if near {
                // The next cycle ends a quarter of the way from the live heap to the limit.
                let goal =
                    (100 * (used + (limit - used.min(limit)) / 4) as u128 / used as u128) as usize;
                (
                    goal.clamp(NEAREST_GC_GOAL, LUAU_GC_GOAL),
                    (limit >> 16).max(LUAU_GC_STEP_KIB),
                    MOST_GC_STEP_MUL,
                )
            } else {
                (LUAU_GC_GOAL, LUAU_GC_STEP_KIB, LUAU_GC_STEP_MUL)
            };
            ffi::lua_gc(state, ffi::LUA_GCSETGOAL, goal as c_int);
            ffi::lua_gc(state, ffi::LUA_GCSETSTEPSIZE, step_kib as c_int);
            ffi::lua_gc(state, ffi::LUA_GCSETSTEPMUL, step_mul as c_int);
            self.paced.set(near);
            self.close_reserve_if_room(used);
        }
    }

    /// A full collection, then [`pace`](Self::pace).
    ///
    /// # Safety
    /// As for [`pace`](Self::pace); the collection may free anything no longer reachable.
    unsafe fn collect_and_pace(&self, state: *mut ffi::lua_State) {
        // SAFETY: as the caller promises.
        unsafe {
            // Paced first from the heap as it is: a full collection places the next cycle by
            // the goal it runs under, so a VM it leaves past half its limit starts that cycle
            // soon after, not at twice its heap.
            self.pace(state);
            ffi::lua_gc(state, ffi::LUA_GCCOLLECT, 0);
            self.pace(state);
        }
    }

    /// The last sixteenth of the VM's limit (at least 64 KiB), kept back from the script until
    /// it catches an out-of-memory error. Luau raises `not enough memory` without collecting,
    /// and the code that caught it can only free what it holds by dropping it and allocating
    /// on while the collector finds it; without room to allocate in, its very next allocation
    /// would fail again. The whole limit is what the VM holds on the pool's memory.
    pub(crate) fn reserve(&self) -> usize {
        (self.limit / 16).max(64 << 10).min(self.limit / 2)
    }

    /// The limit the VM's allocator enforces while the reserve is closed.
    pub(crate) fn allocator_limit(&self) -> usize {
        self.limit - self.reserve()
    }

    /// Opens the reserve: the allocator may use the whole limit. Called when a script catches
    /// an out-of-memory error.
    fn open_reserve(&self) {
        if !self.reserve_open.replace(true) {
            self.set_allocator_limit(self.limit);
        }
    }

    /// Closes the reserve once the heap is back under three quarters of the allocator's limit.
    fn close_reserve_if_room(&self, used: usize) {
        if self.reserve_open.get() && used <= self.allocator_limit() / 4 * 3 {
            self.reserve_open.set(false);
            self.set_allocator_limit(self.allocator_limit());
        }
    }

    fn set_allocator_limit(&self, bytes: usize) {
        if let Some(lua) = self.lua.try_upgrade() {
            // The limit can always be set on a VM built with one (mlua's own allocator).
            let _ = lua.set_memory_limit(bytes);
        }
    }

    fn half(&self) -> usize {
        self.limit / 2
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

/// Luau's own collector goal: a cycle starts when the heap has doubled since the last one.
const LUAU_GC_GOAL: usize = 200;

/// The lowest goal [`MemoryLabel::pace`] sets: a cycle at least every 1% of growth.
const NEAREST_GC_GOAL: usize = 101;

/// Luau's own step: the collector steps every KiB allocated.
const LUAU_GC_STEP_KIB: usize = 1;

/// Luau's own step multiplier: each step does twice the work of the bytes it is for.
const LUAU_GC_STEP_MUL: usize = 200;

/// The most work one step may do, as a multiple (in percent) of its size.
const MOST_GC_STEP_MUL: usize = 100_000;

/// Pushes `function` as a C closure whose upvalue 1 is `label` (a light userdata) and upvalue 2
/// the table holding the caught text, and answers it.
///
/// # Safety
/// `label` must outlive every call of the closure: it is the label of the VM the closure is
/// made in, which the VM's core keeps for the VM's whole life.
unsafe fn label_closure(
    lua: &Lua,
    label: &MemoryLabel,
    function: ffi::lua_CFunction,
    continuation: Option<ffi::lua_Continuation>,
    name: &'static CStr,
) -> mlua::Result<mlua::Function> {
    let pointer = std::ptr::from_ref(label)
        .cast_mut()
        .cast::<std::ffi::c_void>();
    // SAFETY: pushes the upvalues and the closure inside exec_raw's protected call (one free
    // slot past the one mlua reserved for the argument).
    unsafe {
        lua.exec_raw::<mlua::Function>(label.caught_text.clone(), |state| {
            ffi::lua_rawcheckstack(state, 2);
            ffi::lua_pushlightuserdata(state, pointer);
            ffi::lua_insert(state, -2);
            ffi::lua_pushcclosurek(state, function, name.as_ptr(), 2, continuation);
        })
    }
}

/// The label a closure made by [`label_closure`] was made for.
///
/// # Safety
/// Called from such a closure only, on its VM's thread.
unsafe fn closure_label<'a>(state: *mut ffi::lua_State) -> &'a MemoryLabel {
    // SAFETY: upvalue 1 is the label's address, which outlives the closure's calls.
    unsafe { &*ffi::lua_touserdata(state, ffi::lua_upvalueindex(1)).cast::<MemoryLabel>() }
}

/// Makes the prelude's `caughtOutOfMemory(collect)`: what `pcall` and `xpcall` call when the
/// error they caught is Luau's out-of-memory error. It opens the VM's reserve (see
/// [`MemoryLabel::reserve`]) and answers the text naming the VM and its limit, made ahead so
/// answering allocates nothing; with `collect` true it first runs a full collection, which
/// frees what the failed call held (its frames are gone by then), and paces the collector (see
/// [`MemoryLabel::pace`]).
pub(crate) fn caught_function(lua: &Lua, label: &MemoryLabel) -> mlua::Result<mlua::Function> {
    // SAFETY: `label` is the VM core's own, which lives as long as the VM.
    unsafe { label_closure(lua, label, caught_out_of_memory, None, c"caughtOutOfMemory") }
}

unsafe extern "C-unwind" fn caught_out_of_memory(state: *mut ffi::lua_State) -> c_int {
    // SAFETY: Luau calls us with a valid `state` and the upvalues `label_closure` set; the
    // collection and the reads allocate nothing, so nothing here raises.
    unsafe {
        let label = closure_label(state);
        label.open_reserve();
        if ffi::lua_toboolean(state, 1) != 0 {
            label.collect_and_pace(state);
        }
        ffi::lua_rawgeti(state, ffi::lua_upvalueindex(2), 1);
        1
    }
}

/// Puts Skein's `pcall` in the VM's globals: Luau's, through the same yieldable protected call
/// Luau's own uses, except that an out-of-memory error it catches opens the VM's reserve, is
/// collected after (the failed call's frames are gone by then) and reads as the text naming
/// the VM and its limit. Call it before the globals are made read-only.
pub(crate) fn install_pcall(lua: &Lua, label: &MemoryLabel) -> mlua::Result<()> {
    // SAFETY: `label` is the VM core's own, which lives as long as the VM.
    let function = unsafe {
        label_closure(
            lua,
            label,
            protected_call,
            Some(protected_call_done),
            c"pcall",
        )
    }?;
    lua.globals().raw_set("pcall", function)
}

/// `pcall(f, ...)`: calls `f` with the rest under a protected call that may yield.
unsafe extern "C-unwind" fn protected_call(state: *mut ffi::lua_State) -> c_int {
    // SAFETY: Luau calls us with a valid `state`; `luaL_checkany` raises through Luau with
    // nothing of ours live, and `lua_pcallyieldable` runs `protected_call_done` when the call
    // ends, now or after the yields it makes.
    unsafe {
        ffi::luaL_checkany(state, 1);
        ffi::lua_pcallyieldable(state, ffi::lua_gettop(state) - 1, ffi::LUA_MULTRET, 0)
    }
}

/// `pcall`'s continuation: `true` and the results, or `false` and the error.
unsafe extern "C-unwind" fn protected_call_done(
    state: *mut ffi::lua_State,
    status: c_int,
) -> c_int {
    // SAFETY: Luau calls us with the frame `protected_call` made: its results (or the error
    // object) on the stack and its upvalues from `label_closure`. Only `lua_rawcheckstack` may
    // allocate, and raise, as in Luau's own `pcall`; nothing of ours is live then.
    unsafe {
        ffi::lua_rawcheckstack(state, 1);
        if status == ffi::LUA_OK {
            ffi::lua_pushboolean(state, 1);
            ffi::lua_insert(state, 1);
            return ffi::lua_gettop(state);
        }
        if status == ffi::LUA_ERRMEM {
            let label = closure_label(state);
            label.open_reserve();
            ffi::lua_pop(state, 1);
            label.collect_and_pace(state);
            ffi::lua_rawgeti(state, ffi::lua_upvalueindex(2), 1);
        } else {
            caught_error::replace_with_text(state, ffi::lua_upvalueindex(2));
        }
        ffi::lua_pushboolean(state, 0);
        ffi::lua_insert(state, -2);
        2
    }
}

/// What `collectgarbage` raises for an option other than `"collect"` and `"count"`.
const COLLECT_OPTIONS: &CStr =
    c"collectgarbage: the option must be \"collect\" (a full collection) or \"count\" (the KiB in use)";

/// Puts Skein's `collectgarbage` in the VM's globals: `"count"` as Luau has it, and
/// `"collect"`, which mlua refuses in a sandboxed VM. A script that caught `not enough memory`
/// and dropped what it held can then free it without waiting for its task to yield. Call it
/// before the globals are made read-only.
pub(crate) fn install_collectgarbage(lua: &Lua, label: &MemoryLabel) -> mlua::Result<()> {
    // SAFETY: `label` is the VM core's own, which lives as long as the VM.
    let function = unsafe { label_closure(lua, label, collect_garbage, None, c"collectgarbage") }?;
    lua.globals().raw_set("collectgarbage", function)
}

/// `collectgarbage(option?)`. A C function, not an mlua callback, so a VM at its memory limit
/// can call it: reading a constant option and collecting allocate nothing.
unsafe extern "C-unwind" fn collect_garbage(state: *mut ffi::lua_State) -> c_int {
    // SAFETY: Luau calls us with a valid `state` and the upvalues `label_closure` set. Nothing
    // with a destructor is live when a raise leaves this frame: `option` borrows a string the
    // stack keeps.
    unsafe {
        let option = CStr::from_ptr(ffi::luaL_optstring(state, 1, c"collect".as_ptr()));
        match option.to_bytes() {
            b"collect" => {
                closure_label(state).collect_and_pace(state);
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
