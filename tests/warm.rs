//! `jobs.warm(module, entry)`: once per worker VM before any item, again in a VM built later,
//! the await refusal, the promise's outcome, the warm bound, panics, stats and bad input.

use std::time::{Duration, Instant};

use skein::{mlua, DomainSpec, Message, Plan, Pool, PromiseStatus, ScriptDomain};

use crate::support::{
    assert_contains, field, list, number, refusal, text, wait_until, Marks, Tree,
};

const REGISTRY: &str = r#"
local M = {}
local state = { built = false, runs = 0 }

function M.build()
    state.runs += 1
    hostMark()
    task.wait(0.05) -- the behaviour under test: a warm that yields, and what waits for it
    state.built = true
end

function M.read()
    local c = jobs.context()
    return { built = state.built, runs = state.runs, worker = c and c.worker or -1 }
end

function M.chunk(c) return M.read() end

function M.fail() error("the registry could not load", 0) end

function M.awaitDispatch()
    jobs.dispatch("./registry", "read"):await()
end

function M.awaitMap()
    jobs.map("./registry", "read", { 1 }):await()
end

function M.awaitInTask()
    local err
    task.spawn(function()
        local ok, e = pcall(function() return jobs.parallelFor("./registry", "chunk", 2):await() end)
        err = if ok then "no error" else tostring(e)
    end)
    local start = os.clock()
    while err == nil do
        assert(os.clock() - start < 10, "the task never ended")
        task.wait() -- a yield of one batch: the poll for the task's end
    end
    error(err, 0)
end

function M.awaitSettledWarm()
    local p = jobs.warm("./registry", "build")
    assert(p:status() == "resolved", p:status())
    p:await()
end

function M.warmFromItem()
    jobs.warm("./registry", "build"):await()
    return M.read()
end

local log = {}
local warmEnded = false
-- Ticks once a batch until the warm has ended; `ticker.started` tells the engine it runs.
function M.ticker()
    jobs.shared.table("ticker").started = true
    local start = os.clock()
    while not warmEnded do
        assert(os.clock() - start < 10, "the warm never ended")
        table.insert(log, "tick")
        task.wait() -- a yield of one batch: the tick
    end
end
function M.logWarm()
    table.insert(log, "warm+")
    task.wait(0.05) -- the behaviour under test: the warm's wait, during which tasks run
    table.insert(log, "warm-")
    warmEnded = true
end
function M.log() return table.concat(log, ",") end

-- The behaviour under test: a wait far past any warm bound, so one that ends is the bound's doing.
function M.slow() task.wait(30) end
-- The behaviour under test: two waits that end within the bound.
function M.quick() task.wait(0.05) task.wait(0.05) end
-- The behaviour under test: a run that spins past the bound, then yields.
function M.busy()
    local t = os.clock()
    while os.clock() - t < 0.4 do end
    task.wait(0) -- the behaviour under test: the first yield past the bound
    hostMark()
end
-- A warm that tells it runs (`warm.gated`), then waits until the test opens `warm.open`.
function M.gated()
    local t = jobs.shared.table("warm")
    t.gatedRuns = (t.gatedRuns or 0) + 1 -- one worker in the tests that read it
    t.gated = true
    local start = os.clock()
    while not t.open do
        assert(os.clock() - start < 10, "the gate never opened")
        task.wait() -- a yield of one batch: the poll for the gate
    end
end

return M
"#;

const PANICKY: &str = r#"
return {
    panicky = function() hostMark() rawPanic() end,
}
"#;

/// A module whose top level panics in host code: requiring it drops the worker's VM.
const BOOM: &str = r#"
rawPanic()
return { x = function() end }
"#;

fn tree() -> Tree {
    Tree::new(&[
        ("registry.luau", REGISTRY),
        ("panicky.luau", PANICKY),
        ("boom.luau", BOOM),
    ])
}

/// A plan with `hostMark()` and `rawPanic()`, a host function whose panic Skein's wrapper does
/// not catch, so it reaches the scheduler (in a task) or the worker (outside one).
fn plan(marks: &Marks) -> Plan {
    marks.plan().setup(|lua| {
        let f = lua.create_function(|_, ()| -> mlua::Result<()> { panic!("raw host panic") })?;
        lua.globals().raw_set("rawPanic", f)
    })
}

#[test]
fn warm_runs_once_in_every_worker_vm_and_items_see_its_state() {
    let tree = tree();
    let marks = Marks::default();
    let pool = Pool::new(2);
    let domain = tree.domain_with(&pool, plan(&marks));
    let out = domain
        .eval(
            r#"
            local p = jobs.warm("./registry", "build")
            assert(p:await() == nil)
            local rows = jobs.parallelFor("./registry", "chunk", 16, nil, { chunks = 16 }):await()
            return rows
            "#,
        )
        .unwrap();
    assert_eq!(marks.count(), 2, "one run per worker VM");
    for row in list(&out) {
        assert_eq!(field(row, "built"), &Message::Boolean(true));
        assert_eq!(number(field(row, "runs")), 1.0);
    }
    let stats = pool.stats();
    for row in &stats {
        assert_eq!(row.warm_runs.len(), 1, "{stats:?}");
        let run = &row.warm_runs[0];
        assert_eq!(run.name, "./registry.build");
        assert!(run.ok() && run.error.is_none());
        assert!(run.elapsed >= Duration::from_millis(50), "{run:?}");
    }
}

#[test]
fn an_item_dispatched_while_the_warm_waits_starts_after_it() {
    let tree = tree();
    let marks = Marks::default();
    let pool = Pool::new(2);
    let domain = tree.domain_with(&pool, plan(&marks));
    let out = domain
        .eval(
            r#"
            local w = jobs.warm("./registry", "build")
            local plain = jobs.dispatch("./registry", "read")
            local keyed = jobs.dispatch("./registry", "read", nil, { key = "k" })
            local chunks = jobs.parallelFor("./registry", "chunk", 4, nil, { chunks = 4 })
            local out = { plain:await(), keyed:await() }
            for _, r in chunks:await() do table.insert(out, r) end
            w:await()
            return out
            "#,
        )
        .unwrap();
    assert_eq!(list(&out).len(), 6);
    for row in list(&out) {
        assert_eq!(field(row, "built"), &Message::Boolean(true), "{row:?}");
        assert_eq!(number(field(row, "runs")), 1.0);
    }
    assert_eq!(marks.count(), 2);
}

#[test]
fn a_second_call_runs_nothing_and_settles_the_same() {
    let tree = tree();
    let marks = Marks::default();
    let pool = Pool::new(2);
    let domain = tree.domain_with(&pool, plan(&marks));
    // The same file, spelled otherwise: through the root's parent folder.
    let root = tree.path();
    let other = format!(
        "../{}/registry",
        root.file_name().unwrap().to_str().unwrap()
    );
    let out = domain
        .eval(&format!(
            r#"
            local a = jobs.warm("./registry", "build")
            local b = jobs.warm("{other}", "build")
            local first = {{ a:await(), b:await() }}
            local c = jobs.warm("./registry", "build")
            local settled = c:status()
            c:await()
            local f1 = jobs.warm("./registry", "fail")
            local ok1, e1 = pcall(function() return f1:await() end)
            local ok2, e2 = pcall(function() return jobs.warm("./registry", "fail"):await() end)
            assert(not ok1 and not ok2)
            return {{ settled = settled, e1 = tostring(e1), e2 = tostring(e2) }}
            "#
        ))
        .unwrap();
    assert_eq!(marks.count(), 2, "the second and third calls ran nothing");
    assert_eq!(text(field(&out, "settled")), "resolved");
    assert_eq!(field(&out, "e1"), field(&out, "e2"));
    let runs: usize = pool.stats().iter().map(|r| r.warm_runs.len()).sum();
    assert_eq!(runs, 4, "build and fail, once per worker");
}

#[test]
fn a_raising_warm_rejects_naming_each_worker_and_the_vm_serves_on() {
    let tree = tree();
    let pool = Pool::new(2);
    let domain = tree.domain_with(&pool, plan(&Marks::default()));
    let err = refusal(&domain, r#"jobs.warm("./registry", "fail"):await()"#);
    assert_contains(
        &err,
        "job 'jobs.warm \"./registry\".fail' failed: worker 0: the registry could not load; \
         worker 1: the registry could not load",
    );
    let row = domain
        .eval(r#"return jobs.dispatch("./registry", "read"):await()"#)
        .unwrap();
    assert_eq!(field(&row, "built"), &Message::Boolean(false));
    domain.pump();
    let mut reports = domain.take_reports();
    reports.sort_by(|a, b| a.source.cmp(&b.source));
    let sources: Vec<&str> = reports.iter().map(|r| r.source.as_str()).collect();
    assert_eq!(
        sources,
        [
            "jobs.warm \"./registry\".fail on worker 0",
            "jobs.warm \"./registry\".fail on worker 1"
        ]
    );
    assert_contains(&reports[0].message, "the registry could not load");
    let stats = pool.stats();
    for row in &stats {
        let run = &row.warm_runs[0];
        assert!(!run.ok());
        assert_eq!(run.error.as_deref(), Some("the registry could not load"));
    }
    // The same rows in Luau.
    let lua_row = domain
        .eval("local r = jobs.stats()[1].warm[1] return { r.name, r.ok, r.error, r.ms >= 0 }")
        .unwrap();
    let lua_row = list(&lua_row);
    assert_eq!(text(&lua_row[0]), "./registry.fail");
    assert_eq!(lua_row[1], Message::Boolean(false));
    assert_eq!(text(&lua_row[2]), "the registry could not load");
    assert_eq!(lua_row[3], Message::Boolean(true));
}

#[test]
fn awaiting_a_pool_promise_inside_a_warm_raises_naming_it() {
    let tree = tree();
    let pool = Pool::new(1);
    let domain = tree.domain_with(&pool, plan(&Marks::default()));
    let err = refusal(
        &domain,
        r#"jobs.warm("./registry", "awaitDispatch"):await()"#,
    );
    assert_contains(
        &err,
        "worker 0: jobs.warm \"./registry\".awaitDispatch: awaiting a jobs.dispatch promise \
         inside a warm would wait on the pool it is warming",
    );
    let err = refusal(&domain, r#"jobs.warm("./registry", "awaitMap"):await()"#);
    assert_contains(
        &err,
        "jobs.warm \"./registry\".awaitMap: awaiting a jobs.map promise inside a warm would \
         wait on the pool it is warming",
    );
    let err = refusal(&domain, r#"jobs.warm("./registry", "awaitInTask"):await()"#);
    assert_contains(
        &err,
        "jobs.warm \"./registry\".awaitInTask: awaiting a jobs.parallelFor promise inside a warm",
    );
    // Settled already, and still refused.
    domain
        .eval(r#"jobs.warm("./registry", "build"):await()"#)
        .unwrap();
    let err = refusal(
        &domain,
        r#"jobs.warm("./registry", "awaitSettledWarm"):await()"#,
    );
    assert_contains(
        &err,
        "jobs.warm \"./registry\".awaitSettledWarm: awaiting a jobs.warm promise inside a warm",
    );
    // Outside a warm, the same awaits are fine: the items the refused warms dispatched ran.
    let row = domain
        .eval(r#"return jobs.dispatch("./registry", "read"):await()"#)
        .unwrap();
    assert_eq!(field(&row, "built"), &Message::Boolean(true));
}

#[test]
fn an_item_can_warm_and_await_it() {
    let tree = tree();
    let marks = Marks::default();
    let pool = Pool::new(2);
    let domain = tree.domain_with(&pool, plan(&marks));
    let row = domain
        .eval(r#"return jobs.dispatch("./registry", "warmFromItem"):await()"#)
        .unwrap();
    assert_eq!(field(&row, "built"), &Message::Boolean(true));
    assert_eq!(number(field(&row, "runs")), 1.0);
    assert_eq!(marks.count(), 2);
}

#[test]
fn a_panicking_warm_fails_for_the_epoch_and_a_rebuilt_vm_runs_the_others_first() {
    let tree = tree();
    let marks = Marks::default();
    let pool = Pool::new(1);
    let domain = tree.domain_with(&pool, plan(&marks));
    domain
        .eval(r#"jobs.warm("./registry", "build"):await()"#)
        .unwrap();
    assert_eq!(marks.count(), 1);
    let err = refusal(&domain, r#"jobs.warm("./panicky", "panicky"):await()"#);
    assert_contains(&err, "worker 0: host code panicked: raw host panic");
    assert_eq!(marks.count(), 2);

    // A module whose top level panics outside any task: the worker drops its VM.
    domain.exec(r#"jobs.dispatch("./boom", "x")"#).unwrap();
    domain.pump();
    assert!(wait_until(Duration::from_secs(5), || pool.stats()[0]
        .panics
        >= 1));
    let row = domain
        .eval(r#"return jobs.dispatch("./registry", "read"):await()"#)
        .unwrap();
    assert_eq!(
        field(&row, "built"),
        &Message::Boolean(true),
        "warmed again"
    );
    assert_eq!(number(field(&row, "runs")), 1.0, "in a new VM");
    assert_eq!(
        marks.count(),
        3,
        "build ran again; the panicking warm did not"
    );

    domain.pump();
    let reports = domain.take_reports();
    let warm_reports: Vec<_> = reports
        .iter()
        .filter(|r| r.source.contains("panicky"))
        .collect();
    assert_eq!(warm_reports.len(), 1, "{reports:?}");
    assert_eq!(warm_reports[0].source, "jobs.warm \"./panicky\".panicky");
    assert_contains(
        &warm_reports[0].message,
        "host code panicked: raw host panic (on worker 0); it runs on no later VM",
    );
    let again = refusal(&domain, r#"jobs.warm("./panicky", "panicky"):await()"#);
    assert_eq!(again, err, "the same promise outcome; nothing ran");
    assert_eq!(marks.count(), 3);
}

fn bounded(tree: &Tree, pool: &Pool, marks: &Marks, bound: Duration) -> ScriptDomain {
    ScriptDomain::new(
        pool,
        DomainSpec::new("bounded")
            .warm_bound(bound)
            .plan(plan(marks).root(tree.path())),
    )
    .unwrap()
}

#[test]
fn a_warm_within_its_bound_ends_well_and_one_past_it_fails_on_time() {
    let tree = tree();
    let marks = Marks::default();
    let pool = Pool::new(1);
    let domain = bounded(&tree, &pool, &marks, Duration::from_millis(300));
    // Two waits of 50 ms: within 300 ms.
    domain
        .eval(r#"jobs.warm("./registry", "quick"):await()"#)
        .unwrap();

    let started = Instant::now();
    let err = refusal(&domain, r#"jobs.warm("./registry", "slow"):await()"#);
    let took = started.elapsed();
    assert_contains(
        &err,
        "worker 0: warm bound exceeded: the entry ran longer than 0.3 s of wall time, waits included",
    );
    // Ended at the bound, not at the end of its 30 s wait. Not a performance claim: 20 s is
    // far past the bound on any machine, and far short of the wait.
    assert!(
        took < Duration::from_secs(20),
        "ended at the bound, not after its 30 s wait: {took:?}"
    );
    let run = &pool.stats()[0].warm_runs[1];
    assert_eq!(run.name, "./registry.slow");
    assert!(run.elapsed >= Duration::from_millis(300), "{run:?}");
    domain.pump();
    let reports = domain.take_reports();
    assert_eq!(reports.len(), 1, "{reports:?}");
    assert_eq!(reports[0].source, "jobs.warm \"./registry\".slow");
    // The VM serves on.
    let row = domain
        .eval(r#"return jobs.dispatch("./registry", "read"):await()"#)
        .unwrap();
    assert_eq!(number(field(&row, "runs")), 0.0);
}

#[test]
fn a_run_in_progress_at_the_bound_goes_on_to_its_next_yield() {
    let tree = tree();
    let marks = Marks::default();
    let pool = Pool::new(1);
    let domain = bounded(&tree, &pool, &marks, Duration::from_millis(150));
    let err = refusal(&domain, r#"jobs.warm("./registry", "busy"):await()"#);
    assert_contains(
        &err,
        "warm bound exceeded: the entry ran longer than 0.15 s",
    );
    assert_eq!(
        marks.count(),
        0,
        "not resumed after the yield past the bound"
    );
    let run = &pool.stats()[0].warm_runs[0];
    assert!(
        run.elapsed >= Duration::from_millis(400),
        "the run went on: {run:?}"
    );
}

#[test]
fn bad_arguments_are_refused_at_the_call() {
    let tree = tree();
    let pool = Pool::new(1);
    let domain = tree.domain(&pool);
    assert_contains(
        &refusal(&domain, r#"jobs.warm(1, "build")"#),
        "jobs.warm: module must be a require path string, got a number",
    );
    assert_contains(
        &refusal(&domain, r#"jobs.warm("./registry")"#),
        "jobs.warm: entry must be the name of a function, got nil",
    );
    assert_contains(
        &refusal(&domain, r#"jobs.warm("./nowhere", "build")"#),
        "jobs.warm: ",
    );
    // An entry that is not a function comes back as each worker's failure.
    let err = refusal(&domain, r#"jobs.warm("./registry", "missing"):await()"#);
    assert_contains(&err, "worker 0: entry 'missing' of module");
    assert!(pool.stats()[0].warm_runs.len() == 1);
}

#[test]
fn items_held_back_by_a_warm_are_refused_when_the_domain_stops() {
    let tree = tree();
    let pool = Pool::new(1);
    let domain = tree.domain_with(&pool, plan(&Marks::default()));
    let other = tree.domain_with(&pool, plan(&Marks::default()));
    domain.exec(r#"jobs.warm("./registry", "gated")"#).unwrap();
    domain.pump();
    let gate = domain.shared().table("warm").unwrap();
    assert!(wait_until(Duration::from_secs(10), || gate
        .get("gated")
        .unwrap()
        .is_some()));
    let mut held = domain.dispatch("./registry", "read", Message::Nil).unwrap();
    // Another domain's item is not held back: once it ran on the only worker, that worker has
    // taken the item dispatched before it, and held it back.
    let mut after = other.dispatch("./registry", "read", Message::Nil).unwrap();
    after
        .wait_timeout(Duration::from_secs(10))
        .expect("the other domain's item ran")
        .unwrap();
    assert_eq!(held.status(), PromiseStatus::Pending, "held back");
    drop(domain);
    let err = held
        .wait_timeout(Duration::from_secs(5))
        .expect("settled")
        .unwrap_err();
    assert_contains(&err.to_string(), "was refused unrun: domain 'test' stopped");
}

#[test]
fn tasks_already_in_the_vm_run_between_the_warm_waits() {
    let tree = tree();
    let pool = Pool::new(1);
    let domain = tree.domain_with(&pool, plan(&Marks::default()));
    let log = domain
        .eval(
            r#"
            local ticker = jobs.dispatch("./registry", "ticker")
            local started, start = jobs.shared.table("ticker"), os.clock()
            while not started.started do
                assert(os.clock() - start < 10, "the ticker never started")
                task.wait() -- a yield of one batch: the poll for the ticker's start
            end
            jobs.warm("./registry", "logWarm"):await()
            ticker:await()
            return jobs.dispatch("./registry", "log"):await()
            "#,
        )
        .unwrap();
    let log = text(&log);
    let start = log.find("warm+").expect("the warm ran");
    let end = log.find("warm-").expect("the warm ended");
    assert!(
        log[start..end].contains("tick"),
        "the ticker ran during the warm's wait: {log}"
    );
    assert!(
        log.ends_with("warm-"),
        "the ticker stopped at the warm's end: {log}"
    );
}

/// A warming domain on one worker whose `gated` warm waits for a gate the test opens, with
/// `build` queued behind it and an item held back, and another domain whose item panics in its
/// module's top level, outside any task: the worker drops every VM it holds, the warming one
/// included. Answers the two domains once the gated warm first runs.
fn warming_beside_a_panicker(
    tree: &Tree,
    pool: &Pool,
    marks: &Marks,
) -> (ScriptDomain, ScriptDomain) {
    let warming = tree.domain_with(pool, plan(marks));
    let other = tree.domain_with(pool, plan(&Marks::default()));
    warming
        .exec(
            r#"
            slow = jobs.warm("./registry", "gated")
            build = jobs.warm("./registry", "build")
            held = jobs.dispatch("./registry", "read")
            "#,
        )
        .unwrap();
    warming.pump();
    assert!(wait_until(Duration::from_secs(10), || gated_runs(&warming) == 1.0));
    (warming, other)
}

/// How many times the `gated` warm has started.
fn gated_runs(domain: &ScriptDomain) -> f64 {
    let gate = domain.shared().table("warm").unwrap();
    gate.get("gatedRuns").unwrap().map_or(0.0, |n| number(&n))
}

/// Panics the worker from `other`'s item (its module's top level), outside any warm entry.
fn panic_outside(pool: &Pool, other: &ScriptDomain, panics: u64) {
    other.exec(r#"jobs.dispatch("./boom", "x")"#).unwrap();
    other.pump();
    assert!(wait_until(Duration::from_secs(10), || pool.stats()[0]
        .panics
        >= panics));
}

#[test]
fn a_panic_outside_the_entry_that_drops_its_vm_runs_it_once_more_first_in_the_next_vm() {
    let tree = tree();
    let marks = Marks::default();
    let pool = Pool::new(1);
    let (warming, other) = warming_beside_a_panicker(&tree, &pool, &marks);
    panic_outside(&pool, &other, 1);
    // The running entry starts again in the VM built next, before `build`.
    assert!(wait_until(Duration::from_secs(10), || gated_runs(&warming) == 2.0));
    assert_eq!(marks.count(), 0, "build waits behind the rerun");
    let gate = warming.shared().table("warm").unwrap();
    gate.set("open", true).unwrap();
    let out = warming
        .eval(
            r#"
            local row = held:await()
            slow:await()
            build:await()
            return row
            "#,
        )
        .unwrap();
    assert_eq!(field(&out, "built"), &Message::Boolean(true), "{out:?}");
    assert_eq!(number(field(&out, "runs")), 1.0);
    assert_eq!(
        marks.count(),
        1,
        "build ran once, in the VM built after the panic"
    );
    assert_eq!(gated_runs(&warming), 2.0);
    let runs: Vec<_> = pool.stats()[0]
        .warm_runs
        .iter()
        .filter(|r| r.name == "./registry.gated")
        .cloned()
        .collect();
    assert_eq!(runs.len(), 2, "{runs:?}");
    assert_eq!(
        runs[0].error.as_deref(),
        Some(
            "host code panicked: raw host panic outside the entry, which ended its VM; \
             it runs again in the next VM"
        )
    );
    assert!(runs[1].ok(), "{runs:?}");
    warming.pump();
    let reports = warming.take_reports();
    assert!(
        !reports.iter().any(|r| r.source.contains("gated")),
        "the rerun is no failure of the entry: {reports:?}"
    );
}

#[test]
fn a_second_panic_outside_the_entry_fails_it_for_the_epoch_naming_the_panic() {
    let tree = tree();
    let marks = Marks::default();
    let pool = Pool::new(1);
    let (warming, other) = warming_beside_a_panicker(&tree, &pool, &marks);
    panic_outside(&pool, &other, 1);
    assert!(wait_until(Duration::from_secs(10), || gated_runs(&warming) == 2.0));
    panic_outside(&pool, &other, 2);
    let out = warming
        .eval(
            r#"
            local row = held:await()
            local ok, err = pcall(function() return slow:await() end)
            build:await()
            return { row = row, ok = ok, err = tostring(err) }
            "#,
        )
        .unwrap();
    let row = field(&out, "row");
    assert_eq!(field(row, "built"), &Message::Boolean(true), "{out:?}");
    assert_eq!(field(&out, "ok"), &Message::Boolean(false));
    assert_contains(
        &text(field(&out, "err")),
        "worker 0: host code panicked: raw host panic",
    );
    assert_eq!(gated_runs(&warming), 2.0, "no third run");
    assert_eq!(
        marks.count(),
        1,
        "build ran once, in the VM built after the second panic"
    );
    warming.pump();
    let reports = warming.take_reports();
    let gated: Vec<_> = reports
        .iter()
        .filter(|r| r.source == "jobs.warm \"./registry\".gated")
        .collect();
    assert_eq!(gated.len(), 1, "{reports:?}");
    assert_contains(
        &gated[0].message,
        "host code panicked: raw host panic (on worker 0); it runs on no later VM",
    );
}
