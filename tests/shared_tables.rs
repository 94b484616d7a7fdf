//! Shared tables end to end: the engine VM, workers and the host reading and writing one table;
//! the table syntax and every wrapped base and `table` function; atomic counts; nested handles
//! and their detaching; iteration at one version; each refusal with its text and nothing
//! changed after it; the end of the domain; and a stress run.

use skein::{DomainSpec, MapKey, Message, Pool, ScriptDomain, SharedTableErrorKind};

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
    let tree = Tree::new(&[("jobs.luau", JOBS)]);
    let pool = Pool::new(2);
    let domain = tree.domain(&pool);
    (tree, pool, domain)
}

fn eval(domain: &ScriptDomain, source: &str) -> Message {
    domain
        .eval(source)
        .unwrap_or_else(|e| panic!("{e}\n---\n{source}"))
}

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
            "jobs.shared.revision: expected a shared table, got table",
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
