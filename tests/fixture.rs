//! The fixture that defines a domain: two domains made from the same plan, in one process and
//! on one pool, share nothing. Not globals, not module tables (in the engine VM or in worker
//! VMs), not userdata or the metatables of its types, not key bindings, not shared tables or
//! queues, not engine events, not grants.

use std::time::Duration;

use skein::capability::{CapabilityId, CapabilitySet, RootAuthority};
use skein::job::JobOptions;
use skein::{DomainSpec, Message, Plan, Pool, ScriptDomain};

use crate::support::{text, Tree};

const STATE: &str = r#"
local M = { hits = 0 }
-- Counts calls in this VM's copy of the module.
function M.hit()
    M.hits += 1
    return M.hits
end
return M
"#;

/// `need(name)` answers whether the running code holds capability `name`.
fn plan(tree: &Tree) -> Plan {
    Plan::new().root(tree.path()).function("need", |lua, args| {
        let name: String = lua.unpack_multi(args)?;
        lua.pack_multi(skein::capability::require_capability(&name).is_ok())
    })
}

fn twins(pool: &Pool, tree: &Tree) -> (ScriptDomain, ScriptDomain) {
    let grant = RootAuthority::new().grant(CapabilitySet::from_iter([CapabilityId::new(
        "input.observe",
    )
    .unwrap()]));
    let a = ScriptDomain::new(pool, DomainSpec::new("a").plan(plan(tree)).grant(grant)).unwrap();
    let b = ScriptDomain::new(pool, DomainSpec::new("b").plan(plan(tree))).unwrap();
    (a, b)
}

#[test]
fn two_domains_from_one_plan_share_nothing() {
    let tree = Tree::new(&[("state.luau", STATE)]);
    let pool = Pool::new(1);
    let (a, b) = twins(&pool, &tree);

    // Globals and the engine VM's module tables.
    a.exec(r#"marker = "a" require("./state").hit() require("./state").hit()"#)
        .unwrap();
    assert_eq!(b.eval("return marker").unwrap(), Message::Nil);
    assert_eq!(
        b.eval(r#"return require("./state").hit()"#).unwrap(),
        Message::Number(1.0)
    );

    // Worker VMs and key bindings: the one worker thread keeps a VM per domain, and the same
    // key names a different binding in each.
    let keyed = |d: &ScriptDomain| {
        d.dispatch_with("./state", "hit", Message::Nil, &JobOptions::new().key("k"))
            .unwrap()
            .wait()
            .unwrap()
    };
    assert_eq!(keyed(&a), Message::Number(1.0));
    assert_eq!(keyed(&a), Message::Number(2.0));
    assert_eq!(keyed(&b), Message::Number(1.0));
    assert_eq!(
        a.eval(r#"return jobs.context() == nil and jobs.release("k")"#)
            .unwrap(),
        Message::Boolean(true)
    );
    // B's binding outlived A's release.
    assert_eq!(keyed(&b), Message::Number(2.0));

    // Shared tables and queues of the same names.
    a.exec(r#"jobs.shared.table("scores").top = 99 jobs.shared.queue("work"):push(1)"#)
        .unwrap();
    assert_eq!(
        b.eval(r#"return jobs.shared.table("scores").top"#).unwrap(),
        Message::Nil
    );
    assert_eq!(
        b.eval(r#"return jobs.shared.queue("work"):len()"#).unwrap(),
        Message::Number(0.0)
    );

    // Engine events raised on one are not seen by the other's watchers, and each domain's own
    // event reaches its own watcher exactly once (so the silence is not a watcher that never
    // hears anything).
    let watch = r#"seen = 0 engine.on("tick", function() seen += 1 end)"#;
    a.exec(watch).unwrap();
    b.exec(watch).unwrap();
    let seen = |d: &ScriptDomain| d.eval("return seen").unwrap();
    a.raise_engine_event("tick", Message::Nil).unwrap();
    a.frame(Duration::from_millis(16));
    b.frame(Duration::from_millis(16));
    assert_eq!(seen(&a), Message::Number(1.0));
    assert_eq!(seen(&b), Message::Number(0.0));
    b.raise_engine_event("tick", Message::Nil).unwrap();
    a.frame(Duration::from_millis(16));
    b.frame(Duration::from_millis(16));
    assert_eq!(seen(&a), Message::Number(1.0));
    assert_eq!(seen(&b), Message::Number(1.0));

    // Grants: `a` holds input.observe, `b` nothing, on the same worker thread.
    let ask = r#"return jobs.dispatch("./probe", "ask", "input.observe"):await()"#;
    tree.write(
        "probe.luau",
        "return { ask = function(name) return tostring(need(name)) end }",
    );
    assert_eq!(text(&a.eval(ask).unwrap()), "true");
    assert_eq!(text(&b.eval(ask).unwrap()), "false");
}

#[test]
fn no_userdata_and_no_userdata_type_is_shared() {
    let tree = Tree::new(&[("state.luau", STATE)]);
    let pool = Pool::new(1);
    let (a, b) = twins(&pool, &tree);
    // A userdata of one domain's VM never leaves it: only copies (messages) do.
    let err = a
        .eval(r#"return jobs.shared.table("t")"#)
        .unwrap_err()
        .to_string();
    assert!(err.contains("userdata"), "{err}");
    // A userdata type's metatable is protected in every VM: no domain's code can reach it to
    // change how another domain's handles behave.
    let probe = r#"
        local mt = getmetatable(jobs.shared.table("t"))
        if type(mt) ~= "table" then return "locked" end
        local ok = pcall(function() mt.extra = "a" end)
        return if ok then "written" else "readonly"
    "#;
    assert_eq!(text(&a.eval(probe).unwrap()), "locked");
    assert_eq!(text(&b.eval(probe).unwrap()), "locked");
}
