//! `jobs.dispatch` as a raw C function: the common call (module and entry strings, arguments,
//! `opts` nil or a table of valid options, `key` included) read straight off the Luau stack,
//! its promise's handle made in place, no `mlua` callback wrapper and no `mlua::Value` per
//! argument or option. Every other call (an option to refuse, a refusal of any kind, an entry
//! string this VM has not interned yet, a userdata among the arguments) is handed whole to the
//! `mlua` function in upvalue 2 (`api.rs`), which answers it or raises its refusal. Both
//! entrances read `opts` through the one parse of `jobs/leaves/options.rs`
//! (`DispatchOptionsReader`) and issue the call through `issue.rs`, so they take the same calls
//! by the same rules. A keyed item its lane refuses (too many keys) is taken back and the call
//! handed over the same way: the lane refused it whole, so the second try meets the same state.
//!
//! # Safety
//!
//! The rule of `vm/promise_handle.rs` holds here: no Rust value that needs dropping is alive
//! across a Luau call that can raise. The call runs in three phases: the handle is made and
//! entered in the VM's table of handles first, while no Rust value exists (a memory error
//! unwinds through this function's plain frame to the script's caller, as any Luau error
//! does); then Rust reads, checks and queues the item, calling only Luau functions that neither
//! allocate nor raise; then, with every Rust value dropped, it answers the handle or hands the
//! call to the slow path. A Rust panic is caught before it reaches Luau.

use std::cell::RefCell;
use std::ffi::{c_int, c_void, CStr};
use std::rc::Rc;
use std::time::Duration;

use mlua::{ffi, Function, Lua};

use super::home::JobsHome;
use super::issue::{queue, Dispatch};
use crate::jobs::leaves::options::{DispatchOptions, DispatchOptionsReader, OptionValue};
use crate::jobs::protocol::job::charge_job;
use crate::value::read::Reader;
use crate::value::Limits;
use crate::vm::promise_handle::{
    self, bind, clone_handle, enter_slot_in, leave_slot_in, push_templates,
};
use crate::vm::{caller_chunk, Resolved, VmCore};

/// What the raw `jobs.dispatch` reaches through its first upvalue: the VM's home and core.
pub(crate) struct DispatchContext {
    home: Rc<JobsHome>,
    core: Rc<VmCore>,
    /// The last module this VM's dispatches resolved: a loop that dispatches to one module
    /// from one file finds it by comparing two short byte strings, not hashing them.
    last: RefCell<Option<LastModule>>,
    /// Whether upvalues 3 and 4 hold the handle template and the table of handles (the VM had
    /// its handle tables when the function was made): the fast path needs them.
    handles: bool,
}

/// The upvalue holding the handle template (`promise_handle::push_templates`).
const TEMPLATE: c_int = 3;
/// The upvalue holding the table of handles by slot.
const SLOTS: c_int = 4;

/// A resolution kept by [`DispatchContext`]: the calling chunk's name and the specifier as
/// bytes, under the module generation it was made in (an edit moves it).
struct LastModule {
    source: Option<Box<[u8]>>,
    spec: Box<[u8]>,
    generation: u64,
    resolved: Resolved,
}

/// Makes `jobs.dispatch`: the raw function with `slow` (the `mlua` dispatch) behind it. The
/// context is kept in the VM's app data, so the pointer the function holds lives as long as the
/// VM.
pub(crate) fn dispatch_function(
    lua: &Lua,
    home: Rc<JobsHome>,
    core: Rc<VmCore>,
    slow: Function,
) -> mlua::Result<Function> {
    let context = Rc::new(DispatchContext {
        handles: promise_handle::tables(&core).is_some(),
        home,
        core,
        last: RefCell::new(None),
    });
    let pointer = Rc::as_ptr(&context).cast_mut().cast::<c_void>();
    let core = context.core.clone();
    lua.set_app_data(context);
    // SAFETY: pushes the four upvalues and the closure inside exec_raw's protected call (two
    // free slots past the ones mlua reserved for the argument).
    unsafe {
        lua.exec_raw::<Function>(slow, |state| {
            ffi::lua_rawcheckstack(state, 3);
            ffi::lua_pushlightuserdata(state, pointer);
            ffi::lua_insert(state, -2);
            match promise_handle::tables(&core) {
                Some(tables) => push_templates(state, tables),
                None => {
                    ffi::lua_pushnil(state);
                    ffi::lua_pushnil(state);
                }
            }
            ffi::lua_pushcclosurek(state, raw_dispatch, c"dispatch".as_ptr(), 4, None);
        })
    }
}

/// The raw `jobs.dispatch`.
///
/// # Safety
/// Called by Luau only, with upvalue 1 the VM's [`DispatchContext`], upvalue 2 the slow path,
/// and upvalues [`TEMPLATE`] and [`SLOTS`] as [`dispatch_function`] set them.
unsafe extern "C-unwind" fn raw_dispatch(state: *mut ffi::lua_State) -> c_int {
    // SAFETY: as documented; the context outlives every call (the VM's app data holds it).
    let context =
        unsafe { &*ffi::lua_touserdata(state, ffi::lua_upvalueindex(1)).cast::<DispatchContext>() };
    // SAFETY: type tests of this call's own arguments.
    let common = unsafe {
        let nargs = ffi::lua_gettop(state);
        (2..=4).contains(&nargs)
            && ffi::lua_type(state, 1) == ffi::LUA_TSTRING
            && ffi::lua_type(state, 2) == ffi::LUA_TSTRING
            && matches!(
                ffi::lua_type(state, 4),
                ffi::LUA_TNONE | ffi::LUA_TNIL | ffi::LUA_TTABLE
            )
    };
    if !(common && context.handles) {
        // SAFETY: no Rust value is alive.
        return unsafe { promise_handle::call_slow(state) };
    }
    let index = context.core.promises.borrow().next_index();
    // SAFETY: phase one: the handle, made while no Rust value is alive (it may raise), and the
    // stack the argument reader needs, reserved now so that its own check allocates nothing.
    let at = unsafe {
        if ffi::lua_checkstack(state, Reader::STACK_NEEDED) == 0 {
            return promise_handle::call_slow(state);
        }
        ffi::lua_settop(state, 4);
        clone_handle(state, ffi::lua_upvalueindex(TEMPLATE));
        let at = ffi::lua_gettop(state);
        enter_slot_in(state, ffi::lua_upvalueindex(SLOTS), at, index);
        at
    };
    let queued = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // SAFETY: phase two: this call's own stack, the handle at `at`.
        unsafe { dispatch_common(state, context, at, index) }
    }))
    .unwrap_or(false);
    if queued {
        return 1;
    }
    // SAFETY: phase three of a call the fast path did not take: nothing was made for the entry
    // it cleared, and no Rust value is alive.
    unsafe {
        leave_slot_in(state, ffi::lua_upvalueindex(SLOTS), index);
        ffi::lua_settop(state, 4);
        promise_handle::call_slow(state)
    }
}

/// Reads, checks and queues the common call; false hands it to the slow path, with nothing
/// made or taken.
///
/// # Safety
/// A raw C function's stack: the module at 1, the entry at 2, the arguments at 3, the unbound
/// handle at `at`, entered under slot `index`. Calls only Luau functions that neither allocate
/// nor raise.
unsafe fn dispatch_common(
    state: *mut ffi::lua_State,
    context: &DispatchContext,
    at: c_int,
    index: u32,
) -> bool {
    let (home, core) = (&*context.home, &*context.core);
    // SAFETY: strings at 1 and 2 (checked by the caller), read in place.
    let (spec, entry_address) = unsafe {
        let spec = string_at(state, 1);
        // The entry is known by its text's address, as `LuaString::to_pointer` answers it.
        let entry = ffi::lua_tolstring(state, 2, std::ptr::null_mut());
        (spec, entry as usize)
    };
    let Some(entry) = home.known_entry(entry_address) else {
        return false;
    };
    // SAFETY: index 4 is nil or a table (checked by the caller); read without allocating.
    let Some(opts) = (unsafe { read_options(state, 4, home.principal.max_deadline) }) else {
        return false;
    };
    // SAFETY: `state` is the running thread; the name is used before this call returns.
    let source = unsafe { caller_chunk(state) };
    let Some(module) = resolve(context, source, spec) else {
        return false;
    };
    let mut reader = Reader::on_state(state, Limits::MAX_MESSAGE_BYTES);
    // SAFETY: index 3 is the arguments' slot (nil when none were given).
    let Ok(args) = (unsafe { reader.read_at(3) }) else {
        return false;
    };
    let budget = &home.principal.job_bytes;
    let call = Dispatch::new(opts, home.target(module, entry), args, reader.weight());
    let Ok(cell) = queue(home, core, call, |n| charge_job(budget, n, "jobs.dispatch")) else {
        return false;
    };
    debug_assert_eq!(cell.index(), index, "the slot the handle was entered under");
    core.promises.borrow_mut().mark_handle(cell.index());
    // SAFETY: the handle is at `at`; binding allocates nothing.
    unsafe { bind(state, at, cell.index()) };
    true
}

/// Reads `opts` (nil or a table at `idx`) through the one parse of dispatch options when every
/// option in it is valid; `None` when the slow path must read it (and word the refusal): an
/// unknown option, a key that is not a string, a value of the wrong kind or out of its range,
/// `supersede` without `key`.
///
/// # Safety
/// `idx` is a valid index of `state` holding nil or a table; two free slots. Raw iteration and
/// reads only: nothing allocates in Luau.
unsafe fn read_options(
    state: *mut ffi::lua_State,
    idx: c_int,
    cap: Duration,
) -> Option<DispatchOptions> {
    // SAFETY: as documented.
    if unsafe { ffi::lua_type(state, idx) } != ffi::LUA_TTABLE {
        return Some(DispatchOptions::defaults(cap));
    }
    let mut reader = DispatchOptions::reader(cap);
    let mut iter: c_int = 0;
    loop {
        // SAFETY: a table; rawiter pushes a key and a value (two free slots), popped below.
        iter = unsafe { ffi::lua_rawiter(state, idx, iter) };
        if iter < 0 {
            break;
        }
        // SAFETY: the key at -2 and the value at -1, read in place, then popped.
        let read = unsafe {
            let read = read_option(state, &mut reader);
            ffi::lua_settop(state, -3);
            read
        };
        if !read {
            return None;
        }
    }
    reader.finish().ok()
}

/// Hands the option whose key is at -2 and value at -1 to `reader`, both read in place; false
/// when the key is not a string or `reader` does not take the option.
///
/// # Safety
/// A key and a value on top of `state`'s stack, alive while `reader` reads them.
unsafe fn read_option(state: *mut ffi::lua_State, reader: &mut DispatchOptionsReader) -> bool {
    // SAFETY: as documented; strings are read in place (a string key is never converted).
    unsafe {
        if ffi::lua_type(state, -2) != ffi::LUA_TSTRING {
            return false;
        }
        let key = string_at(state, -2);
        let value = match ffi::lua_type(state, -1) {
            ffi::LUA_TNUMBER | ffi::LUA_TINTEGER => {
                OptionValue::Number(ffi::lua_tonumberx(state, -1, std::ptr::null_mut()))
            }
            ffi::LUA_TSTRING => OptionValue::String(string_at(state, -1)),
            ffi::LUA_TBOOLEAN => OptionValue::Boolean(ffi::lua_toboolean(state, -1) != 0),
            kind => OptionValue::Other(type_name(state, kind)),
        };
        matches!(reader.option(key, value), Ok(true))
    }
}

/// The name of the Luau type `kind`, as `type()` answers it.
///
/// # Safety
/// `kind` is a type `lua_type` answered on `state`.
unsafe fn type_name(state: *mut ffi::lua_State, kind: c_int) -> &'static str {
    // SAFETY: Luau's type names are static C strings, never freed.
    unsafe { CStr::from_ptr(ffi::lua_typename(state, kind)) }
        .to_str()
        .unwrap_or("value")
}

/// The bytes of the string at `idx`, in place.
///
/// # Safety
/// `idx` holds a string, alive while the slice is used.
unsafe fn string_at<'a>(state: *mut ffi::lua_State, idx: c_int) -> &'a [u8] {
    let mut len = 0usize;
    // SAFETY: as documented: a string is read without conversion or allocation.
    unsafe {
        let data = ffi::lua_tolstring(state, idx, &mut len);
        std::slice::from_raw_parts(data.cast::<u8>(), len)
    }
}

/// The module `spec` names from the chunk `source`: the kept resolution when it is the same
/// call site's, else the VM's resolver (which keeps its own per-VM cache), kept for next time.
fn resolve(context: &DispatchContext, source: Option<&[u8]>, spec: &[u8]) -> Option<Resolved> {
    let modules = &context.core.modules;
    let generation = modules.generation();
    if let Some(last) = &*context.last.borrow() {
        if last.generation == generation && *last.spec == *spec && last.source.as_deref() == source
        {
            return Some(last.resolved.clone());
        }
    }
    let text = std::str::from_utf8(spec).ok()?;
    let resolved = match source.map(std::str::from_utf8) {
        None => modules.resolve(None, text),
        Some(Ok(source)) => modules.resolve(Some(source), text),
        Some(Err(_)) => return None,
    }
    .ok()?;
    *context.last.borrow_mut() = Some(LastModule {
        source: source.map(Box::from),
        spec: Box::from(spec),
        generation: modules.generation(),
        resolved: resolved.clone(),
    });
    Some(resolved)
}
