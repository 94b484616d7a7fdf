//! Shared queues end to end: the Luau handle on the engine and on workers, parking a pop without
//! holding a thread, close, end, refusals with their texts, the Rust handle, and a stress run
//! that counts every value in and out.

use std::time::{Duration, Instant};

use skein::shared::{PopError, PushErrorKind};
use skein::{Message, Pool};

use crate::support::{assert_contains, number, refusal, text, wait_until, Tree, PUSH_RETRYING};

/// The error `body` raises, as the code that caught it sees it: one line.
#[track_caller]
fn refused(domain: &skein::ScriptDomain, body: &str) -> String {
    let full = refusal(domain, body);
    assert!(
        !full.contains('\n'),
        "a caught error is its text alone: {full:?}"
    );
    full
}

const QUEUES: &str = r#"
local M = {}

-- Pops until the queue is closed and drained; answers what it took, in order.
function M.drain(args)
    local q = jobs.shared.queue(args.name)
    local got = {}
    while true do
        local v = q:pop()
        if v == nil then return got end
        table.insert(got, v)
    end
end

-- As drain, a batch at a time.
function M.drainMany(args)
    local q = jobs.shared.queue(args.name)
    local got = {}
    while true do
        local batch = q:popMany(args.batch)
        if #batch == 0 then return got end
        assert(#batch <= args.batch, "a batch past n")
        for _, v in batch do table.insert(got, v) end
    end
end

-- Pushes v, retrying while the queue is full (support::PUSH_RETRYING).
M.pushRetrying = require("./push_retrying")

-- Pushes first..last, waiting a batch whenever the queue is full.
function M.produce(args)
    local q = jobs.shared.queue(args.name)
    for i = args.first, args.last do
        M.pushRetrying(q, i)
    end
    return args.last - args.first + 1
end

function M.popOne(args)
    return jobs.shared.queue(args.name):pop()
end

function M.push(args)
    jobs.shared.queue(args.name):push(args.value)
    return true
end

function M.double(x) return x * 2 end

return M
"#;

/// A module that pops at its top level, where a task can't wait.
const TOP_LEVEL_POP: &str = r#"return jobs.shared.queue("top"):pop()"#;

fn setup(workers: usize) -> (Tree, Pool) {
    (
        Tree::new(&[
            ("queues.luau", QUEUES),
            ("top.luau", TOP_LEVEL_POP),
            PUSH_RETRYING,
        ]),
        Pool::new(workers),
    )
}

/// Pumps `domain` until `done`, failing the test after 10 s.
#[track_caller]
fn pump_until(domain: &skein::ScriptDomain, done: impl Fn() -> bool) {
    assert!(
        wait_until(Duration::from_secs(10), || {
            domain.pump();
            done()
        }),
        "timed out waiting"
    );
}

#[test]
fn values_round_trip_exactly_and_one_name_is_one_handle() {
    let (tree, pool) = setup(1);
    let domain = tree.domain(&pool);
    let v = domain
        .eval(
            r#"
            local q = jobs.shared.queue("round", { capacity = 16 })
            assert(rawequal(q, jobs.shared.queue("round")), "one handle per name per VM")
            assert(q.name == "round" and q.capacity == 16)
            assert(tostring(q) == "SharedQueue('round', capacity 16)", tostring(q))
            assert(q:tryPop() == nil and q:len() == 0)
            local b = buffer.create(3)
            buffer.writeu8(b, 2, 9)
            local inputs = { true, 42, integer.fromstring("1152921504606846976"), 1.5, "a\0b", vector.create(1, 2, 3), b,
                { 1, 2, { x = "y" } } }
            for _, v in inputs do q:push(v) end
            assert(q:len() == #inputs)
            local out = {}
            for i = 1, #inputs do out[i] = q:pop() end
            assert(out[1] == true and out[2] == 42 and out[4] == 1.5 and out[5] == "a\0b")
            assert(out[6] == vector.create(1, 2, 3))
            assert(buffer.len(out[7]) == 3 and buffer.readu8(out[7], 2) == 9)
            assert(out[8][3].x == "y" and #out[8] == 3)
            assert(q:len() == 0)
            return out[3]
            "#,
        )
        .unwrap();
    assert_eq!(v, Message::Integer(1 << 60), "a 64-bit integer stays exact");
}

#[test]
fn unknown_options_are_refused_naming_the_option_and_make_nothing() {
    let (tree, pool) = setup(1);
    let domain = tree.domain(&pool);
    assert_eq!(
        refused(&domain, r#"jobs.shared.queue("q", { capacty = 8 })"#),
        "jobs.shared.queue: unknown option 'capacty' in opts: expected capacity"
    );
    assert_eq!(
        refused(&domain, r#"jobs.shared.queue("q", { capacity = 8, 1 })"#),
        "jobs.shared.queue: opts has a number key, but options are named by strings: expected capacity"
    );
    assert_eq!(
        refused(&domain, r#"jobs.shared.queue("q", 8)"#),
        "jobs.shared.queue: opts must be a table, got a number"
    );
    // Nothing was made: the name is still free for any capacity.
    domain
        .eval(r#"assert(jobs.shared.queue("q", { capacity = 3 }).capacity == 3)"#)
        .unwrap();
    domain
        .eval(r#"assert(jobs.shared.queue("q", {}).capacity == 3, "an empty table asks nothing")"#)
        .unwrap();
}

#[test]
fn capacities_at_and_past_the_bounds() {
    let (tree, pool) = setup(1);
    let domain = tree.domain(&pool);
    assert_eq!(
        refused(&domain, r#"jobs.shared.queue("zero", { capacity = 0 })"#),
        "jobs.shared.queue: capacity must be 1 to 65536, got 0"
    );
    assert_eq!(
        refused(&domain, r#"jobs.shared.queue("big", { capacity = 65537 })"#),
        "jobs.shared.queue: capacity must be 1 to 65536, got 65537"
    );
    assert_eq!(
        refused(
            &domain,
            r#"jobs.shared.queue("negative", { capacity = -5 })"#
        ),
        "jobs.shared.queue: capacity must be 1 to 65536, got -5"
    );
    assert_eq!(
        refused(&domain, r#"jobs.shared.queue("text", { capacity = "8" })"#),
        "jobs.shared.queue: opts.capacity must be a number, got a string"
    );
    assert_eq!(
        refused(&domain, r#"jobs.shared.queue("half", { capacity = 1.5 })"#),
        "jobs.shared.queue: opts.capacity must be a whole number, got 1.5"
    );
    let v = domain
        .eval(
            r#"
            assert(jobs.shared.queue("one", { capacity = 1 }).capacity == 1)
            assert(jobs.shared.queue("max", { capacity = 65536 }).capacity == 65536)
            return jobs.shared.queue("default").capacity
            "#,
        )
        .unwrap();
    assert_eq!(number(&v), 1024.0);
    // Nothing was made by the refused calls: the names are still free for any capacity.
    domain
        .eval(r#"assert(jobs.shared.queue("zero", { capacity = 3 }).capacity == 3)"#)
        .unwrap();
    assert_eq!(
        refused(&domain, r#"jobs.shared.queue("one", { capacity = 2 })"#),
        "jobs.shared.queue: queue 'one' exists with capacity 1, not 2"
    );
    domain
        .eval(r#"assert(jobs.shared.queue("one").capacity == 1, "no capacity takes it as it is")"#)
        .unwrap();
}

#[test]
fn names_at_and_past_the_bounds() {
    let (tree, pool) = setup(1);
    let domain = tree.domain(&pool);
    assert_eq!(
        refused(&domain, r#"jobs.shared.queue("")"#),
        "jobs.shared.queue: a name must be 1 to 256 bytes, got 0 bytes"
    );
    assert_eq!(
        refused(&domain, r#"jobs.shared.queue(string.rep("n", 257))"#),
        "jobs.shared.queue: a name must be 1 to 256 bytes, got 257 bytes"
    );
    assert_eq!(
        refused(&domain, r#"jobs.shared.queue(7)"#),
        "jobs.shared.queue: name must be a string, got a number"
    );
    domain
        .eval(r#"assert(jobs.shared.queue(string.rep("n", 256)).capacity == 1024)"#)
        .unwrap();
    domain
        .eval(r#"assert(jobs.shared.queue("x").name == "x")"#)
        .unwrap();
}

#[test]
fn bad_pushes_raise_naming_the_path_and_change_nothing() {
    let (tree, pool) = setup(1);
    let domain = tree.domain(&pool);
    domain
        .eval(r#"local q = jobs.shared.queue("bad", { capacity = 2 }) q:push(1) q:push(2)"#)
        .unwrap();
    assert_eq!(
        refused(&domain, r#"jobs.shared.queue("bad"):push(3)"#),
        "SharedQueue:push: queue 'bad' is full (capacity 2)"
    );
    domain.eval(r#"jobs.shared.queue("bad"):tryPop()"#).unwrap();
    assert_eq!(
        refused(&domain, r#"jobs.shared.queue("bad"):push(nil)"#),
        "SharedQueue:push: value: a queue value can't be nil"
    );
    assert_eq!(
        refused(
            &domain,
            r#"jobs.shared.queue("bad"):push({ items = { print } })"#
        ),
        "SharedQueue:push: value.items[1]: a function can't cross a worker or event boundary"
    );
    assert_eq!(
        refused(
            &domain,
            r#"jobs.shared.queue("bad"):push(coroutine.create(print))"#
        ),
        "SharedQueue:push: value: a coroutine can't cross a worker or event boundary"
    );
    assert_eq!(
        refused(&domain, r#"jobs.shared.queue("bad"):popMany(0)"#),
        "SharedQueue:popMany: n must be a whole number from 1 to 2, got 0"
    );
    assert_eq!(
        refused(&domain, r#"jobs.shared.queue("bad"):popMany(3)"#),
        "SharedQueue:popMany: n must be a whole number from 1 to 2, got 3"
    );
    let v = domain
        .eval(r#"local q = jobs.shared.queue("bad") return { q:len(), q:tryPop(), q:tryPop() }"#)
        .unwrap();
    assert_eq!(
        v,
        Message::List(vec![Message::Number(1.0), Message::Number(2.0)]),
        "only the value left by the good pushes, once"
    );
}

#[test]
fn close_drains_then_answers_nil_and_answers_parked_pops() {
    let (tree, pool) = setup(1);
    let domain = tree.domain(&pool);
    let v = domain
        .eval(
            r#"
            local q = jobs.shared.queue("closing")
            local parked = "not yet"
            task.spawn(function() parked = q:pop() end)
            assert(parked == "not yet", "the pop parked")
            assert(q:close() == true and q:close() == false)
            task.wait() -- the behaviour under test: the close wakes the parked pop by the next batch
            assert(parked == nil, "a parked pop answers nil on close")
            return parked
            "#,
        )
        .unwrap();
    assert_eq!(v, Message::Nil);
    let v = domain
        .eval(
            r#"
            local q = jobs.shared.queue("drained")
            q:push("a") q:push("b") q:push("c")
            q:close()
            local ok, err = pcall(q.push, q, "d")
            assert(not ok)
            local many = q:popMany(2)
            return { tostring(err), many[1], many[2], q:pop(), tostring(q:pop()), tostring(q:tryPop()),
                #q:popMany(5), q:len() }
            "#,
        )
        .unwrap();
    let Message::List(items) = v else {
        panic!("a list: {v:?}")
    };
    assert_contains(
        &text(&items[0]),
        "SharedQueue:push: queue 'drained' is closed",
    );
    assert_eq!(text(&items[1]), "a");
    assert_eq!(text(&items[2]), "b");
    assert_eq!(text(&items[3]), "c");
    assert_eq!(text(&items[4]), "nil");
    assert_eq!(text(&items[5]), "nil");
    assert_eq!(number(&items[6]), 0.0);
    assert_eq!(number(&items[7]), 0.0);
}

#[test]
fn an_engine_pop_suspends_only_its_task() {
    let (tree, pool) = setup(1);
    let domain = tree.domain(&pool);
    let queue = domain.shared().queue("frames", 8).unwrap();
    domain
        .exec(
            r#"
            got = nil
            local q = jobs.shared.queue("frames")
            task.spawn(function() got = q:pop() end)
            "#,
        )
        .unwrap();
    // The engine thread keeps running other tasks while the pop is parked.
    for frame in 0..3 {
        let v = domain
            .eval(&format!("return {frame} + (got or 0)"))
            .unwrap();
        assert_eq!(number(&v), f64::from(frame));
    }
    queue.push(Message::Integer(40)).unwrap();
    pump_until(&domain, || {
        domain.eval("return got").unwrap() == Message::Integer(40)
    });
    assert_eq!(queue.len(), 0);
}

#[test]
fn workers_pop_in_a_loop_while_the_engine_pushes() {
    let (tree, pool) = setup(2);
    let domain = tree.domain(&pool);
    let v = domain
        .eval(
            r#"
            local queues = require("./queues")
            local q = jobs.shared.queue("work", { capacity = 64 })
            local a = jobs.dispatch("./queues", "drain", { name = "work" })
            local b = jobs.dispatch("./queues", "drainMany", { name = "work", batch = 7 })
            local pushed = 0
            for i = 1, 500 do
                queues.pushRetrying(q, i)
                pushed += 1
            end
            q:close()
            local seen, count = {}, 0
            for _, got in { a:await(), b:await() } do
                local last = 0
                for _, v in got do
                    assert(not seen[v], `value {v} delivered twice`)
                    assert(v > last, "one consumer saw its values out of order")
                    seen[v], last, count = true, v, count + 1
                end
            end
            return { pushed, count }
            "#,
        )
        .unwrap();
    assert_eq!(
        v,
        Message::List(vec![Message::Number(500.0), Message::Number(500.0)])
    );
}

#[test]
fn a_worker_parked_on_pop_keeps_serving_other_items() {
    let (tree, pool) = setup(1);
    let domain = tree.domain(&pool);
    let v = domain
        .eval(
            r#"
            local parked = jobs.dispatch("./queues", "popOne", { name = "later" })
            -- The only worker has the pop parked, and still runs this item.
            local doubled = jobs.dispatch("./queues", "double", 21):await()
            assert(parked:status() == "pending")
            jobs.shared.queue("later"):push("hello")
            return { doubled, parked:await() }
            "#,
        )
        .unwrap();
    assert_eq!(
        v,
        Message::List(vec![Message::Number(42.0), Message::String("hello".into())])
    );
}

#[test]
fn a_worker_pushes_to_a_parked_engine_pop_and_the_host_pops_from_a_worker_push() {
    let (tree, pool) = setup(2);
    let domain = tree.domain(&pool);
    let v = domain
        .eval(
            r#"
            local q = jobs.shared.queue("up")
            jobs.dispatch("./queues", "push", { name = "up", value = { n = 5 } })
            return q:pop().n
            "#,
        )
        .unwrap();
    assert_eq!(number(&v), 5.0);
    let host = domain.shared().queue("down", 4).unwrap();
    domain
        .eval(r#"jobs.dispatch("./queues", "push", { name = "down", value = "x" }):await()"#)
        .unwrap();
    assert_eq!(
        host.pop_blocking(Duration::from_secs(5)).unwrap(),
        Some(Message::String("x".into()))
    );
}

#[test]
fn a_cancelled_popper_loses_no_value() {
    let (tree, pool) = setup(1);
    let domain = tree.domain(&pool);
    // Cancelled, then a push: the value reaches the dead pop's VM and goes back.
    let v = domain
        .eval(
            r#"
            local q = jobs.shared.queue("c1")
            local t = task.spawn(function() q:pop() error("never resumed") end)
            task.cancel(t)
            q:push("kept")
            task.wait() -- the behaviour under test: the dead pop's VM gives it back by the next batch
            return { q:len(), q:tryPop() }
            "#,
        )
        .unwrap();
    assert_eq!(
        v,
        Message::List(vec![Message::Number(1.0), Message::String("kept".into())])
    );
    // Cancelled, then another pop: the dead waiter is withdrawn, the live pop gets the value.
    let v = domain
        .eval(
            r#"
            local q = jobs.shared.queue("c2")
            local t = task.spawn(function() q:pop() end)
            task.cancel(t)
            local got
            task.spawn(function() got = q:pop() end)
            q:push("live")
            local start = os.clock()
            while got == nil do
                assert(os.clock() - start < 10, "the live pop never got the value")
                task.wait() -- a yield of one batch: the poll for the pop
            end
            return { got, q:len() }
            "#,
        )
        .unwrap();
    assert_eq!(
        v,
        Message::List(vec![Message::String("live".into()), Message::Number(0.0)])
    );
    // A worker's pop whose job is cancelled: the value is not lost either.
    let queue = domain.shared().queue("c3", 4).unwrap();
    domain
        .exec(r#"popper = jobs.dispatch("./queues", "popOne", { name = "c3" })"#)
        .unwrap();
    // The worker's pop has parked on the queue: cancel it there.
    assert!(
        wait_until(Duration::from_secs(10), || queue.waiters() == 1),
        "the worker's pop never parked"
    );
    assert_eq!(
        domain.eval("return popper:cancel()").unwrap(),
        Message::Boolean(true)
    );
    queue.push(Message::Integer(9)).unwrap();
    assert!(
        wait_until(Duration::from_secs(10), || queue.len() == 1),
        "the value never came back"
    );
    assert_eq!(queue.try_pop().unwrap(), Some(Message::Integer(9)));
}

#[test]
fn the_rust_handle_pushes_pops_and_times_out() {
    let (tree, pool) = setup(1);
    let domain = tree.domain(&pool);
    let store = domain.shared();
    let q = store.queue("host", 2).unwrap();
    assert_eq!((q.name().as_str(), q.capacity(), q.len()), ("host", 2, 0));
    q.push(Message::Integer(1)).unwrap();
    q.push(Message::Integer(2)).unwrap();
    let full = q.push(Message::Integer(3)).unwrap_err();
    assert_eq!(full.kind, PushErrorKind::Full);
    assert_eq!(
        full.to_string(),
        "SharedQueue:push: queue 'host' is full (capacity 2)"
    );
    assert_eq!(full.into_inner(), Message::Integer(3));
    assert_eq!(q.len(), 2);
    assert_eq!(
        q.push(Message::Nil).unwrap_err().to_string(),
        "SharedQueue:push: value: a queue value can't be nil"
    );
    assert_eq!(q.try_pop().unwrap(), Some(Message::Integer(1)));
    assert_eq!(
        q.pop_blocking(Duration::from_secs(1)).unwrap(),
        Some(Message::Integer(2))
    );
    let start = Instant::now();
    // the behaviour under test: a timed-out pop waits its timeout out, then answers None
    assert_eq!(q.pop_blocking(Duration::from_millis(30)).unwrap(), None);
    assert!(start.elapsed() >= Duration::from_millis(30));
    // A timed-out pop leaves no waiter behind: the next push queues.
    assert_eq!(q.waiters(), 0);
    q.push(Message::Integer(4)).unwrap();
    assert_eq!(q.len(), 1);
    // Another thread's push wakes a blocked pop.
    let other = q.clone();
    q.try_pop().unwrap();
    let pusher = std::thread::spawn(move || {
        // Pushes once the pop below has blocked.
        assert!(
            wait_until(Duration::from_secs(10), || other.waiters() == 1),
            "the pop never blocked"
        );
        other.push(Message::Boolean(true)).unwrap();
    });
    assert_eq!(
        q.pop_blocking(Duration::from_secs(5)).unwrap(),
        Some(Message::Boolean(true))
    );
    pusher.join().unwrap();
    assert!(!q.is_closed());
    assert!(q.close().unwrap());
    assert!(q.is_closed());
    assert_eq!(q.try_pop(), Err(PopError::Closed));
    assert_eq!(
        q.pop_blocking(Duration::from_secs(1)),
        Err(PopError::Closed)
    );
    let err = store.queue("host", 3).unwrap_err();
    assert_eq!(
        err.to_string(),
        "SharedStore::queue: queue 'host' exists with capacity 2, not 3"
    );
    assert_eq!(
        store.queue("", 1).unwrap_err().to_string(),
        "SharedStore::queue: a name must be 1 to 256 bytes, got 0 bytes"
    );
    assert_eq!(
        store.queue("z", 0).unwrap_err().to_string(),
        "SharedStore::queue: capacity must be 1 to 65536, got 0"
    );
    // The host's queue is the one Luau sees.
    let luau_side = domain
        .eval(r#"local q = jobs.shared.queue("host") return { q.capacity, q:pop() }"#)
        .unwrap();
    assert_eq!(luau_side, Message::List(vec![Message::Number(2.0)]));
}

#[test]
fn dropping_the_domain_rejects_parked_pops_with_the_reason() {
    let (tree, pool) = setup(1);
    let domain = tree.domain(&pool);
    let q = domain.shared().queue("doomed", 4).unwrap();
    let waiting = q.clone();
    let popper = std::thread::spawn(move || waiting.pop_blocking(Duration::from_secs(30)));
    // The pop has blocked: the drop must wake it, not merely refuse a later pop.
    assert!(
        wait_until(Duration::from_secs(10), || q.waiters() == 1),
        "the pop never blocked"
    );
    drop(domain);
    let popped = popper.join().unwrap();
    assert_eq!(popped, Err(PopError::Ended("domain 'test' stopped".into())));
    let err = q.push(Message::Integer(1)).unwrap_err();
    assert_eq!(
        err.to_string(),
        "SharedQueue:push: queue 'doomed' has ended: domain 'test' stopped"
    );
    assert_eq!(q.len(), 0);
    assert_eq!(
        q.close(),
        Err(PopError::Ended("domain 'test' stopped".into()))
    );
}

#[test]
fn a_handle_used_after_its_domain_ended_raises_naming_the_reason() {
    let (tree, pool) = setup(1);
    let first = tree.domain(&pool);
    let store = first.shared();
    let kept = store.queue("kept", 2).unwrap();
    kept.push(Message::Integer(1)).unwrap();
    drop(first);
    assert_eq!(
        kept.try_pop(),
        Err(PopError::Ended("domain 'test' stopped".into())),
        "the values ended with the domain"
    );
    let err = store.queue("again", 2).unwrap_err();
    assert_eq!(
        err.to_string(),
        "SharedStore::queue: the shared store has ended: domain 'test' stopped"
    );
}

#[test]
fn two_domains_do_not_share_queues() {
    let (tree, pool) = setup(1);
    let a = tree.domain(&pool);
    let b = tree.domain(&pool);
    a.eval(r#"jobs.shared.queue("same", { capacity = 2 }):push("from a")"#)
        .unwrap();
    let v = b
        .eval(r#"local q = jobs.shared.queue("same", { capacity = 5 }) return { q:len(), q.capacity }"#)
        .unwrap();
    assert_eq!(
        v,
        Message::List(vec![Message::Number(0.0), Message::Number(5.0)])
    );
    assert_eq!(
        a.shared().queue("same", 2).unwrap().try_pop().unwrap(),
        Some(Message::String("from a".into()))
    );
}

#[test]
fn stress_producers_and_consumers_on_two_workers_and_the_engine() {
    const PRODUCERS: i64 = 4;
    const PER: i64 = 400;
    let (tree, pool) = setup(2);
    let domain = tree.domain(&pool);
    let v = domain
        .eval(&format!(
            r#"
            local queues = require("./queues")
            local q = jobs.shared.queue("stress", {{ capacity = 16 }})
            local consumers = {{}}
            for i = 1, 3 do
                table.insert(consumers, jobs.dispatch("./queues", "drain", {{ name = "stress" }}))
            end
            table.insert(consumers, jobs.dispatch("./queues", "drainMany", {{ name = "stress", batch = 5 }}))
            local engineGot = {{}}
            local engineDone = false
            task.spawn(function()
                while true do
                    local v = q:pop()
                    if v == nil then break end
                    table.insert(engineGot, v)
                end
                engineDone = true
            end)
            local producers = {{}}
            for p = 0, {PRODUCERS} - 1 do
                table.insert(producers, jobs.dispatch("./queues", "produce",
                    {{ name = "stress", first = p * {PER} + 1, last = (p + 1) * {PER} }}))
            end
            -- The engine produces too.
            for i = {PRODUCERS} * {PER} + 1, ({PRODUCERS} + 1) * {PER} do
                queues.pushRetrying(q, i)
            end
            local produced = {PER}
            for _, p in producers do produced += p:await() end
            q:close()
            local seen, count = {{}}, 0
            local function take(list)
                for _, v in list do
                    assert(not seen[v], `value {{v}} delivered twice`)
                    seen[v] = true
                    count += 1
                end
            end
            for _, c in consumers do take(c:await()) end
            local start = os.clock()
            while not engineDone do
                assert(os.clock() - start < 10, "the engine's consumer never ended")
                task.wait() -- a yield of one batch: the poll for the engine's consumer
            end
            take(engineGot)
            for i = 1, ({PRODUCERS} + 1) * {PER} do
                assert(seen[i], `value {{i}} was lost`)
            end
            return {{ produced, count, q:len() }}
            "#
        ))
        .unwrap();
    let total = (PRODUCERS + 1) * PER;
    assert_eq!(
        v,
        Message::List(vec![
            Message::Number(total as f64),
            Message::Number(total as f64),
            Message::Number(0.0)
        ])
    );
}

#[test]
fn a_pop_with_a_value_ready_and_a_push_with_a_slot_free_never_yield() {
    let (tree, pool) = setup(1);
    let domain = tree.domain(&pool);
    let v = domain
        .eval(
            r#"
            local q = jobs.shared.queue("ready", { capacity = 2 })
            -- A free slot: each push goes in at once, without yielding its coroutine.
            local pushing = coroutine.create(function() q:push(1) q:push(2) return q:len() end)
            local ok, n = coroutine.resume(pushing)
            assert(ok and coroutine.status(pushing) == "dead" and n == 2, tostring(n))
            -- No slot: refused at once, and nothing changed.
            local full, err = pcall(q.push, q, 3)
            assert(not full and string.find(tostring(err), "is full (capacity 2)", 1, true))
            -- A value ready: the pops take it without yielding (no park, no promise).
            local popping = coroutine.create(function() return q:pop(), q:popMany(2) end)
            local ok2, a, rest = coroutine.resume(popping)
            assert(ok2 and coroutine.status(popping) == "dead", tostring(a))
            assert(a == 1 and #rest == 1 and rest[1] == 2)
            -- Where a task can't wait (a metamethod), a ready value is taken all the same.
            q:push(4)
            local t = setmetatable({}, { __index = function() return q:pop() end })
            local got = t.anything
            q:push(5)
            q:close()
            -- Closed: a ready pop drains, then answers nil (and popMany an empty list) at once.
            local drained = coroutine.create(function() return q:pop(), q:pop(), #q:popMany(2) end)
            local ok3, last, none, empty = coroutine.resume(drained)
            assert(ok3 and coroutine.status(drained) == "dead", tostring(last))
            return { got, last, none == nil, empty, q:len() }
            "#,
        )
        .unwrap();
    assert_eq!(
        v,
        Message::List(vec![
            Message::Number(4.0),
            Message::Number(5.0),
            Message::Boolean(true),
            Message::Number(0.0),
            Message::Number(0.0),
        ])
    );
    let queue = domain.shared().queue("ready", 2).unwrap();
    assert_eq!(queue.waiters(), 0, "no pop was left parked");
}

/// A consumer on one worker pops (one at a time from a queue of one slot, or two at a time from
/// one of two) while a producer on the other pushes: the queue runs empty and full over and over,
/// so pushes land between a pop's look and its park. Every value goes in once and comes out
/// once, in order.
#[test]
fn values_pushed_between_a_pops_look_and_its_park_are_neither_lost_nor_doubled() {
    const N: i64 = 3_000;
    let (tree, pool) = setup(2);
    let domain = tree.domain(&pool);
    for (entry, capacity, extra) in [("drain", 1, ""), ("drainMany", 2, ", batch = 2")] {
        let name = format!("race_{entry}");
        let v = domain
            .eval(&format!(
                r#"
                local q = jobs.shared.queue("{name}", {{ capacity = {capacity} }})
                local consumer = jobs.dispatch("./queues", "{entry}", {{ name = "{name}"{extra} }})
                local made = jobs.dispatch("./queues", "produce",
                    {{ name = "{name}", first = 1, last = {N} }}):await()
                q:close()
                local got = consumer:await()
                local inOrder, sum = true, 0
                for i, v in got do
                    inOrder = inOrder and v == i
                    sum += v
                end
                return {{ made, #got, sum, inOrder, q:len() }}
                "#
            ))
            .unwrap();
        assert_eq!(
            v,
            Message::List(vec![
                Message::Number(N as f64),
                Message::Number(N as f64),
                Message::Number((N * (N + 1) / 2) as f64),
                Message::Boolean(true),
                Message::Number(0.0),
            ]),
            "{entry}"
        );
        let queue = domain.shared().queue(&name, capacity).unwrap();
        assert_eq!(queue.waiters(), 0, "{entry}: no pop was left parked");
    }
}

#[test]
fn queue_names_count_toward_the_domain_s_names() {
    let (tree, pool) = setup(1);
    let domain = tree.domain(&pool);
    domain
        .eval(r#"for i = 1, 4096 do jobs.shared.queue(`n{i}`, { capacity = 1 }) end"#)
        .unwrap();
    assert_eq!(
        refused(&domain, r#"jobs.shared.queue("one too many")"#),
        "jobs.shared.queue: the domain holds at most 4096 shared names"
    );
    assert_eq!(
        domain
            .shared()
            .queue("from the host", 1)
            .unwrap_err()
            .to_string(),
        "SharedStore::queue: the domain holds at most 4096 shared names"
    );
    // The names made still answer.
    domain
        .eval(r#"local q = jobs.shared.queue("n4096") q:push(1) assert(q:pop() == 1)"#)
        .unwrap();
}

#[test]
fn a_pop_that_would_wait_where_a_task_cannot_raises() {
    let (tree, pool) = setup(1);
    let domain = tree.domain(&pool);
    assert_eq!(
        refused(&domain, r#"require("./top")"#),
        "SharedQueue:pop can't wait here: queue 'top' is empty; call it from a task, not from \
         a metamethod or a module's top level, or use tryPop"
    );
    // Nothing was left waiting: the next push queues, and a pop with a value needs no wait.
    let v = domain
        .eval(r#"local q = jobs.shared.queue("top") q:push("v") local n = q:len() return { n, require("./top") }"#)
        .unwrap();
    assert_eq!(
        v,
        Message::List(vec![Message::Number(1.0), Message::String("v".into())])
    );
}

/// A queue handle is userdata of Skein's own: `typeof` names it, its metatable is locked, its
/// `name` and `capacity` can't be written, and no other userdata passes for one as a method's
/// `self`, at any of the methods.
#[test]
fn a_queue_handle_is_told_apart_from_every_other_userdata() {
    let (tree, pool) = setup(1);
    let domain = tree.domain(&pool);
    let out = domain
        .eval(
            r#"
            local q = jobs.shared.queue("own", { capacity = 4 })
            q:push(1)
            assert(typeof(q) == "SharedQueue" and type(q) == "userdata")
            assert(getmetatable(q) == false, "the metatable is locked")
            assert(not pcall(function() q.name = "other" end) and q.name == "own")
            local fake = newproxy(true)
            local said = {}
            for _, name in { "pop", "popMany", "push", "tryPop", "len", "close" } do
                local ok, err = pcall(q[name], fake, 1)
                assert(not ok)
                table.insert(said, tostring(err))
            end
            assert(q:len() == 1 and q:pop() == 1)
            return table.concat(said, "\n")
            "#,
        )
        .unwrap();
    let out = text(&out);
    for name in ["pop", "popMany", "push", "tryPop", "len", "close"] {
        assert_contains(
            &out,
            &format!("SharedQueue:{name}: self must be a queue, got a userdata"),
        );
    }
}
