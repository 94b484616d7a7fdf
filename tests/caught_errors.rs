//! What code that catches an error reads: the error's text as the docs quote it, a string, by
//! every way Luau catches (`pcall`, `xpcall`'s handler, `coroutine.resume`, a `coroutine.wrap`
//! under `pcall`, an awaited rejection), never mlua's error object with its `runtime error: `
//! prefix and stack; and any other raised value as it was raised.

use skein::Pool;

use crate::support::{list, text, Tree};

const REFUSED: &str =
    "jobs.dispatch: unknown option 'bogus' in opts: expected deadline, name, key or supersede";

#[test]
fn every_way_of_catching_reads_the_error_s_text() {
    let tree = Tree::new(&[(
        "m.luau",
        "return { broke = function() error('job broke', 0) end }\n",
    )]);
    let pool = Pool::new(1);
    let domain = tree.domain(&pool);
    let caught = domain
        .eval(
            r#"
            local function refused() jobs.dispatch("./m", "broke", nil, { bogus = 1 }) end
            local seen = {}
            local function keep(err) table.insert(seen, typeof(err) .. " " .. tostring(err)) end
            keep(select(2, pcall(refused)))
            keep(select(2, xpcall(refused, function(err) return err end)))
            keep(select(2, xpcall(refused, function(err) return typeof(err) end)))
            keep(select(2, coroutine.resume(coroutine.create(refused))))
            keep(select(2, pcall(coroutine.wrap(refused))))
            keep(select(2, pcall(function()
                return jobs.dispatch("./m", "broke", nil, { name = "j" }):await()
            end)))
            -- Luau's own errors and raised values are as Luau makes them.
            keep(select(2, pcall(function() error("plain", 0) end)))
            keep(select(2, pcall(function() error({ code = 7 }) end)).code)
            -- Still a string where a script builds on it.
            keep("joined " .. select(2, pcall(refused)))
            return seen
            "#,
        )
        .unwrap();
    let caught: Vec<String> = list(&caught).iter().map(text).collect();
    assert_eq!(
        caught,
        [
            format!("string {REFUSED}"),
            format!("string {REFUSED}"),
            "string string".to_owned(),
            format!("string {REFUSED}"),
            format!("string {REFUSED}"),
            "string job 'j' failed: job broke".to_owned(),
            "string plain".to_owned(),
            "number 7".to_owned(),
            format!("string joined {REFUSED}"),
        ]
    );
}
