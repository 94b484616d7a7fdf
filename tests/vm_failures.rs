//! How a VM's failures reach a script: out of memory on the engine and on workers, a worker VM
//! retired after it hit its limit, nested `parallelFor` bounded, raised tables rendered.

use skein::{Plan, Pool};

use crate::support::{number, text, Tree};

const M: &str = r#"
local M = {}
function M.fail() error("the entry failed on purpose") end
function M.double(x) return x * 2 end
return M
"#;

#[test]
fn awaiting_a_rejection_with_the_engine_out_of_memory_raises_and_the_pool_serves_on() {
    let tree = Tree::new(&[("m.luau", M)]);
    let pool = Pool::new(1);
    let domain = tree.domain_with(&pool, Plan::new().memory_limit(8 * 1024 * 1024));
    let v = domain
        .eval(
            r#"local p = jobs.dispatch("./m", "fail")
               local hold = {}
               local n = 0
               for _, size in { 4096, 1024, 256, 64, 16, 1 } do
                   pcall(function()
                       while true do n += 1 hold[n] = string.rep("x", size) .. n end
                   end)
               end
               local ok, err = pcall(function() return p:await() end)
               return err"#,
        )
        .unwrap();
    assert_eq!(
        text(&v),
        "out of memory: the engine VM reached its memory limit of 8 MiB while making the \
         outcome of an awaited promise"
    );
    // The engine VM lived through it: the filled table died with the eval.
    still_serves(&domain);
}

/// A dispatch that proves the pool, and the engine VM that awaits it, still serve.
fn still_serves(domain: &skein::ScriptDomain) {
    let v = domain
        .eval(r#"return jobs.dispatch("./m", "double", 21):await()"#)
        .expect("the pool still serves");
    assert_eq!(number(&v), 42.0);
}

const HOG: &str = r#"
local M = {}
function M.hog() local t = {} for i = 1, 1e9 do t[i] = string.rep("x", 1024) .. i end end
function M.double(x) return x * 2 end
return M
"#;

#[test]
fn an_engine_allocation_past_the_limit_names_the_engine_vm_and_its_limit() {
    let tree = Tree::new(&[("m.luau", M)]);
    let pool = Pool::new(1);
    let domain = tree.domain_with(&pool, Plan::new().memory_limit(8 * 1024 * 1024));
    let err = domain
        .eval(r#"local t = {} for i = 1, 1e9 do t[i] = string.rep("x", 1024) .. i end"#)
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        "script eval failed: out of memory: the engine VM reached its memory limit of 8 MiB\n\
         eval:1"
    );
    still_serves(&domain);
}

#[test]
fn a_job_past_the_limit_names_the_worker_vm_and_its_limit() {
    let tree = Tree::new(&[("m.luau", HOG)]);
    let pool = Pool::new(1);
    let domain = tree.domain_with(&pool, Plan::new().memory_limit(16 * 1024 * 1024));
    let v = domain
        .eval(
            r#"local ok, err = pcall(function() return jobs.dispatch("./m", "hog"):await() end)
               return err"#,
        )
        .unwrap();
    let err = text(&v);
    assert_eq!(
        err.lines().next(),
        Some(
            "job './m:hog' failed: out of memory: the VM of worker 0 reached its memory limit \
             of 16 MiB"
        ),
        "{err}"
    );
    let v = domain
        .eval(r#"return jobs.dispatch("./m", "double", 21):await()"#)
        .expect("the pool still serves");
    assert_eq!(number(&v), 42.0);
}

#[test]
fn a_task_spawn_bomb_is_caught_by_pcall_with_a_named_out_of_memory_text() {
    let tree = Tree::new(&[("m.luau", M)]);
    let pool = Pool::new(1);
    let domain = tree.domain_with(&pool, Plan::new().memory_limit(8 * 1024 * 1024));
    let v = domain
        .eval(
            r#"local ok, err = pcall(function()
                   while true do task.spawn(function() task.wait(0.05) end) end
               end)
               -- The spawned tasks hold the memory until they end.
               task.wait(0.2)
               return tostring(ok) .. " " .. tostring(err)"#,
        )
        .unwrap();
    let caught = text(&v);
    assert_eq!(
        caught.lines().next(),
        Some(
            "false runtime error: out of memory: the engine VM reached its memory limit of 8 MiB \
             while making a task for task.spawn"
        ),
        "{caught}"
    );
    still_serves(&domain);
}
