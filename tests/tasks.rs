//! The task library on the engine VM and on workers: spawn, defer, delay, wait, cancel, await.

use std::time::Duration;

use skein::{DomainSpec, Message, Plan, Pool, ScriptDomain};

use crate::support::{assert_contains, refusal, sim_domain, text, Tree};

/// `waitFor(done)`: yields a batch at a time until `done()` holds, raising after 10 s, so a test
/// waits for what it observes instead of for a time it guesses.
const WAIT_FOR: &str = r#"
local function waitFor(done)
    local start = os.clock()
    while not done() do
        assert(os.clock() - start < 10, "waitFor: timed out")
        task.wait() -- a yield of one batch: the poll
    end
end
"#;

fn eval(source: &str) -> String {
    let tree = Tree::new(&[]);
    let pool = Pool::new(1);
    let domain = tree.domain(&pool);
    text(&domain.eval(&format!("{WAIT_FOR}{source}")).expect("eval"))
}

#[test]
fn spawn_runs_at_once_until_the_first_yield() {
    let out = eval(
        r#"
        local log = {}
        -- the yield under test: the spawned task's first task.wait() hands back to its spawner
        task.spawn(function(a) table.insert(log, "spawned " .. a); task.wait(); table.insert(log, "resumed") end, "x")
        table.insert(log, "after spawn")
        waitFor(function() return #log == 3 end)
        return table.concat(log, ",")
    "#,
    );
    assert_eq!(out, "spawned x,after spawn,resumed");
}

#[test]
fn defer_runs_in_the_next_batch_and_work_deferred_by_a_batch_waits_for_the_next() {
    let out = eval(
        r#"
        local log = {}
        task.defer(function(v)
            table.insert(log, "d1 " .. v)
            task.defer(function() table.insert(log, "d3") end)
        end, "a")
        task.defer(function() table.insert(log, "d2") end)
        table.insert(log, "main")
        waitFor(function() return #log == 4 end)
        return table.concat(log, ",")
    "#,
    );
    assert_eq!(out, "main,d1 a,d2,d3");
}

#[test]
fn an_advance_drains_the_deferred_batch_before_update_and_after_late_update() {
    let pool = Pool::new(1);
    let domain = sim_domain(&pool);
    domain
        .eval(
            r#"
            log = {}
            local n = 0
            require("@skein/context").bind("sim", {
                update = function() n += 1 table.insert(log, "update " .. n) end,
                lateUpdate = function()
                    table.insert(log, "late " .. n)
                    if n == 1 then
                        -- Runs in this advance's late drain; what it defers waits for the
                        -- next batch: the next advance's early drain, before its update.
                        task.defer(function()
                            table.insert(log, "A")
                            task.defer(function() table.insert(log, "B") end)
                        end)
                    end
                end,
            })
        "#,
        )
        .unwrap();
    let log = |d: &ScriptDomain| text(&d.eval("return table.concat(log, ',')").unwrap());
    domain.advance(Duration::from_millis(1)).unwrap();
    assert_eq!(log(&domain), "update 1,late 1,A");
    domain.advance(Duration::from_millis(1)).unwrap();
    assert_eq!(log(&domain), "update 1,late 1,A,B,update 2,late 2");
}

#[test]
fn a_frame_drains_the_deferred_batch_before_and_after_its_registered_jobs() {
    let pool = Pool::new(1);
    let domain = ScriptDomain::new(&pool, DomainSpec::new("game")).unwrap();
    domain
        .eval(
            r#"
            log = {}
            local n = 0
            jobs.register({ phase = "main", executor = { kind = "luau", run = function()
                n += 1
                table.insert(log, "run " .. n)
                if n == 1 then
                    task.defer(function()
                        table.insert(log, "A")
                        task.defer(function() table.insert(log, "B") end)
                    end)
                end
            end } })
        "#,
        )
        .unwrap();
    let log = |d: &ScriptDomain| text(&d.eval("return table.concat(log, ',')").unwrap());
    domain.frame(Duration::from_millis(1));
    assert_eq!(log(&domain), "run 1,A");
    domain.frame(Duration::from_millis(1));
    assert_eq!(log(&domain), "run 1,A,B,run 2");
}

#[test]
fn wait_answers_the_elapsed_seconds() {
    let out = eval(
        r#"
        local t = os.clock()
        -- the behaviour under test: what task.wait answers after a timed wait
        local elapsed = task.wait(0.05)
        local real = os.clock() - t
        return `{elapsed >= 0.05} {math.abs(elapsed - real) < 0.05}`
    "#,
    );
    assert_eq!(out, "true true");
}

#[test]
fn delay_passes_its_arguments_and_timers_fire_in_order() {
    let out = eval(
        r#"
        local log = {}
        -- the timers under test: the later one is set first
        task.delay(0.06, function(v) table.insert(log, v) end, "late")
        task.delay(0.02, function(v) table.insert(log, v) end, "early")
        waitFor(function() return #log == 2 end)
        return table.concat(log, ",")
    "#,
    );
    assert_eq!(out, "early,late");
}

#[test]
fn cancel_stops_a_parked_task() {
    let out = eval(
        r#"
        local log = {}
        -- the timers under test: both would have fired at 0.02 s
        local t = task.delay(0.02, function() table.insert(log, "ran") end)
        task.cancel(t)
        local w = task.spawn(function() task.wait(0.02) table.insert(log, "woke") end) -- under test
        task.cancel(w)
        -- A later timer that is not cancelled: once it fired, so would have the two above.
        local later = false
        task.delay(0.04, function() later = true end)
        waitFor(function() return later end)
        return `[{table.concat(log, ",")}]`
    "#,
    );
    assert_eq!(out, "[]");
}

#[test]
fn await_outside_a_task_context_is_refused() {
    // the refusal under test: a wait at a module's top level
    let tree = Tree::new(&[("m.luau", "task.wait(1)\nreturn {}\n")]);
    let pool = Pool::new(1);
    let domain = tree.domain(&pool);
    let err = domain
        .eval(r#"return require("./m")"#)
        .unwrap_err()
        .to_string();
    assert_contains(&err, "task.wait can't wait here");
}

#[test]
fn a_failing_spawned_task_is_reported_with_its_stack() {
    let tree = Tree::new(&[]);
    let pool = Pool::new(1);
    let domain = tree.domain(&pool);
    domain
        .eval(&format!(
            "{WAIT_FOR}{}",
            r#"
            local failing = false
            task.spawn(function()
                task.wait() -- the behaviour under test: it fails after a yield, not at the spawn
                failing = true
                error("spawned task failed")
            end)
            waitFor(function() return failing end)
            return nil
        "#
        ))
        .unwrap();
    let reports = domain.take_reports();
    assert_eq!(reports.len(), 1, "{reports:?}");
    assert_eq!(reports[0].source, "script eval");
    assert_contains(&reports[0].message, "spawned task failed");
    assert_contains(&reports[0].message, "eval");
}

#[test]
fn promise_status_and_await_on_a_settled_promise() {
    let tree = Tree::new(&[("m.luau", "return { id = function(x) return x end }\n")]);
    let pool = Pool::new(2);
    let domain = tree.domain(&pool);
    let v = domain
        .eval(
            r#"
            local p = jobs.dispatch("./m", "id", "v")
            local before = p:status()
            local a = p:await()
            local b = task.await(p)
            return `{before} {p:status()} {a} {b}`
        "#,
        )
        .unwrap();
    assert_eq!(text(&v), "pending resolved v v");
}

#[test]
fn loadstring_and_filesystem_require_are_gone() {
    // `proj` is the root; `outside.luau` beside it is a valid module, so only the confinement
    // can refuse it (a parse error or a missing file would refuse it too, with other words).
    let tree = Tree::new(&[
        ("proj/.luaurc", "{}"),
        ("outside.luau", "return 'OUTSIDE'\n"),
    ]);
    let pool = Pool::new(1);
    let root = tree.path().join("proj");
    let domain = ScriptDomain::new(
        &pool,
        DomainSpec::new("test").plan(Plan::new().root(root.clone())),
    )
    .expect("domain");
    assert_eq!(
        domain.eval("return loadstring == nil").unwrap(),
        Message::Boolean(true)
    );
    assert_contains(
        &refusal(&domain, r#"return require("/etc/passwd")"#),
        "invalid require path '/etc/passwd': absolute paths are not allowed; start it with ./, \
         ../ or @",
    );
    let outside = refusal(&domain, r#"return require("../outside")"#);
    assert_contains(
        &outside,
        &format!(
            "module '../outside' from {} leads outside the project root {}: modules are \
             required only from below it",
            root.display(),
            root.display()
        ),
    );
    assert!(!outside.contains("OUTSIDE"), "{outside}");
}

#[test]
fn require_skein_jobs_is_the_jobs_global() {
    let out = eval(r#"return tostring(require("@skein/jobs") == jobs)"#);
    assert_eq!(out, "true");
}
