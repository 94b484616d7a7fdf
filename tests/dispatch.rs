//! `jobs.dispatch` end to end: results, refusals at the call, rejections, deadlines, cancel,
//! memory limits and host panics, each followed by a dispatch that proves the pool still serves.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use skein::job::FailureKind;
use skein::{Message, NativeMode, Plan, Pool, PromiseStatus};

use crate::support::{
    assert_contains, error_of, number, refusal, text, wait_until, Gate, Marks, ThreadMark, Tree,
};

const MATH: &str = r#"
local M = {}
function M.double(x) return x * 2 end
function M.echo(x) return x end
function M.spin() while true do end end
function M.slow(s) task.wait(s) return "slept" end -- a timer: parked time is under test
function M.context() local c = jobs.context() return { worker = c.worker, key = c.key, fresh = c.fresh } end
function M.fail() error("the entry failed on purpose") end
function M.giveFunction() return { callback = function() end } end
function M.hog() local t = {} for i = 1, 1e9 do t[i] = string.rep("x", 1024) .. i end end
function M.boom() return hostBoom() end
function M.nested(n) return jobs.dispatch("./math", "double", n):await() + 1 end
M.notAFunction = 42
-- Marks (hostMark, in a plan with Marks) once it runs, then spins.
function M.markedSpin() hostMark() while true do end end
-- Holds its worker at the host's gate (in a plan with a Gate).
function M.held() gate() return "held" end
return M
"#;

/// A domain with `math.luau` and the pool that serves it.
fn setup() -> (Tree, Pool) {
    (Tree::new(&[("math.luau", MATH)]), Pool::new(2))
}

/// As `setup`, with one worker: a test that the pool "still serves" then proves that the same
/// worker VM that failed serves the next item.
fn setup_one() -> (Tree, Pool) {
    (Tree::new(&[("math.luau", MATH)]), Pool::new(1))
}

/// A job dispatched now settles within 10 s (a worker stuck on an earlier item fails the test
/// instead of hanging it).
fn still_serves(domain: &skein::ScriptDomain) {
    let v = domain
        .dispatch("./math", "double", Message::Number(21.0))
        .unwrap()
        .wait_timeout(Duration::from_secs(10))
        .expect("the pool still serves")
        .unwrap();
    assert_eq!(number(&v), 42.0);
}

#[test]
fn dispatch_returns_the_entry_result() {
    let (tree, pool) = setup();
    let domain = tree.domain(&pool);
    still_serves(&domain);
    let v = domain
        .eval(
            r#"return jobs.dispatch("./math", "echo", { a = { 1, 2, 3 }, s = "x\0y" }):await().s"#,
        )
        .unwrap();
    assert_eq!(text(&v), "x\0y");
}

#[test]
fn many_dispatches_in_flight_all_settle() {
    let (tree, pool) = setup();
    let domain = tree.domain(&pool);
    let v = domain
        .eval(
            r#"
            local ps = {}
            for i = 1, 2000 do ps[i] = jobs.dispatch("./math", "double", i) end
            local sum = 0
            for _, p in ps do sum += p:await() end
            return sum
        "#,
        )
        .unwrap();
    assert_eq!(number(&v), (2000.0 * 2001.0 / 2.0) * 2.0);
    let stats = pool.stats();
    let total: u64 = stats.iter().map(|s| s.items_run).sum();
    assert!(total >= 2000, "items run: {total}");
}

/// Every way one dispatch is refused at the call (no `:await()` in its Luau) or rejects at its
/// await: the row's name, the Luau that dispatches, and the whole text of its error as a
/// `pcall` catches it (`{root}` stands for the module root).
const REFUSALS: &[(&str, &str, &str)] = &[
    (
        "an unknown option is refused naming it",
        r#"jobs.dispatch("./math", "double", 1, { dealine = 2 })"#,
        "jobs.dispatch: unknown option 'dealine' in opts: expected deadline, name, key or supersede",
    ),
    (
        "a deadline of 0 is refused",
        r#"jobs.dispatch("./math", "double", 1, { deadline = 0 })"#,
        "jobs.dispatch: opts.deadline must be a number of seconds above 0, got 0",
    ),
    (
        "a negative deadline is refused",
        r#"jobs.dispatch("./math", "double", 1, { deadline = -1 })"#,
        "jobs.dispatch: opts.deadline must be a number of seconds above 0, got -1",
    ),
    (
        "a NaN deadline is refused",
        r#"jobs.dispatch("./math", "double", 1, { deadline = 0/0 })"#,
        "jobs.dispatch: opts.deadline must be a number of seconds above 0, got nan",
    ),
    (
        "a deadline one past the cap is refused",
        r#"jobs.dispatch("./math", "double", 1, { deadline = 61 })"#,
        "jobs.dispatch: opts.deadline of 61 s is past the cap of 60 s: a deadline may be lowered, \
         never raised",
    ),
    (
        "a deadline just past the cap is refused",
        r#"jobs.dispatch("./math", "double", 1, { deadline = 60.5 })"#,
        "jobs.dispatch: opts.deadline of 60.5 s is past the cap of 60 s: a deadline may be \
         lowered, never raised",
    ),
    (
        "a missing module is refused at the call",
        r#"jobs.dispatch("./nope", "run")"#,
        "jobs.dispatch: module './nope' not found from {root} (tried {root}/nope.luau, \
         {root}/nope.lua, {root}/nope/init.luau, {root}/nope/init.lua)",
    ),
    (
        "a module that is no require path is refused naming the argument",
        r#"jobs.dispatch("math", "run")"#,
        "jobs.dispatch: module: invalid require path 'math': it must start with ./, ../ or @",
    ),
    (
        "a module path past 1024 bytes is refused by its length",
        r#"jobs.dispatch("./" .. string.rep("m", 1023), "run")"#,
        "jobs.dispatch: module must be a require path of at most 1024 bytes, got a string of \
         1025 bytes",
    ),
    (
        "an entry past 256 bytes is refused by its length",
        r#"jobs.dispatch("./math", string.rep("e", 257))"#,
        "jobs.dispatch: entry must be the name of a function, at most 256 bytes, got a string of \
         257 bytes",
    ),
    (
        "a module that fails to compile rejects naming it",
        r#"jobs.dispatch("./broken", "run"):await()"#,
        "job './broken:run' failed: module {root}/broken.luau could not be loaded: syntax error \
         in {root}/broken.luau:2: Expected identifier when parsing variable name, got 'return'",
    ),
    (
        "a module that raises at load rejects with its error",
        r#"jobs.dispatch("./raises", "run"):await()"#,
        "job './raises:run' failed: module {root}/raises.luau could not be loaded: \
         {root}/raises.luau:1: load-time failure",
    ),
    (
        "an entry that is a number rejects",
        r#"jobs.dispatch("./math", "notAFunction"):await()"#,
        "job './math:notAFunction' failed: entry 'notAFunction' of module {root}/math.luau is not \
         a function (it is a number)",
    ),
    (
        "a missing entry rejects",
        r#"jobs.dispatch("./math", "missing"):await()"#,
        "job './math:missing' failed: entry 'missing' of module {root}/math.luau is not a \
         function (it is nil)",
    ),
    (
        "a nested function argument is refused at the call with its path",
        r#"jobs.dispatch("./math", "echo", { items = { 1, 2, { callback = print } } })"#,
        "jobs.dispatch: args.items[3].callback: a function can't cross a worker or event boundary",
    ),
    (
        "a coroutine argument is refused at the call with its path",
        r#"jobs.dispatch("./math", "echo", { co = coroutine.create(print) })"#,
        "jobs.dispatch: args.co: a coroutine can't cross a worker or event boundary",
    ),
    (
        "a non-transferable result rejects with its path",
        r#"jobs.dispatch("./math", "giveFunction"):await()"#,
        "job './math:giveFunction' failed: result.callback: a function can't cross a worker or \
         event boundary",
    ),
    (
        "an entry's error rejects with its message and where it was raised",
        r#"jobs.dispatch("./math", "fail", nil, { name = "failing job" }):await()"#,
        "job 'failing job' failed: {root}/math.luau:8: the entry failed on purpose",
    ),
];

#[test]
fn each_refusal_and_rejection_names_its_cause_and_the_vm_serves_on() {
    // One worker: after a failure in its VM, that same VM serves the next item.
    let (tree, pool) = setup_one();
    tree.write("broken.luau", "local M = {}\nfunction M.run( return M\n");
    tree.write("raises.luau", "error('load-time failure')\nreturn {}\n");
    let domain = tree.domain(&pool);
    let root = tree.path().display().to_string();
    for (name, body, expected) in REFUSALS {
        let err =
            error_of(&domain, body).unwrap_or_else(|| panic!("row '{name}': no error was raised"));
        assert_eq!(err, expected.replace("{root}", &root), "row '{name}'");
        still_serves(&domain);
    }
}

#[test]
fn a_64_mib_module_or_entry_is_refused_by_its_length_in_a_short_text() {
    // The entry was kept and copied whole (the job's name, the interned entry, the rejection
    // that quoted it twice): a 64 MiB entry made the host allocate hundreds of MiB, and under
    // an address-space limit the runner aborted. A module path was quoted whole, five times
    // over when it was not found. Both are refused at the call now, for every call that takes
    // them, and the VM serves on.
    let (tree, pool) = setup_one();
    let domain = tree.domain(&pool);
    let calls = [
        ("jobs.dispatch", "jobs.dispatch(M, E)"),
        ("jobs.parallelFor", "jobs.parallelFor(M, E, 4)"),
        ("jobs.map", "jobs.map(M, E, { 1 })"),
        ("jobs.warm", "jobs.warm(M, E)"),
        (
            "jobs.register",
            "jobs.register({ phase = 'p', executor = { kind = 'worker', module = M, entry = E, \
             input = print, apply = print } })",
        ),
    ];
    let huge = "string.rep('x', 64 * 1024 * 1024)";
    for (call, body) in calls {
        let (module, entry) = if call == "jobs.register" {
            ("executor.module", "executor.entry")
        } else {
            ("module", "entry")
        };
        for (param, m, e) in [
            (module, format!("'./' .. {huge}"), "'double'".to_owned()),
            (entry, "'./math'".to_owned(), huge.to_owned()),
        ] {
            let err = refusal(&domain, &format!("local M, E = {m}, {e} return {body}"));
            let message = err.split("\nstack traceback:").next().unwrap_or_default();
            assert_contains(message, &format!("{call}: {param} must be "));
            assert_contains(message, "got a string of 6710886");
            assert!(message.len() < 200, "{call} {param}: {message}");
        }
    }
    // An entry at the bound is looked up as any other.
    let err = refusal(
        &domain,
        "jobs.dispatch('./math', string.rep('e', 256)):await()",
    );
    assert_contains(&err, &format!("entry '{}' of module", "e".repeat(256)));
    still_serves(&domain);
}

#[test]
fn deadlines_at_the_cap_and_just_above_zero_are_accepted() {
    // The deadlines past either bound are rows of REFUSALS.
    let (tree, pool) = setup();
    let domain = tree.domain(&pool);
    let v = domain
        .eval(
            r#"return jobs.dispatch("./math", "double", 1, { deadline = 60 }):await()
                 + jobs.dispatch("./math", "double", 1, { deadline = 0.001 }):await()"#,
        )
        .unwrap();
    assert_eq!(number(&v), 4.0);
}

in_both_modes!(a_job_that_loops_forever_is_stopped_by_its_deadline);
fn a_job_that_loops_forever_is_stopped_by_its_deadline(mode: NativeMode) {
    let (tree, pool) = setup_one();
    let domain = tree.domain_with(&pool, Plan::new().native(mode));
    let started = Instant::now();
    let err = refusal(
        &domain,
        r#"jobs.dispatch("./math", "spin", nil, { deadline = 0.2, name = "spinner" }):await()"#,
    );
    assert_contains(
        &err,
        "job 'spinner' failed: deadline exceeded: one run took longer than 0.2 s",
    );
    // A hang guard, not a timing claim: far past the 0.2 s deadline, far short of forever.
    assert!(started.elapsed() < Duration::from_secs(10));
    still_serves(&domain);
}

#[test]
fn parked_time_does_not_count_toward_the_deadline() {
    let (tree, pool) = setup();
    let domain = tree.domain(&pool);
    // The behaviour under test: a job parked for 0.3 s under a deadline of 0.1 s.
    let v = domain
        .eval(r#"return jobs.dispatch("./math", "slow", 0.3, { deadline = 0.1 }):await()"#)
        .unwrap();
    assert_eq!(text(&v), "slept");
}

in_both_modes!(a_job_past_the_memory_limit_fails_and_the_vm_serves_on);
fn a_job_past_the_memory_limit_fails_and_the_vm_serves_on(mode: NativeMode) {
    let (tree, pool) = setup_one();
    let plan = Plan::new().memory_limit(32 * 1024 * 1024).native(mode);
    let domain = tree.domain_with(&pool, plan);
    let err = refusal(&domain, r#"jobs.dispatch("./math", "hog"):await()"#);
    assert_contains(
        &err,
        "out of memory: the VM of worker 0 reached its memory limit of 32 MiB",
    );
    still_serves(&domain);
}

#[test]
fn a_panic_in_a_host_function_is_contained() {
    let (tree, pool) = setup_one();
    let plan = Plan::new().function("hostBoom", |_, _| panic!("the host blew up"));
    let domain = tree.domain_with(&pool, plan);
    let err = refusal(&domain, r#"jobs.dispatch("./math", "boom"):await()"#);
    assert_contains(&err, "host function 'hostBoom' panicked: the host blew up");
    still_serves(&domain);
    still_serves(&domain);
}

#[test]
fn a_script_that_raises_at_top_level_fails_run_until_idle_with_its_stack() {
    let (tree, pool) = setup();
    tree.write("main.luau", "local x = 1\nerror('top-level failure')\n");
    let domain = tree.domain(&pool);
    domain.run_file(tree.path().join("main.luau"), &[]).unwrap();
    let err = domain.run_until_idle().unwrap_err().to_string();
    assert_contains(&err, "failed: ");
    assert_contains(&err, "top-level failure");
    assert_contains(&err, "main.luau:2");
}

#[test]
fn context_is_nil_on_the_engine_and_names_the_worker_on_a_worker() {
    let (tree, pool) = setup();
    let domain = tree.domain(&pool);
    let v = domain.eval("return jobs.context() == nil").unwrap();
    assert_eq!(v, Message::Boolean(true));
    let v = domain
        .eval(
            r#"local c = jobs.dispatch("./math", "context"):await()
               return c.worker >= 0 and c.worker < 2 and c.key == nil and c.fresh == false"#,
        )
        .unwrap();
    assert_eq!(v, Message::Boolean(true));
}

#[test]
fn a_job_may_dispatch_and_await_another_job() {
    let (tree, pool) = setup();
    let domain = tree.domain(&pool);
    let v = domain
        .eval(r#"return jobs.dispatch("./math", "nested", 20):await()"#)
        .unwrap();
    assert_eq!(number(&v), 41.0);
}

in_both_modes!(cancelling_a_running_job_halts_it);
fn cancelling_a_running_job_halts_it(mode: NativeMode) {
    let (tree, pool) = setup_one();
    let marks = Marks::default();
    let domain = tree.domain_with(&pool, marks.plan().native(mode));
    domain
        .exec(r#"spinning = jobs.dispatch("./math", "markedSpin")"#)
        .unwrap();
    // Running, not queued: the entry marked before it spins.
    assert!(wait_until(Duration::from_secs(10), || marks.count() == 1));
    let v = domain
        .eval(
            r#"
            local cancelled = spinning:cancel()
            local ok, err = pcall(function() return spinning:await() end)
            return `{cancelled} {ok} {spinning:status()} {err}`
        "#,
        )
        .unwrap();
    assert_eq!(text(&v), "true false cancelled cancelled");
    // The only worker is not stuck on the spinning entry.
    still_serves(&domain);
    still_serves(&domain);
}

#[test]
fn cancelling_a_queued_job_keeps_it_from_running() {
    let tree = Tree::new(&[(
        "mark.luau",
        "local M = {}\nfunction M.mark() hostMark() return true end\nfunction M.hold() gate() return true end\nreturn M\n",
    )]);
    let pool = Pool::new(1);
    let (marks, gate) = (Marks::default(), Gate::default());
    let domain = tree.domain_with(&pool, gate.plan(marks.plan()));
    domain
        .exec(r#"held = jobs.dispatch("./mark", "hold")"#)
        .unwrap();
    // The only worker is held at the gate: an item dispatched now is queued, not running.
    assert!(wait_until(Duration::from_secs(10), || gate.arrived() == 1));
    let v = domain
        .eval(
            r#"
            queued = jobs.dispatch("./mark", "mark")
            return `{queued:cancel()} {queued:status()}`
        "#,
        )
        .unwrap();
    assert_eq!(text(&v), "true cancelled");
    gate.open();
    // The one worker takes the engine's items in order: the cancelled item comes up before
    // this one, so by its answer the cancelled item was skipped, not run.
    let v = domain
        .eval(r#"assert(held:await()) return jobs.dispatch("./mark", "mark"):await()"#)
        .unwrap();
    assert_eq!(v, Message::Boolean(true));
    assert_eq!(marks.count(), 1, "the cancelled item ran");
}

#[test]
fn host_promise_wait_try_take_and_cancel() {
    let (tree, pool) = setup_one();
    let (marks, gate) = (Marks::default(), Gate::default());
    let domain = tree.domain_with(&pool, gate.plan(marks.plan()));
    let p = domain
        .dispatch("./math", "double", Message::Number(4.0))
        .unwrap();
    assert_eq!(number(&p.wait().unwrap()), 8.0);

    // Pending until the host opens the gate.
    let mut p = domain.dispatch("./math", "held", Message::Nil).unwrap();
    assert!(p.try_take().is_none());
    assert_eq!(p.status(), PromiseStatus::Pending);
    gate.open();
    let v = p.wait_timeout(Duration::from_secs(10)).unwrap().unwrap();
    assert_eq!(text(&v), "held");

    let p = domain
        .dispatch("./math", "markedSpin", Message::Nil)
        .unwrap();
    // Running, not queued, when it is cancelled.
    assert!(wait_until(Duration::from_secs(10), || marks.count() == 1));
    assert!(p.cancel());
    assert_eq!(p.status(), PromiseStatus::Cancelled);
    assert!(!p.cancel());
    // The only worker was freed of the spinning entry.
    still_serves(&domain);
}

#[test]
fn an_edit_of_the_module_reaches_the_next_dispatch() {
    let (tree, pool) = setup();
    tree.write("edit.luau", "return { v = function() return 1 end }\n");
    let domain = tree.domain(&pool);
    let v = domain
        .eval(
            r#"return jobs.dispatch("./edit", "v"):await() + jobs.dispatch("./edit", "v"):await()"#,
        )
        .unwrap();
    assert_eq!(number(&v), 2.0);
    tree.write(
        "edit.luau",
        "return { v = function() return 100 end } -- edited\n",
    );
    let v = domain
        .eval(
            r#"return jobs.dispatch("./edit", "v"):await() + jobs.dispatch("./edit", "v"):await()"#,
        )
        .unwrap();
    assert_eq!(number(&v), 200.0);
}

#[test]
fn a_host_promise_rejects_with_a_structured_failure() {
    let (tree, pool) = setup();
    let domain = tree.domain(&pool);
    let err = domain
        .dispatch("./math", "fail", Message::Nil)
        .unwrap()
        .wait()
        .unwrap_err();
    let skein::Error::Job(failure) = err else {
        panic!("expected a job failure, got {err:?}");
    };
    assert_eq!(failure.kind, FailureKind::Raised);
    assert_eq!(failure.job, "./math:fail");
    assert_eq!(failure.entry.as_deref(), Some("fail"));
    assert!(failure.module.as_ref().unwrap().ends_with("math.luau"));
    assert_contains(&failure.message, "math.luau:8: the entry failed on purpose");
    assert!(
        !failure.message.contains("stack traceback"),
        "{}",
        failure.message
    );
    assert_contains(
        failure.traceback.as_deref().unwrap(),
        "math.luau:8: in function 'fail'",
    );

    let err = domain
        .dispatch("./math", "notAFunction", Message::Nil)
        .unwrap()
        .wait()
        .unwrap_err();
    let skein::Error::Job(failure) = err else {
        panic!("expected a job failure, got {err:?}");
    };
    assert_eq!(failure.kind, FailureKind::Load);
}

#[test]
fn queued_items_of_a_dropped_domain_are_refused_unrun() {
    let tree = Tree::new(&[(
        "mark.luau",
        "local M = {}\nfunction M.mark() hostMark() return true end\nfunction M.hold() gate() return true end\nreturn M\n",
    )]);
    let pool = Pool::new(1);
    let (marks, gate) = (Marks::default(), Gate::default());
    let domain = tree.domain_with(&pool, gate.plan(marks.plan()));
    let busy = domain.dispatch("./mark", "hold", Message::Nil).unwrap();
    let queued = domain.dispatch("./mark", "mark", Message::Nil).unwrap();
    // Once the only worker is held at the gate, the second item is certainly still queued.
    assert!(wait_until(Duration::from_secs(10), || gate.arrived() == 1));
    drop(domain);
    gate.open();
    // The running one is interrupted when it comes back from the host function to Luau.
    assert!(matches!(busy.wait(), Err(skein::Error::Cancelled)));
    let err = queued.wait().unwrap_err();
    let skein::Error::Job(failure) = err else {
        panic!("expected a job failure, got {err:?}");
    };
    assert_eq!(failure.kind, FailureKind::Refused);
    assert_eq!(
        failure.to_string(),
        "job './mark:mark' was refused unrun: domain 'test' stopped"
    );
    assert_eq!(marks.count(), 0, "the queued item ran");
}

#[test]
fn cancelling_a_parked_job_ends_its_task() {
    // `arrive()` counts jobs that reached their wait, `woke()` those whose wait ended. The
    // timers are the park under test: the cancelled job's (1 s) would end before the kept
    // job's (2 s) on the one worker, so once the kept job resolved, a cancelled task that
    // still waited would have woken.
    let tree = Tree::new(&[(
        "late.luau",
        "return { run = function(s) arrive() task.wait(s) woke() return true end }\n",
    )]);
    let pool = Pool::new(1);
    let (arrived, woke) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let count = |counter: &Arc<AtomicUsize>, name: &'static str, plan: Plan| {
        let counter = counter.clone();
        plan.function(name, move |_, _| {
            counter.fetch_add(1, Ordering::SeqCst);
            Ok(skein::mlua::MultiValue::new())
        })
    };
    let plan = count(&woke, "woke", count(&arrived, "arrive", Plan::new()));
    let domain = tree.domain_with(&pool, plan);
    domain
        .exec(
            r#"
            cancelled = jobs.dispatch("./late", "run", 1)
            kept = jobs.dispatch("./late", "run", 2)
        "#,
        )
        .unwrap();
    // The one worker started the kept job: the cancelled one is parked in its wait.
    assert!(wait_until(Duration::from_secs(10), || arrived
        .load(Ordering::SeqCst)
        == 2));
    let v = domain
        .eval(
            r#"
            local was = cancelled:cancel()
            kept:await()
            return `{was} {cancelled:status()} {kept:status()}`
        "#,
        )
        .unwrap();
    assert_eq!(text(&v), "true cancelled resolved");
    // The cancelled job's parked task never woke: only the kept job did.
    assert_eq!(woke.load(Ordering::SeqCst), 1);
}

#[test]
fn a_failing_task_a_job_left_behind_is_reported_against_the_job() {
    let tree = Tree::new(&[(
        "leaves.luau",
        // The delay is under test: a task that fails after its job returned.
        "return { run = function()\n  task.delay(0.02, function()\n    error('left behind and failed')\n  end)\n  return 'returned'\nend }\n",
    )]);
    let pool = Pool::new(1);
    let domain = tree.domain(&pool);
    let v = domain
        .eval(r#"return jobs.dispatch("./leaves", "run", nil, { name = "leaver" }):await()"#)
        .unwrap();
    assert_eq!(text(&v), "returned");
    let reports = std::cell::RefCell::new(Vec::new());
    assert!(wait_until(Duration::from_secs(10), || {
        domain.pump();
        reports.borrow_mut().extend(domain.take_reports());
        !reports.borrow().is_empty()
    }));
    let reports = reports.into_inner();
    assert_eq!(reports.len(), 1, "{reports:?}");
    assert_eq!(reports[0].source, "job 'leaver'");
    // The message, then the Luau stack of the task that raised it.
    assert_contains(
        &reports[0].message,
        "leaves.luau:3: left behind and failed\nstack traceback:\n",
    );
    assert_contains(&reports[0].message, "leaves.luau:3: in function");
}

#[test]
fn jobs_stats_answers_the_pool_rows() {
    let (tree, pool) = setup();
    let domain = tree.domain(&pool);
    let v = domain
        .eval(
            r#"
            local ps = {}
            for i = 1, 20 do ps[i] = jobs.dispatch("./math", "double", i) end
            for _, p in ps do p:await() end
            jobs.dispatch("./math", "double", 1, { key = "held" }):await()
            local rows = jobs.stats()
            local items, keys, slots = 0, 0, {}
            for _, row in rows do
                items += row.items_run
                keys += row.keys_held
                table.insert(slots, row.worker)
                assert(row.busy_ms >= 0 and row.vms_held >= 0 and row.panics == 0)
            end
            return `{#rows} {items >= 21} {keys} {table.concat(slots, ",")}`
        "#,
        )
        .unwrap();
    // The key stays bound until released, so one worker holds it.
    assert_eq!(text(&v), "2 true 1 0,1");
    // The same counts the host reads.
    let host: u64 = pool.stats().iter().map(|s| s.items_run).sum();
    assert!(host >= 20);
}

/// A reply meant for a promise of a worker VM that was replaced (after a panic) must not settle
/// the promise of the new VM that happens to reuse its id.
#[test]
fn a_late_reply_to_a_replaced_vm_never_settles_a_promise_of_the_new_one() {
    const REPLY: &str = r#"
local M = {}
function M.where() return jobs.context().worker end
-- Dispatches a slow item on another key and returns at once: its promise stays pending in
-- this VM, which is about to be replaced.
function M.leave() jobs.dispatch("./reply", "slow", "stale", { key = "b" }) return jobs.context().worker end
-- Parked until the host pushes to the queue "go".
function M.slow(x) jobs.shared.queue("go"):pop() return x end
function M.fast(x) return x end
-- The new VM's first promise: the same slab slot and generation as the one left behind. Its
-- worker thread marks, then sleeps once the task waits in its await.
function M.ask()
    local p = jobs.dispatch("./reply", "fast", "fresh", { key = "b" })
    threadMark()
    return p:await()
end
return M
"#;
    let tree = Tree::new(&[("reply.luau", REPLY), ("boom.luau", "rawPanic() return {}")]);
    let pool = Pool::new(2);
    let mark = ThreadMark::default();
    let plan = mark.plan(Plan::new().setup(|lua| {
        let f =
            lua.create_function(|_, ()| -> skein::mlua::Result<()> { panic!("raw host panic") })?;
        lua.globals().raw_set("rawPanic", f)
    }));
    let domain = tree.domain_with(&pool, plan);
    domain
        .exec(
            r#"
            local x = jobs.dispatch("./reply", "leave", nil, { key = "a" }):await()
            -- Requiring a module whose top level panics outside any task drops the VM of key a.
            -- The item whose require panicked is answered, not lost with the VM.
            local ok, err = pcall(function() jobs.dispatch("./boom", "x", nil, { key = "a" }):await() end)
            assert(not ok)
            local answer = jobs.dispatch("./reply", "ask", nil, { key = "a" }):await()
            local y = jobs.dispatch("./reply", "where", nil, { key = "a" }):await()
            out = { x, y, answer, tostring(err) }
        "#,
        )
        .unwrap();
    // The new VM's promise waits: only now may the stale reply come.
    assert!(wait_until(Duration::from_secs(10), || {
        domain.pump();
        mark.asleep()
    }));
    domain
        .exec(r#"jobs.shared.queue("go"):push(true)"#)
        .unwrap();
    assert!(wait_until(Duration::from_secs(10), || {
        domain.pump();
        domain.eval("return out ~= nil").unwrap() == Message::Boolean(true)
    }));
    let out = domain.eval("return out").unwrap();
    let Message::List(v) = out else {
        panic!("{out:?}")
    };
    assert_eq!(v[0], v[1], "key a stayed on its worker");
    assert!(
        pool.stats().iter().map(|s| s.panics).sum::<u64>() >= 1,
        "the VM was replaced"
    );
    assert_eq!(text(&v[2]), "fresh");
    assert_contains(&text(&v[3]), "host code panicked: raw host panic");
}

#[test]
fn jobs_hold_their_arguments_and_results_against_max_job_bytes_until_their_promises_are_gone() {
    const JOB_WEIGHT: usize = skein::DomainSpec::JOB_WEIGHT;
    const MAX_JOB_BYTES: usize = skein::DomainSpec::MAX_JOB_BYTES;
    let tree = Tree::new(&[(
        "math.luau",
        "local M = {}\nfunction M.make(n) return string.rep('x', n) end\n\
         function M.double(x) return x * 2 end\nreturn M\n",
    )]);
    let pool = Pool::new(2);
    let domain = tree.domain(&pool);
    assert_eq!(domain.stats().job_bytes, 0);
    // Four jobs whose string results fill the bound exactly once they return: each holds
    // JOB_WEIGHT and its result (16 + len) for as long as its promise lives; its argument (a
    // number, 16) only until a worker built it in its VM.
    let len = MAX_JOB_BYTES / 4 - JOB_WEIGHT - 16;
    domain
        .exec(&format!(
            r#"
held = {{}}
for i = 1, 4 do held[i] = jobs.dispatch("./math", "make", {len}) end
for i = 1, 4 do assert(#held[i]:await() == {len}) end
"#
        ))
        .unwrap();
    domain.run_until_idle().unwrap();
    assert_eq!(domain.stats().job_bytes, MAX_JOB_BYTES);
    // One more job, however small, is refused at the call, and nothing changed.
    let err = domain
        .eval(r#"return jobs.dispatch("./math", "double", 1)"#)
        .unwrap_err()
        .to_string();
    assert_contains(&err, &dispatch_refused(MAX_JOB_BYTES + JOB_WEIGHT));
    let err = domain
        .eval(r#"return jobs.parallelFor("./math", "double", 2)"#)
        .unwrap_err()
        .to_string();
    assert_contains(
        &err,
        &format!(
            "jobs.parallelFor: the domain's jobs would hold {} bytes",
            MAX_JOB_BYTES + 2 * JOB_WEIGHT
        ),
    );
    assert_eq!(domain.stats().job_bytes, MAX_JOB_BYTES);
    // Once the promises are unreachable and collected, all of it is given back.
    domain.eval("held = nil return true").unwrap();
    domain.lua().gc_collect().unwrap();
    assert_eq!(domain.stats().job_bytes, 0);
    still_serves(&domain);
    domain.lua().gc_collect().unwrap();
    assert_eq!(
        domain.stats().job_bytes,
        0,
        "an awaited job whose promise was collected holds nothing"
    );
}

#[test]
fn a_jobs_name_is_held_against_max_job_bytes_with_it_and_one_copy_serves_every_chunk() {
    const JOB_WEIGHT: usize = skein::DomainSpec::JOB_WEIGHT;
    const MAX_JOB_BYTES: usize = skein::DomainSpec::MAX_JOB_BYTES;
    let tree = Tree::new(&[(
        "math.luau",
        "return { double = function(x) return x * 2 end, count = function(c) return c.count end }\n",
    )]);
    let pool = Pool::new(1);
    let domain = tree.domain(&pool);
    // A named job holds its name's bytes beside what the same job unnamed holds, while its
    // promise lives; a parallelFor's chunks hold one copy of their name between them.
    let held = |code: &str| {
        domain.eval(&format!("{code} return true")).unwrap();
        domain.stats().job_bytes
    };
    let plain = held(r#"a = jobs.dispatch("./math", "double", 1) assert(a:await() == 2)"#);
    let named = held(
        r#"b = jobs.dispatch("./math", "double", 1, { name = string.rep("n", 1000) })
           assert(b:await() == 2)"#,
    ) - plain;
    assert_eq!(named, plain + 1000);
    let before = plain + named;
    let chunks = held(
        r#"c = jobs.parallelFor("./math", "count", 8, nil, { chunks = 8 }) assert(#c:await() == 8)"#,
    ) - before;
    let named_chunks = held(
        r#"d = jobs.parallelFor("./math", "count", 8, nil, { chunks = 8, name = string.rep("c", 500) })
           assert(#d:await() == 8)"#,
    ) - before
        - chunks;
    assert_eq!(named_chunks, chunks + 500);
    domain
        .eval("a, b, c, d = nil, nil, nil, nil return true")
        .unwrap();
    domain.lua().gc_collect().unwrap();
    assert_eq!(domain.stats().job_bytes, 0);

    // At the bound: a name that fills it with the job's own weight and its argument (a number,
    // 16 bytes) is taken; one byte more is refused at the call, naming what it would hold.
    let at = MAX_JOB_BYTES - JOB_WEIGHT - 16;
    let err = domain
        .eval(&format!(
            r#"local p = jobs.dispatch("./math", "double", 1, {{ name = string.rep("n", {}) }})
               return p"#,
            at + 1
        ))
        .unwrap_err()
        .to_string();
    assert_contains(&err, &dispatch_refused(MAX_JOB_BYTES + 1));
    domain.lua().gc_collect().unwrap();
    assert_eq!(domain.stats().job_bytes, 0, "a refusal holds nothing");
    let v = domain
        .eval(&format!(
            r#"return jobs.dispatch("./math", "double", 1, {{ name = string.rep("n", {at}) }}):await()"#
        ))
        .unwrap();
    assert_eq!(v, Message::Number(2.0));
    domain.lua().gc_collect().unwrap();
    assert_eq!(domain.stats().job_bytes, 0);
    still_serves(&domain);
}

#[test]
fn a_result_past_max_job_bytes_rejects_its_promise_and_the_pool_serves_on() {
    const JOB_WEIGHT: usize = skein::DomainSpec::JOB_WEIGHT;
    const MAX_JOB_BYTES: usize = skein::DomainSpec::MAX_JOB_BYTES;
    let tree = Tree::new(&[(
        "math.luau",
        "local M = {}\nfunction M.make(n) return string.rep('x', n) end\n\
         function M.double(x) return x * 2 end\nreturn M\n",
    )]);
    let pool = Pool::new(2);
    let domain = tree.domain(&pool);
    // Three results of a quarter each, then a fourth one byte too big.
    let len = MAX_JOB_BYTES / 4 - JOB_WEIGHT - 16;
    let v = domain
        .eval(&format!(
            r#"
held = {{}}
for i = 1, 3 do held[i] = jobs.dispatch("./math", "make", {len}) end
for i = 1, 3 do held[i]:await() end
local ok, err = pcall(function() return jobs.dispatch("./math", "make", {}):await() end)
return err
"#,
            len + 1
        ))
        .unwrap();
    assert_contains(
        &text(&v),
        &format!(
            "result: the domain's jobs would hold {} bytes of arguments and results, past the \
             bound of {MAX_JOB_BYTES}; await and drop some results before dispatching more",
            MAX_JOB_BYTES + 1
        ),
    );
    domain.eval("held = nil return true").unwrap();
    domain.lua().gc_collect().unwrap();
    assert_eq!(domain.stats().job_bytes, 0);
    still_serves(&domain);
}

/// The text of a dispatch the job bound refuses, naming what the jobs `would` hold.
fn dispatch_refused(would: usize) -> String {
    format!(
        "jobs.dispatch: the domain's jobs would hold {would} bytes of arguments and results, past \
         the bound of {}; await some before dispatching more",
        skein::DomainSpec::MAX_JOB_BYTES
    )
}
