//! Deadline cost: a 10^8-iteration Luau loop run as a job under the default deadline (Skein's
//! raw interrupt reads an atomic at every back-edge) against the same loop in a plain
//! `mlua::Lua` with no interrupt at all. The two alternate, five runs each; medians and their
//! ratio are printed. Goal: at most 1.05x.

use std::time::{Duration, Instant};

use skein::mlua::{self, Lua};
use skein::{DomainSpec, Message, Plan, Pool, ScriptDomain};

const ITERATIONS: f64 = 1e8;
const RUNS: usize = 5;
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

    let lua = Lua::new();
    let module: mlua::Table = lua.load(SPIN).eval().expect("load spin");
    let run: mlua::Function = module.get("run").expect("run");
    let plain_run = |n: f64| {
        let t0 = Instant::now();
        let r: f64 = run.call(n).expect("call");
        let took = t0.elapsed();
        assert_eq!(r, expected(n));
        took
    };

    // Warm both: the worker builds its VM on the first item.
    skein_run(1e6);
    plain_run(1e6);

    let mut skein = Vec::new();
    let mut plain = Vec::new();
    for i in 0..RUNS {
        let s = skein_run(ITERATIONS);
        let p = plain_run(ITERATIONS);
        println!("run {i}: skein job {s:>12.3?}   plain mlua {p:>12.3?}");
        skein.push(s);
        plain.push(p);
    }
    let (s, p) = (median(skein), median(plain));
    let ratio = s.as_secs_f64() / p.as_secs_f64();
    println!(
        "deadline: median skein job {s:.3?} ({:.2} ns/iteration), plain mlua {p:.3?} \
         ({:.2} ns/iteration); ratio {ratio:.3}x (goal <= 1.05x: {})",
        s.as_nanos() as f64 / ITERATIONS,
        p.as_nanos() as f64 / ITERATIONS,
        if ratio <= 1.05 { "met" } else { "MISSED" }
    );
}
