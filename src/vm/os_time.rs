//! `os.time` with its date fields bounded: Luau's own computes the date in 32-bit `int`s, so a
//! year like `1e9` overflows them and answers a number that is no time at all. Skein's checks
//! each field of a date table first, refusing one past what the computation holds (naming the
//! field, its bound and its value), then runs Luau's own in the same call, so every date within
//! the bounds answers exactly what Luau answers (nil before 1970, fields past their usual range
//! carried over, as `month = 13` is next January), with Luau's own errors (a missing `day`).

use std::ffi::{c_int, CStr};

use mlua::{ffi, Function, Lua, Table};

/// The most a `year`, `month` or `day` field may be, either side of 0: 1,000,000. Within it
/// Luau's day count stays far inside a 32-bit `int`.
const MAX_DATE_FIELD: i64 = 1_000_000;

/// The fields of a date table, each with its bound either side of 0. `hour`, `min` and `sec`
/// are counted in 64 bits, so each may be any 32-bit `int` (but its least), as Luau reads it.
const FIELDS: [(&CStr, i64); 6] = [
    (c"year", MAX_DATE_FIELD),
    (c"month", MAX_DATE_FIELD),
    (c"day", MAX_DATE_FIELD),
    (c"hour", i32::MAX as i64),
    (c"min", i32::MAX as i64),
    (c"sec", i32::MAX as i64),
];

/// Puts the bounded `os.time` in the VM's `os` library. Call it before the sandbox makes the
/// library read-only.
pub(crate) fn install(lua: &Lua) -> mlua::Result<()> {
    let os: Table = lua.globals().raw_get("os")?;
    let luau: Function = os.raw_get("time")?;
    // SAFETY: inside exec_raw's protected call, with Luau's function pushed as its argument
    // and the free slots mlua reserved: the closure takes it as its one upvalue.
    let bounded = unsafe {
        lua.exec_raw::<Function>(luau, |state| {
            ffi::lua_pushcclosurek(state, bounded_time, c"time".as_ptr(), 1, None);
        })
    }?;
    os.raw_set("time", bounded)
}

/// `os.time(date?)`: each field of a date table that Luau would read as a number (a number, or
/// a string that reads as one) has its whole part within its bound, or the call raises naming
/// it; then Luau's own `os.time` (upvalue 1) runs in this same frame, so its errors name the
/// same function and the same caller they always did.
unsafe extern "C-unwind" fn bounded_time(state: *mut ffi::lua_State) -> c_int {
    // SAFETY: Luau calls us with a valid `state`, with room for LUA_MINSTACK pushes. Nothing
    // with a destructor is live when a raise leaves this frame: the refusal's text is pushed
    // and dropped before `lua_error`.
    unsafe {
        if ffi::lua_type(state, 1) == ffi::LUA_TTABLE {
            for (field, bound) in FIELDS {
                ffi::lua_rawgetfield(state, 1, field.as_ptr());
                let mut is_number = 0;
                let n = ffi::lua_tonumberx(state, -1, &mut is_number);
                let whole = n.trunc();
                if is_number != 0 && !(whole >= -(bound as f64) && whole <= bound as f64) {
                    refuse(state, field, bound);
                }
                ffi::lua_pop(state, 1);
            }
        }
        match ffi::lua_tocfunction(state, ffi::lua_upvalueindex(1)) {
            Some(luau) => luau(state),
            None => 0,
        }
    }
}

/// Raises the refusal of `field`, whose value is on top of the stack, as `luaL_error` would:
/// the caller's position first.
///
/// # Safety
/// Called from [`bounded_time`] only, with the field's value on top of `state`'s stack.
unsafe fn refuse(state: *mut ffi::lua_State, field: &CStr, bound: i64) -> ! {
    // SAFETY: as the caller's contract; `lua_tolstring` turns the slot (our own copy) into the
    // number's text as Luau prints it (`1e+300`, `nan`), or answers the string's own bytes.
    unsafe {
        let mut len = 0;
        let got = ffi::lua_tolstring(state, -1, &mut len);
        let got = String::from_utf8_lossy(std::slice::from_raw_parts(got.cast::<u8>(), len));
        let text = format!(
            "os.time: field '{}' must be within -{bound} to {bound}, got {got}",
            field.to_string_lossy()
        );
        ffi::luaL_where(state, 1);
        ffi::lua_pushlstring(state, text.as_ptr().cast(), text.len());
        drop(text);
        drop(got);
        ffi::lua_concat(state, 2);
        ffi::lua_error(state)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use mlua::Value;

    use crate::vm::{Plan, Vm};

    /// What `expr` answers in a VM Skein built, or the text it raised, as a script reads it
    /// (a call through `pcall` names no caller's position).
    fn run(expr: &str) -> String {
        let vm = Vm::build(
            &Plan::new(),
            Box::new(|_, _| {}),
            Duration::from_secs(5),
            |_| Ok(()),
        )
        .unwrap();
        let chunk = format!(
            "local ok, got = {expr} \
             return if ok then `{{got}}` else `raised {{got}}`"
        );
        match vm
            .lua
            .load(chunk)
            .set_name("=chunk")
            .eval::<Value>()
            .unwrap()
        {
            Value::String(s) => s.to_string_lossy(),
            other => panic!("{other:?}"),
        }
    }

    fn refusal(field: &str, bound: i64, got: &str) -> String {
        format!("raised os.time: field '{field}' must be within -{bound} to {bound}, got {got}")
    }

    #[test]
    fn each_field_is_taken_at_its_bound_and_refused_one_past_it() {
        let date = |year: &str, month: &str, day: &str, sec: &str| {
            run(&format!(
                "pcall(os.time, {{ year = {year}, month = {month}, day = {day}, hour = 0, \
                 sec = {sec} }})"
            ))
        };
        // Luau's answers within the bounds: the year 1,000,000, and 2^31 - 1 seconds into
        // 2024; a date before 1970 is nil.
        assert_eq!(date("1e6", "1", "1", "0"), "31494784780800");
        assert_eq!(date("2024", "1", "1", "2147483647"), "3851550847");
        assert_eq!(date("-1e6", "1", "1", "0"), "nil");
        assert_eq!(date("1970", "1e6", "1", "0"), "2629743235200");
        assert_eq!(date("1970", "-1e6", "1", "0"), "nil");
        assert_eq!(date("1970", "1", "1e6", "0"), "86399913600");
        assert_eq!(date("1970", "1", "-1e6", "0"), "nil");
        // One past: refused naming the field and the value, as Luau prints it.
        assert_eq!(
            date("1e6 + 1", "1", "1", "0"),
            refusal("year", 1_000_000, "1000001")
        );
        assert_eq!(
            date("-1e6 - 1", "1", "1", "0"),
            refusal("year", 1_000_000, "-1000001")
        );
        assert_eq!(
            date("1970", "1e6 + 1", "1", "0"),
            refusal("month", 1_000_000, "1000001")
        );
        assert_eq!(
            date("1970", "1", "-1e6 - 1", "0"),
            refusal("day", 1_000_000, "-1000001")
        );
        assert_eq!(
            date("2024", "1", "1", "2^31"),
            refusal("sec", i32::MAX as i64, "2147483648")
        );
        // The overflow that answered a time that is no time: 1e9, 1e300, NaN, and a string
        // that reads as a number, as Luau's own reads it.
        assert_eq!(
            date("1e9", "1", "1", "0"),
            refusal("year", 1_000_000, "1000000000")
        );
        assert_eq!(
            date("1e300", "1", "1", "0"),
            refusal("year", 1_000_000, "1e+300")
        );
        assert_eq!(
            date("0/0", "1", "1", "0"),
            refusal("year", 1_000_000, "nan")
        );
        assert_eq!(
            date("'1e9'", "1", "1", "0"),
            refusal("year", 1_000_000, "1e9")
        );
        // A fraction is cut as Luau cuts it: 1,000,000.5 is the year 1,000,000.
        assert_eq!(date("1e6 + 0.5", "1", "1", "0"), "31494784780800");
    }

    #[test]
    fn everything_else_is_luau_s_own() {
        assert_eq!(
            run("pcall(os.time, { year = 2000, month = 1, day = 1 })"),
            "946728000"
        );
        assert_eq!(
            run("pcall(os.time, { year = 2000, month = 1 })"),
            "raised field 'day' missing in date table"
        );
        assert_eq!(
            run("pcall(os.time, 5)"),
            "raised invalid argument #1 to 'time' (table expected, got number)"
        );
        assert_eq!(run("true, type(os.time())"), "number");
        // Called from a script, a refusal names the caller's position, as Luau's own errors do.
        assert_eq!(
            run("pcall(function() return os.time({ year = 1e9, month = 1, day = 1 }) end)"),
            "raised chunk:1: os.time: field 'year' must be within -1000000 to 1000000, got \
             1000000000"
        );
        // The table a refusal names is left as it was.
        assert_eq!(
            run(
                "true, (function() local d = { year = 1e9, month = 1, day = 1 } \
                 pcall(os.time, d) return `{d.year} {d.month} {d.day}` end)()"
            ),
            "1000000000 1 1"
        );
    }
}
