//! The worker's per-item path below mlua: the entry kept per VM (and what must still reach it:
//! an edit, a module replacing its own entry), arguments and results built and read in place,
//! and a root task's first run outside the scheduler's tables (a yield, a deadline, a failure,
//! a cancel still behave as for any task).

use skein::{Message, Plan, Pool};

use crate::support::{assert_contains, list, number, refusal, string, text, Tree};

/// One worker, so every item runs in the same VM (and sees what earlier items left there).
fn one_worker(files: &[(&str, &str)]) -> (Tree, Pool) {
    (Tree::new(files), Pool::new(1))
}

const SWAP: &str = r#"
local M = {}
function M.v() M.v = function() return 2 end return 1 end
function M.toNumber() M.toNumber = 5 return 1 end
function M.echo(x) return x end
function M.spin() while true do end end
function M.yields(x) task.wait(0) task.wait(0) return x * 2 end
function M.fails() error("failed on purpose", 0) end
return M
"#;

#[test]
fn a_module_that_replaces_its_entry_is_seen_by_the_next_item() {
    let (tree, pool) = one_worker(&[("swap.luau", SWAP)]);
    let domain = tree.domain(&pool);
    let v = domain
        .eval(
            r#"local a = jobs.dispatch("./swap", "v"):await()
               local b = jobs.dispatch("./swap", "v"):await()
               local c = jobs.dispatch("./swap", "v"):await()
               return { a, b, c }"#,
        )
        .unwrap();
    let got: Vec<f64> = list(&v).iter().map(number).collect();
    assert_eq!(got, [1.0, 2.0, 2.0]);
}

#[test]
fn an_entry_replaced_by_a_non_function_rejects_the_next_item_naming_what_it_is() {
    let (tree, pool) = one_worker(&[("swap.luau", SWAP)]);
    let domain = tree.domain(&pool);
    let root = tree.path().display().to_string();
    let first = domain
        .eval(r#"return jobs.dispatch("./swap", "toNumber"):await()"#)
        .unwrap();
    assert_eq!(number(&first), 1.0);
    let err = refusal(&domain, r#"jobs.dispatch("./swap", "toNumber"):await()"#);
    assert_contains(
        &err,
        &format!(
            "job './swap:toNumber' failed: entry 'toNumber' of module {root}/swap.luau is not a \
             function (it is a number)"
        ),
    );
    // The VM serves on, through the same cached module.
    let v = domain
        .eval(r#"return jobs.dispatch("./swap", "echo", 3):await()"#)
        .unwrap();
    assert_eq!(number(&v), 3.0);
}

#[test]
fn an_edit_replacing_a_cached_entry_reaches_the_next_item_and_a_removed_one_rejects() {
    let (tree, pool) = one_worker(&[("edit.luau", "return { v = function() return 1 end }\n")]);
    let domain = tree.domain(&pool);
    let root = tree.path().display().to_string();
    let twice =
        r#"return jobs.dispatch("./edit", "v"):await() + jobs.dispatch("./edit", "v"):await()"#;
    assert_eq!(number(&domain.eval(twice).unwrap()), 2.0);
    tree.write(
        "edit.luau",
        "return { v = function() return 100 end } -- edited\n",
    );
    assert_eq!(number(&domain.eval(twice).unwrap()), 200.0);
    tree.write(
        "edit.luau",
        "return { w = function() return 1 end } -- v is gone\n",
    );
    let err = refusal(&domain, r#"jobs.dispatch("./edit", "v"):await()"#);
    assert_contains(
        &err,
        &format!("entry 'v' of module {root}/edit.luau is not a function (it is nil)"),
    );
}

#[test]
fn arguments_and_results_keep_their_types_through_the_raw_path() {
    let (tree, pool) = one_worker(&[("swap.luau", SWAP)]);
    let domain = tree.domain(&pool);
    let v = domain
        .eval(
            r#"local n = jobs.dispatch("./swap", "echo", 1.5):await()
               local s = jobs.dispatch("./swap", "echo", "a short string"):await()
               local t = jobs.dispatch("./swap", "echo", { 1, "two", { three = 3 } }):await()
               local b = jobs.dispatch("./swap", "echo", true):await()
               local z = jobs.dispatch("./swap", "echo", nil):await()
               local buf = jobs.dispatch("./swap", "echo", buffer.fromstring("bytes")):await()
               return { n, s, t[2], t[3].three, b, z == nil, buffer.tostring(buf) }"#,
        )
        .unwrap();
    let got = list(&v);
    assert_eq!(number(&got[0]), 1.5);
    assert_eq!(text(&got[1]), "a short string");
    assert_eq!(text(&got[2]), "two");
    assert_eq!(number(&got[3]), 3.0);
    assert_eq!(got[4], Message::Boolean(true));
    assert_eq!(got[5], Message::Boolean(true));
    assert_eq!(text(&got[6]), "bytes");
    // A Rust-issued integer argument comes back an integer, a string a string.
    let echoed = domain
        .dispatch("./swap", "echo", Message::Integer(i64::MAX))
        .unwrap()
        .wait()
        .unwrap();
    assert_eq!(echoed, Message::Integer(i64::MAX));
    let echoed = domain
        .dispatch("./swap", "echo", string("from the host"))
        .unwrap()
        .wait()
        .unwrap();
    assert_eq!(echoed, string("from the host"));
}

#[test]
fn a_yielding_entry_runs_to_its_end_and_its_coroutine_serves_the_next_items() {
    let (tree, pool) = one_worker(&[("swap.luau", SWAP)]);
    let domain = tree.domain(&pool);
    let v = domain
        .eval(
            r#"local ps = {}
               for i = 1, 40 do ps[i] = jobs.dispatch("./swap", "yields", i) end
               local sum = 0
               for i = 1, 40 do sum += ps[i]:await() end
               for i = 1, 40 do sum += jobs.dispatch("./swap", "echo", i):await() end
               return sum"#,
        )
        .unwrap();
    assert_eq!(number(&v), (2 * 820 + 820) as f64);
}

#[test]
fn a_deadline_hit_inside_a_cached_entry_rejects_and_the_vm_serves_on() {
    let (tree, pool) = one_worker(&[("swap.luau", SWAP)]);
    let domain = tree.domain(&pool);
    // The module and its entries are cached by the first item.
    let v = domain
        .eval(r#"return jobs.dispatch("./swap", "echo", 1):await()"#)
        .unwrap();
    assert_eq!(number(&v), 1.0);
    for _ in 0..2 {
        let err = refusal(
            &domain,
            r#"jobs.dispatch("./swap", "spin", nil, { deadline = 0.05, name = "spinner" }):await()"#,
        );
        assert_contains(
            &err,
            "job 'spinner' failed: deadline exceeded: one run took longer than 0.05 s",
        );
        let v = domain
            .eval(r#"return jobs.dispatch("./swap", "echo", 2):await()"#)
            .unwrap();
        assert_eq!(number(&v), 2.0);
    }
}

#[test]
fn a_failure_in_the_first_run_rejects_with_its_message_and_the_vm_serves_on() {
    let (tree, pool) = one_worker(&[("swap.luau", SWAP)]);
    let domain = tree.domain(&pool);
    let root = tree.path().display().to_string();
    // The code that catches the rejection sees its text alone.
    let err = refusal(&domain, r#"jobs.dispatch("./swap", "fails"):await()"#);
    assert_eq!(err, "job './swap:fails' failed: failed on purpose");
    // Uncaught, it fails the task that awaited it, and the report carries the job's stack,
    // which names the module's line (raised from the entry's first run), before the task's.
    domain
        .exec(r#"task.spawn(function() jobs.dispatch("./swap", "fails"):await() end)"#)
        .unwrap();
    domain.run_until_idle().unwrap();
    let reports = domain.take_reports();
    assert_eq!(reports.len(), 1, "{reports:?}");
    let report = &reports[0];
    assert!(
        report
            .message
            .starts_with("job './swap:fails' failed: failed on purpose\nstack traceback:\n"),
        "{report:?}"
    );
    assert_contains(&report.message, &format!("{root}/swap.luau:8"));
    assert_contains(&report.message, "in function <exec:1>");
    let v = domain
        .eval(r#"return jobs.dispatch("./swap", "echo", 5):await()"#)
        .unwrap();
    assert_eq!(number(&v), 5.0);
}

#[test]
fn arguments_the_worker_vm_has_no_memory_for_reject_the_item_and_the_vm_serves_on() {
    let hog = r#"
local M = {}
local held = {}
for i = 1, 4 do held[i] = string.rep("y", 1024 * 1024) .. i end
function M.echo(x) return #held + (if type(x) == "string" then #x else x) end
return M
"#;
    let (tree, pool) = one_worker(&[("hog.luau", hog)]);
    let domain = tree.domain_with(&pool, Plan::new().memory_limit(16 * 1024 * 1024));
    // Built on the worker under protection: a memory error there is the item's refusal.
    let big = Message::String(vec![b'x'; 12 * 1024 * 1024].into());
    let err = domain
        .dispatch("./hog", "echo", big)
        .unwrap()
        .wait()
        .unwrap_err()
        .to_string();
    assert_contains(
        &err,
        "its arguments could not be read: out of memory: the VM reached its memory limit",
    );
    let v = domain
        .dispatch("./hog", "echo", string("four"))
        .unwrap()
        .wait()
        .unwrap();
    assert_eq!(v, Message::Number(8.0));
}
