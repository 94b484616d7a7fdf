//! Shared tables and shared queues under load together: two workers, the engine and host threads
//! all hammer ONE shared table and ONE shared queue at once, then every count is checked exactly.
//!
//! Four producers push tagged numbers into the queue: two worker jobs, a task on the engine and a
//! host thread through [`SharedQueueRef`]. Each producer also, for every value it pushes, bumps
//! the table's common `total` and its own counter with an atomic update, writes a plain key of
//! its own, and writes through its nested table. Four consumers pop: two worker jobs (one by
//! `pop`, one by `popMany`), a task on the engine, and a host thread with `pop_blocking`. At the
//! end each value must have been popped exactly once (count and sum per producer), every atomic
//! counter must be exact, and every plain key must hold the last value its producer wrote.
//! A larger size runs with `cargo test -- --ignored`, as CI's `.ci/run` does, in release.

use std::collections::BTreeMap;
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use skein::shared::{PopError, PushErrorKind, SharedQueueRef, SharedTableRef};
use skein::{MapKey, Message, Pool};

use crate::support::{number, Tree, PUSH_RETRYING};

/// A producer's tag times `SCALE`, plus its index, is the value it pushes: a consumer reads who
/// pushed a value from the value alone.
const SCALE: u64 = 1_000_000;

/// Each producer writes its plain keys `k_<who>_0` to `k_<who>_<KEYS - 1>` over and over.
const KEYS: u64 = 16;

/// The producers, by tag (1-based: `tag * SCALE` is never 0).
const PRODUCERS: [&str; 4] = ["w1", "w2", "engine", "host"];

/// The consumers whose tallies land in the table (the host thread's stays in Rust).
const LUAU_CONSUMERS: [&str; 3] = ["c1", "c2", "engine"];

const STRESS: &str = r#"
local M = {}

-- What every producer does to the table for its i-th value.
function M.touch(t, who: string, i: number, keys: number)
    jobs.shared.atomic(t, "total", function(n) return n + 1 end)
    jobs.shared.atomic(t.counters, who, function(n) return (n or 0) + 1 end)
    t["k_" .. who .. "_" .. (i % keys)] = i
    -- Only this producer writes its nested table, so a read-then-write through it is exact.
    local mine = t.nested[who]
    mine.hits += 1
    mine.last = i
end

-- Pushes v, retrying while the queue is full (support::PUSH_RETRYING).
M.pushRetrying = require("./push_retrying")

-- Waits a batch at a time until done() holds, raising after `limit` seconds.
function M.waitFor(what: string, limit: number, done)
    local start = os.clock()
    while not done() do
        assert(os.clock() - start < limit, `{what}: not within {limit} s`)
        task.wait() -- a yield of one batch: the poll
    end
end

function M.produce(args)
    local q = jobs.shared.queue("stress.q")
    local t = jobs.shared.table("stress.t")
    for i = 1, args.count do
        local v = args.tag * args.scale + i
        M.pushRetrying(q, v)
        M.touch(t, args.who, i, args.keys)
    end
    return args.count
end

-- Pops until closed and drained, then writes its count and sum per producer tag.
function M.consume(args)
    local q = jobs.shared.queue("stress.q")
    local t = jobs.shared.table("stress.t")
    local counts, sums = {}, {}
    local function take(v)
        local tag = v // args.scale
        counts[tag] = (counts[tag] or 0) + 1
        sums[tag] = (sums[tag] or 0) + v
        jobs.shared.atomic(t, "popped", function(n) return n + 1 end)
    end
    while true do
        if args.batch then
            local batch = q:popMany(args.batch)
            if #batch == 0 then break end
            for _, v in batch do take(v) end
        else
            local v = q:pop()
            if v == nil then break end
            take(v)
        end
    end
    for tag, n in counts do
        t["popped_" .. args.who .. "_" .. tag] = n
        t["sum_" .. args.who .. "_" .. tag] = sums[tag]
    end
    return true
end

return M
"#;

/// The engine's script: starts the worker producers and consumers, produces and consumes on
/// engine tasks, closes the queue once every producer (the host's included) is done, and waits
/// for every consumer.
fn engine_script(per: u64) -> String {
    format!(
        r#"
        local stress = require("./stress")
        local t = jobs.shared.table("stress.t")
        local q = jobs.shared.queue("stress.q")
        local common = {{ count = {per}, keys = {KEYS}, scale = {SCALE} }}
        local function args(extra)
            local a = table.clone(common)
            for k, v in extra do a[k] = v end
            return a
        end
        local producers = {{
            jobs.dispatch("./stress", "produce", args({{ who = "w1", tag = 1 }})),
            jobs.dispatch("./stress", "produce", args({{ who = "w2", tag = 2 }})),
        }}
        local consumers = {{
            jobs.dispatch("./stress", "consume", args({{ who = "c1" }})),
            jobs.dispatch("./stress", "consume", args({{ who = "c2", batch = 7 }})),
        }}
        local engineProduced, engineConsumed = false, false
        task.spawn(function()
            stress.produce(args({{ who = "engine", tag = 3 }}))
            engineProduced = true
        end)
        task.spawn(function()
            stress.consume(args({{ who = "engine" }}))
            engineConsumed = true
        end)
        for _, p in producers do
            assert(p:await() == {per})
        end
        stress.waitFor("the engine's and the host's producers", 120, function()
            return engineProduced and t.hostDone
        end)
        q:close()
        for _, c in consumers do
            assert(c:await() == true)
        end
        stress.waitFor("the engine's consumer", 120, function() return engineConsumed end)
        "#
    )
}

fn num(n: u64) -> Message {
    Message::Number(n as f64)
}

/// The number at `key` of `t`, failing the test when it is absent.
#[track_caller]
fn get_number(t: &SharedTableRef, key: impl Into<MapKey>) -> u64 {
    let key = key.into();
    match t.get(key.clone()).unwrap() {
        Some(m) => number(&m) as u64,
        None => panic!("no value at {key:?}"),
    }
}

/// Adds one to a number (or nil, as 0) in an atomic update.
fn plus_one(n: Option<Message>) -> Option<Message> {
    Some(Message::Number(n.as_ref().map_or(0.0, number) + 1.0))
}

/// The host's producer: what the Luau producers do, through the Rust handles.
fn host_produce(queue: &SharedQueueRef, t: &SharedTableRef, per: u64) {
    let counters = t.table_at("counters").unwrap();
    let mine = t.table_at("nested").unwrap().table_at("host").unwrap();
    for i in 1..=per {
        let mut value = num(4 * SCALE + i);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match queue.push(value) {
                Ok(()) => break,
                // Retries while full, and only then, for at most 10 s.
                Err(refused) if refused.kind == PushErrorKind::Full => {
                    assert!(Instant::now() < deadline, "host push: {refused} for 10 s");
                    value = refused.into_inner();
                    thread::yield_now();
                }
                Err(other) => panic!("host push: {other}"),
            }
        }
        t.atomic("total", plus_one).unwrap();
        counters.atomic("host", plus_one).unwrap();
        t.set(format!("k_host_{}", i % KEYS), num(i)).unwrap();
        let hits = get_number(&mine, "hits");
        mine.set("hits", num(hits + 1)).unwrap();
        mine.set("last", num(i)).unwrap();
    }
    t.set("hostDone", Message::Boolean(true)).unwrap();
}

/// The host's consumer: pops, blocking this thread, until the queue is closed and drained.
/// Answers its count and sum per producer tag.
fn host_consume(queue: &SharedQueueRef, t: &SharedTableRef) -> BTreeMap<u64, (u64, u64)> {
    let mut tally = BTreeMap::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        assert!(
            Instant::now() < deadline,
            "the host consumer never saw the close"
        );
        match queue.pop_blocking(Duration::from_millis(50)) {
            Ok(Some(m)) => {
                let v = number(&m) as u64;
                let entry: &mut (u64, u64) = tally.entry(v / SCALE).or_default();
                entry.0 += 1;
                entry.1 += v;
                t.atomic("popped", plus_one).unwrap();
            }
            Ok(None) => {} // nothing within the timeout: ask again
            Err(PopError::Closed) => return tally,
            Err(other) => panic!("host pop: {other}"),
        }
    }
}

fn run(per: u64) {
    let tree = Tree::new(&[("stress.luau", STRESS), PUSH_RETRYING]);
    let pool = Pool::new(2);
    let domain = tree.domain(&pool);
    let store = domain.shared();
    let queue = store.queue("stress.q", 32).unwrap();
    let t = store.table("stress.t").unwrap();
    // The shape every writer relies on, made before any of them starts.
    t.set("total", num(0)).unwrap();
    t.set("popped", num(0)).unwrap();
    t.set("counters", Message::Map(Vec::new())).unwrap();
    let nested = PRODUCERS
        .iter()
        .map(|&who| {
            (
                MapKey::from(who),
                Message::Map(vec![(MapKey::from("hits"), num(0))]),
            )
        })
        .collect();
    t.set("nested", Message::Map(nested)).unwrap();

    let start = Arc::new(Barrier::new(3));
    let producer = {
        let (queue, t, start) = (queue.clone(), t.clone(), start.clone());
        thread::spawn(move || {
            start.wait();
            host_produce(&queue, &t, per);
        })
    };
    let consumer = {
        let (queue, t, start) = (queue.clone(), t.clone(), start.clone());
        thread::spawn(move || {
            start.wait();
            host_consume(&queue, &t)
        })
    };
    start.wait();
    domain.exec(&engine_script(per)).unwrap();
    domain.run_until_idle().unwrap();
    producer.join().unwrap();
    let host_tally = consumer.join().unwrap();
    assert!(domain.take_reports().is_empty());

    // The queue: closed, drained, and every value popped exactly once.
    assert!(queue.is_closed() && queue.is_empty());
    assert!(matches!(queue.try_pop(), Err(PopError::Closed)));
    for (index, who) in PRODUCERS.iter().enumerate() {
        let tag = index as u64 + 1;
        let (mut count, mut sum) = host_tally.get(&tag).copied().unwrap_or_default();
        for consumer in LUAU_CONSUMERS {
            if let Some(n) = t.get(format!("popped_{consumer}_{tag}")).unwrap() {
                count += number(&n) as u64;
                sum += get_number(&t, format!("sum_{consumer}_{tag}"));
            }
        }
        assert_eq!(count, per, "values of {who} popped");
        assert_eq!(
            sum,
            tag * SCALE * per + per * (per + 1) / 2,
            "sum of the values of {who} popped"
        );
    }

    // The atomic counters: exact, though every writer bumped `total` and `popped` at once.
    let writers = PRODUCERS.len() as u64;
    assert_eq!(get_number(&t, "total"), writers * per);
    assert_eq!(get_number(&t, "popped"), writers * per);
    let counters = t.table_at("counters").unwrap();
    for who in PRODUCERS {
        assert_eq!(get_number(&counters, who), per, "counter of {who}");
    }

    // The plain keys and the nested tables: each holds the last value its one writer wrote.
    for who in PRODUCERS {
        for slot in 0..KEYS {
            let last = (1..=per).rev().find(|i| i % KEYS == slot);
            let got = t.get(format!("k_{who}_{slot}")).unwrap();
            assert_eq!(got.map(|m| number(&m) as u64), last, "k_{who}_{slot}");
        }
        let mine = t.table_at("nested").unwrap().table_at(who).unwrap();
        assert_eq!(get_number(&mine, "hits"), per, "hits of {who}");
        assert_eq!(get_number(&mine, "last"), per, "last of {who}");
    }
}

#[test]
fn two_workers_the_engine_and_the_host_hammer_one_table_and_one_queue() {
    run(2_000);
}

#[test]
#[ignore = "large; run with --ignored (CI does, in release: .ci/run)"]
fn two_workers_the_engine_and_the_host_hammer_one_table_and_one_queue_at_scale() {
    run(20_000);
}
