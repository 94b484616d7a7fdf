//! Handler calls and named-event deliveries as the cheap call path makes them: labels written
//! only when read, owners reused between calls, shared handler snapshots and a name's Luau
//! string kept across a drain. Each test pins behaviour that path must not change.

use std::time::Duration;

use skein::{ContextSpec, DomainSpec, Message, Phase, Pool, ScriptDomain};

fn two_contexts() -> DomainSpec {
    DomainSpec::new("game")
        .context(ContextSpec::new("ui").phases([Phase::Update]))
        .unwrap()
        .context(ContextSpec::new("world").phases([Phase::Update]))
        .unwrap()
}

fn sources(domain: &ScriptDomain) -> Vec<(String, String)> {
    let mut reports: Vec<(String, String)> = domain
        .take_reports()
        .into_iter()
        .map(|r| (r.source, r.message.lines().next().unwrap_or("").to_owned()))
        .collect();
    reports.sort();
    reports
}

#[test]
fn a_task_a_handler_started_fails_later_under_its_own_handlers_label() {
    let pool = Pool::new(1);
    let domain = ScriptDomain::new(&pool, two_contexts()).unwrap();
    domain
        .exec(
            r#"
            local context = require("@skein/context")
            -- The behaviour under test: a task the handler started fails a frame later.
            context.bind("ui", { update = function()
                task.defer(function() task.waitFrames(1) error("late in ui") end)
            end })
            context.bind("world", { update = function() end })
            "#,
        )
        .unwrap();
    // The second frame's calls come after the first frame's ui call left its task behind.
    for _ in 0..2 {
        let report = domain.run_phase(Phase::Update, &[]).unwrap();
        assert_eq!((report.calls, report.errors.len()), (2, 0));
    }
    for _ in 0..3 {
        domain.frame(Duration::from_millis(1));
    }
    let reports = sources(&domain);
    assert_eq!(reports.len(), 2, "{reports:?}");
    for (source, message) in &reports {
        assert_eq!(source, "context 'ui' update handler");
        assert!(message.contains("late in ui"), "{message}");
    }
}

#[test]
fn named_handlers_that_fail_after_a_yield_are_reported_by_context_and_name() {
    let pool = Pool::new(1);
    let domain = ScriptDomain::new(&pool, two_contexts()).unwrap();
    domain
        .exec(
            r#"
            local events = require("@skein/events")
            -- The behaviour under test: handlers that fail after a yield (a frame).
            events.on("hit", function() task.waitFrames(1) error("late hit") end, "ui")
            events.on("hit", function() task.waitFrames(1) error("bare hit") end)
            events.emit("hit", 1)
            "#,
        )
        .unwrap();
    let report = domain.drain_events();
    assert_eq!((report.delivered, report.errors.len()), (1, 0));
    domain.frame(Duration::from_millis(1));
    domain.frame(Duration::from_millis(1));
    let reports = sources(&domain);
    assert_eq!(reports.len(), 2, "{reports:?}");
    assert_eq!(reports[0].0, "context 'ui' event 'hit' handler");
    assert!(reports[0].1.contains("late hit"), "{reports:?}");
    assert_eq!(reports[1].0, "event 'hit' handler");
    assert!(reports[1].1.contains("bare hit"), "{reports:?}");
}

#[test]
fn a_failure_in_the_first_run_is_a_diagnostic_named_as_before() {
    let pool = Pool::new(1);
    let domain = ScriptDomain::new(&pool, two_contexts()).unwrap();
    domain
        .exec(
            r#"
            local events = require("@skein/events")
            events.on("hit", function() error("at once") end, "world")
            require("@skein/context").bind("ui", { update = function() error("now") end })
            events.emit("hit", 1)
            "#,
        )
        .unwrap();
    let report = domain.drain_events();
    assert_eq!(report.errors.len(), 1, "{report:?}");
    let diagnostic = &report.errors[0];
    assert!(
        diagnostic
            .message
            .starts_with("event 'hit' handler failed: "),
        "{diagnostic:?}"
    );
    assert!(diagnostic.message.contains("at once"), "{diagnostic:?}");
    assert_eq!(diagnostic.attribution.context.as_deref(), Some("world"));
    let phase = domain.run_phase(Phase::Update, &[]).unwrap();
    assert_eq!(phase.errors.len(), 1);
    assert!(phase.errors[0].message.contains("now"), "{phase:?}");
    assert_eq!(phase.errors[0].attribution.context.as_deref(), Some("ui"));
    assert!(domain.take_reports().is_empty());
}

#[test]
fn binding_or_removing_during_a_delivery_counts_from_the_next_event() {
    let pool = Pool::new(1);
    let domain = ScriptDomain::new(&pool, DomainSpec::new("game")).unwrap();
    domain
        .exec(
            r#"
            local events = require("@skein/events")
            log = {}
            local off
            events.on("x", function(v)
                table.insert(log, "a" .. v)
                if v == 1 then
                    off()
                    events.on("x", function(w) table.insert(log, "c" .. w) end)
                end
            end)
            off = events.on("x", function(v) table.insert(log, "b" .. v) end)
            events.emit("x", 1)
            events.emit("x", 2)
            "#,
        )
        .unwrap();
    let report = domain.drain_events();
    assert_eq!(report.delivered, 2);
    assert_eq!(
        domain.eval("return table.concat(log, ',')").unwrap(),
        Message::String("a1,b1,a2,c2".into())
    );
}

#[test]
fn a_handler_bound_during_its_phase_runs_from_the_next_run_on() {
    let pool = Pool::new(1);
    let domain = ScriptDomain::new(&pool, two_contexts()).unwrap();
    domain
        .exec(
            r#"
            local context = require("@skein/context")
            n = 0
            context.bind("ui", { update = function()
                n += 1
                if n == 1 then context.bind("ui", { update = function() n += 10 end }) end
            end })
            "#,
        )
        .unwrap();
    assert_eq!(domain.run_phase(Phase::Update, &[]).unwrap().calls, 1);
    assert_eq!(domain.eval("return n").unwrap(), Message::Number(1.0));
    assert_eq!(domain.run_phase(Phase::Update, &[]).unwrap().calls, 2);
    assert_eq!(domain.eval("return n").unwrap(), Message::Number(12.0));
}

#[test]
fn each_named_handler_gets_its_own_payload_copy_and_the_events_name() {
    let pool = Pool::new(1);
    let domain = ScriptDomain::new(&pool, DomainSpec::new("game")).unwrap();
    domain
        .exec(
            r#"
            local events = require("@skein/events")
            names = {}
            events.on("t", function(p, name) p.x = 1 table.insert(names, name) end)
            events.on("t", function(p, name) seen = p.x table.insert(names, name) end)
            events.on("u", function(p, name) table.insert(names, name) end)
            events.emit("t", {})
            events.emit("u", {})
            events.emit("t", {})
            "#,
        )
        .unwrap();
    let mailbox = domain.mailbox();
    mailbox.post_named("u", Message::Nil).unwrap();
    assert_eq!(domain.drain_events().delivered, 4);
    assert_eq!(domain.eval("return seen").unwrap(), Message::Nil);
    assert_eq!(
        domain.eval("return table.concat(names, ',')").unwrap(),
        Message::String("t,t,u,t,t,u".into())
    );
}
