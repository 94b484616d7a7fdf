//! Capabilities of contexts and child domains: a context holds a part of its domain's grant,
//! its handlers and everything they start run under it (tasks, pool items, and the forwarded
//! queries and recorded commands of those items), and a child domain gets only a part of its
//! parent's grant.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use skein::capability::{CapabilityId, CapabilitySet, RootAuthority};
use skein::{ContextSpec, DomainSpec, Error, Message, Phase, Plan, Pool, ScriptDomain};

use crate::support::{assert_contains, wait_until, Tree};

fn set(names: &[&str]) -> CapabilitySet {
    names
        .iter()
        .map(|n| CapabilityId::new(n).expect("valid name"))
        .collect()
}

/// `need(name)`: a host function that checks `name` at its entry, as a native service would.
fn plan(tree: &Tree) -> Plan {
    Plan::new().root(tree.path()).function("need", |lua, args| {
        let name: String = lua.unpack_multi(args)?;
        skein::capability::require_capability(&name)?;
        lua.pack_multi(true)
    })
}

const PROBE: &str = r#"
return {
    check = function(name) return need(name) end,
    query = function() return world.check() end,
    command = function() world.note() return true end,
}
"#;

/// Domain `game` granted `input.observe` and `audio.play`; its context `ui` holds only
/// `input.observe`, its context `all` (no capabilities set) the whole grant.
fn game(pool: &Pool, tree: &Tree) -> ScriptDomain {
    let grant = RootAuthority::new().grant(set(&["input.observe", "audio.play"]));
    let spec = DomainSpec::new("game")
        .plan(plan(tree))
        .grant(grant)
        .context(
            ContextSpec::new("ui")
                .phases([Phase::Input])
                .capabilities(set(&["input.observe"])),
        )
        .unwrap()
        .context(ContextSpec::new("all").phases([Phase::Update]))
        .unwrap();
    ScriptDomain::new(pool, spec).expect("domain")
}

fn denied_to_ui(domain: &ScriptDomain, capability: &str) -> String {
    format!(
        "capability '{capability}' denied to domain 'game' ({}, generation 1, context 'ui')",
        domain.id()
    )
}

/// Pumps the domain until the global `done` is set (at most 10 s), then answers `expr`.
fn when_done(domain: &ScriptDomain, expr: &str) -> Message {
    let done = wait_until(Duration::from_secs(10), || {
        domain.pump();
        domain.eval("return done == true").unwrap() == Message::Boolean(true)
    });
    assert!(done, "`done` was never set: {:?}", domain.take_reports());
    domain.eval(&format!("return {expr}")).unwrap()
}

#[test]
fn a_context_asking_for_more_than_the_domain_holds_is_refused_naming_it() {
    let pool = Pool::new(1);
    let grant = RootAuthority::new().grant(set(&["input.observe"]));
    let spec = DomainSpec::new("game")
        .grant(grant)
        .context(ContextSpec::new("ok").capabilities(set(&["input.observe"])))
        .unwrap()
        .context(ContextSpec::new("ui").capabilities(set(&[
            "input.observe",
            "net.connect",
            "audio.play",
        ])))
        .unwrap();
    let err = ScriptDomain::new(&pool, spec).err().expect("refused");
    assert_eq!(
        err.to_string(),
        "context 'ui' cannot delegate capabilities it does not hold: audio.play, net.connect"
    );
    match err {
        Error::OverDelegation(e) => {
            assert_eq!(e.who, "context 'ui'");
            assert_eq!(
                e.missing,
                set(&["audio.play", "net.connect"])
                    .iter()
                    .cloned()
                    .collect::<Vec<_>>()
            );
        }
        other => panic!("expected OverDelegation, got {other:?}"),
    }
    // With no grant at all, any capability a context asks for is too much.
    let spec = DomainSpec::new("bare")
        .context(ContextSpec::new("c").capabilities(set(&["input.observe"])))
        .unwrap();
    assert_eq!(
        ScriptDomain::new(&pool, spec).err().unwrap().to_string(),
        "context 'c' cannot delegate capabilities it does not hold: input.observe"
    );
}

#[test]
fn a_handler_holds_its_contexts_part_across_yields_and_in_the_tasks_it_starts() {
    let tree = Tree::new(&[]);
    let pool = Pool::new(1);
    let domain = game(&pool, &tree);
    domain
        .exec(
            r#"
            local function try(name)
                local ok, err = pcall(need, name)
                return if ok then "ok" else tostring(err)
            end
            seen = {}
            require("@skein/context").bind("ui", { input = function()
                seen.own = try("input.observe")
                seen.other = try("audio.play")
                -- The yields under test: the part holds across them and in spawned tasks.
                task.spawn(function()
                    task.wait()
                    seen.spawned = try("audio.play")
                end)
                task.wait(0.01) -- a yield under test, as above: the part holds across it
                seen.ownAfter = try("input.observe")
                seen.otherAfter = try("audio.play")
                done = true
            end })
            require("@skein/context").bind("all", { update = function()
                seen.all = try("audio.play")
            end })
            "#,
        )
        .unwrap();
    let report = domain.run_phase(Phase::Input, &[]).unwrap();
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    assert_eq!(when_done(&domain, "seen.own"), Message::String("ok".into()));
    let denied = denied_to_ui(&domain, "audio.play");
    for key in ["other", "spawned", "otherAfter"] {
        let Message::String(text) = domain.eval(&format!("return seen.{key}")).unwrap() else {
            panic!("seen.{key} is not a string");
        };
        assert_contains(&String::from_utf8_lossy(&text), &denied);
    }
    assert_eq!(
        domain.eval("return seen.ownAfter").unwrap(),
        Message::String("ok".into())
    );
    // The host's own code, and a context with no capabilities set, hold the whole grant.
    assert_eq!(
        domain.eval("return need('audio.play')").unwrap(),
        Message::Boolean(true)
    );
    domain.run_phase(Phase::Update, &[]).unwrap();
    assert_eq!(
        domain.eval("return seen.all").unwrap(),
        Message::String("ok".into())
    );
    // The three denials count toward the domain and are reported with the context's name.
    assert_eq!(domain.denials(), 3);
    let reports = domain.take_reports();
    assert_eq!(reports.len(), 3, "{reports:?}");
    assert!(reports.iter().all(|r| r.message == denied), "{reports:?}");
}

#[test]
fn an_item_a_handler_dispatches_holds_the_contexts_part_and_the_hosts_holds_the_domains() {
    let tree = Tree::new(&[("probe.luau", PROBE)]);
    let pool = Pool::new(2);
    let domain = game(&pool, &tree);
    domain
        .exec(
            r#"
            require("@skein/context").bind("ui", { input = function()
                own = jobs.dispatch("./probe", "check", "input.observe"):await()
                local ok, err = pcall(function()
                    return jobs.dispatch("./probe", "check", "audio.play"):await()
                end)
                other = if ok then "ok" else tostring(err)
                done = true
            end })
            "#,
        )
        .unwrap();
    domain.run_phase(Phase::Input, &[]).unwrap();
    assert_eq!(when_done(&domain, "own"), Message::Boolean(true));
    let Message::String(other) = domain.eval("return other").unwrap() else {
        panic!("other is not a string");
    };
    assert_contains(
        &String::from_utf8_lossy(&other),
        &denied_to_ui(&domain, "audio.play"),
    );
    // The same item dispatched by host code runs under the domain's grant.
    let host = domain
        .dispatch("./probe", "check", Message::String("audio.play".into()))
        .unwrap()
        .wait()
        .unwrap();
    assert_eq!(host, Message::Boolean(true));
    assert_eq!(domain.denials(), 1);
}

#[test]
fn a_forwarded_query_and_a_recorded_command_run_as_the_item_that_made_them() {
    let tree = Tree::new(&[("probe.luau", PROBE)]);
    let pool = Pool::new(2);
    let domain = game(&pool, &tree);
    domain
        .register_query("world.check", |()| {
            Ok(Message::Boolean(
                skein::capability::require_capability("audio.play").is_ok(),
            ))
        })
        .unwrap();
    let notes = Rc::new(RefCell::new(Vec::new()));
    let seen = notes.clone();
    domain
        .register_command("world.note", move |()| {
            seen.borrow_mut()
                .push(skein::capability::require_capability("audio.play").is_ok());
            Ok(())
        })
        .unwrap();
    domain
        .exec(
            r#"
            require("@skein/context").bind("ui", { input = function()
                fromUi = jobs.dispatch("./probe", "query"):await()
                jobs.dispatch("./probe", "command"):await()
                done = true
            end })
            "#,
        )
        .unwrap();
    domain.run_phase(Phase::Input, &[]).unwrap();
    assert_eq!(when_done(&domain, "fromUi"), Message::Boolean(false));
    assert_eq!(*notes.borrow(), [false]);
    // Dispatched by the domain's own code (not from a handler), the same items hold the
    // whole grant. (The engine thread must pump to answer the query: `eval` does.)
    let from_domain = domain
        .eval("return jobs.dispatch('./probe', 'query'):await()")
        .unwrap();
    assert_eq!(from_domain, Message::Boolean(true));
    domain
        .eval("return jobs.dispatch('./probe', 'command'):await()")
        .unwrap();
    assert_eq!(*notes.borrow(), [false, true]);
    // The two checks made as the context were denied, attributed to it.
    assert_eq!(domain.denials(), 2);
    let reports = domain.take_reports();
    let denied = denied_to_ui(&domain, "audio.play");
    assert!(reports.iter().all(|r| r.message == denied), "{reports:?}");
}

#[test]
fn a_context_with_filesystem_read_reads_below_the_domains_roots() {
    let tree = Tree::new(&[("data/in.txt", "hello")]);
    let pool = Pool::new(1);
    let grant = RootAuthority::new()
        .grant(set(&["input.observe"]))
        .read_root(tree.path().join("data"))
        .unwrap();
    let spec = DomainSpec::new("game")
        .plan(plan(&tree))
        .grant(grant)
        .context(
            ContextSpec::new("reader")
                .phases([Phase::Input])
                .capabilities(set(&["filesystem.read"])),
        )
        .unwrap();
    let domain = ScriptDomain::new(&pool, spec).unwrap();
    let path = tree.path().join("data/in.txt");
    domain
        .exec(&format!(
            r#"
            require("@skein/context").bind("reader", {{ input = function()
                text = require("@skein/fs").readFile("{}")
                local ok, err = pcall(need, "input.observe")
                observe = if ok then "ok" else tostring(err)
                done = true
            end }})
            "#,
            path.display()
        ))
        .unwrap();
    domain.run_phase(Phase::Input, &[]).unwrap();
    assert_eq!(when_done(&domain, "text"), Message::String("hello".into()));
    let Message::String(observe) = domain.eval("return observe").unwrap() else {
        panic!("observe is not a string");
    };
    assert_contains(
        &String::from_utf8_lossy(&observe),
        &format!(
            "capability 'input.observe' denied to domain 'game' ({}, generation 1, context 'reader')",
            domain.id()
        ),
    );
}

#[test]
fn a_child_domain_gets_only_the_part_of_its_parents_grant_it_asked_for() {
    let tree = Tree::new(&[("data/in.txt", "hello"), ("probe.luau", PROBE)]);
    let pool = Pool::new(1);
    let grant = RootAuthority::new()
        .grant(set(&["input.observe", "audio.play"]))
        .read_root(tree.path().join("data"))
        .unwrap();
    let parent = ScriptDomain::new(
        &pool,
        DomainSpec::new("game").plan(plan(&tree)).grant(grant),
    )
    .unwrap();

    // Asking for more than the parent holds names the parent and every missing capability.
    let err = parent
        .child_spec("hud", set(&["audio.play", "net.connect", "gpu.compute"]))
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "domain 'game' cannot delegate capabilities it does not hold: gpu.compute, net.connect"
    );
    assert!(matches!(err, Error::OverDelegation(ref e) if e.who == "domain 'game'"));

    let spec = DomainSpec::new("hud")
        .plan(plan(&tree))
        .delegate_from(&parent, set(&["audio.play", "filesystem.read"]))
        .unwrap();
    assert_eq!(
        spec.granted().capabilities(),
        &set(&["audio.play", "filesystem.read"])
    );
    assert_eq!(spec.granted().read_roots(), parent.grant().read_roots());
    let child = ScriptDomain::new(&pool, spec).unwrap();
    assert_eq!(
        child.eval("return need('audio.play')").unwrap(),
        Message::Boolean(true)
    );
    let path = tree.path().join("data/in.txt");
    assert_eq!(
        child
            .eval(&format!(
                "return require('@skein/fs').readFile('{}')",
                path.display()
            ))
            .unwrap(),
        Message::String("hello".into())
    );
    let err = child
        .dispatch("./probe", "check", Message::String("input.observe".into()))
        .unwrap()
        .wait()
        .unwrap_err()
        .to_string();
    assert_contains(
        &err,
        &format!(
            "capability 'input.observe' denied to domain 'hud' ({}, generation 1)",
            child.id()
        ),
    );
    assert_eq!((child.denials(), parent.denials()), (1, 0));

    // A child can hand on only what it holds: its own child can't get back `input.observe`.
    let err = child
        .child_spec("grandchild", set(&["input.observe"]))
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "domain 'hud' cannot delegate capabilities it does not hold: input.observe"
    );
}

#[test]
fn a_named_event_handler_bound_for_a_context_runs_under_that_context() {
    let (tree, pool) = (Tree::new(&[("probe.luau", PROBE)]), Pool::new(1));
    let domain = game(&pool, &tree);
    domain
        .exec(
            r#"
            local events = require("@skein/events")
            seen = {}
            local function probe(_, name)
                local ok, err = pcall(need, "audio.play")
                table.insert(seen, `{name}:{ok}:{ok or tostring(err)}`)
            end
            events.on("asUi", probe, "ui")
            events.on("asDomain", probe)
            "#,
        )
        .unwrap();
    domain.mailbox().post_named("asUi", Message::Nil).unwrap();
    domain
        .mailbox()
        .post_named("asDomain", Message::Nil)
        .unwrap();
    let report = domain.drain_events();
    assert_eq!(report.delivered, 2, "{report:?}");
    let seen = domain.eval("return table.concat(seen, '|')").unwrap();
    let seen = crate::support::text(&seen);
    let (ui, whole) = seen.split_once('|').expect("two handler runs");
    assert!(ui.starts_with("asUi:false:"), "{ui}");
    assert_contains(ui, &denied_to_ui(&domain, "audio.play"));
    assert_eq!(whole, "asDomain:true:true");
}
