//! Deadline cost: a 10^8-iteration Luau loop run as a job under the default deadline (Skein
//! installs its raw interrupt only once a run must stop, so this run has none) against the same
//! loop in a plain `mlua::Lua` with no interrupt at all. The two alternate, five runs each; medians and their
//! ratio are printed. Goal: at most 1.05x.
//!
//! A third, diagnostic side runs the same loop in a plain `mlua::Lua` whose raw interrupt
//! callback returns at once: it prices Luau's interrupt hook itself, apart from what Skein's
//! callback does inside it.

use std::time::{Duration, Instant};

use std::ffi::c_int;

use skein::mlua::{self, ffi, Lua};
use skein::{DomainSpec, Message, Plan, Pool, ScriptDomain};

const ITERATIONS: f64 = 1e8;
const RUNS: usize = 7;
const SPIN: &str = r#"
local M = {}
function M.run(n)
    local s = 0
    for i = 1, n do s += i end
    return s
end
return M
"#;

fn expected(n: f64) -> f64 {
    n * (n + 1.0) / 2.0
}

fn number(m: &Message) -> f64 {
    match m {
        Message::Number(n) => *n,
        Message::Integer(i) => *i as f64,
        other => panic!("expected a number, got {other:?}"),
    }
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// An interrupt that does nothing: what any interrupt at all costs.
unsafe extern "C-unwind" fn noop_interrupt(_state: *mut ffi::lua_State, _gc: c_int) {}

/// A plain VM with the spin module loaded; with `hook`, a no-op raw interrupt is installed.
fn plain_vm(hook: bool) -> (Lua, mlua::Function) {
    let lua = Lua::new();
    if hook {
        // SAFETY: `lua_callbacks` answers the callbacks of this VM's global state, valid while
        // `lua` lives; only the `interrupt` slot is replaced, mlua's own interrupt is never set
        // on this VM, and the VM stays on this thread.
        unsafe {
            (*ffi::lua_callbacks(lua.state())).interrupt = Some(noop_interrupt);
        }
    }
    let module: mlua::Table = lua.load(SPIN).eval().expect("load spin");
    let run: mlua::Function = module.get("run").expect("run");
    (lua, run)
}

fn time_call(run: &mlua::Function, n: f64) -> Duration {
    let t0 = Instant::now();
    let r: f64 = run.call(n).expect("call");
    let took = t0.elapsed();
    assert_eq!(r, expected(n));
    took
}

fn ns_per_iteration(d: Duration) -> f64 {
    d.as_nanos() as f64 / ITERATIONS
}

fn main() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("spin.luau"), SPIN).expect("write module");
    let pool = Pool::new(1);
    let plan = Plan::new().root(dir.path().canonicalize().expect("canonical tempdir"));
    let domain = ScriptDomain::new(&pool, DomainSpec::new("bench").plan(plan)).expect("domain");
    let skein_run = |n: f64| {
        let t0 = Instant::now();
        let r = domain
            .dispatch("./spin", "run", Message::Number(n))
            .expect("dispatch")
            .wait()
            .expect("job");
        let took = t0.elapsed();
        assert_eq!(number(&r), expected(n));
        took
    };

    let (_plain_lua, plain) = plain_vm(false);
    let (_hooked_lua, hooked) = plain_vm(true);

    // Warm all three: the worker builds its VM on the first item.
    skein_run(1e6);
    time_call(&plain, 1e6);
    time_call(&hooked, 1e6);

    let (mut skein, mut bare, mut noop) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..RUNS {
        let s = skein_run(ITERATIONS);
        let p = time_call(&plain, ITERATIONS);
        let h = time_call(&hooked, ITERATIONS);
        println!(
            "run {i}: skein job {s:>10.3?}   plain mlua {p:>10.3?}   mlua + no-op interrupt {h:>10.3?}"
        );
        skein.push(s);
        bare.push(p);
        noop.push(h);
    }
    let mins = (
        *skein.iter().min().expect("runs"),
        *bare.iter().min().expect("runs"),
        *noop.iter().min().expect("runs"),
    );
    let (s, p, h) = (median(skein), median(bare), median(noop));
    let ratio = s.as_secs_f64() / p.as_secs_f64();
    println!(
        "deadline: median skein job {s:.3?} ({:.2} ns/iteration), plain mlua {p:.3?} \
         ({:.2} ns/iteration); ratio {ratio:.3}x (goal <= 1.05x: {})",
        ns_per_iteration(s),
        ns_per_iteration(p),
        if ratio <= 1.05 { "met" } else { "MISSED" }
    );
    println!(
        "deadline: fastest runs: skein {:.2} ns/it, plain {:.2} ns/it, ratio {:.3}x",
        ns_per_iteration(mins.0),
        ns_per_iteration(mins.1),
        mins.0.as_secs_f64() / mins.1.as_secs_f64()
    );
    println!(
        "deadline (diagnostic): mlua + no-op raw interrupt, median {h:.3?} ({:.2} ns/iteration), \
         {:.3}x plain; skein is {:.3}x of it",
        ns_per_iteration(h),
        h.as_secs_f64() / p.as_secs_f64(),
        s.as_secs_f64() / h.as_secs_f64()
    );
}
