//! `ScriptDomain::stats`: each counter moves when, and only when, its work happens, and the
//! totals outlive a restart.

use skein::event::EventTarget;
use skein::lifecycle::{DomainState, Load};
use skein::{ContextSpec, DomainSpec, Message, Phase, Pool, ScriptDomain};

fn spec() -> DomainSpec {
    DomainSpec::new("stats")
        .context(ContextSpec::new("ui").phases([Phase::Update, Phase::Event]))
        .expect("context")
        .context(ContextSpec::new("world").phases([Phase::Update]))
        .expect("context")
}

#[test]
fn a_fresh_domain_counts_nothing() {
    let pool = Pool::new(1);
    let domain = ScriptDomain::new(&pool, spec()).expect("domain");
    let stats = domain.stats();
    assert_eq!(stats.state, DomainState::Ready);
    assert_eq!(stats.generation, domain.generation());
    assert_eq!(stats.contexts, 2);
    assert_eq!(
        (
            stats.handler_calls,
            stats.events_delivered,
            stats.events_unhandled
        ),
        (0, 0, 0)
    );
    assert_eq!((stats.errors, stats.warnings, stats.denials), (0, 0, 0));
    assert_eq!((stats.events_pending, stats.events_pending_bytes), (0, 0));
    assert_eq!(stats.events_dropped_at_stop, 0);
    assert_eq!(
        (
            stats.live_actors,
            stats.owned_resources,
            stats.registered_jobs
        ),
        (0, 0, 0)
    );
}

#[test]
fn phases_events_and_failures_are_counted() {
    let pool = Pool::new(1);
    let domain = ScriptDomain::new(&pool, spec()).expect("domain");
    domain
        .exec(
            r#"
            local context = require("@skein/context")
            local events = require("@skein/events")
            context.bind("ui", { update = function() end, event = function() end })
            context.bind("world", { update = function() error("boom") end })
            events.on("hit", function() end)
            events.on("hit", function() end)
            "#,
        )
        .expect("bind");
    let report = domain.run_phase(Phase::Update, &[]).expect("phase");
    assert_eq!((report.calls, report.errors.len()), (2, 1));
    let stats = domain.stats();
    assert_eq!(stats.handler_calls, 2);
    assert_eq!(stats.errors, 1);
    assert_eq!(stats.state, DomainState::Running);

    domain
        .mailbox()
        .post_named("hit", Message::Integer(1))
        .expect("post");
    domain
        .mailbox()
        .post_named("nobody", Message::Integer(2))
        .expect("post");
    domain
        .mailbox()
        .post(EventTarget::All, Message::String("raw".into()))
        .expect("post");
    let pending = domain.stats();
    assert_eq!(pending.events_pending, 3);
    assert!(pending.events_pending_bytes > 0);
    let drained = domain.drain_events();
    assert_eq!((drained.delivered, drained.unhandled), (2, 1));
    let stats = domain.stats();
    assert_eq!((stats.events_delivered, stats.events_unhandled), (2, 1));
    // Two named handlers of "hit" and the ui context's event handler.
    assert_eq!(stats.handler_calls, 2 + 3);
    assert_eq!((stats.events_pending, stats.events_pending_bytes), (0, 0));
}

#[test]
fn stop_drops_the_queued_events_and_counts_them() {
    let pool = Pool::new(1);
    let spec = DomainSpec::new("stopping")
        .context(ContextSpec::new("main").phases([Phase::Shutdown]))
        .expect("context");
    let mut domain = ScriptDomain::new(&pool, spec).expect("domain");
    domain
        .exec(
            r#"
            local events = require("@skein/events")
            handled = 0
            events.on("hit", function() handled += 1 end)
            require("@skein/context").bind("main", {
                shutdown = function() events.emit("hit", "at shutdown") end,
            })
            events.emit("hit", 1)
            events.emit("hit", 2)
            "#,
        )
        .expect("exec");
    domain
        .mailbox()
        .post_named("nobody", Message::Integer(3))
        .expect("post");
    assert_eq!(domain.stats().events_pending, 3);
    assert_eq!(domain.stats().events_dropped_at_stop, 0);
    domain.stop();
    let stats = domain.stats();
    // The three queued and the one the shutdown handler emitted, none delivered.
    assert_eq!(stats.events_dropped_at_stop, 4);
    assert_eq!((stats.events_pending, stats.events_pending_bytes), (0, 0));
    assert_eq!((stats.events_delivered, stats.events_unhandled), (0, 0));
    // A post after the stop is refused, not dropped: the count stays.
    assert!(domain.mailbox().post_named("hit", Message::Nil).is_err());
    domain.stop();
    assert_eq!(domain.stats().events_dropped_at_stop, 4);
}

#[test]
fn a_route_to_a_stopped_domain_is_a_warning() {
    let pool = Pool::new(1);
    let domain = ScriptDomain::new(&pool, spec()).expect("domain");
    let mut other = ScriptDomain::new(&pool, DomainSpec::new("other")).expect("other");
    domain.route("hit", other.mailbox()).expect("route");
    other.stop();
    domain
        .exec(r#"require("@skein/events").emit("hit", 1)"#)
        .expect("emit");
    let report = domain.drain_events();
    assert_eq!(report.warnings.len(), 1, "{report:?}");
    let stats = domain.stats();
    assert_eq!((stats.warnings, stats.errors), (1, 0));
    assert_eq!(stats.events_unhandled, 1);
}

#[test]
fn resources_denials_and_reports_are_seen_and_totals_survive_a_restart() {
    let pool = Pool::new(1);
    let mut domain = ScriptDomain::new(&pool, spec()).expect("domain");
    domain.own("texture", || {});
    domain.own("buffer", || {});
    assert_eq!(domain.stats().owned_resources, 2);
    let denied = domain.eval(r#"return require("@skein/fs").readFile("x")"#);
    assert!(denied.is_err(), "{denied:?}");
    // The yield under test: a task that fails after it waited, not at the exec.
    domain
        .exec("task.spawn(function() task.wait() error('later') end)")
        .expect("exec");
    domain.run_until_idle().expect_err("the task fails");
    domain
        .exec("context = require('@skein/context') context.bind('ui', { update = function() end })")
        .expect("bind");
    domain.run_phase(Phase::Update, &[]).expect("phase");
    let before = domain.stats();
    assert_eq!(before.denials, 1);
    assert_eq!(before.handler_calls, 1);

    let generation = domain.restart(Load::Nothing).expect("restart");
    let after = domain.stats();
    assert_eq!(after.generation, generation);
    assert_eq!(
        after.state,
        DomainState::Running,
        "it was running, so it starts again"
    );
    assert_eq!(after.owned_resources, 0, "released with the generation");
    assert_eq!(after.denials, before.denials);
    assert_eq!(after.handler_calls, before.handler_calls);
}
