//! Engine services end to end: queries called directly on the engine VM and forwarded from
//! workers, commands recorded on workers and applied before the job's promise settles (in order,
//! under concurrent jobs), refusals, contained panics, host dispatch and parallelFor chunks with
//! commands, and `task.waitFrames`.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::time::Duration;

use skein::job::JobOptions;
use skein::message::Args;
use skein::refusal::NameRefusal;
use skein::{Error, Message, Plan, Pool, PromiseStatus, ScriptDomain, ServiceError};

use crate::support::{
    assert_contains, first_int, map, number, refusal, serve_world, string, text, wait_until, Marks,
    Tree, World,
};

const MODULE: &str = r#"
local M = {}
function M.get(a) return world.get(a.id) end
function M.set(a)
    world.set(a.id, a.v)
    return "set"
end
function M.setThenGet(a)
    world.set(a.id, a.v)
    return world.get(a.id)
end
-- Appends n entries to its job's log, reading the count back every 7th.
function M.append(a)
    for i = 1, a.n do
        log.append(a.job, i)
        if i % 7 == 0 then
            local c = log.count(a.job)
            if c ~= i then error(`job {a.job}: count {c} after {i} appends`) end
        end
    end
    return a.job
end
function M.quick() return "quick" end
function M.setMarked(a)
    world.set(a.id, a.v)
    hostMark()
    return "set"
end
function M.swap()
    local ok, err = pcall(function() world.get = function() return "swapped" end end)
    return tostring(ok) .. " " .. tostring(err)
end
function M.passFunction() world.set(1, { cb = function() end }) end
function M.queryFunction() return world.get(function() end) end
function M.inMetamethod()
    local t = setmetatable({}, { __index = function() return world.get(1) end })
    return t.x
end
function M.topLevel() return require("./top") end
function M.boom() return boom.query() end
function M.boomCommand()
    boom.command()
    world.set(9, 99)
    return "done"
end
function M.chunk(c)
    for i = c.first, c.last do world.set(i, i * 10) end
    return c.index
end
function M.frames(n)
    local passed = task.waitFrames(n)
    return passed
end
return M
"#;

const TOP: &str = "local v = world.get(1) return { v = v }";

/// A domain with `world.get`, `world.set`, `log.append`, `log.count`, `boom.query` and
/// `boom.command` over host state the test reads back.
fn setup(tree: &Tree, pool: &Pool) -> (ScriptDomain, World) {
    setup_with(tree, pool, Plan::new())
}

/// [`setup`] over a domain built from `plan`.
fn setup_with(tree: &Tree, pool: &Pool, plan: Plan) -> (ScriptDomain, World) {
    let domain = tree.domain_with(pool, plan);
    let world: World = Rc::default();
    serve_world(&domain, &world);
    let logs: Rc<RefCell<HashMap<i64, i64>>> = Rc::default();
    let l = logs.clone();
    domain
        .register_command("log.append", move |args: Args| {
            let job = first_int(&args);
            let i = number(&args[1]) as i64;
            let mut logs = l.borrow_mut();
            let count = logs.entry(job).or_insert(0);
            if i != *count + 1 {
                return Err(format!("job {job}: entry {i} arrived after {count}").into());
            }
            *count = i;
            Ok(())
        })
        .unwrap();
    let l = logs.clone();
    domain
        .register_query("log.count", move |args: Args| {
            Ok(Message::Number(
                *l.borrow().get(&first_int(&args)).unwrap_or(&0) as f64,
            ))
        })
        .unwrap();
    domain
        .register_query("boom.query", |()| -> Result<Message, ServiceError> {
            panic!("the query blew up")
        })
        .unwrap();
    domain
        .register_command("boom.command", |()| panic!("the command blew up"))
        .unwrap();
    (domain, world)
}

fn tree() -> Tree {
    Tree::new(&[("m.luau", MODULE), ("top.luau", TOP)])
}

#[test]
fn a_query_answers_on_the_engine_vm_and_from_a_worker() {
    let (tree, pool) = (tree(), Pool::new(2));
    let (domain, world) = setup(&tree, &pool);
    world.borrow_mut().insert(1, string("one"));
    assert_eq!(text(&domain.eval("return world.get(1)").unwrap()), "one");
    let answer = domain
        .eval(r#"return jobs.dispatch("./m", "get", { id = 1 }):await()"#)
        .unwrap();
    assert_eq!(text(&answer), "one");
    // A command on the engine VM applies at once.
    domain.eval("world.set(2, 'two')").unwrap();
    assert_eq!(text(&world.borrow()[&2]), "two");
}

#[test]
fn a_script_cannot_swap_a_service_for_later_jobs_or_the_engine() {
    let (tree, pool) = (tree(), Pool::new(1));
    let (domain, world) = setup(&tree, &pool);
    world.borrow_mut().insert(1, string("one"));
    let swapped = domain
        .eval(r#"return jobs.dispatch("./m", "swap"):await()"#)
        .unwrap();
    assert_contains(&text(&swapped), "false ");
    assert_contains(&text(&swapped), "attempt to modify a readonly table");
    // The next job on the same worker VM, and the engine, still reach the host's service.
    let answer = domain
        .eval(r#"return jobs.dispatch("./m", "get", { id = 1 }):await()"#)
        .unwrap();
    assert_eq!(text(&answer), "one");
    let engine = domain
        .eval(r#"local ok = pcall(function() world.get = nil end) return tostring(ok) .. " " .. world.get(1)"#)
        .unwrap();
    assert_eq!(text(&engine), "false one");
    // A service added later still lands in the same (read-only) namespace.
    domain
        .register_query("world.count", |()| Ok(Message::Integer(1)))
        .unwrap();
    assert_eq!(
        domain.eval("return world.count()").unwrap(),
        Message::Integer(1)
    );
    let later = domain
        .eval(r#"return jobs.dispatch("./m", "get", { id = 1 }):await()"#)
        .unwrap();
    assert_eq!(text(&later), "one");
}

#[test]
fn a_workers_commands_apply_before_its_promise_settles() {
    let (tree, pool) = (tree(), Pool::new(2));
    let (domain, _world) = setup(&tree, &pool);
    let read = domain
        .eval(
            r#"
            local p = jobs.dispatch("./m", "set", { id = 5, v = "five" })
            assert(p:await() == "set")
            return world.get(5)
            "#,
        )
        .unwrap();
    assert_eq!(text(&read), "five");
    // A forwarded query sees the command its job recorded before it.
    let read = domain
        .eval(r#"return jobs.dispatch("./m", "setThenGet", { id = 6, v = 66 }):await()"#)
        .unwrap();
    assert_eq!(number(&read), 66.0);
    assert!(domain.take_reports().is_empty());
}

#[test]
fn commands_of_concurrent_jobs_apply_in_order_and_before_each_settle() {
    let (tree, pool) = (tree(), Pool::new(2));
    let (domain, _world) = setup(&tree, &pool);
    let checked = domain
        .eval(
            r#"
            local n = 300
            local promises = {}
            for job = 1, 8 do
                promises[job] = jobs.dispatch("./m", "append", { job = job, n = n })
            end
            for job = 1, 8 do
                assert(promises[job]:await() == job)
                local c = log.count(job)
                assert(c == n, `job {job} settled with {c} of {n} commands applied`)
            end
            return 8
            "#,
        )
        .unwrap();
    assert_eq!(number(&checked), 8.0);
    // log.append refuses an entry out of order with a report: none came.
    assert_eq!(domain.take_reports(), vec![]);
}

#[test]
fn a_worker_parked_on_a_query_keeps_serving_another_item() {
    let (tree, pool) = (tree(), Pool::new(1));
    let (domain, world) = setup(&tree, &pool);
    world.borrow_mut().insert(1, Message::Integer(7));
    let parked = domain.dispatch("./m", "get", map(&[("id", Message::Integer(1))]));
    let parked = parked.unwrap();
    // The engine thread does not pump: the query waits, and the only worker runs the next item.
    let quick = domain.dispatch("./m", "quick", Message::Nil).unwrap();
    assert_eq!(text(&quick.wait().unwrap()), "quick");
    assert_eq!(parked.status(), PromiseStatus::Pending);
    assert!(
        wait_until(Duration::from_secs(10), || {
            domain.pump();
            parked.status() != PromiseStatus::Pending
        }),
        "the query was never answered"
    );
    assert_eq!(parked.wait().unwrap(), Message::Integer(7));
}

/// Dispatches `setMarked` with `args` on a one-worker pool, waits for its mark, then runs a
/// `quick` job to its end. A job without commands settles without a frame, and the only worker
/// runs `quick` after `setMarked` has returned: so once `quick` settled, `setMarked` has returned
/// and its commands wait in the engine's mailbox.
fn set_then_barrier(domain: &ScriptDomain, marks: &Marks, args: Message) -> skein::Promise {
    let promise = domain.dispatch("./m", "setMarked", args).unwrap();
    assert!(
        wait_until(Duration::from_secs(10), || marks.count() == 1),
        "setMarked never ran"
    );
    let mut after = domain.dispatch("./m", "quick", Message::Nil).unwrap();
    let quick = after
        .wait_timeout(Duration::from_secs(10))
        .expect("a job without commands settles without a frame")
        .unwrap();
    assert_eq!(text(&quick), "quick");
    promise
}

#[test]
fn host_dispatch_with_commands_settles_after_the_engine_applies_them() {
    let (tree, pool, marks) = (tree(), Pool::new(1), Marks::default());
    let (domain, world) = setup_with(&tree, &pool, marks.plan());
    let args = map(&[("id", Message::Integer(3)), ("v", string("x"))]);
    let promise = set_then_barrier(&domain, &marks, args);
    // `set` has returned, yet without a frame its commands are not applied, so its promise
    // can't settle.
    assert_eq!(promise.status(), PromiseStatus::Pending);
    assert!(world.borrow().get(&3).is_none());
    let applied = std::cell::Cell::new(0);
    assert!(wait_until(Duration::from_secs(10), || {
        applied.set(applied.get() + domain.frame(Duration::from_millis(16)).commands_applied);
        applied.get() > 0
    }));
    assert_eq!(applied.get(), 1);
    assert_eq!(text(&world.borrow()[&3]), "x");
    assert_eq!(text(&promise.wait().unwrap()), "set");
}

#[test]
fn frames_count_forwarded_calls() {
    let (tree, pool) = (tree(), Pool::new(1));
    let (domain, world) = setup(&tree, &pool);
    world.borrow_mut().insert(1, Message::Integer(1));
    let promise = domain
        .dispatch("./m", "get", map(&[("id", Message::Integer(1))]))
        .unwrap();
    let forwarded = std::cell::Cell::new(0);
    assert!(wait_until(Duration::from_secs(10), || {
        forwarded.set(forwarded.get() + domain.frame(Duration::from_millis(16)).forwarded_calls);
        promise.status() != PromiseStatus::Pending
    }));
    assert_eq!(forwarded.get(), 1);
    assert_eq!(domain.frame(Duration::ZERO).forwarded_calls, 0);
}

#[test]
fn parallel_for_chunks_with_commands_settle_after_they_apply() {
    let (tree, pool) = (tree(), Pool::new(2));
    let (domain, _world) = setup(&tree, &pool);
    let sum = domain
        .eval(
            r#"
            jobs.parallelFor("./m", "chunk", 40, nil, { chunks = 4 }):await()
            local s = 0
            for i = 1, 40 do
                local v = world.get(i)
                assert(typeof(v) == "number", `{i}: {typeof(v)} {typeof(s)}`)
                s += v
            end
            return s
            "#,
        )
        .unwrap();
    assert_eq!(number(&sum), 8200.0);
}

#[test]
fn refusals_name_the_function_and_the_reason() {
    let (tree, pool) = (tree(), Pool::new(2));
    let (domain, _world) = setup(&tree, &pool);
    let e = refusal(&domain, "world.set(1, function() end)");
    assert_contains(&e, "world.set: args[2]: a function can't cross");
    let e = refusal(&domain, r#"jobs.dispatch("./m", "passFunction"):await()"#);
    assert_contains(&e, "world.set: args[2].cb: a function can't cross");
    let e = refusal(&domain, r#"jobs.dispatch("./m", "queryFunction"):await()"#);
    assert_contains(&e, "world.get: args[1]: a function can't cross");
    let e = refusal(&domain, r#"jobs.dispatch("./m", "inMetamethod"):await()"#);
    assert_contains(&e, "world.get can't wait here");
    let e = refusal(&domain, r#"jobs.dispatch("./m", "topLevel"):await()"#);
    assert_contains(&e, "world.get can't wait here");
    // An unknown name is simply not there.
    let e = refusal(&domain, "return nothere.get(1)");
    assert_contains(&e, "attempt to index nil");
    let e = refusal(&domain, "return world.nothere(1)");
    assert_contains(&e, "attempt to call a nil value");
}

#[test]
fn registration_refuses_a_second_name_and_bad_names() {
    let (tree, pool) = (tree(), Pool::new(1));
    let (domain, _world) = setup(&tree, &pool);
    let refused = |r: skein::Result<()>, expected: NameRefusal| match r {
        Err(Error::Name { refusal, message }) if refusal == expected => message,
        other => panic!("expected {expected:?}, got {other:?}"),
    };
    let e = refused(
        domain.register_query("world.get", |()| Ok(Message::Nil)),
        NameRefusal::ServiceTaken,
    );
    assert_eq!(
        e,
        "register: engine service 'world.get' is registered already"
    );
    let e = refused(
        domain.register_command("world.get", |()| Ok(())),
        NameRefusal::ServiceTaken,
    );
    assert_eq!(
        e,
        "register: engine service 'world.get' is registered already"
    );
    let e = refused(
        domain.register_query("world.1x", |()| Ok(Message::Nil)),
        NameRefusal::ServiceName,
    );
    assert_contains(&e, "'world.1x' is not a dotted Luau path");
    let e = refused(
        domain.register_query(&"a".repeat(257), |()| Ok(Message::Nil)),
        NameRefusal::ServiceName,
    );
    assert_contains(&e, "must be 1 to 256 bytes, got 257");
    let e = refused(
        domain.register_query("", |()| Ok(Message::Nil)),
        NameRefusal::ServiceName,
    );
    assert_contains(&e, "must be 1 to 256 bytes, got 0");
    let e = refused(
        domain.register_query("math.extra", |()| Ok(Message::Nil)),
        NameRefusal::ServicePath,
    );
    assert_contains(&e, "'math' is a read-only table");
    let e = refused(
        domain.register_query("jobs.dispatch", |()| Ok(Message::Nil)),
        NameRefusal::ServicePath,
    );
    assert_contains(&e, "'jobs' is a read-only table");
    let e = refused(
        domain.register_query("world.get.x", |()| Ok(Message::Nil)),
        NameRefusal::ServicePath,
    );
    assert_contains(&e, "'get' is a function, not a table");
    domain.exec("taken = 1").unwrap();
    let e = refused(
        domain.register_query("taken", |()| Ok(Message::Nil)),
        NameRefusal::ServicePath,
    );
    assert_contains(&e, "'taken' is a number already");
    // A 256-byte name is within the bound.
    let long = "a".repeat(256);
    domain
        .register_query(&long, |()| Ok(Message::Integer(1)))
        .unwrap();
    assert_eq!(
        domain.eval(&format!("return {long}()")).unwrap(),
        Message::Integer(1)
    );
}

#[test]
fn a_panicking_service_fails_the_call_and_the_domain_serves_on() {
    let (tree, pool) = (tree(), Pool::new(1));
    let (domain, _world) = setup(&tree, &pool);
    let e = refusal(&domain, "boom.query()");
    assert_contains(
        &e,
        "engine service 'boom.query' panicked: the query blew up",
    );
    let e = refusal(&domain, r#"jobs.dispatch("./m", "boom"):await()"#);
    assert_contains(
        &e,
        "engine service 'boom.query' panicked: the query blew up",
    );
    // A command that panics when applied is reported; the rest apply and the job settles.
    let read = domain
        .eval(
            r#"
            assert(jobs.dispatch("./m", "boomCommand"):await() == "done")
            return world.get(9)
            "#,
        )
        .unwrap();
    assert_eq!(number(&read), 99.0);
    let reports = domain.take_reports();
    assert_eq!(reports.len(), 1, "{reports:?}");
    assert_eq!(reports[0].source, "job './m:boomCommand'");
    assert_contains(
        &reports[0].message,
        "engine service 'boom.command' panicked: the command blew up",
    );
    assert_eq!(
        text(
            &domain
                .eval(r#"return jobs.dispatch("./m", "quick"):await()"#)
                .unwrap()
        ),
        "quick"
    );
}

#[test]
fn wait_frames_counts_frames_on_the_engine_and_on_workers() {
    let (tree, pool) = (tree(), Pool::new(1));
    let (domain, _world) = setup(&tree, &pool);
    domain
        .exec("local passed = task.waitFrames(3) world.set(1, passed)")
        .unwrap();
    domain.frame(Duration::ZERO);
    domain.frame(Duration::ZERO);
    assert_eq!(domain.eval("return world.get(1)").unwrap(), Message::Nil);
    // eval runs frames of its own: the third passes in it.
    let read = domain
        .eval("task.waitFrames(1) return world.get(1)")
        .unwrap();
    assert_eq!(number(&read), 3.0);
    let before = domain.frames();
    let passed = domain
        .eval(r#"return jobs.dispatch("./m", "frames", 2):await()"#)
        .unwrap();
    assert!(number(&passed) >= 2.0, "{passed:?}");
    assert!(domain.frames() >= before + 2);
    for bad in ["0", "1.5", "-1", "'x'"] {
        let e = refusal(&domain, &format!("task.waitFrames({bad})"));
        assert_contains(
            &e,
            "task.waitFrames: n must be a whole number of frames, 1 or more",
        );
    }
}

const LATE: &str = r#"
local M = {}
-- A task started before the entry returns records into the job's log too.
function M.spawned(a)
    task.spawn(function() world.set(a.id, "from a spawned task") end)
    return "ok"
end
-- A task the entry leaves running records after it returned: sent on its own, later. It waits
-- for the test to open `gate.open`, so the promise has surely settled before it records.
function M.lingering(a)
    task.spawn(function()
        local gate = jobs.shared.table("gate")
        local start = os.clock()
        while not gate.open do
            assert(os.clock() - start < 10, "the gate never opened")
            task.wait() -- a yield of one batch: the poll for the gate
        end
        world.set(a.id, "late")
    end)
    return "ok"
end
function M.extra() return extra.answer() end
-- Waits on a query longer than its deadline: parked time does not count.
function M.parkedPastDeadline()
    hostMark()
    return world.get(1)
end
return M
"#;

#[test]
fn commands_of_tasks_the_entry_started_count_and_later_ones_still_apply() {
    let tree = Tree::new(&[("m.luau", MODULE), ("top.luau", TOP), ("late.luau", LATE)]);
    let pool = Pool::new(2);
    let (domain, world) = setup(&tree, &pool);
    let read = domain
        .eval(
            r#"
            jobs.dispatch("./late", "spawned", { id = 1 }):await()
            return world.get(1)
            "#,
        )
        .unwrap();
    assert_eq!(text(&read), "from a spawned task");
    let read = domain
        .eval(
            r#"
            jobs.dispatch("./late", "lingering", { id = 2 }):await()
            return world.get(2)
            "#,
        )
        .unwrap();
    assert_eq!(read, Message::Nil, "not part of what the promise waits for");
    domain
        .shared()
        .table("gate")
        .unwrap()
        .set("open", Message::Boolean(true))
        .unwrap();
    assert!(
        wait_until(Duration::from_secs(10), || {
            domain.frame(Duration::ZERO);
            world.borrow().get(&2).is_some()
        }),
        "the late command never applied"
    );
    assert_eq!(text(&world.borrow()[&2]), "late");
}

#[test]
fn a_worker_vm_built_before_a_registration_gets_its_stub_at_the_next_item() {
    let tree = Tree::new(&[("m.luau", MODULE), ("top.luau", TOP), ("late.luau", LATE)]);
    let pool = Pool::new(1);
    let (domain, _world) = setup(&tree, &pool);
    let e = refusal(&domain, r#"jobs.dispatch("./late", "extra"):await()"#);
    assert_contains(&e, "attempt to index nil");
    domain
        .register_query("extra.answer", |()| Ok(Message::Integer(42)))
        .unwrap();
    let answer = domain
        .eval(r#"return jobs.dispatch("./late", "extra"):await()"#)
        .unwrap();
    assert_eq!(
        answer,
        Message::Integer(42),
        "a 64-bit integer answer stays an integer"
    );
}

#[test]
fn time_parked_on_a_query_never_counts_toward_the_deadline() {
    let tree = Tree::new(&[("m.luau", MODULE), ("top.luau", TOP), ("late.luau", LATE)]);
    let pool = Pool::new(1);
    let marks = Marks::default();
    let (domain, world) = setup_with(&tree, &pool, marks.plan());
    world.borrow_mut().insert(1, Message::Integer(5));
    let opts = JobOptions::new().deadline(Duration::from_millis(50));
    let promise = domain
        .dispatch_with("./late", "parkedPastDeadline", Message::Nil, &opts)
        .unwrap();
    // The job runs, and calls the query, which waits for the engine thread.
    assert!(wait_until(Duration::from_secs(10), || marks.count() == 1));
    // the behaviour under test: the engine answers only after four deadlines have passed
    std::thread::sleep(Duration::from_millis(200));
    assert!(wait_until(Duration::from_secs(10), || {
        domain.frame(Duration::ZERO);
        promise.status() != PromiseStatus::Pending
    }));
    assert_eq!(promise.wait().unwrap(), Message::Integer(5));
}

#[test]
fn a_keyed_items_query_sees_the_commands_of_the_keys_item_before_it() {
    let (tree, pool) = (tree(), Pool::new(2));
    let (domain, _world) = setup(&tree, &pool);
    let read = domain
        .eval(
            r#"
            local opts = { key = "k" }
            local a = jobs.dispatch("./m", "set", { id = 4, v = 40 }, opts)
            local b = jobs.dispatch("./m", "get", { id = 4 }, opts)
            a:await()
            return b:await()
            "#,
        )
        .unwrap();
    assert_eq!(number(&read), 40.0);
}

#[test]
fn a_dropped_domain_applies_nothing_and_rejects_the_held_promise() {
    let (tree, pool, marks) = (tree(), Pool::new(1), Marks::default());
    let (domain, world) = setup_with(&tree, &pool, marks.plan());
    let args = map(&[("id", Message::Integer(8)), ("v", string("never"))]);
    // The job has returned and its commands wait in the mailbox: no frame applies them.
    let promise = set_then_barrier(&domain, &marks, args);
    assert_eq!(promise.status(), PromiseStatus::Pending);
    drop(domain);
    match promise.wait() {
        Err(Error::Job(failure)) => assert_contains(
            &failure.to_string(),
            "its engine-service commands were not applied: domain 'test' stopped",
        ),
        other => panic!("expected a rejection, got {other:?}"),
    }
    assert!(world.borrow().get(&8).is_none());
}

/// Calls `svc.fail(kind)` and `svc.failCommand(kind)` inside `pcall`, answering the two texts.
const FAILING: &str = "return { run = function(kind) \
    local _, query = pcall(svc.fail, kind) \
    local _, command = pcall(svc.failCommand, kind) \
    return { query, command } end }";

/// `kind`'s failure, through `?` from the error type it names.
fn fail(kind: &str) -> Result<(), ServiceError> {
    match kind {
        "capability" => skein::capability::require_capability("input.observe")?,
        "convert" => {
            let _: u8 = Message::from(300).try_into()?;
        }
        "string" => Err::<(), String>("a String's text".to_owned())?,
        "str" => Err::<(), &str>("a &str's text")?,
        _ => {}
    }
    Ok(())
}

#[test]
fn question_mark_makes_a_service_error_of_each_error_and_keeps_its_text() {
    let tree = Tree::new(&[("fail.luau", FAILING)]);
    let pool = Pool::new(1);
    let domain = tree.domain(&pool); // granted nothing
    domain
        .register_query("svc.fail", |kind: String| {
            fail(&kind)?;
            Ok(Message::Nil)
        })
        .unwrap();
    domain
        .register_command("svc.failCommand", |kind: String| fail(&kind))
        .unwrap();
    let denied = format!(
        "capability 'input.observe' denied to domain 'test' ({}, generation 1)",
        domain.id()
    );
    for (kind, text) in [
        ("capability", denied.as_str()),
        (
            "convert",
            "value: expected an integer from 0 to 255, got the number 300",
        ),
        ("string", "a String's text"),
        ("str", "a &str's text"),
    ] {
        let seen = Message::list([
            format!("engine service 'svc.fail' failed: {text}"),
            format!("engine service 'svc.failCommand' failed: {text}"),
        ]);
        // In the engine VM, both services are called directly.
        let source = format!("return require('./fail').run('{kind}')");
        assert_eq!(domain.eval(&source).unwrap(), seen, "{kind}");
        // From a worker, the query is forwarded and its failure raised in the job (`eval`
        // pumps the engine thread that answers it).
        let source = format!("return jobs.dispatch('./fail', 'run', '{kind}'):await()");
        let from_worker = domain.eval(&source).unwrap();
        assert_eq!(
            from_worker.as_list().and_then(|l| l.first()),
            Some(&seen.as_list().unwrap()[0]),
            "{kind}"
        );
    }
}
