//! The cut-down `jobs.dispatch` / `await` path: entries found by the address of the Luau string
//! that names them, and `task.await`'s `(resolved, value)` hand-back, on both its settled and
//! its pending path.

use std::time::Duration;

use skein::{Message, Pool};

use crate::support::{assert_contains, field, list, number, text, wait_until, Tree};

/// Forty entries, each answering its own number, and a few that answer falsy values or fail;
/// `heldFalse(name)` answers only once a value is pushed to the shared queue `name`.
fn entries_module() -> String {
    let mut source = String::from("local M = {}\n");
    for i in 1..=40 {
        source.push_str(&format!("function M.e{i}() return {i} end\n"));
    }
    source.push_str(
        "function M.falsy() return false end\n\
         function M.none() return nil end\n\
         function M.fail() error('failed on purpose') end\n\
         function M.heldFalse(queue) jobs.shared.queue(queue):pop() return false end\n\
         M.notAFunction = 1\n\
         return M\n",
    );
    source
}

#[test]
fn entries_named_by_strings_made_at_run_time_each_reach_their_own_function() {
    let tree = Tree::new(&[("entries.luau", &entries_module())]);
    let pool = Pool::new(2);
    let domain = tree.domain(&pool);
    // Names are built at run time, in two different orders, so the same name arrives as a
    // string made anew and different names follow each other.
    let v = domain
        .eval(
            r#"
            local ps = {}
            for round = 1, 2 do
                for j = 1, 40 do
                    local i = if round == 1 then j else 41 - j
                    table.insert(ps, jobs.dispatch("./entries", "e" .. tostring(i)))
                end
            end
            local out = {}
            for k, p in ps do out[k] = p:await() end
            return out
            "#,
        )
        .expect("eval");
    let got: Vec<f64> = list(&v).iter().map(number).collect();
    let want: Vec<f64> = (1..=40).chain((1..=40).rev()).map(f64::from).collect();
    assert_eq!(got, want);
    // A name seen before that is not a function still fails with its own name.
    let err = domain
        .eval(
            r#"
            local name = "notA" .. "Function"
            local ok, e = pcall(function() return jobs.dispatch("./entries", name):await() end)
            local ok2, e2 = pcall(function() return jobs.dispatch("./entries", name):await() end)
            return { tostring(ok), e, tostring(ok2), e2 }
            "#,
        )
        .expect("eval");
    let parts: Vec<String> = list(&err).iter().map(text).collect();
    assert_eq!(parts[0], "false");
    assert_eq!(parts[2], "false");
    assert_contains(&parts[1], "entry 'notAFunction' of module");
    assert_contains(&parts[3], "entry 'notAFunction' of module");
}

#[test]
fn await_hands_back_falsy_values_failures_and_cancellation_settled_or_pending() {
    let tree = Tree::new(&[("entries.luau", &entries_module())]);
    let pool = Pool::new(2);
    let domain = tree.domain(&pool);
    // Pending when awaited: the job waits for a push that only a task deferred past the await
    // makes, so the task yields and the settlement resumes it.
    domain
        .exec(
            r#"
            out = {}
            local slow = jobs.dispatch("./entries", "heldFalse", "go")
            out.pendingAtAwait = slow:status() == "pending"
            task.defer(function() jobs.shared.queue("go"):push(true) end)
            out.pendingFalse = slow:await() == false
            f, n, e = jobs.dispatch("./entries", "falsy"), jobs.dispatch("./entries", "none"),
                jobs.dispatch("./entries", "fail")
            "#,
        )
        .expect("exec");
    // Settled before the await: the host pumps until all three settled, then awaits them.
    assert!(wait_until(Duration::from_secs(10), || {
        domain.pump();
        domain
            .eval("return out.pendingFalse ~= nil and f:status() ~= 'pending' and n:status() ~= 'pending' and e:status() ~= 'pending'")
            .expect("eval")
            == Message::Boolean(true)
    }));
    let v = domain
        .eval(
            r#"
            out.settledFalse = f:await() == false
            out.settledNil = n:await() == nil
            local ok, err = pcall(function() return e:await() end)
            out.failOk = ok
            out.failText = tostring(err)
            -- Nothing is ever pushed to "never": only the cancel settles it.
            local c = jobs.dispatch("./entries", "heldFalse", "never")
            c:cancel()
            local cok, cerr = pcall(function() return c:await() end)
            out.cancelOk = cok
            out.cancelText = tostring(cerr)
            return out
            "#,
        )
        .expect("eval");
    for name in [
        "pendingAtAwait",
        "pendingFalse",
        "settledFalse",
        "settledNil",
    ] {
        assert!(
            matches!(field(&v, name), Message::Boolean(true)),
            "{name}: {v:?}"
        );
    }
    for name in ["failOk", "cancelOk"] {
        assert!(
            matches!(field(&v, name), Message::Boolean(false)),
            "{name}: {v:?}"
        );
    }
    assert_contains(&text(field(&v, "failText")), "failed on purpose");
    assert_eq!(text(field(&v, "cancelText")), "cancelled");
}
