//! Deadline cost: a 10^8-iteration Luau loop run as a job under the default deadline (Skein
//! installs its raw interrupt only once a run must stop, so this run has none) against the same
//! loop in a plain `mlua::Lua` with no interrupt at all. The sides alternate (`util::alternate`),
//! seven runs each; medians and their ratio are printed. Goal: at most 1.05x.
//!
//! A third, diagnostic side runs the same loop in a plain `mlua::Lua` whose raw interrupt
//! callback returns at once: it prices Luau's interrupt hook itself, apart from what Skein's
//! callback does inside it.
//!
//! Then a deadline that fires: a job that never ends (`while true`) dispatched with a 20 ms
//! deadline, timed from the dispatch to its rejection (which is checked to name the deadline),
//! alternated (`util::alternate`) with the hand-rolled way to stop a plain `mlua::Lua`: an
//! interrupt set with mlua's `set_interrupt` that raises once a timer thread, started with the
//! run, has slept the same 20 ms. Each side's overshoot past the 20 ms is printed, and the time
//! of a small item right after each stop, beside the same item after a run that ended by itself:
//! what a stop costs the job that follows it.

mod util;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use std::ffi::c_int;

use skein::job::JobOptions;
use skein::mlua::{self, ffi, Lua, VmState};
use skein::{DomainSpec, Message, Plan, Pool, ScriptDomain};

const ITERATIONS: f64 = 1e8;
const RUNS: usize = 7;
/// The deadline of the side whose deadline fires.
const DEADLINE: Duration = Duration::from_millis(20);
/// Alternating rounds of the firing deadline and its hand-rolled baseline.
const FIRES: usize = 15;
/// The iterations of the small item timed after each stop.
const SMALL: f64 = 1e3;
const SPIN: &str = r#"
local M = {}
function M.run(n)
    local s = 0
    for i = 1, n do s += i end
    return s
end
function M.forever()
    local s = 0
    while true do s += 1 end
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
    // Interpreted, as Skein runs a module without `--!native`: Skein builds mlua without
    // `luau-jit`, so this VM has no code generator.
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

    let [skein, bare, noop] = util::alternate(
        RUNS,
        [
            &mut || skein_run(ITERATIONS),
            &mut || time_call(&plain, ITERATIONS),
            &mut || time_call(&hooked, ITERATIONS),
        ],
    );
    for (i, ((s, p), h)) in skein.iter().zip(&bare).zip(&noop).enumerate() {
        println!(
            "run {i}: skein job {s:>10.3?}   plain mlua {p:>10.3?}   mlua + no-op interrupt {h:>10.3?}"
        );
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
    // The iterations a Skein job runs in about the deadline's time, for the run that ends by
    // itself before the "after a run" small item: the worker is then as busy before it as after
    // a stop, so a scheduler that makes a busy thread wait on a loaded machine hits both alike.
    let about_the_deadline = ITERATIONS * DEADLINE.as_secs_f64() / s.as_secs_f64();
    fires(&domain, &skein_run, about_the_deadline);
}

/// The deadline that fires, against the hand-rolled stop of a plain VM; see the module docs.
fn fires(domain: &ScriptDomain, skein_run: &dyn Fn(f64) -> Duration, about_the_deadline: f64) {
    let opts = JobOptions::new().deadline(DEADLINE);
    let stopped = format!(
        "deadline exceeded: one run took longer than {} s",
        DEADLINE.as_secs_f64()
    );
    let mut skein_next = Vec::new();
    let mut skein_stop = || {
        let t0 = Instant::now();
        let err = domain
            .dispatch_with("./spin", "forever", Message::Integer(0), &opts)
            .expect("dispatch")
            .wait()
            .expect_err("a job that never ends is stopped");
        let took = t0.elapsed();
        assert!(err.to_string().contains(&stopped), "{err}");
        skein_next.push(skein_run(SMALL));
        took
    };

    let (lua, forever, run) = stoppable_vm();
    let raised = Arc::new(AtomicBool::new(false));
    let flag = raised.clone();
    lua.set_interrupt(move |_| {
        if flag.load(Ordering::Relaxed) {
            Err(mlua::Error::runtime("deadline"))
        } else {
            Ok(VmState::Continue)
        }
    });
    let mut plain_next = Vec::new();
    let mut plain_stop = || {
        let t0 = Instant::now();
        let timer = {
            let raised = raised.clone();
            thread::spawn(move || {
                // the behaviour under test: the baseline's deadline is a timer thread's sleep.
                thread::sleep(DEADLINE);
                raised.store(true, Ordering::Relaxed);
            })
        };
        let err = forever
            .call::<()>(())
            .expect_err("stopped by the interrupt");
        let took = t0.elapsed();
        assert!(err.to_string().contains("deadline"), "{err}");
        timer.join().expect("timer");
        raised.store(false, Ordering::Relaxed);
        plain_next.push(time_call(&run, SMALL));
        took
    };
    let [skein, plain] = util::alternate(FIRES, [&mut skein_stop, &mut plain_stop]);

    // The small item after a run of about the deadline's length that ended by itself.
    let mut ended_run = Vec::new();
    let ended_next: Vec<Duration> = (0..FIRES)
        .map(|_| {
            ended_run.push(skein_run(about_the_deadline.round()));
            skein_run(SMALL)
        })
        .collect();
    let over = |d: Duration| d.saturating_sub(DEADLINE);
    let (s, p) = (median(skein.clone()), median(plain.clone()));
    println!(
        "deadline that fires ({} ms, {FIRES} alternating rounds): skein job stopped after {s:.2?} \
         median (overshoot {:.2?}, most {:.2?}); plain mlua + set_interrupt + timer thread \
         {p:.2?} (overshoot {:.2?}, most {:.2?}); time to stop skein/plain {:.2}x",
        DEADLINE.as_millis(),
        over(s),
        over(*skein.iter().max().expect("runs")),
        over(p),
        over(*plain.iter().max().expect("runs")),
        s.as_secs_f64() / p.as_secs_f64()
    );
    util::print_rounds(
        "deadline that fires: time to stop, skein/plain",
        &util::ratio_per_round(&plain, &skein),
        "1.00x = stops as soon as a timer thread per run does",
    );
    println!(
        "deadline that fires: the next small item ({SMALL} iterations) right after a stop: \
         skein {:.1?} median (after a run of {:.1?} that ended by itself: {:.1?}); plain mlua \
         {:.1?}",
        median(skein_next),
        median(ended_run),
        median(ended_next),
        median(plain_next)
    );
}

/// A plain VM with the spin module loaded, answering its `forever` and `run`.
fn stoppable_vm() -> (Lua, mlua::Function, mlua::Function) {
    let lua = Lua::new();
    // Interpreted, as Skein runs a module without `--!native`: Skein builds mlua without
    // `luau-jit`, so this VM has no code generator.
    let module: mlua::Table = lua.load(SPIN).eval().expect("load spin");
    let forever: mlua::Function = module.get("forever").expect("forever");
    let run: mlua::Function = module.get("run").expect("run");
    (lua, forever, run)
}
