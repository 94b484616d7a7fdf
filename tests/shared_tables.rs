//! Shared tables end to end: the engine VM, workers and the host reading and writing one table;
//! the table syntax and every wrapped base and `table` function; atomic counts; nested handles
//! and their detaching; iteration at one version; each refusal with its text and nothing
//! changed after it; the end of the domain; and a stress run. `jobs.shared.add` and
//! `SharedTableRef::add`: types, refusals, bounds and lost-update stress. Walks and snapshots
//! racing writes from other threads, each checked against what one moment of the table looks
//! like.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Barrier;
use std::thread;

use skein::message::Limits;
use skein::shared::{SharedTableErrorKind, SharedTableRef};
use skein::{DomainSpec, MapKey, Message, Pool, ScriptDomain};

use crate::support::{assert_contains, number, refusal, text, Tree};

const JOBS: &str = r#"
local M = {}
function M.count(args)
    local t = jobs.shared.table(args.name)
    for _ = 1, args.times do
        jobs.shared.atomic(t, "n", function(n) return (n or 0) + 1 end)
    end
    return true
end
function M.mixed(args)
    local t = jobs.shared.table("stress")
    for i = 1, args.times do
        jobs.shared.atomic(t, "total", function(n) return (n or 0) + 1 end)
        t[args.who .. i] = i
        t.last = args.who
    end
    return true
end
function M.nested(args)
    local t = jobs.shared.table("nest")
    t.player.hp -= args.hit
    return t.player.hp
end
function M.read(args)
    -- A handle can't cross a boundary: hand back a plain copy.
    return jobs.shared.snapshot(jobs.shared.table(args.name))[args.key]
end
function M.addAndAtomic(args)
    local t = jobs.shared.table(args.name)
    local one = integer.create(1)
    for _ = 1, args.times do
        jobs.shared.add(t, "n", 1)
        jobs.shared.add(t, "i", one)
        jobs.shared.atomic(t, "m", function(m) return m + 1 end)
    end
    jobs.shared.add(t, "done", 1)
    return true
end
function M.addNested(args)
    local t = jobs.shared.table(args.name)
    return jobs.shared.add(t.inner, "n", args.by)
end
function M.atomicChunk(c)
    local t = jobs.shared.table("chunks")
    for _ = c.first, c.last do
        jobs.shared.atomic(t, "n", function(n) return (n or 0) + 1 end)
    end
    return c.count
end
return M
"#;

fn setup() -> (Tree, Pool, ScriptDomain) {
    let tree = Tree::new(&[("jobs.luau", JOBS), ("races.luau", RACES)]);
    let pool = Pool::new(2);
    let domain = tree.domain(&pool);
    (tree, pool, domain)
}

fn eval(domain: &ScriptDomain, source: &str) -> Message {
    domain
        .eval(source)
        .unwrap_or_else(|e| panic!("{e}\n---\n{source}"))
}

/// `jobs.shared` is built on a VM's first read of it, in the engine VM and in a worker's, and is
/// a plain field of `jobs` from then on; the `jobs` table's metatable, which builds it, is locked.
/// (A chunk that names `jobs.shared.<field>` builds it as the chunk loads: Luau resolves such
/// paths then. These chunks read it by `jobs["shared"]`, which Luau reads when it runs.)
#[test]
fn jobs_shared_is_built_on_first_read_and_a_plain_field_after() {
    let tree = Tree::new(&[("lazy.luau", LAZY)]);
    let pool = Pool::new(2);
    let domain = tree.domain(&pool);
    assert_eq!(
        eval(&domain, r#"return rawget(jobs, "shared") == nil"#),
        Message::Boolean(true)
    );
    assert_eq!(
        eval(
            &domain,
            r#"local s = jobs["shared"]; return s ~= nil and rawget(jobs, "shared") == s"#
        ),
        Message::Boolean(true)
    );
    assert_eq!(
        eval(
            &domain,
            "local ok = pcall(setmetatable, jobs, {}) return { getmetatable(jobs), ok }"
        ),
        Message::List(vec![
            Message::String(b"the jobs library's metatable is locked".to_vec().into()),
            Message::Boolean(false),
        ])
    );
    // A worker VM builds its own on its first read.
    assert_eq!(
        eval(
            &domain,
            r#"return jobs.dispatch("./lazy", "probe"):await()"#
        ),
        Message::Boolean(true)
    );
    // A key that is not `shared` is nil, as on any table.
    assert_eq!(eval(&domain, r#"return jobs["nothing"]"#), Message::Nil);
}

/// A module that reads `jobs.shared` only at run time.
const LAZY: &str = r#"
local M = {}
function M.probe()
    local before = rawget(jobs, "shared") == nil
    local s = jobs["shared"]
    local t = s.table("lazy")
    t.n = 1
    return before and rawget(jobs, "shared") == s and t.n == 1
end
return M
"#;

#[test]
fn the_syntax_of_an_ordinary_table() {
    let (_tree, _pool, domain) = setup();
    let out = eval(
        &domain,
        r#"
        local t = jobs.shared.table("plain")
        t.x = 1
        t.player = { hp = 10, name = "ann" }
        t.player.hp -= 5
        t[1] = "a"; t[2] = "b"; t[3] = "c"
        assert(#t == 3)
        assert(t.player.hp == 5 and t.player.name == "ann")
        assert(typeof(t) == "SharedTable" and type(t) == "userdata")
        assert(t.missing == nil and t[true] == nil and t[nil] == nil)
        assert(jobs.shared.table("plain") == t, "one name, one handle")
        assert(t.player == t.player, "nested handles compare equal")
        assert(tostring(t.player) == "SharedTable('plain'.player)")
        t.x = nil
        assert(t.x == nil)
        return true
    "#,
    );
    assert_eq!(out, Message::Boolean(true));
}

#[test]
fn values_read_back_as_the_type_they_were_written_with() {
    let (_tree, _pool, domain) = setup();
    let out = eval(
        &domain,
        r#"
        local t = jobs.shared.table("types")
        t.b = false
        t.n = 1.5
        t.w = 3
        t.s = "text\0with nul"
        t.v = vector.create(1, 2, 3)
        t.buf = buffer.fromstring("xyz")
        t.nested = { list = { 1, 2, 3 }, map = { a = true } }
        -- false is stored as false, not dropped as nil would be
        assert(type(t.b) == "boolean" and t.b == false, `b: {type(t.b)}`)
        assert(type(t.n) == "number" and type(t.w) == "number", `n: {type(t.n)}, w: {type(t.w)}`)
        assert(typeof(t.v) == "vector" and t.v.y == 2)
        assert(typeof(t.buf) == "buffer" and buffer.tostring(t.buf) == "xyz")
        assert(t.s == "text\0with nul")
        assert(t.w == 3 and t.n == 1.5)
        return jobs.shared.snapshot(t)
    "#,
    );
    let Message::Map(entries) = out else {
        panic!("{out:?}")
    };
    let get = |k: &str| {
        entries
            .iter()
            .find(|(key, _)| *key == MapKey::from(k))
            .map(|(_, v)| v.clone())
            .unwrap()
    };
    assert_eq!(get("b"), Message::Boolean(false));
    assert_eq!(get("n"), Message::Number(1.5));
    assert_eq!(get("v"), Message::Vector([1.0, 2.0, 3.0]));
    assert_eq!(get("buf"), Message::Buffer("xyz".into()));
    assert_eq!(
        get("nested"),
        Message::Map(vec![
            (
                MapKey::from("list"),
                Message::List(vec![
                    Message::Number(1.0),
                    Message::Number(2.0),
                    Message::Number(3.0)
                ])
            ),
            (
                MapKey::from("map"),
                Message::Map(vec![(MapKey::from("a"), Message::Boolean(true))])
            ),
        ])
    );
}

#[test]
fn integers_stay_integers_both_ways() {
    let (_tree, _pool, domain) = setup();
    let t = domain.shared().table("ints").unwrap();
    t.set("big", Message::Integer(i64::MAX)).unwrap();
    let out = eval(
        &domain,
        r#"
        local t = jobs.shared.table("ints")
        t.copy = t.big
        return t.big
    "#,
    );
    assert_eq!(out, Message::Integer(i64::MAX));
    assert_eq!(t.get("copy").unwrap(), Some(Message::Integer(i64::MAX)));
}

#[test]
fn a_table_written_in_is_copied() {
    let (_tree, _pool, domain) = setup();
    let out = eval(
        &domain,
        r#"
        local t = jobs.shared.table("copies")
        local local_t = { a = 1 }
        t.c = local_t
        local_t.a = 2
        t.d = t.c          -- a handle assigned in copies its current contents
        t.c.a = 3
        return `{t.c.a} {t.d.a}`
    "#,
    );
    assert_eq!(text(&out), "3 1");
}

#[test]
fn iteration_walks_the_version_it_started_on() {
    let (_tree, _pool, domain) = setup();
    let out = eval(
        &domain,
        r#"
        local t = jobs.shared.table("walk")
        for i = 1, 5 do t[i] = i * 10 end
        t.name = "w"
        local seen = {}
        for k, v in t do
            t[k] = nil            -- removals during the loop don't change what it walks
            t.added = true
            table.insert(seen, `{k}={v}`)
        end
        local pairsSeen = 0
        for k, v in pairs(t) do pairsSeen += 1 end
        local ipairsSeen = 0
        t[1] = "x"; t[2] = "y"
        for i, v in ipairs(t) do ipairsSeen += 1 end
        return `{table.concat(seen, ",")} | {pairsSeen} {ipairsSeen}`
    "#,
    );
    assert_eq!(text(&out), "1=10,2=20,3=30,4=40,5=50,name=w | 1 2");
}

#[test]
fn next_rawget_rawset_rawlen() {
    let (_tree, _pool, domain) = setup();
    let out = eval(
        &domain,
        r#"
        local t = jobs.shared.table("raw")
        assert(rawset(t, "a", 1) == t)
        rawset(t, 1, "one")
        assert(rawget(t, "a") == 1 and rawget(t, 1) == "one")
        assert(rawlen(t) == 1)
        local k, v = next(t)
        local k2, v2 = next(t, k)
        local k3 = next(t, k2)
        assert(next({}) == nil and rawget({ 5 }, 1) == 5, "plain tables still work")
        return `{k}={v} {k2}={v2} {k3}`
    "#,
    );
    assert_eq!(text(&out), "1=one a=1 nil");
}

#[test]
fn every_table_function_accepts_a_shared_table() {
    let (_tree, _pool, domain) = setup();
    let out = eval(
        &domain,
        r##"
        local t = jobs.shared.table("lib")
        table.insert(t, "b")
        table.insert(t, "d")
        table.insert(t, 1, "a")
        table.insert(t, 3, "c")
        assert(table.concat(t, ",") == "a,b,c,d")
        assert(table.concat(t, "-", 2, 3) == "b-c")
        assert(table.remove(t) == "d")
        assert(table.remove(t, 1) == "a")
        assert(table.remove(t, 9) == nil and select("#", table.remove(t, 9)) == 0)
        assert(table.concat(t, ",") == "b,c" and #t == 2)
        assert(table.find(t, "c") == 2 and table.find(t, "zz") == nil)
        local x, y = table.unpack(t)
        assert(x == "b" and y == "c")
        for i, v in { 5, 3, 9, 1 } do t[i] = v end
        table.sort(t)
        assert(table.concat(t, ",") == "1,3,5,9")
        table.sort(t, function(a, b) return a > b end)
        assert(table.concat(t, ",") == "9,5,3,1")
        t.sub = { k = 1 }
        local c = table.clone(t)
        assert(type(c) == "table" and c[1] == 9 and c.sub.k == 1)
        c.sub.k = 2   -- a shallow clone shares the nested (shared) table
        assert(t.sub.k == 2)
        table.clear(t)
        assert(next(t) == nil and #t == 0)
        local ok, err = pcall(table.insert, t, 1, 2, 3)
        assert(not ok)
        return tostring(err)
    "##,
    );
    assert_contains(&text(&out), "wrong number of arguments to 'insert'");
}

#[test]
fn plain_tables_keep_the_builtin_behaviour() {
    let (_tree, _pool, domain) = setup();
    let out = eval(
        &domain,
        r#"
        local p = { 3, 1, 2 }
        table.sort(p)
        table.insert(p, 4)
        assert(table.concat(p, ",") == "1,2,3,4")
        assert(table.remove(p, 1) == 1)
        local ok, err = pcall(table.insert, nil, 1)
        return tostring(err)
    "#,
    );
    assert_contains(
        &text(&out),
        "invalid argument #1 to 'insert' (table expected, got nil)",
    );
}

#[test]
fn a_replaced_table_raises_naming_where_it_was() {
    let (_tree, _pool, domain) = setup();
    eval(
        &domain,
        r#"
        local t = jobs.shared.table("players")
        t.alice = { inventory = { gold = 1 } }
        "#,
    );
    let err = refusal(
        &domain,
        r#"
        local t = jobs.shared.table("players")
        local inv = t.alice.inventory
        t.alice = { inventory = {} }
        inv.gold = 5
        "#,
    );
    assert_contains(
        &err,
        "shared table 'players'.alice.inventory is detached: 'players'.alice was replaced",
    );
    let err = refusal(
        &domain,
        r#"
        local t = jobs.shared.table("players")
        local alice = t.alice
        t.alice = nil
        return alice.x
        "#,
    );
    assert_contains(&err, "shared table 'players'.alice was removed");
    let t = domain.shared().table("players").unwrap();
    assert_eq!(t.get("alice").unwrap(), None);
}

#[test]
fn each_refusal_names_its_path_and_changes_nothing() {
    let (_tree, _pool, domain) = setup();
    eval(&domain, "jobs.shared.table('r').keep = 1");
    let t = domain.shared().table("r").unwrap();
    let before = (t.snapshot().unwrap(), t.revision().unwrap());
    let cases = [
        (
            "t.f = print",
            "'r'.f: a function can't be stored in a shared table",
        ),
        (
            "t.a = { b = { coroutine.create(print) } }",
            "'r'.a.b[1]: a coroutine can't be stored in a shared table",
        ),
        (
            "t.m = setmetatable({}, {})",
            "'r'.m: a table with a metatable can't be stored in a shared table",
        ),
        (
            "local c = {}; c.self = c; t.c = c",
            "'r'.c.self: a table that contains itself can't be stored in a shared table",
        ),
        (
            "t.u = newproxy()",
            "'r'.u: a userdata can't be stored in a shared table",
        ),
        (
            "t[true] = 1",
            "shared table 'r': a boolean can't be a key of a shared table",
        ),
        (
            "t[0/0] = 1",
            "shared table 'r': a NaN can't be a key of a shared table",
        ),
        (
            "jobs.shared.atomic(t, 'k', function() return print end)",
            "'r'.k: a function can't be stored in a shared table",
        ),
        (
            "jobs.shared.table('')",
            "jobs.shared.table: a name must be 1 to 256 bytes, got 0 bytes",
        ),
        (
            "jobs.shared.table(string.rep('n', 257))",
            "jobs.shared.table: a name must be 1 to 256 bytes, got 257 bytes",
        ),
        (
            "jobs.shared.freeze(t).keep = 2",
            "shared table 'r' is frozen: it can't be written",
        ),
        (
            "jobs.shared.revision({})",
            "jobs.shared.revision: t must be a shared table, got a table",
        ),
    ];
    for (body, expected) in cases {
        let err = refusal(
            &domain,
            &format!("local t = jobs.shared.table('r'); {body}"),
        );
        assert_contains(&err, expected);
        assert_eq!(
            (t.snapshot().unwrap(), t.revision().unwrap()),
            before,
            "{body} changed the table"
        );
    }
    // A 256-byte name is fine.
    eval(&domain, "jobs.shared.table(string.rep('n', 256)).x = 1");
}

#[test]
fn atomic_returns_the_stored_value_and_refuses_a_yield() {
    let (_tree, _pool, domain) = setup();
    let out = eval(
        &domain,
        r#"
        local t = jobs.shared.table("a")
        assert(jobs.shared.atomic(t, "n", function(n) return (n or 0) + 1 end) == 1)
        assert(jobs.shared.atomic(t, "n", function(n) return n + 1 end) == 2)
        t.list = { 1, 2 }
        local got = jobs.shared.atomic(t, "list", function(l)
            assert(type(l) == "table", "a table arrives as a plain copy")
            table.insert(l, 3)
            return l
        end)
        assert(typeof(got) == "SharedTable" and #got == 3)
        assert(jobs.shared.atomic(t, "n", function() return nil end) == nil and t.n == nil)
        local ok, err = pcall(jobs.shared.atomic, t, "n", function() error("boom") end)
        assert(not ok and string.find(tostring(err), "boom"))
        return true
    "#,
    );
    assert_eq!(out, Message::Boolean(true));
    let err = refusal(
        &domain,
        "local t = jobs.shared.table('a'); jobs.shared.atomic(t, 'y', function(v) coroutine.yield() return 1 end)",
    );
    assert_contains(
        &err,
        "jobs.shared.atomic: the function for 'a'.y yielded; it must return without yielding",
    );
    // the refusal under test: a wait inside an atomic update
    let err = refusal(
        &domain,
        "local t = jobs.shared.table('a'); jobs.shared.atomic(t, 'y', function(v) task.wait(0) return 1 end)",
    );
    assert_contains(&err, "task.wait can't wait here");
    let t = domain.shared().table("a").unwrap();
    assert_eq!(t.get("y").unwrap(), None);
}

#[test]
fn revision_moves_with_nested_writes() {
    let (_tree, _pool, domain) = setup();
    let out = eval(
        &domain,
        r#"
        local t = jobs.shared.table("rev")
        t.inner = {}
        local r0, i0 = jobs.shared.revision(t), jobs.shared.revision(t.inner)
        t.inner.x = 1
        local r1, i1 = jobs.shared.revision(t), jobs.shared.revision(t.inner)
        t.other = 1
        local r2, i2 = jobs.shared.revision(t), jobs.shared.revision(t.inner)
        return `{r1 - r0} {i1 > i0} {r2 - r1} {i2 == i1}`
    "#,
    );
    assert_eq!(text(&out), "1 true 1 true");
}

#[test]
fn frozen_tables_read_one_version() {
    let (_tree, _pool, domain) = setup();
    let out = eval(
        &domain,
        r#"
        local t = jobs.shared.table("cfg")
        t.speed = 1; t.sub = { x = 1 }
        local f = jobs.shared.freeze(t)
        t.speed = 2; t.sub.x = 2
        local n = 0
        for k in f do n += 1 end
        return `{f.speed} {f.sub.x} {n} {typeof(f)}`
    "#,
    );
    assert_eq!(text(&out), "1 1 2 SharedTable");
}

/// A frozen table stored into live tables is copied: writes through one place where it was
/// stored reach neither the frozen table nor any other place it was stored (a second reader
/// found the first version of the cells sharing them).
#[test]
fn a_frozen_table_stored_elsewhere_is_a_copy_of_its_own() {
    let (_tree, _pool, domain) = setup();
    let out = eval(
        &domain,
        r#"
        local a = jobs.shared.table("fa")
        a.cfg = { speed = 1, name = "abc", inner = { k = 10 } }
        local f = jobs.shared.freeze(a.cfg)
        local b = jobs.shared.table("fb")
        b.x = f; b.y = f; a.z = f
        local ra = jobs.shared.revision(a)
        b.x.speed = 2; b.x.name = "xyz"; b.x.inner.k = 99
        assert(jobs.shared.revision(a) == ra, "a write to b moved a's revision")
        a.z.speed = 3
        return `{f.speed} {f.name} {f.inner.k} | {b.x.speed} {b.x.name} {b.x.inner.k} | {b.y.speed} {b.y.inner.k} | {a.z.speed} {a.z.name} {a.cfg.speed}`
    "#,
    );
    assert_eq!(text(&out), "1 abc 10 | 2 xyz 99 | 1 10 | 3 abc 1");
}

/// `table.sort` on a nested table whose named table was last written elsewhere sorts it (the
/// check compared the named table's count with the nested table's revision, and gave up).
#[test]
fn table_sort_sorts_a_nested_table_after_a_write_beside_it() {
    let (_tree, _pool, domain) = setup();
    let out = eval(
        &domain,
        r#"
        local t = jobs.shared.table("nestsort")
        t.a = { 3, 1, 2 }
        t.b = 1
        table.sort(t.a)
        t.c = { "b", "c", "a" }
        t.a[4] = 0
        table.sort(t.c)
        table.sort(t.a, function(x, y) return x > y end)
        return `{t.a[1]}{t.a[2]}{t.a[3]}{t.a[4]} {t.c[1]}{t.c[2]}{t.c[3]}`
    "#,
    );
    assert_eq!(text(&out), "3210 abc");
}

/// A frozen table and a loop keep a copy of the table: each counts against the domain's
/// 256 MiB of shared tables while kept, is refused past it with the text and nothing kept, and
/// gives its bytes back when let go.
#[test]
fn frozen_copies_and_loops_count_against_the_domains_bytes_while_kept() {
    let (_tree, _pool, domain) = setup();
    const BLOB: usize = 60 << 20;
    // One node, the key "blob" (16 + 4) and the buffer (16 + its bytes).
    const WEIGHT: usize = 16 + 20 + 16 + BLOB;
    const BOUND: usize = 256 << 20;
    let t = domain.shared().table("big").unwrap();
    t.set("blob", Message::Buffer(vec![7u8; BLOB].into()))
        .unwrap();
    let kept: Vec<_> = (0..3).map(|_| t.freeze().unwrap()).collect();
    let refused = t.freeze().unwrap_err();
    assert_eq!(refused.kind(), skein::shared::SharedTableErrorKind::Limit);
    assert_eq!(
        refused.to_string(),
        format!(
            "a frozen copy of shared table 'big': the domain's shared tables and queues would hold {} bytes, past the bound of {BOUND}",
            5 * WEIGHT
        )
    );
    let loop_refused = domain
        .eval("local n = 0 for _ in jobs.shared.table('big') do n += 1 end return n")
        .unwrap_err()
        .to_string();
    assert!(
        loop_refused.contains(&format!(
            "a loop over shared table 'big': the domain's shared tables and queues would hold {} bytes, past the bound of {BOUND}",
            5 * WEIGHT
        )),
        "{loop_refused}"
    );
    drop(kept);
    let again = t.freeze().unwrap();
    assert_eq!(
        again
            .get("blob")
            .map(|b| matches!(b, Message::Buffer(b) if b.len() == BLOB)),
        Some(true)
    );
    let n = domain
        .eval("local n = 0 for _ in jobs.shared.table('big') do n += 1 end return n")
        .unwrap();
    assert_eq!(n, Message::Number(1.0));
}

#[test]
fn engine_and_workers_share_one_table_and_atomic_counts_exactly() {
    let (_tree, _pool, domain) = setup();
    let out = eval(
        &domain,
        r#"
        local t = jobs.shared.table("count")
        local ps = {}
        for i = 1, 8 do
            ps[i] = jobs.dispatch("./jobs", "count", { name = "count", times = 50 })
        end
        for _ = 1, 50 do jobs.shared.atomic(t, "n", function(n) return (n or 0) + 1 end) end
        for _, p in ps do p:await() end
        jobs.parallelFor("./jobs", "atomicChunk", { first = 1, last = 400 }, nil, { chunks = 8 }):await()
        return t.n + 1000000 * jobs.shared.table("chunks").n
    "#,
    );
    assert_eq!(number(&out), (8 * 50 + 50 + 1_000_000 * 400) as f64);
}

#[test]
fn nested_write_through_from_a_worker() {
    let (_tree, _pool, domain) = setup();
    let out = eval(
        &domain,
        r#"
        local t = jobs.shared.table("nest")
        t.player = { hp = 100 }
        local left = jobs.dispatch("./jobs", "nested", { hit = 30 }):await()
        return `{left} {t.player.hp}`
    "#,
    );
    assert_eq!(text(&out), "70 70");
}

#[test]
fn the_host_and_scripts_see_the_same_table() {
    let (_tree, _pool, domain) = setup();
    let t = domain.shared().table("host").unwrap();
    t.set(
        "cfg",
        Message::Map(vec![(MapKey::from("level"), Message::Number(3.0))]),
    )
    .unwrap();
    let out = eval(
        &domain,
        r#"
        local t = jobs.shared.table("host")
        t.cfg.level += 1
        return jobs.dispatch("./jobs", "read", { name = "host", key = "cfg" }):await().level
    "#,
    );
    assert_eq!(number(&out), 4.0);
    let cfg = t.table_at("cfg").unwrap();
    assert_eq!(cfg.get("level").unwrap(), Some(Message::Number(4.0)));
}

#[test]
fn two_domains_never_see_each_others_tables() {
    let pool = Pool::new(1);
    let a = ScriptDomain::new(&pool, DomainSpec::new("a")).unwrap();
    let b = ScriptDomain::new(&pool, DomainSpec::new("b")).unwrap();
    eval(&a, "jobs.shared.table('t').x = 'a'");
    assert_eq!(eval(&b, "return jobs.shared.table('t').x"), Message::Nil);
    assert_eq!(b.shared().table("t").unwrap().get("x").unwrap(), None);
}

#[test]
fn a_held_table_after_the_domain_ends_names_the_reason() {
    let pool = Pool::new(1);
    let domain = ScriptDomain::new(&pool, DomainSpec::new("gone")).unwrap();
    let store = domain.shared();
    let t = store.table("t").unwrap();
    t.set("x", Message::Integer(1)).unwrap();
    drop(domain);
    let err = t.get("x").unwrap_err();
    assert_eq!(err.kind(), SharedTableErrorKind::Ended);
    assert_eq!(
        err.to_string(),
        "shared table 't' is gone: domain 'gone' stopped"
    );
    assert_eq!(
        store.table("u").unwrap_err().kind(),
        SharedTableErrorKind::Ended
    );
}

#[test]
fn stress_two_workers_and_the_engine_on_one_table() {
    let (_tree, _pool, domain) = setup();
    let out = eval(
        &domain,
        r#"
        local t = jobs.shared.table("stress")
        local ps = {}
        for w = 1, 4 do
            ps[w] = jobs.dispatch("./jobs", "mixed", { who = "w" .. w, times = 200 })
        end
        for i = 1, 200 do
            jobs.shared.atomic(t, "total", function(n) return (n or 0) + 1 end)
            t["e" .. i] = i
        end
        for _, p in ps do p:await() end
        local keys = 0
        for k in t do keys += 1 end
        return `{t.total} {keys}`
    "#,
    );
    // total + last + 5 writers x 200 keys.
    assert_eq!(text(&out), "1000 1002");
}

#[test]
fn nesting_from_luau_at_64_and_past() {
    let (_tree, _pool, domain) = setup();
    let err = refusal(
        &domain,
        r#"
        local function nest(levels)
            local t = {}
            for _ = 2, levels do t = { n = t } end
            return t
        end
        local t = jobs.shared.table("deep")
        t.ok = nest(63)          -- the named table is the 64th level
        assert(t.ok.n.n ~= nil)
        t.past = nest(64)
        "#,
    );
    assert_contains(
        &err,
        "shared table 'deep'.past: tables would nest 65 deep, past the bound of 64",
    );
    let t = domain.shared().table("deep").unwrap();
    assert_eq!(t.get("past").unwrap(), None);
    assert!(t.get("ok").unwrap().is_some());
}

#[test]
fn the_name_bound_from_luau() {
    let (_tree, _pool, domain) = setup();
    let err = refusal(
        &domain,
        r#"
        for i = 1, 4096 do jobs.shared.table("t" .. i) end
        jobs.shared.table("t1").x = 1       -- names already made are still there
        jobs.shared.table("one more")
        "#,
    );
    assert_contains(
        &err,
        "jobs.shared.table: the domain holds at most 4096 shared names",
    );
    assert_eq!(
        domain.shared().table("t1").unwrap().get("x").unwrap(),
        Some(Message::Number(1.0))
    );
}

#[test]
fn insert_and_remove_keep_integers_and_sort_keeps_numbers() {
    let (_tree, _pool, domain) = setup();
    let t = domain.shared().table("ints").unwrap();
    for (i, v) in [3i64, 1, 2].iter().enumerate() {
        t.set((i + 1) as f64, Message::Integer(*v)).unwrap();
    }
    eval(
        &domain,
        r#"
        local t = jobs.shared.table("ints")
        table.insert(t, 1, { tag = "first" })
        assert(t[1].tag == "first")
        table.remove(t, 1)
        local s = jobs.shared.table("floats")
        for i, v in { 2.5, 0.5, 1.5 } do s[i] = v end
        table.sort(s)
        "#,
    );
    assert_eq!(
        t.snapshot().unwrap(),
        Message::List(vec![
            Message::Integer(3),
            Message::Integer(1),
            Message::Integer(2)
        ])
    );
    assert_eq!(
        domain.shared().table("floats").unwrap().snapshot().unwrap(),
        Message::List(vec![
            Message::Number(0.5),
            Message::Number(1.5),
            Message::Number(2.5)
        ])
    );
}

// ---- jobs.shared.add ------------------------------------------------------------------------

/// An integer message.
fn int(i: i64) -> Message {
    Message::Integer(i)
}

/// The items of a list message.
#[track_caller]
fn items(m: Message) -> Vec<Message> {
    match m {
        Message::List(items) => items,
        other => panic!("expected a list, got {other:?}"),
    }
}

#[test]
fn add_answers_the_sum_with_its_exact_type() {
    let (_tree, _pool, domain) = setup();
    let t = domain.shared().table("acc").unwrap();
    t.set("big", int(i64::MAX)).unwrap();
    t.set("low", int(i64::MIN)).unwrap();
    let out = eval(
        &domain,
        r#"
        local t = jobs.shared.table("acc")
        local add = jobs.shared.add
        local r0 = jobs.shared.revision(t)
        local answers = {
            add(t, "n", 1.5),                      -- a missing key counts as 0
            add(t, "n", 2),                        -- number + number
            add(t, "i", integer.create(2)),        -- missing + integer: an integer
            add(t, "i", integer.create(-5)),       -- integer + integer
            add(t, "j", integer.create(7)),
            add(t, "j", 0.5),                      -- integer + number: a number
            add(t, "k", 1.25),
            add(t, "k", integer.create(2)),        -- number + integer: a number
            add(t, "big", integer.create(1)),      -- wraps: i64::MAX + 1 == i64::MIN
            add(t, "low", integer.create(-1)),     -- and back: i64::MIN - 1 == i64::MAX
            add(t, 3, 4),                          -- a number key
        }
        assert(jobs.shared.revision(t) == r0 + 11, "each add is one write")
        assert(typeof(t.i) == "integer" and typeof(t.n) == "number" and typeof(t.j) == "number")
        assert(typeof(answers[3]) == "integer" and typeof(answers[6]) == "number")
        assert(t[3] == 4 and t.n == 3.5)
        return answers
    "#,
    );
    assert_eq!(
        items(out),
        vec![
            Message::Number(1.5),
            Message::Number(3.5),
            int(2),
            int(-3),
            int(7),
            Message::Number(7.5),
            Message::Number(1.25),
            Message::Number(3.25),
            int(i64::MIN),
            int(i64::MAX),
            Message::Number(4.0),
        ]
    );
    // The host reads what the adds stored, with the same types.
    assert_eq!(t.get("i").unwrap(), Some(int(-3)));
    assert_eq!(t.get("j").unwrap(), Some(Message::Number(7.5)));
    assert_eq!(t.get("big").unwrap(), Some(int(i64::MIN)));
    assert_eq!(t.get("low").unwrap(), Some(int(i64::MAX)));
    assert_eq!(t.get(3.0).unwrap(), Some(Message::Number(4.0)));
}

#[test]
fn add_on_a_key_that_holds_no_number_raises_and_changes_nothing() {
    let (_tree, _pool, domain) = setup();
    eval(
        &domain,
        r#"
        local t = jobs.shared.table("acc")
        t.s = "7"
        t.b = true
        t.t = { n = 1 }
        t.v = vector.create(1, 2, 3)
        t.buf = buffer.fromstring("1")
        t.n = 1
        "#,
    );
    let t = domain.shared().table("acc").unwrap();
    let before = (t.snapshot().unwrap(), t.revision().unwrap());
    for (key, what) in [
        ("s", "a string"),
        ("b", "a boolean"),
        ("t", "a table"),
        ("v", "a vector"),
        ("buf", "a buffer"),
    ] {
        for amount in ["1", "integer.create(1)", "0.5"] {
            let body = format!("jobs.shared.add(jobs.shared.table('acc'), '{key}', {amount})");
            let err = refusal(&domain, &body);
            assert_contains(
                &err,
                &format!("jobs.shared.add: 'acc'.{key} holds {what}, not a number"),
            );
            assert_eq!(
                (t.snapshot().unwrap(), t.revision().unwrap()),
                before,
                "{body} changed the table"
            );
        }
    }
    // The Rust API refuses with the same text, and changes nothing either.
    for (key, what) in [("s", "a string"), ("t", "a table"), ("buf", "a buffer")] {
        let err = t.add(key, int(1)).unwrap_err();
        assert_eq!(err.kind(), SharedTableErrorKind::NotANumber);
        assert_eq!(
            err.to_string(),
            format!("jobs.shared.add: 'acc'.{key} holds {what}, not a number")
        );
    }
    assert_eq!((t.snapshot().unwrap(), t.revision().unwrap()), before);
}

#[test]
fn add_refuses_an_amount_that_is_no_number_and_changes_nothing() {
    let (_tree, _pool, domain) = setup();
    eval(&domain, "jobs.shared.table('acc').hits = 1");
    let t = domain.shared().table("acc").unwrap();
    let before = (t.snapshot().unwrap(), t.revision().unwrap());
    for key in ["hits", "fresh"] {
        for (amount, what) in [
            ("'1'", "a string"),
            ("nil", "nil"),
            ("{}", "a table"),
            ("{ 1 }", "a table"),
            ("true", "a boolean"),
            ("vector.create(1, 0, 0)", "a vector"),
            ("buffer.create(1)", "a buffer"),
            ("print", "a function"),
            ("t", "a shared table"),
        ] {
            let body = format!(
                "local t = jobs.shared.table('acc'); jobs.shared.add(t, '{key}', {amount})"
            );
            let err = refusal(&domain, &body);
            assert_contains(
                &err,
                &format!(
                    "jobs.shared.add: the amount to add to 'acc'.{key} is {what}, not a number"
                ),
            );
            assert_eq!(
                (t.snapshot().unwrap(), t.revision().unwrap()),
                before,
                "{body} changed the table"
            );
        }
    }
    // No amount at all reads as nil.
    let err = refusal(&domain, "jobs.shared.add(jobs.shared.table('acc'), 'hits')");
    assert_contains(
        &err,
        "jobs.shared.add: the amount to add to 'acc'.hits is nil, not a number",
    );
    // The Rust API's texts are the same.
    for (amount, what) in [
        (Message::from("1"), "a string"),
        (Message::Nil, "nil"),
        (Message::List(vec![int(1)]), "a table"),
        (Message::Boolean(true), "a boolean"),
    ] {
        for key in ["hits", "fresh"] {
            let err = t.add(key, amount.clone()).unwrap_err();
            assert_eq!(err.kind(), SharedTableErrorKind::NotANumber);
            assert_eq!(
                err.to_string(),
                format!(
                    "jobs.shared.add: the amount to add to 'acc'.{key} is {what}, not a number"
                )
            );
        }
    }
    assert_eq!((t.snapshot().unwrap(), t.revision().unwrap()), before);
}

#[test]
fn add_refuses_a_frozen_table_a_cut_loose_handle_a_bad_key_and_a_non_table() {
    let (_tree, _pool, domain) = setup();
    eval(
        &domain,
        "local t = jobs.shared.table('acc'); t.n = 1; t.inner = { n = 1 }; t.gone = { n = 1 }",
    );
    let t = domain.shared().table("acc").unwrap();
    let before = (t.snapshot().unwrap(), t.revision().unwrap());
    let cases = [
        (
            "jobs.shared.add(jobs.shared.freeze(t), 'n', 1)",
            "shared table 'acc' is frozen: it can't be written",
        ),
        (
            "jobs.shared.add(jobs.shared.freeze(t).inner, 'n', 1)",
            "shared table 'acc'.inner is frozen: it can't be written",
        ),
        (
            "jobs.shared.add({ n = 1 }, 'n', 1)",
            "jobs.shared.add: t must be a shared table, got a table",
        ),
        (
            "jobs.shared.add(nil, 'n', 1)",
            "jobs.shared.add: t must be a shared table, got nil",
        ),
        (
            "jobs.shared.add(t, true, 1)",
            "shared table 'acc': a boolean can't be a key of a shared table",
        ),
        (
            "jobs.shared.add(t, 0/0, 1)",
            "shared table 'acc': a NaN can't be a key of a shared table",
        ),
        (
            "jobs.shared.add(t, nil, 1)",
            "shared table 'acc': a nil can't be a key of a shared table",
        ),
    ];
    for (body, expected) in cases {
        let err = refusal(
            &domain,
            &format!("local t = jobs.shared.table('acc'); {body}"),
        );
        assert_contains(&err, expected);
        assert_eq!(
            (t.snapshot().unwrap(), t.revision().unwrap()),
            before,
            "{body} changed the table"
        );
    }
    // A handle on a nested table that was replaced, or removed, refuses: no add lands in a table
    // that was cut loose.
    let inner = t.table_at("inner").unwrap();
    let err = refusal(
        &domain,
        r#"
        local t = jobs.shared.table("acc")
        local inner = t.inner
        t.inner = { n = 100 }
        jobs.shared.add(inner, "n", 1)
        "#,
    );
    assert_contains(&err, "shared table 'acc'.inner was replaced");
    let rust_err = inner.add("n", int(1)).unwrap_err();
    assert_eq!(rust_err.kind(), SharedTableErrorKind::Detached);
    assert_contains(&err, &rust_err.to_string());
    let err = refusal(
        &domain,
        r#"
        local t = jobs.shared.table("acc")
        local gone = t.gone
        t.gone = nil
        jobs.shared.add(gone, "n", 1)
        "#,
    );
    assert_contains(&err, "shared table 'acc'.gone was removed");
    assert_eq!(
        t.snapshot().unwrap().to_string(),
        "{inner = {n = 100}, n = 1}"
    );
}

#[test]
fn add_through_a_nested_handle_from_the_engine_a_worker_and_the_host() {
    let (_tree, _pool, domain) = setup();
    let out = eval(
        &domain,
        r#"
        local t = jobs.shared.table("nested.add")
        t.inner = { n = 1, s = "x" }
        local a = jobs.shared.add(t.inner, "n", 2)
        local b = jobs.dispatch("./jobs", "addNested", { name = "nested.add", by = 10 }):await()
        local ok, err = pcall(jobs.shared.add, t.inner, "s", 1)
        assert(not ok)
        return { a, b, t.inner.n, tostring(err) }
    "#,
    );
    let out = items(out);
    assert_eq!(
        out[..3],
        [
            Message::Number(3.0),
            Message::Number(13.0),
            Message::Number(13.0)
        ]
    );
    assert_contains(
        &text(&out[3]),
        "jobs.shared.add: 'nested.add'.inner.s holds a string, not a number",
    );
    let inner = domain
        .shared()
        .table("nested.add")
        .unwrap()
        .table_at("inner")
        .unwrap();
    assert_eq!(inner.add("n", 0.5).unwrap(), Message::Number(13.5));
    assert_eq!(
        inner.add("s", 1.0).unwrap_err().to_string(),
        "jobs.shared.add: 'nested.add'.inner.s holds a string, not a number"
    );
}

#[test]
fn add_from_rust_keeps_types_wraps_and_counts_a_missing_key_as_zero() {
    let pool = Pool::new(1);
    let domain = ScriptDomain::new(&pool, DomainSpec::new("rust")).unwrap();
    let t = domain.shared().table("stats").unwrap();
    let rev = t.revision().unwrap();
    assert_eq!(t.add("hits", int(2)).unwrap(), int(2));
    assert_eq!(t.add("hits", int(3)).unwrap(), int(5));
    assert_eq!(t.add("hits", 0.5).unwrap(), Message::Number(5.5));
    assert_eq!(t.add("f", 1.5).unwrap(), Message::Number(1.5));
    assert_eq!(t.add("f", int(1)).unwrap(), Message::Number(2.5));
    assert_eq!(t.add(1.0, int(4)).unwrap(), int(4));
    t.set("big", int(i64::MAX)).unwrap();
    assert_eq!(t.add("big", int(1)).unwrap(), int(i64::MIN));
    assert_eq!(t.add("big", int(-1)).unwrap(), int(i64::MAX));
    assert_eq!(
        t.revision().unwrap(),
        rev + 9,
        "each add and the set is one write"
    );
    assert_eq!(
        domain
            .eval("local t = jobs.shared.table('stats'); return { typeof(t.big), t.hits, t[1] }")
            .unwrap(),
        Message::List(vec![Message::from("integer"), Message::Number(5.5), int(4)])
    );
    // A key that can't be one is refused before the amount is looked at.
    assert_eq!(
        t.add(f64::NAN, int(1)).unwrap_err().kind(),
        SharedTableErrorKind::BadKey
    );
    drop(domain);
    let err = t.add("hits", int(1)).unwrap_err();
    assert_eq!(err.kind(), SharedTableErrorKind::Ended);
    assert_eq!(
        err.to_string(),
        "shared table 'stats' is gone: domain 'rust' stopped"
    );
}

/// The entry bound (1,048,576 entries): an add that would make a new key is refused at the
/// bound and one past it, while an add to a key the table holds succeeds at the bound.
#[test]
fn add_at_the_entry_bound() {
    const BOUND: usize = 1_048_576;
    let (_tree, _pool, domain) = setup();
    let t = domain.shared().table("big").unwrap();
    // "list" and its items, and "hits": BOUND - 1 entries.
    t.set(
        "list",
        Message::List(vec![Message::Boolean(true); BOUND - 3]),
    )
    .unwrap();
    t.set("hits", int(0)).unwrap();
    let past = "shared table 'big': the write would make 'big' hold 1048577 entries, past the bound of 1048576";
    let out = eval(
        &domain,
        r#"
        local t = jobs.shared.table("big")
        local add = jobs.shared.add
        assert(add(t, "made", 1) == 1)                 -- makes the last entry: at the bound
        local rev = jobs.shared.revision(t)
        local ok, err = pcall(add, t, "one more", 1)   -- one past
        assert(not ok and t["one more"] == nil and jobs.shared.revision(t) == rev)
        assert(add(t, "hits", 1) == 1)                 -- existing keys still count, at the bound
        assert(add(t, "made", 1) == 2)
        return tostring(err)
    "#,
    );
    assert_contains(&text(&out), past);
    let rev = t.revision().unwrap();
    let err = t.add("from rust", int(1)).unwrap_err();
    assert_eq!(err.kind(), SharedTableErrorKind::Limit);
    assert_eq!(err.to_string(), past);
    assert_eq!(t.get("from rust").unwrap(), None);
    assert_eq!(t.revision().unwrap(), rev);
    assert_eq!(t.add("hits", int(1)).unwrap(), Message::Number(2.0));
    // Make room and the same add makes its key.
    t.set("made", Message::Nil).unwrap();
    assert_eq!(t.add("from rust", int(1)).unwrap(), int(1));
}

/// The byte bound (64 MiB a table, each value and key 16 bytes plus its string bytes): a new
/// key that fits exactly is made, one byte more is refused; an add to a held key stays within.
#[test]
fn add_at_the_byte_bound() {
    const BOUND: usize = 64 << 20;
    let w = Limits::NODE_WEIGHT;
    let (_tree, _pool, domain) = setup();
    let t = domain.shared().table("heavy").unwrap();
    t.set("hits", int(0)).unwrap();
    // The table, "hits" and its integer, "blob" and its string, then room for key "kk" and a
    // number: exactly the bound.
    let fixed = w + (w + 4) + w + (w + 4) + w;
    let room = (w + 2) + w;
    t.set(
        "blob",
        Message::String(vec![b'x'; BOUND - fixed - room].into()),
    )
    .unwrap();
    let past = format!(
        "shared table 'heavy': the write would make 'heavy' hold {} bytes, past the bound of {BOUND}",
        BOUND + 1
    );
    let rev = t.revision().unwrap();
    let err = t.add("kkk", int(1)).unwrap_err();
    assert_eq!(err.to_string(), past);
    let err = refusal(
        &domain,
        "jobs.shared.add(jobs.shared.table('heavy'), 'kkk', 1)",
    );
    assert_contains(&err, &past);
    assert_eq!(t.revision().unwrap(), rev, "nothing changed");
    assert_eq!(
        eval(
            &domain,
            "return jobs.shared.add(jobs.shared.table('heavy'), 'kk', 1)"
        ),
        Message::Number(1.0)
    );
    assert_eq!(t.add("hits", 2.5).unwrap(), Message::Number(2.5));
    assert_eq!(t.add("kk", int(1)).unwrap(), Message::Number(2.0));
    assert_eq!(
        t.add("k", int(1)).unwrap_err().kind(),
        SharedTableErrorKind::Limit
    );
}

/// Two workers each add and `atomic` 20,000 times on one table while the engine reads it: no
/// increment is lost, each counter only moves forward, and an integer counter stays one. (With
/// `t.n = t.n + 1` in place of the add, this fails: counts go back and the total falls short.)
#[test]
fn add_and_atomic_from_two_workers_lose_no_increment() {
    const TIMES: i64 = 20_000;
    let (_tree, _pool, domain) = setup();
    let t = domain.shared().table("contended").unwrap();
    t.set("m", 0.0).unwrap();
    let out = eval(
        &domain,
        &format!(
            r#"
        local t = jobs.shared.table("contended")
        local times = {TIMES}
        local a = jobs.dispatch("./jobs", "addAndAtomic", {{ name = "contended", times = times }})
        local b = jobs.dispatch("./jobs", "addAndAtomic", {{ name = "contended", times = times }})
        local reads, last = 0, {{ n = 0, m = 0 }}
        local start = os.clock()
        while t.done ~= 2 do
            local now = jobs.shared.snapshot(t)
            local n, m = now.n or 0, now.m
            assert(n >= last.n and m >= last.m, `went back: n {{last.n}} -> {{n}}, m {{last.m}} -> {{m}}`)
            last = {{ n = n, m = m }}
            reads += 1
            assert(os.clock() - start < 120, "the workers did not finish within 120 s")
        end
        a:await(); b:await()
        return {{ t.n, t.i, t.m, reads }}
    "#
        ),
    );
    let out = items(out);
    assert_eq!(
        out[..3],
        [
            Message::Number((2 * TIMES) as f64),
            int(2 * TIMES),
            Message::Number((2 * TIMES) as f64)
        ]
    );
    assert!(number(&out[3]) >= 1.0);
    assert_eq!(t.get("i").unwrap(), Some(int(2 * TIMES)));
}

/// Host threads: two add 50,000 times to one key, two 50,000 times each to a key of their own,
/// all at once; every total is exact.
#[test]
fn add_from_four_rust_threads_loses_no_increment() {
    const TIMES: i64 = 50_000;
    let pool = Pool::new(1);
    let domain = ScriptDomain::new(&pool, DomainSpec::new("threads")).unwrap();
    let t = domain.shared().table("counts").unwrap();
    let start = Barrier::new(4);
    thread::scope(|s| {
        for who in 0..4 {
            let (t, start) = (t.clone(), &start);
            s.spawn(move || {
                let key = if who < 2 {
                    "same".to_owned()
                } else {
                    format!("own{who}")
                };
                start.wait();
                for _ in 0..TIMES {
                    t.add(key.as_str(), int(1)).unwrap();
                }
            });
        }
    });
    assert_eq!(t.get("same").unwrap(), Some(int(2 * TIMES)));
    assert_eq!(t.get("own2").unwrap(), Some(int(TIMES)));
    assert_eq!(t.get("own3").unwrap(), Some(int(TIMES)));
}

// ---- walks and snapshots racing writes ------------------------------------------------------

/// The raced table and the checks of what one moment of it looks like.
///
/// The writer keeps three invariants, each true at every moment of the table and each broken by
/// a view stitched from two moments:
/// - rounds: it writes its round `g` to keys `1..n` in order, so at any moment the values along
///   `1..n` never go up and span at most 1 (a prefix holds `g`, the rest `g - 1`); a walk that
///   read key 1 before a round and key 900 after it would see 900 above 1;
/// - `a` and `b`: it adds 1 to `a` and then to `b`, so `b` is `a` or `a - 1`;
/// - extras: it makes `x<j>` and then removes `x<j - window>`, so the `x` keys held are one
///   unbroken run of `window` or `window + 1`;
/// - and `pair` moves by one `atomic` on it, keeping `pair.a + pair.b == 0` (a snapshot copies
///   it; a walk hands it as a live handle, so only the snapshot checks it).
const RACES: &str = r#"
local R = {}

function R.check(view, n: number, window: number, what: string)
    local top = view[1]
    assert(top ~= nil, `{what}: key 1 missing`)
    for i = 2, n do
        local v, before = view[i], view[i - 1]
        assert(v ~= nil, `{what}: key {i} missing`)
        assert(v <= before and top - v <= 1, `{what}: [1] = {top}, [{i - 1}] = {before}, [{i}] = {v}`)
    end
    assert(view.b == view.a or view.b == view.a - 1, `{what}: a = {view.a}, b = {view.b}`)
    if type(view.pair) == "table" then
        assert(view.pair.a + view.pair.b == 0, `{what}: pair {view.pair.a} {view.pair.b}`)
    else
        assert(typeof(view.pair) == "SharedTable", `{what}: pair is {typeof(view.pair)}`)
    end
    local lo, hi, extras, keys = math.huge, -math.huge, 0, 0
    for k in view do
        keys += 1
        if type(k) == "string" and string.sub(k, 1, 1) == "x" then
            local j = tonumber(string.sub(k, 2))
            lo, hi, extras = math.min(lo, j), math.max(hi, j), extras + 1
        end
    end
    assert(extras == hi - lo + 1 and (extras == window or extras == window + 1),
        `{what}: x{lo}..x{hi}, {extras} of them`)
    assert(keys == n + 3 + extras, `{what}: {keys} keys`)
end

-- One loop over t, into a plain table; a key seen twice raises.
function R.walk(t)
    local view = {}
    for k, v in t do
        assert(view[k] == nil, `the walk saw {k} twice`)
        view[k] = v
    end
    return view
end

-- The shape the checks expect, before any writer starts.
function R.fill(t, n: number, window: number)
    for i = 1, n do t[i] = 0 end
    t.a, t.b = 0, 0
    t.pair = { a = 0, b = 0 }
    for j = 1, window do t["x" .. j] = j end
end

function R.writer(args)
    local t = jobs.shared.table(args.name)
    local ctl = jobs.shared.table(args.name .. ".ctl")
    local g, j = 0, args.window
    ctl.writing = true
    while not ctl.stop do
        g += 1
        for i = 1, args.n do
            t[i] = g
            if i % 10 == 0 then
                jobs.shared.add(t, "a", 1)
                jobs.shared.add(t, "b", 1)
                j += 1
                t["x" .. j] = j
                t["x" .. (j - args.window)] = nil
            end
            if i % 100 == 0 then
                jobs.shared.atomic(t, "pair", function(p) return { a = p.a + 1, b = p.b - 1 } end)
            end
        end
    end
    return g
end

-- `walks` loops and snapshots, each checked; answers how many of them writes overlapped.
function R.walks(t, args, who: string)
    local overlapped = 0
    for w = 1, args.walks do
        local rev = jobs.shared.revision(t)
        R.check(R.walk(t), args.n, args.window, `{who} walk {w}`)
        R.check(jobs.shared.snapshot(t), args.n, args.window, `{who} snapshot {w}`)
        if jobs.shared.revision(t) ~= rev then overlapped += 1 end
    end
    return overlapped
end

function R.walker(args)
    local t = jobs.shared.table(args.name)
    jobs.shared.table(args.name .. ".ctl").walking = true
    return R.walks(t, args, "worker")
end

return R
"#;

/// One moment's `pair`, `a` and `b` and rounds, as the host reads them from a snapshot.
fn check_snapshot(m: &Message, n: usize) {
    let Message::Map(entries) = m else {
        panic!("expected a map, got {m:?}")
    };
    let mut rounds = vec![None; n + 1];
    let (mut a, mut b, mut pair) = (None, None, None);
    for (k, v) in entries {
        match k {
            MapKey::Number(i) if *i >= 1.0 && *i <= n as f64 => {
                rounds[*i as usize] = Some(number(v))
            }
            MapKey::String(s) if &s[..] == b"a" => a = Some(number(v)),
            MapKey::String(s) if &s[..] == b"b" => b = Some(number(v)),
            MapKey::String(s) if &s[..] == b"pair" => pair = Some(v.clone()),
            _ => {}
        }
    }
    let rounds: Vec<f64> = rounds[1..]
        .iter()
        .map(|r| r.expect("every round key is held"))
        .collect();
    assert!(
        rounds.windows(2).all(|w| w[1] <= w[0]) && rounds[0] - rounds[n - 1] <= 1.0,
        "rounds torn: {:?}..{:?}",
        &rounds[..3],
        &rounds[n - 3..]
    );
    let (a, b) = (a.unwrap(), b.unwrap());
    assert!(b == a || b == a - 1.0, "a = {a}, b = {b}");
    let Some(Message::Map(pair)) = pair else {
        panic!("pair: {pair:?}")
    };
    let sum: f64 = pair.iter().map(|(_, v)| number(v)).sum();
    assert_eq!(sum, 0.0, "pair torn: {pair:?}");
}

/// A worker writes (existing keys, adds, inserts, removals, an `atomic` on a nested table)
/// without pause while the engine and another worker loop over the table and snapshot it, and
/// a host thread snapshots it: every loop and every snapshot shows one moment of the table, and
/// every key a loop's version held, once.
#[test]
fn walks_and_snapshots_racing_a_writer_each_see_one_moment() {
    const N: usize = 1_000;
    let (_tree, _pool, domain) = setup();
    let t = domain.shared().table("raced").unwrap();
    let domain_ctl = domain.shared().table("raced.ctl").unwrap();
    let stop = AtomicBool::new(false);
    let host_snapshots = AtomicUsize::new(0);
    let out = thread::scope(|s| {
        let host = s.spawn(|| {
            let t: &SharedTableRef = &t;
            // The engine fills the table before it starts the writer: check once it has.
            let ctl = domain_ctl.clone();
            while !stop.load(Ordering::Acquire) {
                if ctl.get("writing").unwrap() == Some(Message::Boolean(true)) {
                    check_snapshot(&t.snapshot().unwrap(), N);
                    host_snapshots.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
        let out = domain.eval(&format!(
            r#"
            local R = require("./races")
            local args = {{ name = "raced", n = {N}, window = 8, walks = 25 }}
            local t = jobs.shared.table(args.name)
            local ctl = jobs.shared.table(args.name .. ".ctl")
            R.fill(t, args.n, args.window)
            local writer = jobs.dispatch("./races", "writer", args)
            local walker = jobs.dispatch("./races", "walker", args)
            local ok, result = pcall(function()
                local start = os.clock()
                while not (ctl.writing and ctl.walking) do
                    assert(os.clock() - start < 60, "the writer and the walker did not start")
                end
                local engine = R.walks(t, args, "engine")
                return {{ engine, walker:await() }}
            end)
            ctl.stop = true
            local rounds = writer:await()
            if not ok then error(result) end
            table.insert(result, rounds)
            return result
        "#
        ));
        stop.store(true, Ordering::Release);
        host.join().unwrap();
        out
    });
    let out = items(out.unwrap_or_else(|e| panic!("{e}")));
    let (engine, worker, rounds) = (number(&out[0]), number(&out[1]), number(&out[2]));
    // The checks mean something only if writes landed while loops ran.
    assert!(
        engine >= 1.0 && worker >= 1.0,
        "overlapped walks: engine {engine}, worker {worker}"
    );
    assert!(rounds >= 1.0);
    assert!(host_snapshots.load(Ordering::Relaxed) >= 1);
}

/// A loop sees the table as it stood when it started: its own writes (to the key it is on, to
/// keys it has not reached, new keys, removals) don't show in it, and each key it started with
/// comes once.
#[test]
fn a_walk_does_not_see_the_writes_of_its_own_loop() {
    let (_tree, _pool, domain) = setup();
    let out = eval(
        &domain,
        r#"
        local t = jobs.shared.table("own")
        for i = 1, 100 do t[i] = i end
        for j = 1, 20 do t["s" .. j] = j end
        local seen, count = {}, 0
        for k, v in t do
            assert(v ~= -1, `the loop read its own write at {k}`)
            assert(seen[k] == nil, `{k} twice`)
            assert(v == (if type(k) == "number" then k else tonumber(string.sub(k, 2))), `{k} = {v}`)
            seen[k] = true
            count += 1
            t[k] = -1                                    -- the key it is on
            if type(k) == "number" and k < 100 then
                t[k + 1] = -1                            -- the next one, not reached yet
            end
            t["new" .. tostring(k)] = -1                 -- keys its version never held
            if k == 50 then t[70] = nil; t.s20 = nil; t.s1 = nil end
        end
        assert(count == 120, `{count} keys`)
        local after, minus = 0, 0
        for k, v in t do
            after += 1
            if v == -1 then minus += 1 end
        end
        return `{after} {minus} {t[70]} {t.s20}`
    "#,
    );
    // 100 positions, 20 s keys (s1, s20 and 70 removed at 50, then written -1 again when the
    // loop, which still held them, reached them) and 120 new keys: every one holds -1.
    assert_eq!(text(&out), "240 240 -1 -1");
}

/// A handle is userdata of Skein's own: its metatable is locked, `typeof` names it, and no other
/// userdata (a `newproxy`) passes for one, at any of the functions that take a table.
#[test]
fn a_handle_is_told_apart_from_every_other_userdata() {
    let (_tree, _pool, domain) = setup();
    let out = eval(
        &domain,
        r#"
        local t = jobs.shared.table("own")
        t.x = 1
        assert(getmetatable(t) == false, "the metatable is locked")
        assert(typeof(t) == "SharedTable" and type(t) == "userdata")
        assert(t == jobs.shared.table("own") and t ~= newproxy())
        assert(tostring(t) == "SharedTable('own')", tostring(t))
        local fake = newproxy(true)
        getmetatable(fake).__index = function() return 99 end
        assert(fake.x == 99)
        local refused = {}
        for _, name in { "add", "atomic", "revision", "snapshot", "freeze" } do
            local ok, err = pcall(jobs.shared[name], fake, "x", if name == "atomic" then function(v) return v end else 1)
            assert(not ok)
            table.insert(refused, tostring(err))
        end
        assert(t.x == 1)
        return table.concat(refused, "\n")
    "#,
    );
    let out = text(&out);
    for name in ["add", "atomic", "revision", "snapshot", "freeze"] {
        assert_contains(
            &out,
            &format!("jobs.shared.{name}: t must be a shared table, got a userdata"),
        );
    }
}

/// `atomic`'s function raises: the caller gets the error's text and the traceback of where it
/// was raised, whether the key holds a number (the raw path) or a string (the `mlua` path), and
/// the key keeps its value.
#[test]
fn atomic_raises_the_functions_error_alike_by_either_path_and_changes_nothing() {
    let (_tree, _pool, domain) = setup();
    let out = eval(
        &domain,
        r#"
        local t = jobs.shared.table("own")
        t.n = 5
        t.s = "a"
        local function inner() error("boom") end
        local said = {}
        for _, k in { "n", "s" } do
            local ok, err = pcall(jobs.shared.atomic, t, k, function() inner() end)
            assert(not ok and type(err) == "string")
            assert(string.find(err, "boom", 1, true), err)
            assert(string.find(err, "in function 'inner'", 1, true), err)
            local ok2, err2 = pcall(jobs.shared.atomic, t, k, function() error({ code = 7 }) end)
            assert(not ok2 and string.find(err2, "^table: "), err2)
        end
        assert(jobs.shared.atomic(t, "s", function(s) return s .. "b" end) == "ab")
        return `{t.n} {t.s}`
    "#,
    );
    assert_eq!(text(&out), "5 ab");
}
