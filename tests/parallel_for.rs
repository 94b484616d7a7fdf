//! `jobs.parallelFor` end to end: chunk order and bounds over counts, ranges and buffers, failure
//! naming the chunk and stopping the rest, cancel, deadlines, nested calls with every worker
//! inside a chunk, and each refusal at the call with its text.

use skein::{Message, NativeMode, Plan, Pool};

use crate::support::{assert_contains, assert_nothing_pops, number, refusal, text, Marks, Tree};

const LOOP: &str = r#"
local M = {}
-- Later chunks answer sooner, so completion order is the reverse of chunk order. A timer that
-- staggers completions, not a wait for a state: a slow machine can only shrink the stagger
-- (the results' order is what the tests assert, and it must not follow completion).
function M.bounds(c)
    task.wait((8 - c.index) * 0.01)
    return `{c.index}:{c.first}..{c.last}#{c.count}`
end
function M.sum(c)
    local s = 0
    for i = c.first, c.last do s += i * c.args.scale end
    return s
end
function M.bytes(c)
    return `{c.index}:{c.first}..{c.last}:{buffer.tostring(c.data)}`
end
function M.hasData(c) return c.data == nil end
-- Marks, parks on the shared queue "hold" until the test pushes to it, and marks again.
function M.failThird(c)
    if c.index == 3 then error("chunk three fails on purpose") end
    hostMark()
    jobs.shared.queue("hold"):pop()
    hostMark()
    return c.index
end
-- Holds the worker without yielding until a value is pushed to the shared queue `name`.
function M.spinUntil(name)
    local q = jobs.shared.queue(name)
    while q:tryPop() == nil do end
    return true
end
-- Marks and says so on the shared queue "started", parks on "hold", and marks again.
function M.markAndWait(c)
    hostMark()
    jobs.shared.queue("started"):push(c.index)
    jobs.shared.queue("hold"):pop()
    hostMark()
    return c.index
end
function M.nothing() end
function M.spinSecond(c)
    if c.index == 2 then while true do end end
    return c.index
end
function M.scribble(c)
    buffer.fill(c.data, 0, 0)
    c.args.seen = true
    return `{buffer.len(c.data)} {c.args.seen}`
end
function M.one(c) return c.count end
function M.giveFunction(c)
    if c.index == 2 then return function() end end
    return c.index
end
-- A chunk that starts a parallelFor of its own and awaits it.
function M.outer(c)
    local inner = jobs.parallelFor("./loop", "sum", { first = c.first, last = c.last }, { scale = 1 }, { chunks = 4 }):await()
    local s = 0
    for _, v in inner do s += v end
    return s
end
function M.outerOfOuter(c)
    local mid = jobs.parallelFor("./loop", "outer", { first = c.first, last = c.last }, nil, { chunks = 2 }):await()
    return mid[1] + mid[2]
end
return M
"#;

fn setup(workers: usize) -> (Tree, Pool) {
    (Tree::new(&[("loop.luau", LOOP)]), Pool::new(workers))
}

fn strings(m: &Message) -> Vec<String> {
    match m {
        Message::List(items) => items.iter().map(text).collect(),
        other => panic!("expected a list, got {other:?}"),
    }
}

fn numbers(m: &Message) -> Vec<f64> {
    match m {
        Message::List(items) => items.iter().map(number).collect(),
        other => panic!("expected a list, got {other:?}"),
    }
}

#[test]
fn results_come_in_chunk_order_with_exact_bounds_for_an_uneven_split() {
    let (tree, pool) = setup(2);
    let domain = tree.domain(&pool);
    let v = domain
        .eval(r#"return jobs.parallelFor("./loop", "bounds", 10, nil, { chunks = 3 }):await()"#)
        .unwrap();
    assert_eq!(strings(&v), ["1:1..4#4", "2:5..7#3", "3:8..10#3"]);
    let v = domain
        .eval(r#"return jobs.parallelFor("./loop", "bounds", 7, nil, { chunks = 7 }):await()"#)
        .unwrap();
    let expected: Vec<String> = (1..=7).map(|i| format!("{i}:{i}..{i}#1")).collect();
    assert_eq!(strings(&v), expected);
}

#[test]
fn a_range_keeps_its_indices_and_every_chunk_gets_the_args() {
    let (tree, pool) = setup(2);
    let domain = tree.domain(&pool);
    let v = domain
        .eval(
            r#"return jobs.parallelFor("./loop", "bounds", { first = -3, last = 3 }, nil, { chunks = 2 }):await()"#,
        )
        .unwrap();
    assert_eq!(strings(&v), ["1:-3..0#4", "2:1..3#3"]);
    let v = domain
        .eval(r#"return jobs.parallelFor("./loop", "sum", 100, { scale = 2 }, { chunks = 5 }):await()"#)
        .unwrap();
    // 1..20 sums to 210, 21..40 to 610, ...; each doubled.
    assert_eq!(numbers(&v), [420.0, 1220.0, 2020.0, 2820.0, 3620.0]);
    let v = domain
        .eval(r#"return jobs.parallelFor("./loop", "hasData", 3):await()"#)
        .unwrap();
    assert_eq!(
        v,
        Message::List(vec![Message::Boolean(true); 3]),
        "a count has no data"
    );
}

#[test]
fn default_chunks_are_four_per_worker_and_at_most_one_per_element() {
    let (tree, pool) = setup(2);
    let domain = tree.domain(&pool);
    let v = domain
        .eval(r#"return #jobs.parallelFor("./loop", "sum", 100, { scale = 1 }):await()"#)
        .unwrap();
    assert_eq!(number(&v), 8.0);
    let v = domain
        .eval(r#"return jobs.parallelFor("./loop", "sum", 3, { scale = 1 }):await()"#)
        .unwrap();
    assert_eq!(numbers(&v), [1.0, 2.0, 3.0]);
}

#[test]
fn a_buffer_is_cut_into_whole_elements_and_each_chunk_sees_only_its_slice() {
    let (tree, pool) = setup(2);
    let domain = tree.domain(&pool);
    let v = domain
        .eval(
            r#"return jobs.parallelFor("./loop", "bytes", buffer.fromstring("aabbccddee"), nil, { stride = 2, chunks = 2 }):await()"#,
        )
        .unwrap();
    assert_eq!(strings(&v), ["1:1..3:aabbcc", "2:4..5:ddee"]);
    let v = domain
        .eval(
            r#"return jobs.parallelFor("./loop", "bytes", buffer.fromstring("xyz"), nil, { chunks = 3 }):await()"#,
        )
        .unwrap();
    assert_eq!(
        strings(&v),
        ["1:1..1:x", "2:2..2:y", "3:3..3:z"],
        "stride defaults to 1"
    );
}

#[test]
fn a_chunk_that_raises_rejects_naming_it_and_stops_the_rest() {
    let marks = Marks::default();
    let tree = Tree::new(&[("loop.luau", LOOP)]);
    // One worker takes the chunks in order: 1 and 2 start and park, 3 raises.
    let pool = Pool::new(1);
    let domain = tree.domain_with(&pool, marks.plan());
    let hold = domain.shared().queue("hold", 16).unwrap();
    let v = domain
        .eval(
            r#"
            local ok, err = pcall(function()
                return jobs.parallelFor("./loop", "failThird", 8, nil, { chunks = 8 }):await()
            end)
            return `{ok} {err}`
            "#,
        )
        .unwrap();
    let message = text(&v);
    assert_contains(
        &message,
        "false job './loop:failThird' failed: chunk 3 of 8: ",
    );
    assert_contains(&message, "chunk three fails on purpose");
    assert_eq!(marks.count(), 2, "chunks 1 and 2 marked before parking");
    // Chunks 1 and 2 were stopped while parked: what would wake them stays in the queue.
    assert_nothing_pops(&hold, 2);
    // One worker takes items in order: a chunk 4 to 8 left queued would run before this one.
    let after = domain.dispatch("./loop", "nothing", Message::Nil).unwrap();
    assert_eq!(after.wait().unwrap(), Message::Nil);
    assert_eq!(
        marks.count(),
        2,
        "chunks 1 and 2 marked once and were stopped while parked; 4 to 8 never ran"
    );
}

#[test]
fn a_named_call_is_named_in_its_rejection_and_a_bad_result_names_the_chunk() {
    let (tree, pool) = setup(2);
    let domain = tree.domain(&pool);
    let message = refusal(
        &domain,
        r#"jobs.parallelFor("./loop", "giveFunction", 2, nil, { name = "tiles" }):await()"#,
    );
    assert_contains(&message, "job 'tiles' failed: chunk 2 of 2: ");
    assert_contains(&message, "a function can't cross");
}

in_both_modes!(a_chunk_past_its_deadline_rejects_naming_it);
fn a_chunk_past_its_deadline_rejects_naming_it(mode: NativeMode) {
    let (tree, pool) = setup(2);
    let domain = tree.domain_with(&pool, Plan::new().native(mode));
    let message = refusal(
        &domain,
        r#"jobs.parallelFor("./loop", "spinSecond", 2, nil, { chunks = 2, deadline = 0.1 }):await()"#,
    );
    assert_contains(
        &message,
        "chunk 2 of 2: deadline exceeded: one run took longer than 0.1 s",
    );
    // The pool serves on.
    let v = domain
        .eval(
            r#"return jobs.parallelFor("./loop", "sum", 4, { scale = 1 }, { chunks = 2 }):await()"#,
        )
        .unwrap();
    assert_eq!(numbers(&v), [3.0, 7.0]);
}

in_both_modes!(cancel_stops_every_chunk);
fn cancel_stops_every_chunk(mode: NativeMode) {
    let marks = Marks::default();
    let tree = Tree::new(&[("loop.luau", LOOP)]);
    let pool = Pool::new(2);
    let domain = tree.domain_with(&pool, marks.plan().native(mode));
    let hold = domain.shared().queue("hold", 16).unwrap();
    let _ = domain.shared().queue("started", 16).unwrap();
    let v = domain
        .eval(
            r#"
            local started = jobs.shared.queue("started")
            local p = jobs.parallelFor("./loop", "markAndWait", 4, nil, { chunks = 4 })
            -- Every chunk has started, marked and is about to park before the cancel.
            for _ = 1, 4 do started:pop() end
            local cancelled = p:cancel()
            local ok, err = pcall(function() return p:await() end)
            return `{cancelled} {ok} {p:status()} {err} {p:cancel()}`
            "#,
        )
        .unwrap();
    assert_eq!(text(&v), "true false cancelled cancelled false");
    assert_eq!(marks.count(), 4);
    assert_nothing_pops(&hold, 4);
    assert_eq!(
        marks.count(),
        4,
        "each chunk marked once before the cancel and never woke to mark again"
    );
}

#[test]
fn cancelled_queued_chunks_never_run() {
    let marks = Marks::default();
    let tree = Tree::new(&[("loop.luau", LOOP)]);
    let pool = Pool::new(1);
    let domain = tree.domain_with(&pool, marks.plan());
    let _ = domain.shared().queue("go", 1).unwrap();
    let _ = domain.shared().queue("started", 64).unwrap();
    let _ = domain.shared().queue("hold", 64).unwrap();
    // The only worker spins on an item queued first until the cancel has landed, so every chunk
    // is still queued then, however the threads are scheduled.
    let v = domain
        .eval(
            r#"
            local busy = jobs.dispatch("./loop", "spinUntil", "go")
            local p = jobs.parallelFor("./loop", "markAndWait", 50, nil, { chunks = 50 })
            p:cancel()
            jobs.shared.queue("go"):push(true)
            assert(busy:await())
            -- One worker takes items in order: a chunk left queued would run before this one.
            jobs.dispatch("./loop", "nothing"):await()
            return p:status()
            "#,
        )
        .unwrap();
    assert_eq!(text(&v), "cancelled");
    assert_eq!(marks.count(), 0, "a cancelled chunk ran");
}

#[test]
fn nested_calls_complete_with_every_worker_inside_a_chunk() {
    for workers in [1, 2] {
        let (tree, pool) = setup(workers);
        let domain = tree.domain(&pool);
        // Each outer chunk holds a worker while it awaits an inner call of four chunks.
        let v = domain
            .eval(
                r#"return jobs.parallelFor("./loop", "outer", 100, nil, { chunks = workers }):await()"#
                    .replace("workers", &workers.to_string())
                    .as_str(),
            )
            .unwrap();
        let expected: Vec<f64> = match workers {
            1 => vec![5050.0],
            _ => vec![1275.0, 3775.0],
        };
        assert_eq!(numbers(&v), expected, "{workers} workers");
    }
}

#[test]
fn three_levels_deep_on_two_workers_complete() {
    let (tree, pool) = setup(2);
    let domain = tree.domain(&pool);
    let v = domain
        .eval(r#"return jobs.parallelFor("./loop", "outerOfOuter", 400, nil, { chunks = 4 }):await()"#)
        .unwrap();
    // Chunks of 100: 1..100 sums to 5050, each next hundred adds 10000.
    assert_eq!(numbers(&v), [5050.0, 15050.0, 25050.0, 35050.0]);
}

#[test]
fn bad_input_is_refused_at_the_call_naming_the_value_and_the_rule() {
    let (tree, pool) = setup(2);
    let domain = tree.domain(&pool);
    let cases = [
        (
            r#"jobs.parallelFor("./loop", "sum", 0)"#,
            "jobs.parallelFor: over must be a count of at least 1, got 0",
        ),
        (
            r#"jobs.parallelFor("./loop", "sum", -4)"#,
            "jobs.parallelFor: over must be a count of at least 1, got -4",
        ),
        (
            r#"jobs.parallelFor("./loop", "sum", 2.5)"#,
            "jobs.parallelFor: over must be a whole number, got 2.5",
        ),
        (
            r#"jobs.parallelFor("./loop", "sum", { first = 5, last = 3 })"#,
            "jobs.parallelFor: over.first (5) is past over.last (3): a range runs from first up to last",
        ),
        (
            r#"jobs.parallelFor("./loop", "sum", { first = 1.5, last = 3 })"#,
            "jobs.parallelFor: over.first must be a whole number, got 1.5",
        ),
        (
            r#"jobs.parallelFor("./loop", "sum", { first = 1 })"#,
            "jobs.parallelFor: over.last must be a whole number, got nil",
        ),
        (
            r#"jobs.parallelFor("./loop", "bytes", buffer.create(10), nil, { stride = 4 })"#,
            "jobs.parallelFor: a buffer of 10 bytes is not a whole number of 4-byte elements (opts.stride)",
        ),
        (
            r#"jobs.parallelFor("./loop", "bytes", buffer.create(0))"#,
            "jobs.parallelFor: over is an empty buffer: there is nothing to loop over",
        ),
        (
            r#"jobs.parallelFor("./loop", "sum", 10, nil, { chunks = 0 })"#,
            "jobs.parallelFor: opts.chunks must be at least 1, got 0",
        ),
        (
            r#"jobs.parallelFor("./loop", "sum", 10, nil, { chunks = 11 })"#,
            "jobs.parallelFor: opts.chunks of 11 is more than the 10 elements: a chunk holds at least one",
        ),
        (
            r#"jobs.parallelFor("./loop", "sum", 10, nil, { chunk = 2 })"#,
            "jobs.parallelFor: unknown option 'chunk' in opts: expected deadline, name, chunks or stride",
        ),
        (
            r#"jobs.parallelFor("./loop", "sum", 10, nil, { stride = 4 })"#,
            "jobs.parallelFor: opts.stride (4) sizes the elements of a buffer, and over is not one",
        ),
        (
            r#"jobs.parallelFor("./loop", "bytes", buffer.create(4), nil, { stride = 0 })"#,
            "jobs.parallelFor: opts.stride must be at least 1 byte, got 0",
        ),
        (
            r#"jobs.parallelFor("./loop", "sum", "ten")"#,
            "jobs.parallelFor: over must be a count, a { first, last } range or a buffer, got a string",
        ),
        (
            r#"jobs.parallelFor("./loop", "sum", 10, nil, { deadline = 0 })"#,
            "jobs.parallelFor: opts.deadline must be a number of seconds above 0, got 0",
        ),
        (
            r#"jobs.parallelFor("./loop", "sum", 10, { f = print })"#,
            "jobs.parallelFor: args.f: a function can't cross",
        ),
    ];
    for (call, expected) in cases {
        assert_contains(&refusal(&domain, call), expected);
    }
}

#[test]
fn a_huge_count_is_cut_without_walking_it() {
    let (tree, pool) = setup(2);
    let domain = tree.domain(&pool);
    let v = domain
        .eval(
            r#"
            local r = jobs.parallelFor("./loop", "bounds", 2^53, nil, { chunks = 2 }):await()
            return r[2]
            "#,
        )
        .unwrap();
    assert_eq!(
        text(&v),
        "2:4503599627370497..9007199254740992#4503599627370496"
    );
    let message = refusal(&domain, r#"jobs.parallelFor("./loop", "sum", 2^53 + 2)"#);
    assert_contains(&message, "past ±2^53");
}

#[test]
fn a_chunk_writes_only_its_own_copies_of_data_and_args() {
    let (tree, pool) = setup(2);
    let domain = tree.domain(&pool);
    let v = domain
        .eval(
            r#"
            local b = buffer.fromstring("abcdefgh")
            local args = { seen = false }
            local r = jobs.parallelFor("./loop", "scribble", b, args, { stride = 4, chunks = 2 }):await()
            return `{r[1]}|{r[2]}|{buffer.tostring(b)}|{args.seen}`
            "#,
        )
        .unwrap();
    assert_eq!(text(&v), "4 true|4 true|abcdefgh|false");
}

#[test]
fn thousands_of_chunks_from_the_engine_and_from_a_worker_all_gather() {
    let (tree, pool) = setup(2);
    let domain = tree.domain(&pool);
    let v = domain
        .eval(
            r#"
            local r = jobs.parallelFor("./loop", "one", 100000, nil, { chunks = 4096 }):await()
            local total = 0
            for _, n in r do total += n end
            return `{#r} {total}`
            "#,
        )
        .unwrap();
    assert_eq!(text(&v), "4096 100000");
    // From a worker: each of two outer chunks gathers an inner call of four chunks, 50 times.
    let v = domain
        .eval(
            r#"
            local total = 0
            for _ = 1, 50 do
                for _, s in jobs.parallelFor("./loop", "outer", 8, nil, { chunks = 2 }):await() do
                    total += s
                end
            end
            return total
            "#,
        )
        .unwrap();
    assert_eq!(number(&v), 50.0 * 36.0);
}

#[test]
fn an_entry_that_is_not_a_function_rejects_naming_a_chunk() {
    let (tree, pool) = setup(2);
    let domain = tree.domain(&pool);
    let message = refusal(
        &domain,
        r#"jobs.parallelFor("./loop", "nope", 4, nil, { chunks = 4 }):await()"#,
    );
    assert_contains(&message, "job './loop:nope' failed: chunk ");
    assert_contains(&message, " of 4: entry 'nope' of module ");
    assert_contains(&message, "is not a function (it is nil)");
}
