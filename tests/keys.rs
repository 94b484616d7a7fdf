//! Key-bound items (`opts.key`): one VM per key, one item at a time in dispatch order, `fresh`,
//! supersede, release and its watchers, own-key awaits, the key bound, and every bad input.

use std::time::Duration;

use skein::stats::WorkerStats;
use skein::{Message, Pool};

use crate::support::{assert_contains, field, list, number, refusal, text, wait_until, Tree};

const KEYED: &str = r#"
local M = {}
-- Per key (or "" for items without one): this VM's list and how many of its items run now.
local lists = {}
local running = {}
local released = {}
jobs.onRelease(function(key) table.insert(released, key) end)

-- Appends x to this VM's list for the item's key, yielding in the middle so two items of a key
-- running at once would show. Items of other keys bound here may run between its runs.
function M.append(x)
    local c = jobs.context()
    local k = c.key or ""
    lists[k] = lists[k] or {}
    running[k] = (running[k] or 0) + 1
    assert(running[k] == 1, "two items of one key ran at once")
    task.wait(0.002) -- the behaviour under test: a yield inside the item, where another could run
    table.insert(lists[k], x)
    running[k] -= 1
    return { list = table.concat(lists[k], ","), worker = c.worker, fresh = c.fresh, key = c.key }
end

-- Holds its key's turn until the engine pushes to the shared queue "gate".
function M.slow(x)
    jobs.shared.queue("gate", { capacity = 16 }):pop()
    return x
end

function M.released() return table.concat(released, ",") end

function M.awaitOwnKey()
    local key = jobs.context().key
    local p = jobs.dispatch("./keyed", "append", "after", { key = key })
    local ok, err = pcall(function() return p:await() end)
    assert(not ok, "the await should be refused")
    return tostring(err)
end

function M.release(key) return jobs.release(key) end

function M.fail() error("keyed item failed on purpose") end
function M.spin() while true do end end

-- Dispatches `n` items to each of `keys` keys from this worker, interleaved, and answers each
-- key's final list.
function M.fanOut(spec)
    local ps = {}
    for i = 1, spec.n do
        for k = 1, spec.keys do
            table.insert(ps, jobs.dispatch("./keyed", "append", i, { key = spec.prefix .. k }))
        end
    end
    local lists = {}
    for _, p in ps do
        local r = p:await()
        lists[r.key] = r.list
    end
    return lists
end
return M
"#;

fn setup(workers: usize) -> (Tree, Pool) {
    (Tree::new(&[("keyed.luau", KEYED)]), Pool::new(workers))
}

#[test]
fn items_of_a_key_run_in_order_one_at_a_time_in_one_vm_that_keeps_its_state() {
    let (tree, pool) = setup(2);
    let domain = tree.domain(&pool);
    let out = domain
        .eval(
            r#"
            local ps = {}
            for i = 1, 20 do ps[i] = jobs.dispatch("./keyed", "append", i, { key = "k" }) end
            local out = {}
            for i, p in ps do out[i] = p:await() end
            return out
        "#,
        )
        .unwrap();
    let results = list(&out);
    assert_eq!(results.len(), 20);
    let worker = number(field(&results[0], "worker"));
    for (i, r) in results.iter().enumerate() {
        // Each item saw every earlier item's append: one VM, dispatch order.
        let expected: Vec<String> = (1..=i + 1).map(|n| n.to_string()).collect();
        assert_eq!(text(field(r, "list")), expected.join(","));
        // The key waits for its VM even though the other worker is idle.
        assert_eq!(number(field(r, "worker")), worker, "item {}", i + 1);
        assert_eq!(text(field(r, "key")), "k");
    }
    let stats = pool.stats();
    assert_eq!(stats.iter().map(|s| s.keys_held).sum::<usize>(), 1);
    assert_eq!(stats[worker as usize].keys_held, 1);
    assert_eq!(stats.iter().map(|s| s.keyed_items).sum::<u64>(), 20);
    // The last item waited for the 19 before it, each of which waits 2 ms.
    let longest = stats.iter().map(|s| s.key_wait_max).max().unwrap();
    assert!(longest >= Duration::from_millis(19 * 2), "{stats:?}");
    assert!(stats.iter().map(|s| s.key_wait_total).sum::<Duration>() >= longest);
}

#[test]
fn stats_list_each_workers_keys_with_their_waits_and_a_script_sees_only_its_domains_keys() {
    let (tree, pool) = setup(2);
    let domain = tree.domain(&pool);
    let other = tree.domain(&pool);
    domain
        .eval(
            r#"
            local ps = {}
            for i = 1, 10 do ps[i] = jobs.dispatch("./keyed", "append", i, { key = "k" }) end
            for _, p in ps do p:await() end
        "#,
        )
        .unwrap();
    // An item's turn ends just after its reply: wait for the last one to be counted.
    let counted = || {
        let rows = pool.stats();
        rows.iter()
            .flat_map(|r| r.keys.iter())
            .map(|k| k.items)
            .sum::<u64>()
    };
    assert!(wait_until(Duration::from_secs(10), || counted() == 10));
    let rows = pool.stats();
    let row = rows
        .iter()
        .find(|r| r.keys_held == 1)
        .expect("the bound worker");
    let [held] = &row.keys[..] else {
        panic!("one key listed: {rows:?}")
    };
    assert_eq!(held.key, "k");
    // The last item waited for the 9 before it, each of which waits 2 ms.
    assert!(held.wait_max >= Duration::from_millis(9 * 2), "{held:?}");
    assert!(held.wait_total >= held.wait_max);
    assert_eq!(held.wait_max, row.key_wait_max);
    let seen = r#"
        local seen = {}
        for _, row in jobs.stats() do
            for _, k in row.keys do
                table.insert(seen, k.key .. ":" .. k.items .. ":" .. tostring(k.wait_max_ms >= 18))
            end
        end
        return table.concat(seen, ",")
    "#;
    assert_eq!(text(&domain.eval(seen).unwrap()), "k:10:true");
    assert_eq!(
        text(&other.eval(seen).unwrap()),
        "",
        "another domain's keys stay hidden"
    );
}

#[test]
fn stats_list_at_most_keys_listed_keys_per_worker() {
    let (tree, pool) = setup(1);
    let domain = tree.domain(&pool);
    let listed = WorkerStats::KEYS_LISTED;
    assert_eq!(listed, 64);
    let bind = |n: usize| {
        domain
            .eval(&format!(
                r#"
                for i = 1, {n} do
                    jobs.dispatch("./keyed", "append", i, {{ key = "b" .. i }}):await()
                end
            "#
            ))
            .unwrap();
    };
    bind(listed);
    assert_eq!(pool.stats()[0].keys_held, listed);
    assert_eq!(
        pool.stats()[0].keys.len(),
        listed,
        "at the bound: every key"
    );
    bind(listed + 1);
    assert_eq!(pool.stats()[0].keys_held, listed + 1);
    assert_eq!(pool.stats()[0].keys.len(), listed, "one past: the bound");
    let luau = domain.eval("return #jobs.stats()[1].keys").unwrap();
    assert_eq!(number(&luau), listed as f64);
}

#[test]
fn two_keys_spread_over_the_workers() {
    let (tree, pool) = setup(2);
    let domain = tree.domain(&pool);
    let out = domain
        .eval(
            r#"
            local a = jobs.dispatch("./keyed", "append", 1, { key = "a" }):await()
            local b = jobs.dispatch("./keyed", "append", 1, { key = "b" }):await()
            return { a.worker, b.worker }
        "#,
        )
        .unwrap();
    let workers = list(&out);
    assert_ne!(number(&workers[0]), number(&workers[1]));
    assert_eq!(
        pool.stats().iter().map(|s| s.keys_held).collect::<Vec<_>>(),
        [1, 1]
    );
}

#[test]
fn fresh_is_true_for_the_first_item_then_false_and_true_again_after_release() {
    let (tree, pool) = setup(1);
    let domain = tree.domain(&pool);
    let out = domain
        .eval(
            r#"
            local function fresh() return jobs.dispatch("./keyed", "append", 0, { key = "k" }):await().fresh end
            local a, b = fresh(), fresh()
            local released = jobs.release("k")
            local c = fresh()
            local seen = jobs.dispatch("./keyed", "released"):await()
            return { a, b, released, c, seen }
        "#,
        )
        .unwrap();
    let v = list(&out);
    assert_eq!(v[0], Message::Boolean(true));
    assert_eq!(v[1], Message::Boolean(false));
    assert_eq!(v[2], Message::Boolean(true));
    assert_eq!(
        v[3],
        Message::Boolean(true),
        "fresh again after the release"
    );
    // The watcher ran once, with the key, in the VM that held it.
    assert_eq!(text(&v[4]), "k");
}

#[test]
fn context_outside_a_keyed_item_has_no_key() {
    let (tree, pool) = setup(1);
    let domain = tree.domain(&pool);
    let out = domain
        .eval(
            r#"
            local r = jobs.dispatch("./keyed", "append", 1):await()
            return { r.key == nil, r.fresh, jobs.context() == nil }
        "#,
        )
        .unwrap();
    assert_eq!(
        list(&out),
        [
            Message::Boolean(true),
            Message::Boolean(false),
            Message::Boolean(true)
        ]
    );
}

#[test]
fn release_answers_whether_the_pool_held_the_key() {
    let (tree, pool) = setup(2);
    let domain = tree.domain(&pool);
    let out = domain
        .eval(
            r#"
            local gate = jobs.shared.queue("gate", { capacity = 16 })
            local never = jobs.release("never-used")
            local p = jobs.dispatch("./keyed", "slow", 1, { key = "busy" })
            local whileRunning = jobs.release("busy")
            -- Only a release is pending for the key now: nothing more to release.
            local again = jobs.release("busy")
            gate:push(true)
            p:await()
            local afterward = jobs.release("busy")
            return { never, whileRunning, again, afterward, jobs.dispatch("./keyed", "released", nil, { key = "other" }):await() }
        "#,
        )
        .unwrap();
    let v = list(&out);
    assert_eq!(
        &v[..4],
        [
            Message::Boolean(false),
            Message::Boolean(true),
            Message::Boolean(false),
            Message::Boolean(false)
        ]
    );
    // The release of "busy" reaches its worker as a message after `p` settled: the stats row
    // catches up a moment later. Only "other" stays held.
    assert!(
        wait_until(Duration::from_secs(10), || {
            pool.stats().iter().map(|s| s.keys_held).sum::<usize>() == 1
        }),
        "keys held: {:?}",
        pool.stats()
    );
}

#[test]
fn release_runs_after_the_items_dispatched_before_it_and_watchers_run_once() {
    let (tree, pool) = setup(1);
    let domain = tree.domain(&pool);
    let out = domain
        .eval(
            r#"
            local ps = {}
            for i = 1, 3 do ps[i] = jobs.dispatch("./keyed", "append", i, { key = "r" }) end
            assert(jobs.release("r"))
            local after = jobs.dispatch("./keyed", "append", 4, { key = "r" })
            for _, p in ps do p:await() end
            local a = after:await()
            return { a.list, a.fresh, jobs.dispatch("./keyed", "released"):await() }
        "#,
        )
        .unwrap();
    let v = list(&out);
    // The item after the release ran in a new binding: same VM (one worker), list kept, fresh.
    assert_eq!(text(&v[0]), "1,2,3,4");
    assert_eq!(v[1], Message::Boolean(true));
    assert_eq!(text(&v[2]), "r");
}

#[test]
fn release_works_from_a_worker() {
    let (tree, pool) = setup(2);
    let domain = tree.domain(&pool);
    let out = domain
        .eval(
            r#"
            jobs.dispatch("./keyed", "append", 1, { key = "w" }):await()
            local first = jobs.dispatch("./keyed", "release", "w"):await()
            local second = jobs.dispatch("./keyed", "release", "w"):await()
            return { first, second }
        "#,
        )
        .unwrap();
    assert_eq!(
        list(&out),
        [Message::Boolean(true), Message::Boolean(false)]
    );
    // The release reaches the bound worker's inbox on its own and the row drops the key when
    // that worker takes it, which may be after the eval returned (failed once under load).
    let held = || pool.stats().iter().map(|s| s.keys_held).sum::<usize>();
    assert!(
        wait_until(Duration::from_secs(10), || held() == 0),
        "keys held {}",
        held()
    );
}

#[test]
fn awaiting_an_item_of_the_own_key_is_refused_and_the_item_runs_after() {
    let (tree, pool) = setup(2);
    let domain = tree.domain(&pool);
    let out = domain
        .eval(
            r#"
            local err = jobs.dispatch("./keyed", "awaitOwnKey", nil, { key = "self" }):await()
            local later = jobs.dispatch("./keyed", "append", "last", { key = "self" }):await()
            return { err, later.list }
        "#,
        )
        .unwrap();
    let v = list(&out);
    assert_contains(
        &text(&v[0]),
        "task.await: this item runs as key 'self' and awaits an item of the same key",
    );
    // The item it dispatched to its own key ran after it, before the next one.
    assert_eq!(text(&v[1]), "after,last");
}

#[test]
fn supersede_rejects_queued_items_naming_the_superseding_one_and_leaves_the_running_one() {
    let (tree, pool) = setup(2);
    let domain = tree.domain(&pool);
    let out = domain
        .eval(
            r#"
            local gate = jobs.shared.queue("gate", { capacity = 16 })
            local first = jobs.dispatch("./keyed", "slow", "first", { key = "s", name = "first" })
            local q1 = jobs.dispatch("./keyed", "slow", "q1", { key = "s", name = "q1" })
            local q2 = jobs.dispatch("./keyed", "slow", "q2", { key = "s", name = "q2" })
            local latest = jobs.dispatch("./keyed", "slow", "latest", { key = "s", name = "latest", supersede = true })
            -- "first" holds the key's turn until now; enough for every item, should one not be
            -- superseded.
            for _ = 1, 4 do gate:push(true) end
            local ok1, e1 = pcall(function() return q1:await() end)
            local ok2, e2 = pcall(function() return q2:await() end)
            return { first:await(), tostring(ok1), tostring(e1), tostring(ok2), tostring(e2), latest:await(), q1:status() }
        "#,
        )
        .unwrap();
    let v = list(&out);
    assert_eq!(text(&v[0]), "first");
    assert_eq!(text(&v[1]), "false");
    assert_contains(
        &text(&v[2]),
        "job 'q1' was refused unrun: superseded by job 'latest'",
    );
    assert_eq!(text(&v[3]), "false");
    assert_contains(
        &text(&v[4]),
        "job 'q2' was refused unrun: superseded by job 'latest'",
    );
    assert_eq!(text(&v[5]), "latest");
    assert_eq!(text(&v[6]), "rejected");
}

#[test]
fn bad_keys_and_supersede_are_refused_at_the_call() {
    let (tree, pool) = setup(1);
    let domain = tree.domain(&pool);
    let cases = [
        (
            r#"jobs.dispatch("./keyed", "append", 1, { key = "" })"#,
            "jobs.dispatch: opts.key must be a string of 1 to 256 bytes, got a string of 0 bytes",
        ),
        (
            r#"jobs.dispatch("./keyed", "append", 1, { key = string.rep("k", 257) })"#,
            "jobs.dispatch: opts.key must be a string of 1 to 256 bytes, got a string of 257 bytes",
        ),
        (
            r#"jobs.dispatch("./keyed", "append", 1, { key = 5 })"#,
            "jobs.dispatch: opts.key must be a string of 1 to 256 bytes, got a number",
        ),
        (
            r#"jobs.dispatch("./keyed", "append", 1, { key = {} })"#,
            "jobs.dispatch: opts.key must be a string of 1 to 256 bytes, got a table",
        ),
        (
            r#"jobs.dispatch("./keyed", "append", 1, { supersede = true })"#,
            "jobs.dispatch: opts.supersede needs opts.key: only the items of a key can be superseded",
        ),
        (
            r#"jobs.dispatch("./keyed", "append", 1, { key = "k", supersede = "yes" })"#,
            "jobs.dispatch: opts.supersede must be a boolean, got a string",
        ),
        (
            r#"jobs.dispatch("./keyed", "append", 1, { keys = "k" })"#,
            "jobs.dispatch: unknown option 'keys' in opts: expected deadline, name, key or supersede",
        ),
        (
            r#"jobs.release("")"#,
            "jobs.release: key must be a string of 1 to 256 bytes, got a string of 0 bytes",
        ),
        (
            r#"jobs.release(nil)"#,
            "jobs.release: key must be a string of 1 to 256 bytes, got nil",
        ),
        (
            r#"jobs.onRelease("f")"#,
            "jobs.onRelease: watcher must be a function, got a string",
        ),
    ];
    for (body, expected) in cases {
        assert_contains(&refusal(&domain, body), expected);
    }
    // Nothing was queued or bound by a refused call; 256 bytes and 1 byte are fine.
    assert_eq!(pool.stats().iter().map(|s| s.keys_held).sum::<usize>(), 0);
    let v = domain
        .eval(
            r#"
            local long = jobs.dispatch("./keyed", "append", 1, { key = string.rep("k", 256) }):await()
            local short = jobs.dispatch("./keyed", "append", 2, { key = "k" }):await()
            return #long.key + #short.key
        "#,
        )
        .unwrap();
    assert_eq!(number(&v), 257.0);
}

#[test]
fn onrelease_answers_a_remover_and_the_engine_holds_watchers_it_never_calls() {
    let tree = Tree::new(&[
        ("keyed.luau", KEYED),
        (
            "removed.luau",
            r#"
            local M = {}
            local calls = 0
            local remove = jobs.onRelease(function() calls += 1 end)
            function M.touch() return true end
            function M.removeThenCount()
                remove()
                return calls
            end
            function M.calls() return calls end
            return M
            "#,
        ),
    ]);
    let pool = Pool::new(1);
    let domain = tree.domain(&pool);
    let v = domain
        .eval(
            r#"
            local engineCalls = 0
            jobs.onRelease(function() engineCalls += 1 end)
            jobs.dispatch("./removed", "touch", nil, { key = "a" }):await()
            assert(jobs.release("a"))
            local afterOne = jobs.dispatch("./removed", "removeThenCount"):await()
            jobs.dispatch("./removed", "touch", nil, { key = "a" }):await()
            assert(jobs.release("a"))
            local afterTwo = jobs.dispatch("./removed", "calls"):await()
            return { afterOne, afterTwo, engineCalls }
        "#,
        )
        .unwrap();
    assert_eq!(
        list(&v),
        [
            Message::Number(1.0),
            Message::Number(1.0),
            Message::Number(0.0)
        ]
    );
}

#[test]
fn the_pool_holds_at_most_65536_keys() {
    let (tree, pool) = setup(2);
    let domain = tree.domain(&pool);
    let v = domain
        .eval(
            r#"
            local ps = {}
            for i = 1, 65536 do
                ps[i] = jobs.dispatch("./keyed", "released", nil, { key = tostring(i) })
            end
            for _, p in ps do p:await() end
            local ok, err = pcall(jobs.dispatch, "./keyed", "released", nil, { key = "one too many" })
            -- A held key still takes items, and a released one makes room.
            jobs.dispatch("./keyed", "released", nil, { key = "65536" }):await()
            assert(jobs.release("1"))
            local room = jobs.dispatch("./keyed", "released", nil, { key = "one too many" })
            room:await()
            return { tostring(ok), tostring(err) }
        "#,
        )
        .unwrap();
    let v = list(&v);
    assert_eq!(text(&v[0]), "false");
    assert_contains(
        &text(&v[1]),
        "jobs.dispatch: opts.key: the pool holds at most 65536 keys at once",
    );
    assert_eq!(
        pool.stats().iter().map(|s| s.keys_held).sum::<usize>(),
        65_536
    );
}

#[test]
fn a_stopped_domain_s_keys_are_released_and_another_domain_s_same_key_is_its_own() {
    let (tree, pool) = setup(2);
    let first = tree.domain(&pool);
    let second = tree.domain(&pool);
    let a = first
        .eval(r#"return jobs.dispatch("./keyed", "append", "first", { key = "k" }):await().list"#)
        .unwrap();
    let b = second
        .eval(r#"return jobs.dispatch("./keyed", "append", "second", { key = "k" }):await().list"#)
        .unwrap();
    // Same key string, two domains: two lanes, two VMs' state.
    assert_eq!((text(&a), text(&b)), ("first".into(), "second".into()));
    assert_eq!(pool.stats().iter().map(|s| s.keys_held).sum::<usize>(), 2);
    drop(first);
    assert_eq!(pool.stats().iter().map(|s| s.keys_held).sum::<usize>(), 1);
}

#[test]
fn a_cancelled_failed_or_timed_out_item_hands_its_key_on() {
    let (tree, pool) = setup(2);
    let domain = tree.domain(&pool);
    let out = domain
        .eval(
            r#"
            local gate = jobs.shared.queue("gate", { capacity = 16 })
            local running = jobs.dispatch("./keyed", "slow", 1, { key = "c" })
            local queued = jobs.dispatch("./keyed", "append", "cancelled", { key = "c" })
            queued:cancel()
            local failed = jobs.dispatch("./keyed", "fail", nil, { key = "c" })
            local spun = jobs.dispatch("./keyed", "spin", nil, { key = "c", deadline = 0.05 })
            local last = jobs.dispatch("./keyed", "append", "last", { key = "c" })
            -- "running" holds the key's turn until now: the others are all queued behind it.
            gate:push(true)
            running:await()
            local ok1, e1 = pcall(function() return failed:await() end)
            local ok2, e2 = pcall(function() return spun:await() end)
            return { queued:status(), tostring(e1), tostring(e2), last:await().list }
        "#,
        )
        .unwrap();
    let v = list(&out);
    assert_eq!(text(&v[0]), "cancelled");
    assert_contains(&text(&v[1]), "keyed item failed on purpose");
    assert_contains(&text(&v[2]), "deadline");
    // The cancelled item never ran: the list holds only the last item.
    assert_eq!(text(&v[3]), "last");
}

#[test]
fn stress_many_keys_from_engine_and_workers_keep_order_per_key() {
    let (tree, pool) = setup(2);
    let domain = tree.domain(&pool);
    let out = domain
        .eval(
            r#"
            -- Two workers fan out over their own keys while the engine dispatches to its own.
            local a = jobs.dispatch("./keyed", "fanOut", { n = 15, keys = 10, prefix = "a" })
            local b = jobs.dispatch("./keyed", "fanOut", { n = 15, keys = 10, prefix = "b" })
            local ps = {}
            for i = 1, 15 do
                for k = 1, 10 do
                    table.insert(ps, jobs.dispatch("./keyed", "append", i, { key = "e" .. k }))
                end
            end
            local lists = {}
            for _, p in ps do
                local r = p:await()
                lists[r.key] = r.list
            end
            for key, l in a:await() do lists[key] = l end
            for key, l in b:await() do lists[key] = l end
            local expected = {}
            for i = 1, 15 do expected[i] = tostring(i) end
            expected = table.concat(expected, ",")
            local bad, count = {}, 0
            for key, l in lists do
                count += 1
                if l ~= expected then table.insert(bad, key .. "=" .. l) end
            end
            return { count, table.concat(bad, " ") }
        "#,
        )
        .unwrap();
    let v = list(&out);
    assert_eq!(number(&v[0]), 30.0);
    assert_eq!(
        text(&v[1]),
        "",
        "keys whose items ran out of order or in two VMs"
    );
    let stats = pool.stats();
    assert_eq!(stats.iter().map(|s| s.keys_held).sum::<usize>(), 30);
    assert_eq!(stats.iter().map(|s| s.keyed_items).sum::<u64>(), 450);
    assert!(stats.iter().map(|s| s.items_run).sum::<u64>() >= 452);
}
