//! Registered jobs (`jobs.register`) end to end through Luau: luau, worker and kernel executors
//! driven by `ScriptDomain::frame`, `JobHandle` transitions, failures reported once, the
//! forwarded-call count, `jobs.find` / `inspect` / `list`, phases, and every refusal.

use std::time::Duration;

use skein::job::JobStatus;
use skein::{Message, Pool, ScriptDomain};

use crate::support::{assert_contains, field, list, number, text, wait_until, Tree};

/// The error `body` raises, as the code that caught it sees it: its text alone, on one line.
#[track_caller]
fn refusal(domain: &ScriptDomain, body: &str) -> String {
    let raised = crate::support::refusal(domain, body);
    assert!(
        !raised.contains('\n'),
        "a caught error is its text alone: {raised:?}"
    );
    raised
}

/// The numbers of a list message.
#[track_caller]
fn numbers(m: &Message) -> Vec<f64> {
    list(m).iter().map(number).collect()
}

const MODULE: &str = r#"
local M = {}
local count = 0
function M.double(x) return x * 2 end
-- Busy without yielding until a value is pushed to the shared queue "go" (it takes one), then
-- answers its input: an item that stays in flight until the test lets it go.
function M.slow(a)
    local go = jobs.shared.queue("go", { capacity = 16 })
    while go:tryPop() == nil do end
    return a.n
end
-- Module state a keyed job keeps between its items.
function M.counter() count += 1 return count end
function M.fail() error("the entry failed") end
function M.query(id) return world.get(id) + world.get(id) end
function M.find() return jobs.find("x") end
return M
"#;

const FRAME: Duration = Duration::from_millis(1);

fn setup() -> (Tree, Pool) {
    (Tree::new(&[("m.luau", MODULE)]), Pool::new(2))
}

/// Runs frames until `check` (a Luau expression) is true, failing after 10 s.
#[track_caller]
fn frames_until(domain: &ScriptDomain, check: &str) {
    let source = format!("return {check}");
    let held = wait_until(Duration::from_secs(10), || {
        domain.frame(FRAME);
        domain.eval(&source).unwrap() == Message::Boolean(true)
    });
    assert!(
        held,
        "`{check}` never held: {:?} {:?}",
        domain.jobs(),
        domain.take_reports()
    );
}

/// Lets `n` items of `slow` go: pushes `n` values to the shared queue "go".
fn let_go(domain: &ScriptDomain, n: usize) {
    let go = domain.shared().queue("go", 16).unwrap();
    for _ in 0..n {
        go.push(Message::Boolean(true)).unwrap();
    }
}

fn int(domain: &ScriptDomain, expr: &str) -> f64 {
    number(&domain.eval(&format!("return {expr}")).unwrap())
}

fn string(domain: &ScriptDomain, expr: &str) -> String {
    text(&domain.eval(&format!("return {expr}")).unwrap())
}

#[test]
fn a_luau_job_runs_once_per_frame_and_only_in_frames() {
    let (tree, pool) = setup();
    let domain = tree.domain(&pool);
    domain
        .eval(
            r#"
            n = 0
            job = jobs.register({ name = "tick", phase = "main",
                executor = { kind = "luau", run = function() n += 1 end },
                metadata = { tag = "t", list = { 1, 2 } } })
            "#,
        )
        .unwrap();
    // eval pumps rounds, not frames: nothing ran.
    assert_eq!(int(&domain, "n"), 0.0);
    for _ in 0..3 {
        domain.frame(FRAME);
    }
    assert_eq!(int(&domain, "n"), 3.0);
    let info = domain.eval("return job:info()").unwrap();
    assert_eq!(number(field(&info, "calls")), 3.0);
    assert_eq!(number(field(&info, "failed_calls")), 0.0);
    assert_eq!(text(field(&info, "status")), "pending");
    assert_eq!(text(field(&info, "name")), "tick");
    assert_eq!(text(field(&info, "phase")), "main");
    assert_eq!(text(field(&info, "kind")), "luau");
    // The origin is the chunk that registered it.
    assert_eq!(text(field(&info, "origin")), "eval");
    assert_eq!(text(field(field(&info, "metadata"), "tag")), "t");
    assert_eq!(number(field(&info, "id")), 1.0);
    let rust = domain.jobs();
    assert_eq!(rust.len(), 1);
    assert_eq!(rust[0].calls, 3);
    assert_eq!(rust[0].status, JobStatus::Pending);
    assert_eq!(rust[0].origin, "eval");
}

#[test]
fn pause_resume_cancel_valid_and_status() {
    let (tree, pool) = setup();
    let domain = tree.domain(&pool);
    domain
        .eval(
            r#"
            n = 0
            job = jobs.register({ phase = "main",
                executor = { kind = "luau", run = function() n += 1 end }, origin = "here" })
            "#,
        )
        .unwrap();
    domain.frame(FRAME);
    assert_eq!(
        domain.eval("return job:pause()").unwrap(),
        Message::Boolean(true)
    );
    domain.frame(FRAME);
    domain.frame(FRAME);
    assert_eq!(int(&domain, "n"), 1.0);
    // A paused job reads as pending, with paused set.
    assert_eq!(string(&domain, "job:status()"), "pending");
    assert_eq!(
        domain.eval("return job:info().paused").unwrap(),
        Message::Boolean(true)
    );
    assert_eq!(string(&domain, "job:info().origin"), "here");
    assert_eq!(
        domain.eval("return job:resume()").unwrap(),
        Message::Boolean(true)
    );
    domain.frame(FRAME);
    assert_eq!(int(&domain, "n"), 2.0);
    assert_eq!(
        domain.eval("return job:valid()").unwrap(),
        Message::Boolean(true)
    );
    assert_eq!(
        domain.eval("return job:cancel()").unwrap(),
        Message::Boolean(true)
    );
    domain.frame(FRAME);
    assert_eq!(int(&domain, "n"), 2.0);
    // A cancelled job's handle answers false / nil and never raises.
    let after = domain
        .eval("return { job:valid(), job:cancel(), job:pause(), job:resume(), job:info() == nil, job:status() == nil, #jobs.list() == 0 }")
        .unwrap();
    let (f, t) = (Message::Boolean(false), Message::Boolean(true));
    assert_eq!(
        after,
        Message::List(vec![
            f.clone(),
            f.clone(),
            f.clone(),
            f,
            t.clone(),
            t.clone(),
            t
        ])
    );
    assert!(domain.jobs().is_empty());
}

/// Registers the luau job "r", whose runs count in `n`, as the global handle `job`.
fn counted_job(domain: &ScriptDomain) {
    domain
        .eval(
            r#"
            n = 0
            job = jobs.register({ name = "r", phase = "main",
                executor = { kind = "luau", run = function() n += 1 end } })
            "#,
        )
        .unwrap();
}

fn boolean(domain: &ScriptDomain, expr: &str) -> bool {
    match domain.eval(&format!("return {expr}")).unwrap() {
        Message::Boolean(b) => b,
        other => panic!("`{expr}` answered {other:?}"),
    }
}

#[test]
fn cancel_drops_one_reference_and_the_last_one_unregisters() {
    let (tree, pool) = setup();
    let domain = tree.domain(&pool);
    counted_job(&domain);
    domain.eval("found = jobs.find('r')").unwrap();
    domain.frame(FRAME);
    assert_eq!(int(&domain, "n"), 1.0);
    // The registration's reference goes; the found handle's holds the job.
    assert!(boolean(&domain, "job:cancel()"));
    domain.frame(FRAME);
    assert_eq!(int(&domain, "n"), 2.0);
    // Both handles still read and steer the job: it is registered.
    assert!(boolean(&domain, "job:valid() and found:valid()"));
    assert_eq!(string(&domain, "job:info().name"), "r");
    assert_eq!(string(&domain, "job:status()"), "pending");
    assert_eq!(domain.jobs().len(), 1);
    // A second cancel on the same handle drops nothing.
    assert!(!boolean(&domain, "job:cancel()"));
    assert!(!boolean(&domain, "job:destroy()"));
    domain.frame(FRAME);
    assert_eq!(int(&domain, "n"), 3.0);
    // The last reference: unregistered, and no later frame runs it.
    assert!(boolean(&domain, "found:cancel()"));
    domain.frame(FRAME);
    domain.frame(FRAME);
    assert_eq!(int(&domain, "n"), 3.0);
    assert!(domain.jobs().is_empty());
    assert!(!boolean(&domain, "job:valid() or found:valid()"));
    assert!(boolean(
        &domain,
        "job:info() == nil and found:status() == nil"
    ));
    assert!(!boolean(&domain, "found:cancel()"));
    assert!(boolean(&domain, "jobs.find('r') == nil"));
    // The name is free again.
    counted_job(&domain);
    domain.frame(FRAME);
    assert_eq!(int(&domain, "n"), 1.0);
}

#[test]
fn a_found_handle_cancelled_first_leaves_the_job_to_its_registration() {
    let (tree, pool) = setup();
    let domain = tree.domain(&pool);
    counted_job(&domain);
    // `destroy` drops the reference as `cancel` does.
    assert!(boolean(&domain, "jobs.find('r'):destroy()"));
    domain.eval("found = jobs.find('r')").unwrap();
    assert!(boolean(&domain, "found:cancel()"));
    assert!(!boolean(&domain, "found:cancel()"));
    domain.frame(FRAME);
    domain.frame(FRAME);
    assert_eq!(int(&domain, "n"), 2.0);
    assert!(boolean(&domain, "found:valid() and job:valid()"));
    assert!(boolean(&domain, "job:cancel()"));
    domain.frame(FRAME);
    assert_eq!(int(&domain, "n"), 2.0);
    assert!(domain.jobs().is_empty());
}

#[test]
fn a_collected_found_handle_gives_its_reference_back() {
    let (tree, pool) = setup();
    let domain = tree.domain(&pool);
    counted_job(&domain);
    // A script that finds the job every frame and drops the handle: each one collected gives
    // its reference back, so nothing accumulates.
    for _ in 0..3 {
        domain
            .eval("for _ = 1, 1000 do assert(jobs.find('r')) end")
            .unwrap();
        domain.eval("collectgarbage('collect')").unwrap();
        domain.frame(FRAME);
    }
    assert_eq!(int(&domain, "n"), 3.0);
    // So the registration's reference is the last: its cancel unregisters.
    assert!(boolean(&domain, "job:cancel()"));
    domain.frame(FRAME);
    assert_eq!(int(&domain, "n"), 3.0);
    assert!(domain.jobs().is_empty());
}

#[test]
fn a_collected_found_handle_holding_the_last_reference_unregisters_the_job() {
    let (tree, pool) = setup();
    let domain = tree.domain(&pool);
    counted_job(&domain);
    domain.eval("found = jobs.find('r')").unwrap();
    assert!(boolean(&domain, "job:cancel()"));
    domain.frame(FRAME);
    assert_eq!(int(&domain, "n"), 1.0);
    // Dropped without a cancel and collected: the job goes at the engine's next look.
    domain.eval("found = nil").unwrap();
    domain.eval("collectgarbage('collect')").unwrap();
    assert!(!boolean(&domain, "job:valid()"));
    assert!(boolean(
        &domain,
        "jobs.find('r') == nil and jobs.inspect('r') == nil"
    ));
    domain.frame(FRAME);
    domain.frame(FRAME);
    assert_eq!(int(&domain, "n"), 1.0);
    assert!(domain.jobs().is_empty());

    // Collected between two frames with nothing else reading the registry: the next frame
    // drops it before running anything.
    counted_job(&domain);
    domain.eval("found = jobs.find('r')").unwrap();
    assert!(boolean(&domain, "job:cancel()"));
    domain
        .eval("found = nil collectgarbage('collect')")
        .unwrap();
    domain.frame(FRAME);
    assert_eq!(int(&domain, "n"), 0.0);
    assert!(domain.jobs().is_empty());
}

#[test]
fn a_collected_registration_handle_leaves_its_job_running() {
    let (tree, pool) = setup();
    let domain = tree.domain(&pool);
    domain
        .eval(
            r#"
            n = 0
            jobs.register({ name = "kept", phase = "main",
                executor = { kind = "luau", run = function() n += 1 end } })
            "#,
        )
        .unwrap();
    domain.eval("collectgarbage('collect')").unwrap();
    for _ in 0..3 {
        domain.frame(FRAME);
    }
    assert_eq!(int(&domain, "n"), 3.0);
    // Its reference stayed with the job: a found handle's cancel drops only its own.
    assert!(boolean(&domain, "jobs.find('kept'):cancel()"));
    domain.eval("collectgarbage('collect')").unwrap();
    domain.frame(FRAME);
    assert_eq!(int(&domain, "n"), 4.0);
    assert_eq!(domain.jobs().len(), 1);
}

#[test]
fn a_luau_run_that_yields_is_running_and_is_not_started_again() {
    let (tree, pool) = setup();
    let domain = tree.domain(&pool);
    domain
        .eval(
            r#"
            n = 0
            job = jobs.register({ phase = "main", executor = { kind = "luau",
                -- The behaviour under test: a run that yields across frames.
                run = function() n += 1 task.waitFrames(3) end } })
            "#,
        )
        .unwrap();
    domain.frame(FRAME);
    assert_eq!(string(&domain, "job:status()"), "running");
    domain.frame(FRAME);
    assert_eq!(int(&domain, "n"), 1.0);
    frames_until(&domain, "job:status() == 'pending'");
    domain.frame(FRAME);
    assert_eq!(int(&domain, "n"), 2.0);
}

#[test]
fn a_failing_job_is_reported_once_keeps_its_error_and_resume_clears_it() {
    let (tree, pool) = setup();
    let domain = tree.domain(&pool);
    domain
        .eval(
            r#"
            n = 0
            job = jobs.register({ name = "flaky", phase = "main", executor = { kind = "luau",
                run = function() n += 1 if n == 2 then error("second run broke") end end } })
            "#,
        )
        .unwrap();
    for _ in 0..4 {
        domain.frame(FRAME);
    }
    assert_eq!(int(&domain, "n"), 2.0);
    assert_eq!(string(&domain, "job:status()"), "errored");
    let reports = domain.take_reports();
    assert_eq!(reports.len(), 1, "{reports:?}");
    assert_eq!(reports[0].source, "job 'flaky'");
    assert_contains(&reports[0].message, "job 'flaky' failed: ");
    assert_contains(&reports[0].message, "second run broke");
    assert_contains(
        &string(&domain, "job:info().last_error"),
        "second run broke",
    );
    assert_eq!(int(&domain, "job:info().failed_calls"), 1.0);
    assert_eq!(int(&domain, "job:info().calls"), 2.0);
    domain.eval("job:resume()").unwrap();
    assert_eq!(string(&domain, "job:status()"), "pending");
    domain.frame(FRAME);
    assert_eq!(int(&domain, "n"), 3.0);
    assert!(domain.take_reports().is_empty());
}

#[test]
fn a_worker_job_queues_nothing_for_nil_keeps_one_item_in_flight_and_applies_on_the_engine() {
    let (tree, pool) = setup();
    let domain = tree.domain(&pool);
    domain
        .eval(
            r#"
            want, inputs, applied = false, 0, {}
            job = jobs.register({ name = "slow", phase = "main", executor = { kind = "worker",
                module = "./m", entry = "slow",
                input = function()
                    if not want then return nil end
                    -- Every earlier item was applied before this input runs: one in flight.
                    if inputs ~= #applied then error("a second item while one was in flight") end
                    inputs += 1
                    return { n = inputs }
                end,
                apply = function(result)
                    table.insert(applied, { result = result, engine = jobs.context() == nil })
                end } })
            "#,
        )
        .unwrap();
    for _ in 0..3 {
        domain.frame(FRAME);
    }
    assert_eq!(int(&domain, "job:info().calls"), 0.0);
    assert_eq!(string(&domain, "job:status()"), "pending");
    domain.eval("want = true").unwrap();
    domain.frame(FRAME);
    assert_eq!(int(&domain, "inputs"), 1.0);
    assert_eq!(string(&domain, "job:status()"), "running");
    // While the slow item runs (until the test lets it go), frames start no second item.
    for _ in 0..5 {
        domain.frame(FRAME);
    }
    assert_eq!(string(&domain, "job:status()"), "running");
    assert_eq!(int(&domain, "inputs"), 1.0);
    assert_eq!(int(&domain, "#applied"), 0.0);
    let_go(&domain, 1);
    frames_until(&domain, "#applied == 1");
    let first = domain.eval("return applied[1]").unwrap();
    assert_eq!(number(field(&first, "result")), 1.0);
    assert_eq!(field(&first, "engine"), &Message::Boolean(true));
    // The frame that applied the first started the second: never more than one in flight.
    assert!(int(&domain, "inputs") <= 2.0);
    let_go(&domain, 1);
    frames_until(&domain, "#applied == 2");
    assert_eq!(
        number(field(&domain.eval("return applied[2]").unwrap(), "result")),
        2.0
    );
    assert!(int(&domain, "inputs") <= 3.0);
    // A third item may have started: let it end, so no item spins past the test.
    domain.eval("want = false").unwrap();
    let_go(&domain, 1);
    assert_eq!(int(&domain, "job:info().failed_calls"), 0.0);
    assert!(domain.take_reports().is_empty());
}

#[test]
fn a_keyed_worker_job_keeps_module_state_between_items() {
    let (tree, pool) = setup();
    let domain = tree.domain(&pool);
    domain
        .eval(
            r#"
            seen = {}
            -- An item of the same key holds the key's VM until the test lets it go: the job's
            -- first item waits.
            jobs.dispatch("./m", "slow", { n = 0 }, { key = "counter" })
            job = jobs.register({ phase = "main", executor = { kind = "worker",
                module = "./m", entry = "counter", key = "counter", deadline = 60,
                input = function() return true end,
                apply = function(n) table.insert(seen, n) end } })
            "#,
        )
        .unwrap();
    // The first frame queues the job's first item, behind the slow one.
    domain.frame(FRAME);
    assert_eq!(string(&domain, "job:status()"), "running");
    // The behaviour under test: the item waits 100 ms for the key's VM, which the job's
    // `waited_for_vm` must count.
    std::thread::sleep(Duration::from_millis(100));
    let_go(&domain, 1);
    frames_until(&domain, "#seen >= 3");
    let seen = domain.eval("return { seen[1], seen[2], seen[3] }").unwrap();
    assert_eq!(numbers(&seen), vec![1.0, 2.0, 3.0]);
    let waited = int(&domain, "job:info().waited_for_vm_ms");
    assert!(waited >= 100.0, "{waited}");
    assert!(domain.jobs()[0].waited_for_vm >= Duration::from_millis(100));
    assert_eq!(domain.jobs()[0].kind, "worker");
}

#[test]
fn worker_job_deadline_and_key_are_refused_with_the_dispatch_texts() {
    let (tree, pool) = setup();
    let domain = tree.domain(&pool);
    let job = |extra: &str| {
        format!(
            r#"jobs.register({{ phase = "main", executor = {{ kind = "worker", module = "./m",
                entry = "double", input = function() end, apply = function() end, {extra} }} }})"#
        )
    };
    domain.eval(&job("deadline = 60")).unwrap();
    domain
        .eval(&job(&format!("key = '{}'", "k".repeat(256))))
        .unwrap();
    assert_eq!(
        refusal(&domain, &job("deadline = 61")),
        "jobs.register: executor.deadline of 61 s is past the cap of 60 s: a deadline may be lowered, never raised"
    );
    assert_eq!(
        refusal(&domain, &job("deadline = 0")),
        "jobs.register: executor.deadline must be a number of seconds above 0, got 0"
    );
    assert_eq!(
        refusal(&domain, &job("key = ''")),
        "jobs.register: executor.key must be a string of 1 to 256 bytes, got a string of 0 bytes"
    );
    assert_eq!(
        refusal(&domain, &job(&format!("key = '{}'", "k".repeat(257)))),
        "jobs.register: executor.key must be a string of 1 to 256 bytes, got a string of 257 bytes"
    );
    assert_eq!(domain.jobs().len(), 2);
}

#[test]
fn a_failing_item_or_apply_errors_the_worker_job_once() {
    let (tree, pool) = setup();
    let domain = tree.domain(&pool);
    domain
        .eval(
            r#"
            a = jobs.register({ name = "entry", phase = "main", executor = { kind = "worker",
                module = "./m", entry = "fail", input = function() return 1 end,
                apply = function() end } })
            b = jobs.register({ name = "apply", phase = "main", executor = { kind = "worker",
                module = "./m", entry = "double", input = function() return 4 end,
                apply = function(r) error("apply got " .. r) end } })
            "#,
        )
        .unwrap();
    frames_until(
        &domain,
        "a:status() == 'errored' and b:status() == 'errored'",
    );
    for _ in 0..5 {
        domain.frame(FRAME);
    }
    assert_contains(&string(&domain, "a:info().last_error"), "the entry failed");
    assert_contains(&string(&domain, "b:info().last_error"), "apply got 8");
    assert_eq!(int(&domain, "a:info().calls"), 1.0);
    assert_eq!(int(&domain, "b:info().failed_calls"), 1.0);
    let mut sources: Vec<String> = domain
        .take_reports()
        .into_iter()
        .map(|r| r.source)
        .collect();
    sources.sort();
    assert_eq!(sources, vec!["job 'apply'", "job 'entry'"]);
}

#[test]
fn a_cancelled_worker_job_never_applies_its_item_in_flight() {
    // One worker: an item dispatched after the job's runs only once that one has ended.
    let (tree, pool) = (Tree::new(&[("m.luau", MODULE)]), Pool::new(1));
    let domain = tree.domain(&pool);
    domain
        .eval(
            r#"
            applied = 0
            job = jobs.register({ phase = "main", executor = { kind = "worker",
                module = "./m", entry = "slow", input = function() return { n = 1 } end,
                apply = function() applied += 1 end } })
            "#,
        )
        .unwrap();
    domain.frame(FRAME);
    assert_eq!(string(&domain, "job:status()"), "running");
    domain.eval("assert(job:cancel())").unwrap();
    let_go(&domain, 1);
    // The pool finished the item (its result has landed) before it serves the next one.
    let answer = domain
        .eval(r#"return jobs.dispatch("./m", "double", 4):await()"#)
        .unwrap();
    assert_eq!(answer, Message::Number(8.0));
    for _ in 0..5 {
        domain.frame(FRAME);
    }
    assert_eq!(int(&domain, "applied"), 0.0);
}

#[test]
fn a_kernel_job_runs_natively_and_a_panicking_one_is_contained() {
    let (tree, pool) = setup();
    let domain = tree.domain(&pool);
    domain
        .register_kernel("sum", |m| match m {
            Message::List(items) => Ok(Message::Number(
                items
                    .iter()
                    .map(|i| match i {
                        Message::Integer(i) => *i as f64,
                        Message::Number(n) => *n,
                        _ => 0.0,
                    })
                    .sum(),
            )),
            other => Err(format!("expected a list, got {other:?}")),
        })
        .unwrap();
    domain
        .register_kernel("thread", |_| {
            Ok(Message::String(
                std::thread::current()
                    .name()
                    .unwrap_or("")
                    .as_bytes()
                    .to_vec()
                    .into(),
            ))
        })
        .unwrap();
    domain
        .register_kernel("bad", |_| panic!("kernel blew up"))
        .unwrap();
    assert_eq!(
        domain.register_kernel("sum", Ok).unwrap_err().to_string(),
        "register_kernel: kernel 'sum' is registered already"
    );
    domain
        .eval(
            r#"
            sums, names = {}, {}
            s = jobs.register({ phase = "main", executor = { kind = "kernel", kernel = "sum",
                input = function() return { 1, 2, 3.5 } end,
                apply = function(r) table.insert(sums, r) end } })
            t = jobs.register({ phase = "main", executor = { kind = "kernel", kernel = "thread",
                apply = function(r) table.insert(names, r) end } })
            b = jobs.register({ name = "bad", phase = "main",
                executor = { kind = "kernel", kernel = "bad" } })
            "#,
        )
        .unwrap();
    frames_until(
        &domain,
        "#sums >= 2 and #names >= 1 and b:status() == 'errored'",
    );
    assert_eq!(int(&domain, "sums[1]"), 6.5);
    // It ran on a pool thread, not the engine thread.
    assert_ne!(
        string(&domain, "names[1]"),
        std::thread::current().name().unwrap_or("").to_owned()
    );
    assert_contains(
        &string(&domain, "b:info().last_error"),
        "kernel 'bad' panicked: kernel blew up",
    );
    let reports = domain.take_reports();
    let bad: Vec<_> = reports.iter().filter(|r| r.source == "job 'bad'").collect();
    assert_eq!(bad.len(), 1, "{reports:?}");
    // The pool still serves, kernels and Luau alike.
    let before = int(&domain, "#sums");
    frames_until(&domain, &format!("#sums > {before}"));
    let answer = domain
        .eval(r#"return jobs.dispatch("./m", "double", 21):await()"#)
        .unwrap();
    assert_eq!(answer, Message::Number(42.0));
}

#[test]
fn forwarded_calls_count_a_worker_jobs_queries() {
    let (tree, pool) = setup();
    let domain = tree.domain(&pool);
    domain
        .register_query("world.get", |()| Ok(Message::Number(5.0)))
        .unwrap();
    domain
        .eval(
            r#"
            results = {}
            job = jobs.register({ phase = "main", executor = { kind = "worker",
                module = "./m", entry = "query",
                input = function() if #results < 2 then return 1 end return nil end,
                apply = function(r) table.insert(results, r) end } })
            "#,
        )
        .unwrap();
    frames_until(&domain, "#results == 2");
    assert_eq!(int(&domain, "results[1]"), 10.0);
    assert_eq!(int(&domain, "job:info().forwarded_calls"), 4.0);
    // A plain dispatch's queries count for no registered job.
    domain
        .eval(r#"jobs.dispatch("./m", "query", 1):await()"#)
        .unwrap();
    assert_eq!(int(&domain, "job:info().forwarded_calls"), 4.0);
    assert_eq!(domain.jobs()[0].forwarded_calls, 4);
}

#[test]
fn find_inspect_and_list() {
    let (tree, pool) = setup();
    let domain = tree.domain(&pool);
    domain
        .eval(
            r#"
            local run = function() end
            a = jobs.register({ name = "a", phase = "physics", executor = { kind = "luau", run = run } })
            jobs.register({ name = "b", phase = "render", executor = { kind = "luau", run = run } })
            jobs.register({ phase = "physics", executor = { kind = "luau", run = run } })
            "#,
        )
        .unwrap();
    let names = domain
        .eval("local out = {} for _, i in jobs.list() do table.insert(out, i.name or '-') end return table.concat(out, ',')")
        .unwrap();
    assert_eq!(text(&names), "a,b,-");
    let physics = domain
        .eval("local out = {} for _, i in jobs.list('physics') do table.insert(out, i.id) end return out")
        .unwrap();
    assert_eq!(numbers(&physics), vec![1.0, 3.0]);
    assert_eq!(int(&domain, "#jobs.list('nothing')"), 0.0);
    assert_eq!(string(&domain, "jobs.inspect('b').phase"), "render");
    assert_eq!(string(&domain, "jobs.inspect(a).name"), "a");
    assert_eq!(
        domain.eval("return jobs.inspect('zz')").unwrap(),
        Message::Nil
    );
    assert_eq!(domain.eval("return jobs.find('zz')").unwrap(), Message::Nil);
    assert_eq!(string(&domain, "jobs.find('b'):info().name"), "b");
    // A found handle is the same job with a reference of its own: cancelling it leaves the job
    // to the registration's handle, whose cancel then frees the name.
    domain
        .eval("assert(jobs.find('a'):cancel() and a:valid())")
        .unwrap();
    domain.eval("assert(a:cancel())").unwrap();
    assert_eq!(
        domain.eval("return a:valid()").unwrap(),
        Message::Boolean(false)
    );
    domain
        .eval(r#"jobs.register({ name = "a", phase = "x", executor = { kind = "luau", run = function() end } })"#)
        .unwrap();
    assert_eq!(int(&domain, "jobs.inspect('a').id"), 4.0);
    assert_eq!(
        refusal(&domain, "jobs.inspect(5)"),
        "jobs.inspect: target must be a JobHandle or a job name, got a number"
    );
    assert_eq!(
        refusal(&domain, "jobs.find(nil)"),
        "jobs.find: name must be a string, got nil"
    );
    assert_eq!(
        refusal(&domain, "jobs.list(1)"),
        "jobs.list: phase must be a string or nil, got a number"
    );
}

#[test]
fn phases_run_in_first_registration_order_and_run_phase_runs_one() {
    let (tree, pool) = setup();
    let domain = tree.domain(&pool);
    domain
        .eval(
            r#"
            log = {}
            local function job(phase, name)
                jobs.register({ phase = phase, executor = { kind = "luau",
                    run = function() table.insert(log, name) end } })
            end
            job("late", "late1")
            job("early", "early1")
            job("late", "late2")
            "#,
        )
        .unwrap();
    domain.frame(FRAME);
    assert_eq!(
        string(&domain, "table.concat(log, ',')"),
        "late1,late2,early1"
    );
    domain.eval("log = {}").unwrap();
    assert!(domain.run_job_phase("early"));
    assert!(!domain.run_job_phase("missing"));
    assert_eq!(string(&domain, "table.concat(log, ',')"), "early1");
}

#[test]
fn every_refusal_names_its_field_and_registers_nothing() {
    let (tree, pool) = setup();
    let domain = tree.domain(&pool);
    domain.register_kernel("k", Ok).unwrap();
    domain
        .eval(r#"jobs.register({ name = "dup", phase = "main", executor = { kind = "luau", run = function() end } })"#)
        .unwrap();
    let long = "p".repeat(65);
    let name257 = "n".repeat(257);
    let cases: Vec<(String, String)> = vec![
        ("nil".into(), "jobs.register: descriptor must be a table, got nil".into()),
        (r#"{ name = "dup", phase = "main", executor = { kind = "luau", run = print } }"#.into(),
         "jobs.register: a job named 'dup' is registered already".into()),
        (r#"{ name = "", phase = "main", executor = { kind = "luau", run = print } }"#.into(),
         "jobs.register: name must be a string of 1 to 256 bytes, got a string of 0 bytes".into()),
        (format!(r#"{{ name = "{name257}", phase = "main", executor = {{ kind = "luau", run = print }} }}"#),
         "jobs.register: name must be a string of 1 to 256 bytes, got a string of 257 bytes".into()),
        (r#"{ executor = { kind = "luau", run = print } }"#.into(),
         "jobs.register: phase must be a string of 1 to 64 bytes, got nil".into()),
        (format!(r#"{{ phase = "{long}", executor = {{ kind = "luau", run = print }} }}"#),
         "jobs.register: phase must be a string of 1 to 64 bytes, got a string of 65 bytes".into()),
        (r#"{ phase = "main" }"#.into(),
         "jobs.register: executor must be a table with a kind, got nil".into()),
        (r#"{ phase = "main", executor = { kind = "compute" } }"#.into(),
         "jobs.register: executor.kind must be one of 'luau', 'worker', 'kernel', got 'compute'".into()),
        (r#"{ phase = "main", executor = {} }"#.into(),
         "jobs.register: executor.kind must be one of 'luau', 'worker', 'kernel', got nil".into()),
        (r#"{ phase = "main", executor = { kind = "luau" } }"#.into(),
         "jobs.register: executor.run must be a function, got nil".into()),
        (r#"{ phase = "main", executor = { kind = "luau", run = print, extra = 1 } }"#.into(),
         "jobs.register: unknown executor field for kind 'luau' 'extra': expected kind, run".into()),
        (r#"{ phase = "main", ordering = {}, executor = { kind = "luau", run = print } }"#.into(),
         "jobs.register: unknown descriptor field 'ordering': expected name, phase, executor, reads, writes, after, before, pure, origin, metadata".into()),
        (r#"{ phase = "main", reads = "x", executor = { kind = "luau", run = print } }"#.into(),
         "jobs.register: reads must be a list of at most 64 names, got a string".into()),
        (r#"{ phase = "main", writes = { x = true }, executor = { kind = "luau", run = print } }"#.into(),
         "jobs.register: writes must be a list of at most 64 names, got a table with other keys".into()),
        (r#"{ phase = "main", reads = { "a", 5 }, executor = { kind = "luau", run = print } }"#.into(),
         "jobs.register: reads[2] must be a string of 1 to 256 bytes, got a number".into()),
        (r#"{ phase = "main", writes = { "" }, executor = { kind = "luau", run = print } }"#.into(),
         "jobs.register: writes[1] must be a string of 1 to 256 bytes, got a string of 0 bytes".into()),
        (r#"{ phase = "main", after = "a", executor = { kind = "luau", run = print } }"#.into(),
         "jobs.register: after must be a list of at most 64 job names, got a string".into()),
        (r#"{ phase = "main", before = { true }, executor = { kind = "luau", run = print } }"#.into(),
         "jobs.register: before[1] must be a string of 1 to 256 bytes, got a boolean".into()),
        (r#"{ phase = "main", pure = 1, executor = { kind = "luau", run = print } }"#.into(),
         "jobs.register: pure must be a boolean, got a number".into()),
        (r#"{ phase = "main", pure = true, writes = { "w" }, executor = { kind = "luau", run = print } }"#.into(),
         "jobs.register: a pure job changes nothing outside its result, so it declares no writes (writes names 'w')".into()),
        (r#"{ phase = "main", executor = { kind = "worker", entry = "double", input = print, apply = print } }"#.into(),
         "jobs.register: executor.module must be a require path string, got nil".into()),
        (r#"{ phase = "main", executor = { kind = "worker", module = "./m", input = print, apply = print } }"#.into(),
         "jobs.register: executor.entry must be the name of a function, got nil".into()),
        (r#"{ phase = "main", executor = { kind = "worker", module = "./m", entry = "double", input = 5, apply = print } }"#.into(),
         "jobs.register: executor.input must be a function, got a number".into()),
        (r#"{ phase = "main", executor = { kind = "worker", module = "./m", entry = "double", input = print } }"#.into(),
         "jobs.register: executor.apply must be a function, got nil".into()),
        (r#"{ phase = "main", executor = { kind = "kernel", kernel = "nope" } }"#.into(),
         "jobs.register: executor.kernel 'nope' is not a registered kernel".into()),
        (r#"{ phase = "main", executor = { kind = "kernel" } }"#.into(),
         "jobs.register: executor.kernel must be the name of a registered kernel, got nil".into()),
        (r#"{ phase = "main", executor = { kind = "kernel", kernel = "k", apply = true } }"#.into(),
         "jobs.register: executor.apply must be a function, got a boolean".into()),
        (r#"{ phase = "main", origin = 5, executor = { kind = "luau", run = print } }"#.into(),
         "jobs.register: origin must be a string, got a number".into()),
        (r#"{ phase = "main", metadata = "x", executor = { kind = "luau", run = print } }"#.into(),
         "jobs.register: metadata must be a table of data, got a string".into()),
        (r#"{ phase = "main", metadata = { f = print }, executor = { kind = "luau", run = print } }"#.into(),
         "jobs.register: metadata.f: a function can't cross a worker or event boundary".into()),
    ];
    for (descriptor, expected) in cases {
        let got = refusal(&domain, &format!("jobs.register({descriptor})"));
        assert_eq!(got, expected, "for {descriptor}");
        assert_eq!(domain.jobs().len(), 1, "after {descriptor}");
    }
    let bad_module = refusal(
        &domain,
        r#"jobs.register({ phase = "main", executor = { kind = "worker", module = "./missing",
            entry = "x", input = print, apply = print } })"#,
    );
    assert_contains(&bad_module, "jobs.register: executor.module: ");
    assert_eq!(int(&domain, "#jobs.list()"), 1.0);
}

#[test]
fn find_in_a_worker_vm_is_refused_naming_the_function() {
    let (tree, pool) = setup();
    let domain = tree.domain(&pool);
    let err = domain
        .eval(r#"return jobs.dispatch("./m", "find"):await()"#)
        .unwrap_err()
        .to_string();
    assert_contains(&err, "jobs.find is not yet supported in a worker VM");
}

/// `origin` and `metadata` are kept as long as the job is registered: each is bounded, tested
/// at its bound and one past it, and a refusal registers nothing.
#[test]
fn a_descriptors_origin_and_metadata_are_bounded_and_a_refusal_registers_nothing() {
    let pool = skein::Pool::new(1);
    let domain = skein::ScriptDomain::new(&pool, skein::DomainSpec::new("main")).expect("domain");
    let v = domain
        .eval(
            r#"
            local function reg(name, extra)
                local d = { name = name, phase = "update", executor = { kind = "luau", run = function() end } }
                for k, v in extra do d[k] = v end
                local ok, err = pcall(jobs.register, d)
                return ok or (tostring(err):match("^([^\n]*)"))
            end
            -- A string of n bytes in a table weighs n + 2 nodes of 16 bytes.
            local fits = string.rep("m", 65536 - 32)
            return {
                reg("a", { origin = string.rep("o", 1024) }),
                reg("b", { origin = string.rep("o", 1025) }),
                reg("c", { metadata = { fits } }),
                reg("d", { metadata = { fits .. "m" } }),
                jobs.find("b") == nil and jobs.find("d") == nil and jobs.find("c") ~= nil,
            }
            "#,
        )
        .unwrap();
    let skein::Message::List(row) = v else {
        panic!("{v:?}")
    };
    assert_eq!(row[0], skein::Message::Boolean(true));
    assert_eq!(
        row[1],
        crate::support::string("jobs.register: origin must be at most 1024 bytes, got 1025")
    );
    assert_eq!(row[2], skein::Message::Boolean(true));
    assert_eq!(
        row[3],
        crate::support::string(
            "jobs.register: metadata[1]: a value weighing more than its limit of 65536 bytes \
             can't cross a worker or event boundary"
        )
    );
    assert_eq!(row[4], skein::Message::Boolean(true));
}
