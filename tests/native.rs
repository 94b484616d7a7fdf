//! Native code: which modules a VM runs as machine code in each `NativeMode`, on the engine and
//! on workers, and what the stats say. (The deadline, cancel and memory tests run in both modes
//! where they stand, through `in_both_modes!`.)

use std::ffi::c_int;
use std::time::Duration;

use skein::{mlua, Message, NativeMode, Plan, Pool};

use crate::support::{list, text, wait_until, Tree};

extern "C-unwind" {
    /// Luau's `lua_incustomexecution`: whether the call frame `level` runs native code.
    fn lua_incustomexecution(state: *mut mlua::ffi::lua_State, level: c_int) -> c_int;
}

/// A plan with `inNative()`: whether the Luau function that calls it runs as native code.
fn probing(mode: NativeMode) -> Plan {
    Plan::new().native(mode).function("inNative", |lua, _| {
        // SAFETY: `exec_raw` hands the running state; the query reads call frames only. The
        // levels cover the caller behind mlua's own frames for the host function.
        let native = unsafe {
            lua.exec_raw::<bool>((), |state| {
                let any = (0..4).any(|level| lua_incustomexecution(state, level) != 0);
                mlua::ffi::lua_pushboolean(state, c_int::from(any));
            })
        }?;
        lua.pack_multi(native)
    })
}

/// Each module answers from `probe()` whether it ran native, from a loop (Luau leaves a
/// function without loops at the top level interpreted).
const MODULES: &[(&str, &str)] = &[
    (
        "plain.luau",
        "local M = {}\nfunction M.probe() local n = 0 for i = 1, 3 do n += i end return inNative() end\nreturn M\n",
    ),
    (
        "hot.luau",
        "--!native\nlocal M = {}\nfunction M.probe() local n = 0 for i = 1, 3 do n += i end return inNative() end\nreturn M\n",
    ),
    (
        "marked.luau",
        "local M = {}\n@native\nfunction M.probe() local n = 0 for i = 1, 3 do n += i end return inNative() end\nfunction M.other() return inNative() end\nreturn M\n",
    ),
    (
        // Mentions of the annotations in strings and comments below the code are not annotations.
        "mentions.luau",
        "local M = {}\nM.text = '@native --!native'\n--!native\nfunction M.probe() local n = 0 for i = 1, 3 do n += i end return inNative() end\nreturn M\n",
    ),
];

/// Whether `module.probe` (or `module.entry`) runs native in a job and in the engine VM.
fn native_in(mode: NativeMode, module: &str, entry: &str) -> (bool, bool) {
    let tree = Tree::new(MODULES);
    let pool = Pool::new(1);
    let domain = tree.domain_with(&pool, probing(mode));
    let worker = domain
        .eval(&format!(
            r#"return jobs.dispatch("./{module}", "{entry}"):await()"#
        ))
        .expect("job");
    let engine = domain
        .eval(&format!(r#"return require("./{module}").{entry}()"#))
        .expect("engine");
    (
        worker == Message::Boolean(true),
        engine == Message::Boolean(true),
    )
}

#[test]
fn each_mode_runs_native_what_it_names_on_workers_and_the_engine() {
    let generator = NativeMode::code_generator().is_some();
    let rows = [
        (NativeMode::Off, "plain", "probe", false),
        (NativeMode::Off, "hot", "probe", false),
        (NativeMode::Off, "marked", "probe", false),
        (NativeMode::Annotated, "plain", "probe", false),
        (NativeMode::Annotated, "hot", "probe", true),
        (NativeMode::Annotated, "marked", "probe", true),
        // Only the marked function of a module that marks functions.
        (NativeMode::Annotated, "marked", "other", false),
        (NativeMode::Annotated, "mentions", "probe", false),
        (NativeMode::All, "plain", "probe", true),
        (NativeMode::All, "mentions", "probe", true),
        (NativeMode::All, "hot", "probe", true),
        // As Luau decides: a module that marks functions has only those compiled.
        (NativeMode::All, "marked", "other", false),
    ];
    for (mode, module, entry, native) in rows {
        let expected = native && generator;
        assert_eq!(
            native_in(mode, module, entry),
            (expected, expected),
            "{mode} {module}.{entry}"
        );
    }
}

#[test]
fn a_worker_keeps_running_native_as_modules_load_and_add_globals_and_stops_once_one_shadows_a_library(
) {
    let generator = NativeMode::code_generator().is_some();
    let mut files = MODULES.to_vec();
    files.push((
        "setter.luau",
        "shared = 1\nreturn { nothing = function() end }\n",
    ));
    files.push((
        "shadow.luau",
        "type = type\nreturn { nothing = function() end }\n",
    ));
    files.push((
        "quiet.luau",
        "local x = 1\nreturn { nothing = function() return x end }\n",
    ));
    let tree = Tree::new(&files);
    let pool = Pool::new(1);
    let domain = tree.domain_with(&pool, probing(NativeMode::Annotated));
    // Each module's top level runs with the worker's globals opened; one that leaves them as
    // it found them keeps the VM a safe environment, so native code keeps running.
    let v = domain
        .eval(
            r#"
            local first = jobs.dispatch("./hot", "probe"):await()
            jobs.dispatch("./quiet", "nothing"):await()
            local after = jobs.dispatch("./hot", "probe"):await()
            return { first, after }
            "#,
        )
        .expect("jobs");
    let answers: Vec<_> = list(&v).to_vec();
    assert_eq!(
        answers,
        [Message::Boolean(generator), Message::Boolean(generator)]
    );
    // A top level that adds a global changes no value Luau resolved when it loaded a chunk:
    // native code keeps running.
    let v = domain
        .eval(
            r#"
            jobs.dispatch("./setter", "nothing"):await()
            return jobs.dispatch("./hot", "probe"):await()
            "#,
        )
        .expect("jobs");
    assert_eq!(v, Message::Boolean(generator));
    // One that shadows a library global gives up the safe environment for the VM's life: Luau
    // runs it all interpreted from there, correct but slower.
    let v = domain
        .eval(
            r#"
            jobs.dispatch("./shadow", "nothing"):await()
            return jobs.dispatch("./hot", "probe"):await()
            "#,
        )
        .expect("jobs");
    assert_eq!(v, Message::Boolean(false));
}

#[test]
fn jobs_stats_and_pool_stats_say_which_code_runs() {
    let tree = Tree::new(&[]);
    let pool = Pool::new(2);
    for mode in [NativeMode::Off, NativeMode::Annotated, NativeMode::All] {
        let domain = tree.domain_with(&pool, Plan::new().native(mode));
        let v = domain
            .eval("local rows = jobs.stats() return { rows[1].native, rows[2].native }")
            .expect("stats");
        let said: Vec<String> = list(&v).iter().map(text).collect();
        assert_eq!(said, [mode.in_use(), mode.in_use()]);
    }
    for row in pool.stats() {
        assert_eq!(row.code_generator, NativeMode::code_generator());
    }
}

/// `Pool::stats()` and `jobs.stats()` count the native code a worker's VMs hold, and
/// `ScriptDomain::stats()` the engine VM's: nothing until a VM compiles a module natively, then
/// the module, its bytecode and one block of executable memory; nothing at all in
/// `NativeMode::Off` or where there is no code generator.
#[test]
fn stats_count_the_native_code_workers_and_the_engine_hold_and_nothing_when_none_runs() {
    const BLOCK: usize = 4 << 20;
    let tree = Tree::new(&[(
        "kernel.luau",
        "--!native\nlocal M = {}\nfunction M.run() local s = 0 for i = 1, 10 do s += i end return s end\nreturn M\n",
    )]);
    for mode in [NativeMode::Off, NativeMode::Annotated, NativeMode::All] {
        let pool = Pool::new(1);
        let domain = tree.domain_with(&pool, Plan::new().native(mode));
        let figures = |row: &skein::stats::WorkerStats| {
            (
                row.native_modules,
                row.native_bytecode_bytes,
                row.native_code_bytes,
            )
        };
        assert_eq!(figures(&pool.stats()[0]), (0, 0, 0), "{mode}: no VM yet");
        let sum = domain
            .dispatch("./kernel", "run", Message::Nil)
            .expect("dispatch")
            .wait()
            .expect("job");
        assert_eq!(sum, Message::Number(55.0));
        let row = pool.stats()[0].clone();
        assert_eq!(row.vms_held, 1);
        let (modules, bytecode, code) = figures(&row);
        if mode == NativeMode::Off || NativeMode::code_generator().is_none() {
            assert_eq!((modules, bytecode, code), (0, 0, 0), "{mode}");
        } else {
            assert_eq!(modules, 1, "{mode}: the kernel module");
            assert!(bytecode > 0 && bytecode < 1024, "{mode}: {bytecode} bytes");
            assert_eq!(code, BLOCK, "{mode}: one block for the gate and the kernel");
        }
        let said = domain
            .eval(
                "local r = jobs.stats()[1] \
                 return { r.native_modules, r.native_bytecode_bytes, r.native_code_bytes }",
            )
            .expect("jobs.stats");
        let numbers = [modules, bytecode, code].map(|n| Message::Number(n as f64));
        assert_eq!(list(&said), numbers, "{mode}");
        // The engine VM counts in the domain's stats, not the pool's.
        let sum = domain
            .eval("return require('./kernel').run()")
            .expect("engine");
        assert_eq!(sum, Message::Number(55.0));
        let engine = domain.stats();
        let engine = (
            engine.engine_native_modules,
            engine.engine_native_code_bytes,
        );
        if mode == NativeMode::Off || NativeMode::code_generator().is_none() {
            assert_eq!(engine, (0, 0), "{mode}");
        } else {
            // (`All` compiles the snippets `eval` runs too.)
            assert!(engine.0 >= 1, "{mode}: {engine:?}");
            assert_eq!(engine.1, BLOCK, "{mode}");
        }
        assert_eq!(figures(&pool.stats()[0]), (modules, bytecode, code));
    }
}

/// A worker VM retired past its memory limit takes its native code off the worker's row; the
/// VM built in its place counts only what it compiles itself.
#[test]
fn a_retired_worker_vm_takes_its_native_code_off_the_row() {
    if NativeMode::code_generator().is_none() {
        return;
    }
    const BLOCK: usize = 4 << 20;
    let tree = Tree::new(&[(
        "kernel.luau",
        "--!native\nlocal M = {}\n\
         function M.run() local s = 0 for i = 1, 10 do s += i end return s end\n\
         function M.bomb() local t = {} for i = 1, 1e9 do t[i] = string.rep('x', 1024) .. i end end\n\
         return M\n",
    )]);
    let pool = Pool::new(1);
    let plan = Plan::new().memory_limit(16 * 1024 * 1024);
    let domain = tree.domain_with(&pool, plan);
    let figures = |pool: &Pool| {
        let row = &pool.stats()[0];
        (row.native_modules, row.native_code_bytes)
    };
    let run = || {
        domain
            .dispatch("./kernel", "run", Message::Nil)
            .expect("dispatch")
            .wait()
            .expect("job")
    };
    assert_eq!(run(), Message::Number(55.0));
    assert_eq!(figures(&pool), (1, BLOCK));
    let bomb = domain
        .dispatch("./kernel", "bomb", Message::Nil)
        .expect("dispatch")
        .wait();
    assert!(bomb.is_err(), "{bomb:?}");
    assert!(
        wait_until(Duration::from_secs(10), || figures(&pool) == (0, 0)),
        "the retired VM's native code stayed on the row: {:?}",
        pool.stats()
    );
    assert_eq!(run(), Message::Number(55.0));
    assert_eq!(figures(&pool), (1, BLOCK), "the new VM's own module only");
}

/// Hostile: a job that requires native modules by the thousand. Luau starts each module's code
/// on a fresh page, so small modules fill a VM's 16 MiB of executable memory long before its
/// 4 MiB of bytecode; at the bound the worker VM maps nothing more, the modules past it run
/// interpreted and right, and the row says 16 MiB.
#[test]
fn native_modules_past_a_vms_code_bound_run_interpreted() {
    if NativeMode::code_generator().is_none() {
        return;
    }
    const MODULES: usize = 3_000;
    let tree = Tree::new(&[(
        "many/run.luau",
        "local M = {}\n\
         function M.run(count)\n\
           local natives, last = 0, nil\n\
           for n = 0, count - 1 do\n\
             local native, sum = require('./m' .. n).probe()\n\
             assert(sum == n + 6, 'module ' .. n .. ' answered ' .. sum)\n\
             if native then natives += 1 end\n\
             last = native\n\
           end\n\
           return { natives, last }\n\
         end\n\
         return M\n",
    )]);
    for n in 0..MODULES {
        tree.write(
            &format!("many/m{n}.luau"),
            &format!(
                "--!native\nlocal M = {{}}\n\
                 function M.probe() local s = {n} for i = 1, 3 do s += i end return inNative(), s end\n\
                 return M\n"
            ),
        );
    }
    let pool = Pool::new(1);
    let domain = tree.domain_with(&pool, probing(NativeMode::Annotated));
    let v = domain
        .dispatch("./many/run", "run", Message::Number(MODULES as f64))
        .expect("dispatch")
        .wait()
        .expect("job");
    let (natives, last) = match list(&v) {
        [Message::Number(natives), Message::Boolean(last)] => (*natives as usize, *last),
        other => panic!("the job answered {other:?}"),
    };
    assert!(
        (1_000..MODULES).contains(&natives),
        "{natives} of {MODULES} modules ran native: {:?}",
        pool.stats()
    );
    assert!(!last, "the last module, past the bound, runs interpreted");
    let row = &pool.stats()[0];
    assert_eq!(
        row.native_code_bytes,
        16 << 20,
        "at the bound, never past it"
    );
    assert_eq!(
        row.native_modules, MODULES,
        "each was handed to the generator"
    );
    assert!(row.native_bytecode_bytes < 4 << 20);
}
