//! `jobs.map` end to end: results in list order, chunks cut as `parallelFor` cuts a range and
//! run in one task each, failures naming the element, cancel, the empty list, the copy bounds on
//! the list and on each result, the job budget at its bound and one past, yielding and nested
//! elements, every refusal at the call with its text, and authority that follows the caller as
//! it does for `jobs.dispatch`.

use std::time::Duration;

use skein::capability::{CapabilityId, CapabilitySet, RootAuthority};
use skein::message::Limits;
use skein::{ContextSpec, DomainSpec, Message, Phase, Plan, Pool, ScriptDomain};

use crate::support::{
    assert_contains, assert_nothing_pops, number, refusal, text, wait_until, Marks, Tree,
};

const MAP: &str = r#"
local M = {}
function M.square(x) return x * x end
function M.same(x) return x end
function M.len(s) hostMark() return #s end
-- Odd elements answer nil, so the results have holes where they stood.
function M.evenOnly(x) if x % 2 == 0 then return x end return nil end
-- Waits on a timer that ends sooner for later elements: completion order is the reverse of
-- list order, and the results' order must not follow it.
function M.later(x) task.wait((20 - x) * 0.002) return x * 10 end
function M.failAt(x)
    hostMark()
    if x == 6 then error("element six fails on purpose") end
    return x
end
function M.failTwice(x)
    if x == 3 then error("three") end
    if x == 4 then error("four") end
    return x
end
function M.spinAt(x)
    if x == 5 then while true do end end
    return x
end
function M.giveFunction(x)
    if x == 2 then return function() end end
    return x
end
-- A string of args.size bytes (the result at or past the bound of one copy).
function M.sized(size) return string.rep("r", size) end
-- Marks; odd elements park on the shared queue "hold" until the host pushes to it.
function M.parkOdd(x)
    hostMark()
    if x % 2 == 1 then jobs.shared.queue("hold"):pop() end
    return x
end
-- Marks; element 1 says so on "started" and parks on "hold".
function M.parkFirst(x)
    hostMark()
    if x == 1 then
        jobs.shared.queue("started"):push(1)
        jobs.shared.queue("hold"):pop()
    end
    return x
end
-- Every element yields before it answers; element 4 fails after its yield.
function M.waitThenFail(x)
    task.wait(0)
    if x == 4 then error("four fails after a wait") end
    return x
end
function M.waitOdd(x)
    if x % 2 == 1 then task.wait(0) end
    return x * 2
end
-- A map of its own inside an element, awaited.
function M.inner(x)
    local parts = jobs.map("./map", "square", { x, x + 1 }, { chunks = 2 }):await()
    return parts[1] + parts[2]
end
-- Holds the worker without yielding until a value is pushed to the shared queue `name`.
function M.spinUntil(name)
    local q = jobs.shared.queue(name)
    while q:tryPop() == nil do end
    return true
end
function M.nothing() end
function M.check(name) return need(name) end
return M
"#;

fn setup(workers: usize) -> (Tree, Pool) {
    (Tree::new(&[("map.luau", MAP)]), Pool::new(workers))
}

fn marked(workers: usize) -> (Marks, Tree, Pool, ScriptDomain) {
    let marks = Marks::default();
    let (tree, pool) = setup(workers);
    let domain = tree.domain_with(&pool, marks.plan());
    (marks, tree, pool, domain)
}

fn numbers(m: &Message) -> Vec<f64> {
    match m {
        Message::List(items) => items.iter().map(number).collect(),
        other => panic!("expected a list, got {other:?}"),
    }
}

#[test]
fn results_come_in_list_order_whatever_order_the_elements_finish_in() {
    let (tree, pool) = setup(2);
    let domain = tree.domain(&pool);
    let v = domain
        .eval(r#"return jobs.map("./map", "later", { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10 }, { chunks = 10 }):await()"#)
        .unwrap();
    let expected: Vec<f64> = (1..=10).map(|i| f64::from(i) * 10.0).collect();
    assert_eq!(numbers(&v), expected);
    // A larger list over the default chunks, each result checked in place.
    let v = domain
        .eval(
            r#"
            local list = table.create(1000)
            for i = 1, 1000 do list[i] = i end
            local out = jobs.map("./map", "square", list):await()
            assert(#out == 1000)
            for i = 1, 1000 do assert(out[i] == i * i, i) end
            return out[1000]
            "#,
        )
        .unwrap();
    assert_eq!(number(&v), 1_000_000.0);
}

#[test]
fn elements_and_results_cross_as_dispatch_arguments_do() {
    let (tree, pool) = setup(2);
    let domain = tree.domain(&pool);
    let v = domain
        .eval(
            r#"
            local list = { "a", integer.create(5), 2^60, { x = { 1, 2 } }, vector.create(1, 2, 3), true }
            local out = jobs.map("./map", "same", list, { chunks = 3 }):await()
            assert(out[1] == "a")
            assert(typeof(out[2]) == "integer" and out[2] == integer.create(5))
            assert(typeof(out[3]) == "number" and out[3] == 2^60)
            assert(out[4].x[2] == 2)
            assert(out[5] == vector.create(1, 2, 3))
            assert(out[6] == true)
            -- A nil result leaves its place empty; the others keep their index.
            local holes = jobs.map("./map", "evenOnly", { 1, 2, 3, 4 }, { chunks = 2 }):await()
            return { holes[1] == nil, holes[2], holes[3] == nil, holes[4] }
            "#,
        )
        .unwrap();
    assert_eq!(
        v,
        Message::List(vec![
            Message::Boolean(true),
            Message::Number(2.0),
            Message::Boolean(true),
            Message::Number(4.0)
        ])
    );
}

#[test]
fn a_chunk_runs_its_elements_in_order_and_a_yield_suspends_the_chunk_only() {
    // One worker, the default four chunks per worker: 8 elements are cut [1,2] [3,4] [5,6]
    // [7,8]. Each odd element parks, so each chunk stops at its first element: four marks, and
    // no even element runs until its chunk's odd one is woken.
    let (marks, _tree, _pool, domain) = marked(1);
    let hold = domain.shared().queue("hold", 16).unwrap();
    domain
        .exec(r#"pending = jobs.map("./map", "parkOdd", { 1, 2, 3, 4, 5, 6, 7, 8 })"#)
        .unwrap();
    assert!(
        wait_until(Duration::from_secs(10), || marks.count() == 4),
        "{} marks",
        marks.count()
    );
    // Every chunk has parked: nothing else runs before they are woken.
    let after = domain.dispatch("./map", "nothing", Message::Nil).unwrap();
    after.wait().unwrap();
    assert_eq!(
        marks.count(),
        4,
        "an even element ran before its chunk resumed"
    );
    for i in 0..4 {
        hold.push(Message::Integer(i)).unwrap();
    }
    let v = domain.eval("return pending:await()").unwrap();
    assert_eq!(numbers(&v), [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]);
    assert_eq!(marks.count(), 8);
}

#[test]
fn yielding_and_nested_elements_complete() {
    for workers in [1, 2] {
        let (tree, pool) = setup(workers);
        let domain = tree.domain(&pool);
        let v = domain
            .eval(
                r#"return jobs.map("./map", "waitOdd", { 1, 2, 3, 4, 5 }, { chunks = 2 }):await()"#,
            )
            .unwrap();
        assert_eq!(numbers(&v), [2.0, 4.0, 6.0, 8.0, 10.0], "{workers} workers");
        // Each element starts a map of its own on its worker and awaits it there.
        let v = domain
            .eval(r#"return jobs.map("./map", "inner", { 1, 2, 3 }):await()"#)
            .unwrap();
        assert_eq!(numbers(&v), [5.0, 13.0, 25.0], "{workers} workers");
    }
}

#[test]
fn a_failing_element_rejects_naming_its_index_and_stops_the_rest() {
    // One worker takes the chunks in order: [1..4] resolves, [5..8] fails at 6, so 7 and 8
    // never run.
    let (marks, _tree, _pool, domain) = marked(1);
    let message = refusal(
        &domain,
        r#"jobs.map("./map", "failAt", { 1, 2, 3, 4, 5, 6, 7, 8 }, { chunks = 2 }):await()"#,
    );
    assert_contains(&message, "job './map:failAt' failed: element 6 of 8: ");
    assert_contains(&message, "element six fails on purpose");
    let after = domain.dispatch("./map", "nothing", Message::Nil).unwrap();
    after.wait().unwrap();
    assert_eq!(marks.count(), 6, "elements 7 and 8 ran after 6 failed");
    // Within a chunk the elements run in order: the first to fail is named.
    let message = refusal(
        &domain,
        r#"jobs.map("./map", "failTwice", { 1, 2, 3, 4 }, { chunks = 1, name = "pairs" }):await()"#,
    );
    assert_contains(&message, "job 'pairs' failed: element 3 of 4: ");
    assert_contains(&message, ": three");
    // An element that fails after its chunk yielded and resumed is named all the same.
    let message = refusal(
        &domain,
        r#"jobs.map("./map", "waitThenFail", { 1, 2, 3, 4, 5 }, { chunks = 1 }):await()"#,
    );
    assert_contains(&message, "element 4 of 5: ");
    assert_contains(&message, "four fails after a wait");
}

#[test]
fn an_element_past_its_deadline_or_with_a_bad_result_is_named() {
    let (tree, pool) = setup(2);
    let domain = tree.domain(&pool);
    let message = refusal(
        &domain,
        r#"jobs.map("./map", "spinAt", { 1, 2, 3, 4, 5, 6 }, { chunks = 2, deadline = 0.1 }):await()"#,
    );
    assert_contains(
        &message,
        "element 5 of 6: deadline exceeded: one run took longer than 0.1 s",
    );
    let message = refusal(
        &domain,
        r#"jobs.map("./map", "giveFunction", { 1, 2, 3 }):await()"#,
    );
    assert_contains(
        &message,
        "job './map:giveFunction' failed: element 2 of 3: result: a function can't cross a worker or event boundary",
    );
    // A module that fails to load is named by the first element of the chunk that tried.
    tree.write("broken.luau", "error('the top level fails')");
    let message = refusal(
        &domain,
        r#"jobs.map("./broken", "f", { 1, 2, 3, 4 }, { chunks = 2 }):await()"#,
    );
    assert_contains(&message, "job './broken:f' failed: element ");
    assert_contains(&message, "could not be loaded");
    assert_contains(&message, "the top level fails");
    // The pool serves on.
    let v = domain
        .eval(r#"return jobs.map("./map", "square", { 3, 4 }):await()"#)
        .unwrap();
    assert_eq!(numbers(&v), [9.0, 16.0]);
}

#[test]
fn cancel_stops_the_running_chunk_and_no_later_element_runs() {
    // One chunk of ten: element 1 marks, says so and parks; the cancel lands while it is parked.
    let (marks, _tree, _pool, domain) = marked(1);
    let hold = domain.shared().queue("hold", 16).unwrap();
    let _ = domain.shared().queue("started", 16).unwrap();
    let v = domain
        .eval(
            r#"
            local p = jobs.map("./map", "parkFirst", { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10 }, { chunks = 1 })
            jobs.shared.queue("started"):pop()
            local cancelled = p:cancel()
            local ok, err = pcall(function() return p:await() end)
            return `{cancelled} {ok} {p:status()} {err}`
            "#,
        )
        .unwrap();
    assert_eq!(text(&v), "true false cancelled cancelled");
    // The parked element was ended: what would wake it stays in the queue.
    assert_nothing_pops(&hold, 1);
    let after = domain.dispatch("./map", "nothing", Message::Nil).unwrap();
    after.wait().unwrap();
    assert_eq!(marks.count(), 1, "an element after the cancel ran");
}

#[test]
fn cancelled_queued_chunks_never_run() {
    let (marks, _tree, _pool, domain) = marked(1);
    let _ = domain.shared().queue("go", 1).unwrap();
    // The only worker spins on an item queued first until the cancel has landed, so every chunk
    // is still queued then.
    let v = domain
        .eval(
            r#"
            local busy = jobs.dispatch("./map", "spinUntil", "go")
            local p = jobs.map("./map", "len", { "a", "b", "c", "d", "e" }, { chunks = 5 })
            p:cancel()
            jobs.shared.queue("go"):push(true)
            assert(busy:await())
            -- One worker takes items in order: a chunk left queued would run before this one.
            jobs.dispatch("./map", "nothing"):await()
            return p:status()
            "#,
        )
        .unwrap();
    assert_eq!(text(&v), "cancelled");
    assert_eq!(marks.count(), 0, "a cancelled chunk ran");
}

#[test]
fn an_empty_list_answers_an_empty_list_at_once() {
    let (marks, _tree, _pool, domain) = marked(2);
    let v = domain
        .eval(
            r#"
            local p = jobs.map("./map", "len", {})
            local status = p:status()
            local out = p:await()
            return `{status} {typeof(out)} {#out} {next(out) == nil}`
            "#,
        )
        .unwrap();
    assert_eq!(text(&v), "resolved table 0 true");
    assert_eq!(marks.count(), 0);
}

/// A Luau expression of a list of two strings whose copy weighs `Limits::MAX_MESSAGE_BYTES`
/// plus `over`: the list and each string weigh 16 besides the strings' bytes.
fn list_weighing_the_bound_plus(over: usize) -> (String, usize, usize) {
    let bytes = Limits::MAX_MESSAGE_BYTES - 3 * Limits::NODE_WEIGHT;
    let (a, b) = (bytes / 2, bytes - bytes / 2 + over);
    (
        format!(r#"{{ string.rep("a", {a}), string.rep("b", {b}) }}"#),
        a,
        b,
    )
}

#[test]
fn a_list_is_copied_under_the_bound_of_one_copy_and_refused_one_byte_past_before_anything_runs() {
    let (marks, _tree, _pool, domain) = marked(1);
    let (list, a, b) = list_weighing_the_bound_plus(0);
    let v = domain
        .eval(&format!(
            r#"return jobs.map("./map", "len", {list}, {{ chunks = 2 }}):await()"#
        ))
        .unwrap();
    assert_eq!(numbers(&v), [a as f64, b as f64]);
    assert_eq!(marks.count(), 2);
    let (list, _, _) = list_weighing_the_bound_plus(1);
    let message = refusal(&domain, &format!(r#"jobs.map("./map", "len", {list})"#));
    assert_contains(
        &message,
        "jobs.map: list[2]: a value weighing more than its limit of 67108864 bytes can't cross a worker or event boundary",
    );
    // One worker takes items in order: a chunk of the refused call would run before this.
    let after = domain.dispatch("./map", "nothing", Message::Nil).unwrap();
    after.wait().unwrap();
    assert_eq!(marks.count(), 2, "a refused map ran an element");
}

#[test]
fn each_result_is_copied_under_the_bound_of_one_copy_and_refused_one_byte_past() {
    let (tree, pool) = setup(1);
    let domain = tree.domain(&pool);
    let at_bound = Limits::MAX_MESSAGE_BYTES - Limits::NODE_WEIGHT;
    let v = domain
        .eval(&format!(
            r#"local out = jobs.map("./map", "sized", {{ 1, {at_bound} }}):await() return #out[2]"#
        ))
        .unwrap();
    assert_eq!(number(&v), at_bound as f64);
    let message = refusal(
        &domain,
        &format!(
            r#"jobs.map("./map", "sized", {{ 1, {} }}):await()"#,
            at_bound + 1
        ),
    );
    assert_contains(
        &message,
        "job './map:sized' failed: element 2 of 2: result: a value weighing more than its limit of 67108864 bytes can't cross a worker or event boundary",
    );
}

#[test]
fn bad_input_is_refused_at_the_call_naming_the_value_and_the_rule() {
    let (tree, pool) = setup(2);
    let domain = tree.domain(&pool);
    let cases = [
        (
            r#"jobs.map("./map", "square", { 1, nil, 3 })"#,
            "jobs.map: list must be a table whose keys are 1 to n, got a table with other keys (a hole, or a key that is not a whole number from 1)",
        ),
        (
            r#"jobs.map("./map", "square", { a = 1 })"#,
            "jobs.map: list must be a table whose keys are 1 to n, got a table with other keys (a hole, or a key that is not a whole number from 1)",
        ),
        (
            r#"jobs.map("./map", "square", { [0] = 1, 2 })"#,
            "jobs.map: list must be a table whose keys are 1 to n, got a table with other keys (a hole, or a key that is not a whole number from 1)",
        ),
        (
            r#"jobs.map("./map", "square", "abc")"#,
            "jobs.map: list must be a table whose keys are 1 to n, got a string",
        ),
        (
            r#"jobs.map("./map", "square", nil)"#,
            "jobs.map: list must be a table whose keys are 1 to n, got nil",
        ),
        (
            r#"jobs.map("./map", "square", { 1, print })"#,
            "jobs.map: list[2]: a function can't cross a worker or event boundary",
        ),
        (
            r#"jobs.map(42, "square", { 1 })"#,
            "jobs.map: module must be a require path string, got a number",
        ),
        (
            r#"jobs.map("./map", nil, { 1 })"#,
            "jobs.map: entry must be the name of a function, got nil",
        ),
        (
            r#"jobs.map("./map", "square", { 1, 2 }, { chunks = 0 })"#,
            "jobs.map: opts.chunks must be at least 1, got 0",
        ),
        (
            r#"jobs.map("./map", "square", { 1, 2 }, { chunks = 3 })"#,
            "jobs.map: opts.chunks of 3 is more than the 2 elements: a chunk holds at least one",
        ),
        (
            r#"jobs.map("./map", "square", { 1, 2 }, { chunks = 65537 })"#,
            "jobs.map: opts.chunks of 65537 is past the bound of 65536 chunks; a chunk may hold many elements",
        ),
        (
            r#"jobs.map("./map", "square", { 1, 2 }, { chunks = 1.5 })"#,
            "jobs.map: opts.chunks must be a whole number, got 1.5",
        ),
        (
            r#"jobs.map("./map", "square", { 1 }, { deadline = 61 })"#,
            "jobs.map: opts.deadline of 61 s is past the cap of 60 s: a deadline may be lowered, never raised",
        ),
        (
            r#"jobs.map("./map", "square", { 1 }, { deadline = 0 })"#,
            "jobs.map: opts.deadline must be a number of seconds above 0, got 0",
        ),
        (
            r#"jobs.map("./map", "square", { 1 }, { name = 5 })"#,
            "jobs.map: opts.name must be a string, got a number",
        ),
        (
            r#"jobs.map("./map", "square", { 1 }, { key = "k" })"#,
            "jobs.map: opts.key does not apply to a map: its chunks run on every worker, and a key binds items to one; dispatch keyed items with jobs.dispatch",
        ),
        (
            r#"jobs.map("./map", "square", { 1 }, { supersede = true })"#,
            "jobs.map: opts.supersede does not apply to a map: its chunks run on every worker, and a key binds items to one; dispatch keyed items with jobs.dispatch",
        ),
        (
            r#"jobs.map("./map", "square", { 1 }, { stride = 4 })"#,
            "jobs.map: unknown option 'stride' in opts: expected deadline, name or chunks",
        ),
        (
            r#"jobs.map("./map", "square", { 1 }, "fast")"#,
            "jobs.map: opts must be a table, got a string",
        ),
        (
            r#"jobs.map("./missing", "square", { 1 })"#,
            "jobs.map: module './missing' not found from ",
        ),
    ];
    for (call, expected) in cases {
        let message = refusal(&domain, call);
        assert!(
            message.contains(expected),
            "{call}\n  got:      {message}\n  expected: {expected}"
        );
    }
}

fn set(names: &[&str]) -> CapabilitySet {
    names
        .iter()
        .map(|n| CapabilityId::new(n).expect("valid name"))
        .collect()
}

#[test]
fn elements_run_under_the_callers_authority_as_dispatched_items_do() {
    let tree = Tree::new(&[("map.luau", MAP)]);
    let pool = Pool::new(2);
    // The domain holds x.a and x.b and no other capability (not worker.spawn: a map, like a
    // dispatch, needs none); its context `narrow` holds only x.a.
    let plan = Plan::new().root(tree.path()).function("need", |lua, args| {
        let name: String = lua.unpack_multi(args)?;
        skein::capability::require_capability(&name)?;
        lua.pack_multi(true)
    });
    let spec = DomainSpec::new("a")
        .plan(plan)
        .grant(RootAuthority::new().grant(set(&["x.a", "x.b"])))
        .context(
            ContextSpec::new("narrow")
                .phases([Phase::OnDemand])
                .capabilities(set(&["x.a"])),
        )
        .unwrap();
    let d = ScriptDomain::new(&pool, spec).unwrap();
    let v = d
        .eval(r#"return jobs.map("./map", "check", { "x.a", "x.b" }):await()"#)
        .unwrap();
    assert_eq!(
        v,
        Message::List(vec![Message::Boolean(true), Message::Boolean(true)])
    );
    d.exec(
        r#"require('@skein/context').bind('narrow', { onDemand = function()
            mapped = jobs.map('./map', 'check', { 'x.a', 'x.b' })
            dispatched = jobs.dispatch('./map', 'check', 'x.b')
        end })"#,
    )
    .unwrap();
    let report = d.run_phase(Phase::OnDemand, &[]).unwrap();
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    let denial = format!(
        "capability 'x.b' denied to domain 'a' (domain#{}, generation 1, context 'narrow')",
        d.id().get()
    );
    let mapped = refusal(&d, "mapped:await()");
    assert_contains(&mapped, "job './map:check' failed: element 2 of 2: ");
    assert_contains(&mapped, &denial);
    let dispatched = refusal(&d, "dispatched:await()");
    assert_contains(&dispatched, &denial);
    // The host has no map of its own; its dispatches run under the domain's grant, as before.
    let from_host = d
        .dispatch("./map", "check", Message::String("x.b".into()))
        .unwrap();
    assert_eq!(from_host.wait().unwrap(), Message::Boolean(true));
}

#[test]
fn a_map_holds_its_chunks_and_results_against_max_job_bytes_and_names_the_element_past_it() {
    const JOB_WEIGHT: usize = skein::DomainSpec::JOB_WEIGHT;
    const MAX_JOB_BYTES: usize = skein::DomainSpec::MAX_JOB_BYTES;
    let (tree, pool) = setup(2);
    let domain = tree.domain(&pool);
    // Three dispatches hold three quarters of the bound once they return (each JOB_WEIGHT and
    // its result, 16 + its length).
    let quarter = MAX_JOB_BYTES / 4;
    let len = quarter - JOB_WEIGHT - Limits::NODE_WEIGHT;
    domain
        .exec(&format!(
            r#"
held = {{}}
for i = 1, 3 do held[i] = jobs.dispatch("./map", "sized", {len}) end
for i = 1, 3 do held[i]:await() end
"#
        ))
        .unwrap();
    domain.run_until_idle().unwrap();
    assert_eq!(domain.stats().job_bytes, 3 * quarter);
    // A map of two elements in one chunk whose results fill the last quarter exactly: the chunk
    // holds JOB_WEIGHT, and each result 16 + its length, as long as the promise lives.
    let a = 100;
    let b = quarter - JOB_WEIGHT - (Limits::NODE_WEIGHT + a) - Limits::NODE_WEIGHT;
    domain
        .exec(&format!(
            r#"mapped = jobs.map("./map", "sized", {{ {a}, {b} }}, {{ chunks = 1 }})
               assert(#mapped:await()[2] == {b})"#
        ))
        .unwrap();
    domain.run_until_idle().unwrap();
    assert_eq!(domain.stats().job_bytes, MAX_JOB_BYTES);
    // Any more is refused at the call, naming the bound, and nothing changed.
    let message = refusal(&domain, r#"jobs.map("./map", "square", { 1 })"#);
    assert_contains(
        &message,
        &format!(
            "jobs.map: the domain's jobs would hold {} bytes of arguments and results, past the \
             bound of {MAX_JOB_BYTES}; await some before dispatching more",
            MAX_JOB_BYTES + JOB_WEIGHT
        ),
    );
    assert_eq!(domain.stats().job_bytes, MAX_JOB_BYTES);
    // With the map's promise gone its quarter is free; the same map with its second result one
    // byte longer passes the bound there, and that element is named.
    domain.exec("mapped = nil").unwrap();
    domain.lua().gc_collect().unwrap();
    assert_eq!(domain.stats().job_bytes, 3 * quarter);
    let message = refusal(
        &domain,
        &format!(
            r#"jobs.map("./map", "sized", {{ {a}, {} }}, {{ chunks = 1 }}):await()"#,
            b + 1
        ),
    );
    assert_contains(
        &message,
        &format!(
            "job './map:sized' failed: element 2 of 2: result: the domain's jobs would hold {} \
             bytes of arguments and results, past the bound of {MAX_JOB_BYTES}; await and drop \
             some results before dispatching more",
            MAX_JOB_BYTES + 1
        ),
    );
    // Everything is given back once the promises are gone.
    domain.exec("held = nil").unwrap();
    domain.lua().gc_collect().unwrap();
    assert_eq!(domain.stats().job_bytes, 0);
    let v = domain
        .eval(r#"return jobs.map("./map", "square", { 2, 3 }):await()"#)
        .unwrap();
    assert_eq!(numbers(&v), [4.0, 9.0]);
}
