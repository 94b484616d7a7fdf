//! A value crosses at the top level of a dispatch's arguments or a job's
//! result exactly as it crosses nested in a table. A whole Luau number past 2^53 (`2^60`,
//! `-2^63`, `2^53 + 2`) stays that number, and a Luau integer stays an integer, both ways:
//! it used to be refused late with "pass the Message through IntoLua".

use skein::{DomainSpec, MapKey, Message, Plan, Pool, ScriptDomain};

use crate::hostile::hostile_run;
use crate::support::{skein_in, Tree};

const ECHO: &str = "return { echo = function(x) return x end, \
                    kind = function(x) return typeof(x) end }";

fn domain(tree: &Tree, pool: &Pool) -> ScriptDomain {
    ScriptDomain::new(
        pool,
        DomainSpec::new("main").plan(Plan::new().root(tree.path())),
    )
    .unwrap()
}

/// Each value sent to `echo` at the top level and nested, compared exactly (value and type)
/// in Luau; the script answers the lines that differ.
const ROUND_TRIPS: &str = r#"
local values = {
    2^60, -2^63, 2^53 + 2, -(2^53 + 2), 2^63 * 4, 0.5, 3,
    integer.create(5), integer.fromstring("1152921504606846977"),
    integer.fromstring("-9223372036854775808"), integer.fromstring("9223372036854775807"),
}
local wrong = {}
local function same(a, b) return a == b and typeof(a) == typeof(b) end
for i, v in values do
    local top = jobs.dispatch("./echo", "echo", v):await()
    local nested = jobs.dispatch("./echo", "echo", { v }):await()
    local seen = jobs.dispatch("./echo", "kind", v):await()
    if not same(top, v) then table.insert(wrong, `{i}: top level gave {typeof(top)} {top}`) end
    if not same(nested[1], v) then table.insert(wrong, `{i}: nested gave {typeof(nested[1])}`) end
    if seen ~= typeof(v) then table.insert(wrong, `{i}: the entry saw {seen}`) end
end
return table.concat(wrong, "; ")
"#;

#[test]
fn whole_numbers_past_2_pow_53_and_integers_cross_at_the_top_level_as_nested() {
    let tree = Tree::new(&[("echo.luau", ECHO)]);
    let pool = Pool::new(2);
    let d = domain(&tree, &pool);
    assert_eq!(d.eval(ROUND_TRIPS).unwrap(), Message::String("".into()));
}

#[test]
fn the_runner_round_trips_them_too() {
    let tree = Tree::new(&[
        ("echo.luau", ECHO),
        ("main.luau", &format!("local wrong = (function() {ROUND_TRIPS} end)()\nprint(wrong == '' and 'exact' or wrong)\n")),
    ]);
    hostile_run(&tree.path(), &["main.luau"])
        .exited(0)
        .stdout_has("exact\n");
}

/// The host sees what Luau holds: a number as `Message::Number`, an integer as
/// `Message::Integer`, at the top level as nested.
#[test]
fn eval_and_promise_wait_answer_numbers_as_numbers_and_integers_as_integers() {
    let tree = Tree::new(&[("echo.luau", ECHO)]);
    let pool = Pool::new(1);
    let d = domain(&tree, &pool);
    let p60 = 2f64.powi(60);
    assert_eq!(d.eval("return 2^60").unwrap(), Message::Number(p60));
    assert_eq!(
        d.eval("return -2^63").unwrap(),
        Message::Number(-2f64.powi(63))
    );
    assert_eq!(d.eval("return 3").unwrap(), Message::Number(3.0));
    assert_eq!(
        d.eval("return { 2^60 }").unwrap(),
        Message::List(vec![Message::Number(p60)])
    );
    assert_eq!(
        d.eval(r#"return integer.fromstring("1152921504606846977")"#)
            .unwrap(),
        Message::Integer((1 << 60) + 1)
    );
    // Host dispatches: the value reaches the entry with its type and comes back exact.
    for value in [
        Message::Number(p60),
        Message::Number(-2f64.powi(63)),
        Message::Number(2f64.powi(53) + 2.0),
        Message::Integer((1 << 60) + 1),
        Message::Integer(i64::MIN),
        Message::Integer(7),
    ] {
        let back = d
            .dispatch("./echo", "echo", value.clone())
            .unwrap()
            .wait()
            .unwrap();
        assert_eq!(back, value);
        let kind = d
            .dispatch("./echo", "kind", value.clone())
            .unwrap()
            .wait()
            .unwrap();
        let expected = if matches!(value, Message::Integer(_)) {
            "integer"
        } else {
            "number"
        };
        assert_eq!(kind, Message::String(expected.into()), "{value:?}");
        let nested = Message::Map(vec![(MapKey::String("v".into()), value.clone())]);
        assert_eq!(
            d.dispatch("./echo", "echo", nested.clone())
                .unwrap()
                .wait()
                .unwrap(),
            nested
        );
    }
    // A job's result read by the host: a number stays a number.
    let from_luau = d
        .eval(r#"return jobs.dispatch("./echo", "echo", 2^60):await()"#)
        .unwrap();
    assert_eq!(from_luau, Message::Number(p60));
}

/// A `jobs.parallelFor`'s `args` cross to every chunk alike: top level as nested.
#[test]
fn parallel_for_args_cross_at_the_top_level_as_nested() {
    let tree = Tree::new(&[(
        "chunks.luau",
        "return { args = function(ctx) return ctx.args end }",
    )]);
    let pool = Pool::new(2);
    let d = domain(&tree, &pool);
    let wrong = d
        .eval(
            r#"
            local wrong = {}
            local values = { 2^60, -2^63, 2^53 + 2, integer.fromstring("1152921504606846977"), 3 }
            for i, v in values do
                for _, args in { v, { v } } do
                    local got = jobs.parallelFor("./chunks", "args", 2, args):await()
                    for c = 1, 2 do
                        local seen = if type(args) == "table" then got[c][1] else got[c]
                        if seen ~= v or typeof(seen) ~= typeof(v) then
                            table.insert(wrong, `{i}: chunk {c} saw {typeof(seen)} {seen}`)
                        end
                    end
                end
            end
            return table.concat(wrong, "; ")
            "#,
        )
        .unwrap();
    assert_eq!(wrong, Message::String("".into()));
}

/// A whole float past `i64::MAX` prints as the float it is, as Luau prints it, on each path a
/// script prints a value from: `print`, `tostring`, interpolation, a job's result, a shared
/// table, a worker's reply (never `i64::MAX`, `9223372036854775807`).
#[test]
fn the_runner_prints_a_float_past_the_largest_integer_as_a_float_on_every_path() {
    let tree = Tree::new(&[
        ("echo.luau", ECHO),
        (
            "main.luau",
            r#"
local w = require("@skein/worker").spawn { source = "return function(m) return m end" }
local shared = jobs.shared.table("big")
for _, v in { 2^63, -2^63, 2^64 } do
    shared.v = v
    shared.nested = { v }
    w:send(v)
    print(v, tostring(v), `{v}`, jobs.dispatch("./echo", "echo", v):await(),
        jobs.dispatch("./echo", "echo", { v }):await()[1], shared.v, shared.nested[1], w:receive(10))
end
"#,
        ),
    ]);
    let (code, stdout, stderr) = skein_in(
        &tree.path(),
        &["run", "--allow", "worker.spawn", "main.luau"],
    );
    assert_eq!(code, 0, "{stderr}");
    let line = |v: &str| [v; 8].join("\t");
    assert_eq!(
        stdout,
        format!(
            "{}\n{}\n{}\n",
            line("9223372036854776000"),
            line("-9223372036854776000"),
            line("18446744073709552000")
        )
    );
}
