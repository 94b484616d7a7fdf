//! `@skein/interfaces`: composing effective tables in one domain generation, every refusal
//! with its text and nothing changed after it, the read-only view, restarts and domains
//! keeping theirs apart, the refusals of worker VMs and actors, and the host's view.

use skein::capability::{CapabilityId, CapabilitySet, RootAuthority};
use skein::interface::{InterfaceField, InterfaceInfo};
use skein::lifecycle::Load;
use skein::{ContextSpec, DomainSpec, Message, Phase, Pool, ScriptDomain};

use crate::support::{number, refusal, text, Tree};

fn domain(pool: &Pool, name: &str) -> ScriptDomain {
    let domain = ScriptDomain::new(pool, DomainSpec::new(name)).expect("domain");
    domain
        .eval(r#"interfaces = require("@skein/interfaces")"#)
        .unwrap();
    domain
}

/// The error text `body` raises, as the code that caught it sees it: one line.
#[track_caller]
fn raised(domain: &ScriptDomain, body: &str) -> String {
    let full = refusal(domain, body);
    assert!(
        !full.contains('\n'),
        "a caught error is its text alone: {full:?}"
    );
    full
}

fn field(name: &str, provider: &str) -> InterfaceField {
    InterfaceField {
        name: name.to_owned(),
        provider: provider.to_owned(),
    }
}

#[test]
fn provides_compose_into_one_effective_table() {
    let pool = Pool::new(1);
    let d = domain(&pool, "game");
    let out = d
        .eval(
            r#"
            assert(interfaces.get("ui.hud") == nil)
            interfaces.provide("ui.hud", { show = function() return "shown" end, layer = 3 })
            local early = interfaces.get("ui.hud")
            interfaces.provide("ui.hud", { hide = function() return "hidden" end })
            interfaces.provide("audio", { volume = 0.5 })
            local hud = interfaces.expect("ui.hud")
            -- One table, composed in place: a consumer that took it early sees later fields.
            assert(rawequal(hud, early) and rawequal(hud, interfaces.get("ui.hud")))
            local names = {}
            for k in pairs(hud) do table.insert(names, k) end
            table.sort(names)
            return { hud.show(), early.hide(), hud.layer, interfaces.expect("audio").volume,
                table.concat(names, ","), table.concat(interfaces.list(), ",") }
            "#,
        )
        .unwrap();
    assert_eq!(
        out,
        Message::List(vec![
            Message::String("shown".into()),
            Message::String("hidden".into()),
            Message::Number(3.0),
            Message::Number(0.5),
            Message::String("hide,layer,show".into()),
            Message::String("audio,ui.hud".into()),
        ])
    );
}

#[test]
fn every_refusal_names_its_cause_and_changes_nothing() {
    let pool = Pool::new(1);
    let d = domain(&pool, "game");
    d.eval(r#"interfaces.provide("ui.hud", { show = 1, hide = 2 })"#)
        .unwrap();
    let before = d.interfaces();
    let cases = [
        (
            r#"interfaces.provide(42, {})"#,
            "interfaces.provide: name must be a string, got a number",
        ),
        (
            r#"interfaces.provide("UI.Hud", { a = 1 })"#,
            "interfaces.provide: invalid interface name 'UI.Hud': each dotted segment must be a \
             lowercase letter followed by lowercase letters, digits or '_'",
        ),
        (
            r#"interfaces.provide("ui..hud", { a = 1 })"#,
            "interfaces.provide: invalid interface name 'ui..hud': each dotted segment must be a \
             lowercase letter followed by lowercase letters, digits or '_'",
        ),
        (
            r#"interfaces.provide("", { a = 1 })"#,
            "interfaces.provide: an interface name must be 1 to 256 bytes, got 0",
        ),
        (
            r#"interfaces.provide(string.rep("a", 257), { a = 1 })"#,
            "interfaces.provide: an interface name must be 1 to 256 bytes, got 257",
        ),
        (
            r#"interfaces.provide("audio", 5)"#,
            "interfaces.provide: fields must be a table, got a number",
        ),
        (
            r#"interfaces.provide("audio", { play = 1, [1] = 2 })"#,
            "interfaces.provide: the fields of 'audio' must have string keys, got a number",
        ),
        // A clash refuses the whole call: `zoom` and `a` are not added either.
        (
            r#"interfaces.provide("ui.hud", { a = 1, show = 3, zoom = 4 })"#,
            "interfaces.provide: field 'show' of interface 'ui.hud' is provided already, by \
             chunk 'eval'",
        ),
        (
            r#"interfaces.provide("audio", { play = 1, ["\255"] = 2 })"#,
            "interfaces.provide: the fields of 'audio' must have UTF-8 text keys",
        ),
        (
            r#"interfaces.provide("\255", { a = 1 })"#,
            "interfaces.provide: name must be UTF-8 text",
        ),
        (
            r#"interfaces.get(nil)"#,
            "interfaces.get: name must be a string, got nil",
        ),
        (
            r#"interfaces.get("Audio")"#,
            "interfaces.get: invalid interface name 'Audio': each dotted segment must be a \
             lowercase letter followed by lowercase letters, digits or '_'",
        ),
        (
            r#"interfaces.expect(true)"#,
            "interfaces.expect: name must be a string, got a boolean",
        ),
        (
            r#"interfaces.expect("audio")"#,
            "interfaces.expect: no interface 'audio' is provided in domain 'game' generation 1",
        ),
    ];
    for (body, expected) in cases {
        assert_eq!(raised(&d, body), expected, "for {body}");
    }
    assert_eq!(d.interfaces(), before);
    let left = d
        .eval(
            r#"local hud = interfaces.get("ui.hud")
            return { hud.a == nil and hud.zoom == nil, hud.show, #interfaces.list() }"#,
        )
        .unwrap();
    assert_eq!(
        left,
        Message::List(vec![
            Message::Boolean(true),
            Message::Number(1.0),
            Message::Number(1.0)
        ])
    );
    // A name of exactly 256 bytes is taken.
    d.eval(r#"interfaces.provide(string.rep("a", 256), { x = 1 })"#)
        .unwrap();
    assert_eq!(d.interfaces()[0].name, "a".repeat(256));
}

#[test]
fn consumers_read_a_table_they_cannot_write() {
    let pool = Pool::new(1);
    let d = domain(&pool, "game");
    d.eval(r#"interfaces.provide("audio", { play = function() return "played" end })"#)
        .unwrap();
    for body in [
        r#"interfaces.get("audio").play = nil"#,
        r#"interfaces.get("audio").stop = function() end"#,
        r#"rawset(interfaces.get("audio"), "play", 1)"#,
        r#"setmetatable(interfaces.get("audio"), {})"#,
    ] {
        let err = raised(&d, body);
        assert!(err.contains("readonly table"), "{body}: {err}");
    }
    let still = d
        .eval(
            r#"local audio = interfaces.get("audio")
            return { table.isfrozen(audio), audio.play(), audio.stop == nil }"#,
        )
        .unwrap();
    assert_eq!(
        still,
        Message::List(vec![
            Message::Boolean(true),
            Message::String("played".into()),
            Message::Boolean(true),
        ])
    );
    // The module itself is read-only too: nobody swaps `provide` for their own.
    let err = raised(&d, r#"interfaces.provide = print"#);
    assert!(err.contains("readonly table"), "{err}");
}

#[test]
fn a_restart_starts_without_interfaces() {
    let pool = Pool::new(1);
    let mut d = domain(&pool, "game");
    d.eval(r#"interfaces.provide("ui.hud", { show = 1 })"#)
        .unwrap();
    assert_eq!(d.interfaces().len(), 1);
    d.restart(Load::Nothing).unwrap();
    assert!(d.interfaces().is_empty());
    let after = d
        .eval(
            r#"local interfaces = require("@skein/interfaces")
            local ok, err = pcall(interfaces.expect, "ui.hud")
            return { interfaces.get("ui.hud") == nil, #interfaces.list(), tostring(err) }"#,
        )
        .unwrap();
    let Message::List(items) = after else {
        panic!("expected a list, got {after:?}")
    };
    assert_eq!(items[0], Message::Boolean(true));
    assert_eq!(items[1], Message::Number(0.0));
    assert!(
        text(&items[2]).contains(
            "interfaces.expect: no interface 'ui.hud' is provided in domain 'game' generation 2"
        ),
        "{:?}",
        items[2]
    );
    // The new generation composes afresh: the old field is no clash.
    d.eval(r#"require("@skein/interfaces").provide("ui.hud", { show = 2 })"#)
        .unwrap();
    assert_eq!(
        d.interfaces(),
        [InterfaceInfo {
            name: "ui.hud".to_owned(),
            fields: vec![field("show", "chunk 'eval'")],
        }]
    );
}

#[test]
fn two_domains_never_see_each_others() {
    let pool = Pool::new(1);
    let game = domain(&pool, "game");
    let tools = domain(&pool, "tools");
    game.eval(r#"interfaces.provide("audio", { volume = 1 })"#)
        .unwrap();
    tools
        .eval(r#"interfaces.provide("audio", { volume = 2 })"#)
        .unwrap();
    let volume = |d: &ScriptDomain| {
        number(
            &d.eval(r#"return interfaces.expect("audio").volume"#)
                .unwrap(),
        )
    };
    assert_eq!((volume(&game), volume(&tools)), (1.0, 2.0));
    game.eval(r#"interfaces.provide("ui.hud", {})"#).unwrap();
    assert_eq!(
        raised(&tools, r#"interfaces.expect("ui.hud")"#),
        "interfaces.expect: no interface 'ui.hud' is provided in domain 'tools' generation 1"
    );
    assert_eq!(tools.interfaces().len(), 1);
    assert_eq!(game.interfaces().len(), 2);
}

#[test]
fn worker_vms_and_actors_are_refused() {
    let tree = Tree::new(&[(
        "w.luau",
        r#"return { all = function()
            local interfaces = require("@skein/interfaces")
            local out = {}
            for _, call in { "provide", "get", "expect", "list" } do
                local ok, err = pcall(interfaces[call], "audio", {})
                table.insert(out, tostring(err))
            end
            return out
        end }"#,
    )]);
    let pool = Pool::new(1);
    let d = tree.domain(&pool);
    d.eval(r#"require("@skein/interfaces").provide("audio", { volume = 1 })"#)
        .unwrap();
    let out = d
        .dispatch("./w", "all", Message::Nil)
        .unwrap()
        .wait()
        .unwrap();
    let expected = ["provide", "get", "expect", "list"].map(|f| {
        format!(
            "interfaces.{f}: interfaces live in the engine VM of their domain; a worker VM or actor has none"
        )
    });
    let Message::List(texts) = out else {
        panic!("expected a list, got {out:?}")
    };
    let texts: Vec<String> = texts.iter().map(text).collect();
    for (got, want) in texts.iter().zip(&expected) {
        assert!(got.contains(want.as_str()), "{got} lacks {want}");
    }
    assert_eq!(texts.len(), 4);

    let spawner = ScriptDomain::new(
        &pool,
        DomainSpec::new("actors").grant(RootAuthority::new().grant(CapabilitySet::from_iter([
            CapabilityId::new("worker.spawn").unwrap(),
        ]))),
    )
    .unwrap();
    let got = spawner
        .eval(
            r#"
            local w = require("@skein/worker").spawn { source = [[
                return function(call)
                    local ok, err = pcall(require("@skein/interfaces")[call], "audio", {})
                    return tostring(err)
                end
            ]] }
            local out = {}
            for _, call in { "provide", "get", "expect", "list" } do
                w:send(call)
                table.insert(out, w:receive(20))
            end
            return out
            "#,
        )
        .unwrap();
    let Message::List(texts) = got else {
        panic!("expected a list, got {got:?}")
    };
    for (got, want) in texts.iter().map(text).zip(&expected) {
        assert!(got.contains(want.as_str()), "{got} lacks {want}");
    }
    // The refusals touched nothing of the engine VM's.
    assert_eq!(
        d.interfaces(),
        [InterfaceInfo {
            name: "audio".to_owned(),
            fields: vec![field("volume", "chunk 'eval'")],
        }]
    );
}

#[test]
fn the_host_sees_who_provided_each_field() {
    let tree = Tree::new(&[(
        "hud.luau",
        r#"require("@skein/interfaces").provide("ui.hud", { show = true, hide = true })
        return true"#,
    )]);
    let pool = Pool::new(1);
    let spec = DomainSpec::new("game")
        .plan(skein::Plan::new().root(tree.path()))
        .context(ContextSpec::new("ui").phases([Phase::Startup]))
        .unwrap();
    let d = ScriptDomain::new(&pool, spec).unwrap();
    d.eval(
        r#"
        assert(pcall(require("@skein/interfaces").provide, "audio", { play = true }))
        require("./hud")
        require("@skein/context").bind("ui", { startup = function()
            require("@skein/interfaces").provide("ui.hud", { layer = 2 })
        end })
        "#,
    )
    .unwrap();
    let report = d.run_phase(Phase::Startup, &[]).unwrap();
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    let module = format!("chunk '{}'", tree.path().join("hud.luau").display());
    assert_eq!(
        d.interfaces(),
        [
            // Through pcall: the chunk that called pcall provided it.
            InterfaceInfo {
                name: "audio".to_owned(),
                fields: vec![field("play", "chunk 'eval'")],
            },
            InterfaceInfo {
                name: "ui.hud".to_owned(),
                fields: vec![
                    field("hide", &module),
                    field("layer", "chunk 'eval' in context 'ui'"),
                    field("show", &module),
                ],
            }
        ]
    );
    // A clash names the first provider, context and all.
    assert_eq!(
        raised(
            &d,
            r#"require("@skein/interfaces").provide("ui.hud", { layer = 3 })"#
        ),
        "interfaces.provide: field 'layer' of interface 'ui.hud' is provided already, by \
         chunk 'eval' in context 'ui'"
    );
}
