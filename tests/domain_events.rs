//! Domain events: raw events (to contexts' `event` phase handlers) and named events (to the
//! handlers bound to a name) kept apart in one FIFO, the drain and its counts, the queue's
//! limits at and one past each bound, routes between domains, and restarts discarding what
//! was queued for the old generation.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use skein::event::{EventLimits, EventTarget, PostRefused, QueueBound};
use skein::{ContextSpec, DomainSpec, Message, Phase, Plan, Pool, ScriptDomain};

use crate::support::{assert_contains, refusal, sim_domain, string, text, Tree};

/// A domain whose scripts log into the global `log`; `ui` and `world` handle raw events,
/// `world` first (priority), and `ui` has a startup phase too.
fn game(pool: &Pool, limits: EventLimits) -> ScriptDomain {
    let spec = DomainSpec::new("game")
        .event_limits(limits)
        .context(ContextSpec::new("ui").phases([Phase::Event, Phase::Startup]))
        .unwrap()
        .context(ContextSpec::new("world").phases([Phase::Event]).priority(5))
        .unwrap()
        .context(ContextSpec::new("quiet").phases([Phase::Event]))
        .unwrap();
    let domain = ScriptDomain::new(pool, spec).unwrap();
    domain
        .eval(
            r#"
            log = {}
            function note(s) table.insert(log, s) end
            events = require("@skein/events")
            local context = require("@skein/context")
            context.bind("ui", {
                event = function(e) note("raw ui " .. tostring(e)) end,
                startup = function() note("startup phase") end,
            })
            context.bind("world", { event = function(e) note("raw world " .. tostring(e)) end })
        "#,
        )
        .unwrap();
    domain
}

fn log(domain: &ScriptDomain) -> String {
    text(&domain.eval("return table.concat(log, ', ')").unwrap())
}

fn limits() -> EventLimits {
    EventLimits::default()
}

#[test]
fn raw_and_named_events_never_pass_for_each_other() {
    let pool = Pool::new(1);
    let domain = game(&pool, limits());
    domain
        .eval(r#"events.on("startup", function(p, name) note("named " .. name .. " " .. p) end)"#)
        .unwrap();
    let mailbox = domain.mailbox();
    mailbox
        .post(EventTarget::Context("ui".into()), string("a"))
        .unwrap();
    mailbox.post_named("startup", string("b")).unwrap();
    domain.eval(r#"events.emit("startup", "c")"#).unwrap();
    // A name that matches a phase reaches no phase handler; a raw event reaches no name.
    mailbox.post_named("event", string("d")).unwrap();
    mailbox
        .post(EventTarget::Context("quiet".into()), string("e"))
        .unwrap();
    let report = domain.drain_events();
    assert_eq!(log(&domain), "raw ui a, named startup b, named startup c");
    assert_eq!(
        (report.delivered, report.unhandled, report.pending),
        (3, 2, 0)
    );
    assert!(report.errors.is_empty(), "{:?}", report.errors);
}

#[test]
fn raw_events_reach_their_target_or_every_context_in_scheduler_order() {
    let pool = Pool::new(1);
    let domain = game(&pool, limits());
    let mailbox = domain.mailbox();
    mailbox.post(EventTarget::All, Message::Integer(1)).unwrap();
    mailbox
        .post(EventTarget::Context("world".into()), Message::Integer(2))
        .unwrap();
    mailbox
        .post(EventTarget::Context("nobody".into()), Message::Integer(3))
        .unwrap();
    let report = domain.drain_events();
    assert_eq!(log(&domain), "raw world 1, raw ui 1, raw world 2");
    assert_eq!((report.delivered, report.unhandled), (2, 1));
}

#[test]
fn one_fifo_keeps_emission_order_across_kinds() {
    let pool = Pool::new(1);
    let domain = game(&pool, limits());
    domain
        .eval(r#"events.on("n", function(p) note("named " .. p) end)"#)
        .unwrap();
    let mailbox = domain.mailbox();
    for i in 0..3 {
        mailbox
            .post(EventTarget::Context("ui".into()), Message::Integer(i))
            .unwrap();
        mailbox.post_named("n", Message::Integer(i)).unwrap();
        domain
            .eval(&format!(r#"events.emit("n", "lua{i}")"#))
            .unwrap();
    }
    assert_eq!(domain.pending_events(), 9);
    let report = domain.drain_events();
    assert_eq!(report.delivered, 9);
    assert_eq!(
        log(&domain),
        "raw ui 0, named 0, named lua0, raw ui 1, named 1, named lua1, raw ui 2, named 2, named lua2"
    );
}

#[test]
fn named_handlers_run_by_context_priority_then_bind_order() {
    let pool = Pool::new(1);
    let domain = game(&pool, limits());
    let host_seen = Rc::new(RefCell::new(0));
    let seen = host_seen.clone();
    domain
        .bind_event_handler("x", move |_| {
            *seen.borrow_mut() += 1;
            Ok(())
        })
        .unwrap();
    domain
        .eval(
            r#"
            events.on("x", function() note("plain 1") end)
            events.on("x", function() note("ui") end, "ui")
            events.on("x", function() note("world") end, "world")
            events.on("x", function() note("plain 2") end)
        "#,
        )
        .unwrap();
    domain.mailbox().post_named("x", Message::Nil).unwrap();
    let report = domain.drain_events();
    assert_eq!(report.delivered, 1);
    assert_eq!(log(&domain), "world, plain 1, ui, plain 2");
    assert_eq!(*host_seen.borrow(), 1);
    let err = refusal(&domain, r#"events.on("x", function() end, "nowhere")"#);
    assert_contains(&err, "events.on: no context named 'nowhere' is declared");
    // A 64 MiB context or name is refused in a short text: the context was quoted whole, and
    // the name copied whole before its length was checked.
    let err = refusal(
        &domain,
        r#"events.on("x", function() end, string.rep("c", 64 * 1024 * 1024))"#,
    );
    assert_contains(
        &err,
        &format!(
            "events.on: no context named '{}...' (67108864 bytes) is declared",
            "c".repeat(256)
        ),
    );
    assert!(err.len() < 1024, "{}", err.len());
    for call in ["events.on(N, function() end)", "events.emit(N, 1)"] {
        let err = refusal(
            &domain,
            &format!("local N = string.rep('n', 64 * 1024 * 1024) {call}"),
        );
        assert_contains(&err, "an event name must be 1 to 256 bytes, got 67108864");
        assert!(err.len() < 1024, "{}", err.len());
    }
}

#[test]
fn an_event_queued_during_a_drain_waits_for_the_next() {
    let pool = Pool::new(1);
    let domain = game(&pool, limits());
    domain
        .eval(
            r#"
            events.on("ping", function() note("ping") events.emit("pong", 1) end)
            events.on("pong", function() note("pong") end)
            events.emit("ping")
        "#,
        )
        .unwrap();
    let first = domain.drain_events();
    assert_eq!((first.delivered, first.pending), (1, 1));
    assert_eq!(log(&domain), "ping");
    let second = domain.drain_events();
    assert_eq!((second.delivered, second.pending), (1, 0));
    assert_eq!(log(&domain), "ping, pong");
    let third = domain.drain_events();
    assert_eq!((third.delivered, third.unhandled, third.pending), (0, 0, 0));
}

#[test]
fn a_drain_takes_per_drain_and_leaves_the_rest_in_order() {
    let pool = Pool::new(1);
    let domain = game(
        &pool,
        EventLimits {
            per_drain: 3,
            ..limits()
        },
    );
    domain
        .eval(r#"events.on("n", function(i) note(tostring(i)) end)"#)
        .unwrap();
    for i in 0..7 {
        domain
            .mailbox()
            .post_named("n", Message::Integer(i))
            .unwrap();
    }
    let counts: Vec<(usize, usize)> = (0..4)
        .map(|_| {
            let r = domain.drain_events();
            (r.delivered, r.pending)
        })
        .collect();
    assert_eq!(counts, [(3, 4), (3, 1), (1, 0), (0, 0)]);
    assert_eq!(log(&domain), "0, 1, 2, 3, 4, 5, 6");
}

#[test]
fn advance_drains_once_after_its_late_phase() {
    let pool = Pool::new(1);
    let domain = game(
        &pool,
        EventLimits {
            per_drain: 2,
            ..limits()
        },
    );
    domain
        .eval(r#"events.on("n", function(i) note(tostring(i)) end)"#)
        .unwrap();
    for i in 0..3 {
        domain
            .mailbox()
            .post_named("n", Message::Integer(i))
            .unwrap();
    }
    let report = domain.advance(Duration::from_millis(1)).unwrap();
    assert_eq!((report.events.delivered, report.events.pending), (2, 1));
    let report = domain.advance(Duration::from_millis(1)).unwrap();
    assert_eq!((report.events.delivered, report.events.pending), (1, 0));
}

#[test]
fn an_event_emitted_during_update_is_delivered_in_the_same_advance() {
    let pool = Pool::new(1);
    let domain = sim_domain(&pool);
    domain
        .eval(
            r#"
            log = {}
            local events = require("@skein/events")
            events.on("hit", function(n) table.insert(log, "hit " .. n) end)
            local n = 0
            require("@skein/context").bind("sim", {
                update = function() n += 1 table.insert(log, "update " .. n) events.emit("hit", n) end,
                lateUpdate = function() table.insert(log, "late " .. n) end,
            })
        "#,
        )
        .unwrap();
    let report = domain.advance(Duration::from_millis(1)).unwrap();
    assert_eq!(report.events.delivered, 1);
    assert_eq!(
        text(&domain.eval("return table.concat(log, ', ')").unwrap()),
        "update 1, late 1, hit 1"
    );
    domain.advance(Duration::from_millis(1)).unwrap();
    assert_eq!(
        text(&domain.eval("return table.concat(log, ', ')").unwrap()),
        "update 1, late 1, hit 1, update 2, late 2, hit 2"
    );
}

#[test]
fn unhandled_events_are_counted_and_dropped() {
    let pool = Pool::new(1);
    let domain = game(&pool, limits());
    let mailbox = domain.mailbox();
    mailbox.post_named("nobody", Message::Nil).unwrap();
    mailbox
        .post(EventTarget::Context("quiet".into()), Message::Nil)
        .unwrap();
    domain
        .eval(
            r#"
            local remove = events.on("gone", function() note("never") end)
            assert(remove() == true)
            assert(remove() == false)
            events.emit("gone")
        "#,
        )
        .unwrap();
    let report = domain.drain_events();
    assert_eq!(
        (report.delivered, report.unhandled, report.pending),
        (0, 3, 0)
    );
    assert_eq!(log(&domain), "");
    let again = domain.drain_events();
    assert_eq!((again.delivered, again.unhandled), (0, 0));
}

#[test]
fn a_failing_handler_is_a_diagnostic_and_the_next_one_runs() {
    let pool = Pool::new(1);
    let domain = game(&pool, limits());
    domain
        .bind_event_handler("x", |_| Err("host says no".to_owned()))
        .unwrap();
    domain
        .eval(
            r#"
            events.on("x", function() error("lua says no") end, "world")
            events.on("x", function() note("after") end)
            events.emit("x")
        "#,
        )
        .unwrap();
    let report = domain.drain_events();
    assert_eq!(report.delivered, 1);
    assert_eq!(log(&domain), "after");
    assert_eq!(report.errors.len(), 2, "{:?}", report.errors);
    assert_eq!(
        report.errors[0].attribution.context.as_deref(),
        Some("world")
    );
    assert_contains(&report.errors[0].message, "event 'x' handler failed:");
    assert_contains(&report.errors[0].message, "lua says no");
    assert_eq!(
        report.errors[1].message,
        "event 'x' handler failed: host says no"
    );
}

#[test]
fn the_pending_limit_at_the_bound_and_one_past() {
    let pool = Pool::new(1);
    let domain = game(
        &pool,
        EventLimits {
            pending: 3,
            ..limits()
        },
    );
    let mailbox = domain.mailbox();
    mailbox.post_named("a", Message::Integer(1)).unwrap();
    mailbox.post_named("a", Message::Integer(2)).unwrap();
    domain.eval(r#"events.emit("a", 3)"#).unwrap();
    assert_eq!(domain.pending_events(), 3);
    let bytes = domain.pending_event_bytes();
    let refused = mailbox.post_named("a", Message::Integer(4)).unwrap_err();
    assert!(matches!(
        refused,
        PostRefused::Full {
            bound: QueueBound::Pending,
            limit: 3,
            ..
        }
    ));
    assert_eq!(
        refused.to_string(),
        "queue full: the queue holds its limit of 3 pending events (EventLimits::pending)"
    );
    assert_eq!(refused.into_payload(), Message::Integer(4));
    let err = refusal(&domain, r#"events.emit("a", 5)"#);
    assert_contains(
        &err,
        "events.emit: queue full: the queue holds its limit of 3 pending events (EventLimits::pending)",
    );
    assert_eq!(domain.pending_events(), 3);
    assert_eq!(domain.pending_event_bytes(), bytes);
    // The host's raw post always queues, past the limit too.
    mailbox
        .post(EventTarget::Context("ui".into()), Message::Integer(6))
        .unwrap();
    assert_eq!(domain.pending_events(), 4);
    let report = domain.drain_events();
    assert_eq!((report.delivered, report.unhandled), (1, 3));
    // The refused emit is recorded as a queue-full diagnostic of the domain.
    assert_eq!(report.errors.len(), 1, "{:?}", report.errors);
    assert_eq!(report.errors[0].attribution.domain, domain.id());
    assert_eq!(
        report.errors[0].message,
        "events.emit: queue full: the queue holds its limit of 3 pending events (EventLimits::pending)"
    );
}

#[test]
fn the_byte_limit_at_the_bound_and_one_past() {
    let pool = Pool::new(1);
    // One event: 16 bytes for the string node, its bytes, and the name's one byte.
    let exact = EventLimits {
        bytes: 16 + 83 + 1,
        ..limits()
    };
    let domain = game(&pool, exact);
    let mailbox = domain.mailbox();
    mailbox.post_named("n", string(&"x".repeat(83))).unwrap();
    assert_eq!(domain.pending_event_bytes(), 100);
    assert_eq!(domain.drain_events().unhandled, 1);
    domain
        .eval(r#"events.emit("n", string.rep("x", 83))"#)
        .unwrap();
    assert_eq!(domain.pending_event_bytes(), 100);
    assert_eq!(domain.drain_events().unhandled, 1);

    let want = "queue full: the event does not fit in the 100 bytes the queue may hold (EventLimits::bytes)";
    let refused = mailbox
        .post_named("n", string(&"x".repeat(84)))
        .unwrap_err();
    assert!(matches!(
        refused,
        PostRefused::Full {
            bound: QueueBound::Bytes,
            limit: 100,
            ..
        }
    ));
    assert_eq!(refused.to_string(), want);
    let err = refusal(&domain, r#"events.emit("n", string.rep("x", 84))"#);
    assert_contains(&err, &format!("events.emit: {want}"));
    // A vast table is refused part way through reading it.
    let err = refusal(
        &domain,
        r#"local t = table.create(100000, 1) events.emit("n", t)"#,
    );
    assert_contains(&err, &format!("events.emit: {want}"));
    assert_eq!(
        (domain.pending_events(), domain.pending_event_bytes()),
        (0, 0)
    );

    // A raw post weighing past the limit still queues and counts: then a named event can't fit.
    mailbox
        .post(EventTarget::All, string(&"y".repeat(200)))
        .unwrap();
    assert_eq!(domain.pending_event_bytes(), 216);
    let refused = mailbox.post_named("n", Message::Nil).unwrap_err();
    assert_eq!(refused.to_string(), want);
    assert_eq!(domain.pending_events(), 1);
}

#[test]
fn names_are_one_to_256_bytes() {
    let pool = Pool::new(1);
    let domain = game(&pool, limits());
    let mailbox = domain.mailbox();
    let longest = "n".repeat(256);
    mailbox.post_named(&longest, Message::Nil).unwrap();
    domain
        .eval(&format!(r#"events.emit("{longest}")"#))
        .unwrap();
    assert_eq!(domain.pending_events(), 2);
    let bytes = domain.pending_event_bytes();
    assert_eq!(bytes, 2 * (16 + 256));

    let past = "n".repeat(257);
    let refused = mailbox.post_named(&past, Message::Nil).unwrap_err();
    assert!(matches!(
        refused,
        PostRefused::Name {
            len: 257,
            max: 256,
            ..
        }
    ));
    assert_eq!(
        refused.to_string(),
        "an event name must be 1 to 256 bytes, got 257"
    );
    let refused = mailbox.post_named("", Message::Nil).unwrap_err();
    assert_eq!(
        refused.to_string(),
        "an event name must be 1 to 256 bytes, got 0"
    );
    let err = refusal(&domain, &format!(r#"events.emit("{past}")"#));
    assert_contains(
        &err,
        "events.emit: an event name must be 1 to 256 bytes, got 257",
    );
    let err = refusal(&domain, r#"events.emit("")"#);
    assert_contains(
        &err,
        "events.emit: an event name must be 1 to 256 bytes, got 0",
    );
    let err = refusal(&domain, r#"events.on("", function() end)"#);
    assert_contains(
        &err,
        "events.on: an event name must be 1 to 256 bytes, got 0",
    );
    let err = domain
        .bind_event_handler(&past, |_| Ok(()))
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        "bind_event_handler: an event name must be 1 to 256 bytes, got 257"
    );
    assert_eq!(domain.pending_events(), 2);
    assert_eq!(domain.pending_event_bytes(), bytes);
}

#[test]
fn a_route_copies_named_events_to_another_domain() {
    let pool = Pool::new(1);
    let game = game(&pool, limits());
    let audio = ScriptDomain::new(&pool, DomainSpec::new("audio")).unwrap();
    audio
        .eval(
            r#"
            heard = {}
            require("@skein/events").on("boom", function(v) table.insert(heard, v) end)
        "#,
        )
        .unwrap();
    game.route("boom", audio.mailbox()).unwrap();
    game.eval(r#"events.on("boom", function(v) note("local " .. v) end)"#)
        .unwrap();
    game.eval(r#"events.emit("boom", 1) events.emit("quiet", 2) events.emit("boom", 3)"#)
        .unwrap();
    // Host posts are not the domain's emissions: they are not routed.
    game.mailbox()
        .post_named("boom", Message::Integer(4))
        .unwrap();
    let report = audio.drain_events();
    assert_eq!((report.delivered, report.pending), (2, 0));
    assert_eq!(
        text(&audio.eval("return table.concat(heard, ',')").unwrap()),
        "1,3"
    );
    let report = game.drain_events();
    assert_eq!((report.delivered, report.unhandled), (3, 1));
    assert!(report.warnings.is_empty(), "{:?}", report.warnings);
    assert_eq!(log(&game), "local 1, local 3, local 4");
}

#[test]
fn a_stopped_or_full_recipient_is_a_warning_for_the_emitter() {
    let pool = Pool::new(1);
    let game = game(&pool, limits());
    let mut stopped = ScriptDomain::new(&pool, DomainSpec::new("stopped")).unwrap();
    let full = ScriptDomain::new(
        &pool,
        DomainSpec::new("full").event_limits(EventLimits {
            pending: 1,
            ..limits()
        }),
    )
    .unwrap();
    game.route("boom", stopped.mailbox()).unwrap();
    game.route("boom", full.mailbox()).unwrap();
    stopped.stop();
    // The emitter does not fail: its own handlers and the full recipient's first copy go on.
    game.eval(r#"events.emit("boom", 1) events.emit("boom", 2)"#)
        .unwrap();
    assert_eq!(full.pending_events(), 1);
    let report = game.drain_events();
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    let warnings: Vec<String> = report.warnings.iter().map(|d| d.message.clone()).collect();
    assert_eq!(warnings.len(), 3, "{warnings:?}");
    assert_contains(&warnings[0], "warning: route 'boom'");
    assert_contains(&warnings[0], "the domain is stopped");
    assert_contains(&warnings[1], "the domain is stopped");
    assert_contains(
        &warnings[2],
        "queue full: the queue holds its limit of 1 pending events (EventLimits::pending)",
    );
    assert!(report
        .warnings
        .iter()
        .all(|d| d.attribution.domain == game.id()));
    assert!(game.drain_events().warnings.is_empty());
}

#[test]
fn a_restart_discards_the_old_generations_events_and_counts_them() {
    let pool = Pool::new(1);
    let mut domain = game(&pool, limits());
    let host_seen = Rc::new(RefCell::new(Vec::new()));
    let seen = host_seen.clone();
    domain
        .bind_event_handler("n", move |m| {
            seen.borrow_mut().push(m);
            Ok(())
        })
        .unwrap();
    let old = domain.mailbox();
    old.post(EventTarget::All, Message::Integer(1)).unwrap();
    old.post_named("n", Message::Integer(2)).unwrap();
    domain.eval(r#"events.emit("n", 3)"#).unwrap();
    let stale_before = domain.stale_events();
    domain.restart(skein::lifecycle::Load::Nothing).unwrap();
    assert_eq!(domain.stale_events(), stale_before + 3);
    assert_eq!(
        (domain.pending_events(), domain.pending_event_bytes()),
        (0, 0)
    );
    // The old generation's mailbox still posts, into nothing: discarded and counted.
    old.post_named("n", Message::Integer(4)).unwrap();
    let report = domain.drain_events();
    assert_eq!((report.delivered, report.unhandled), (0, 0));
    assert_eq!(domain.stale_events(), stale_before + 4);
    // The new generation's events deliver; the host's handler stayed bound.
    domain
        .mailbox()
        .post_named("n", Message::Integer(5))
        .unwrap();
    assert_eq!(domain.drain_events().delivered, 1);
    assert_eq!(*host_seen.borrow(), [Message::Integer(5)]);
    // Luau handlers went with the old VM, and the new VM has its own `@skein/events`.
    domain
        .eval(r#"require("@skein/events").emit("n", 6)"#)
        .unwrap();
    assert_eq!(domain.drain_events().delivered, 1);
    assert_eq!(host_seen.borrow().len(), 2);
}

#[test]
fn a_stopped_domain_refuses_posts_and_drains_nothing() {
    let pool = Pool::new(1);
    let mut domain = game(&pool, limits());
    domain.mailbox().post_named("n", Message::Nil).unwrap();
    let mailbox = domain.mailbox();
    domain.stop();
    let refused = mailbox
        .post(EventTarget::All, Message::Integer(1))
        .unwrap_err();
    assert_eq!(refused.to_string(), "the domain is stopped");
    assert_eq!(refused.into_payload(), Message::Integer(1));
    assert_eq!(domain.drain_events(), skein::event::EventReport::default());
}

#[test]
fn a_worker_vm_cannot_bind_but_can_emit() {
    let tree = Tree::new(&[(
        "w.luau",
        r#"return {
            on = function() return tostring(select(2, pcall(require("@skein/events").on, "x", print))) end,
            emit = function() return (pcall(require("@skein/events").emit, "x")) end,
        }"#,
    )]);
    let pool = Pool::new(1);
    let domain = tree.domain_with(&pool, Plan::new());
    let on = domain
        .dispatch("./w", "on", Message::Nil)
        .unwrap()
        .wait()
        .unwrap();
    assert_contains(&text(&on), "events.on: handlers bind only in the engine VM");
    let emit = domain
        .dispatch("./w", "emit", Message::Nil)
        .unwrap()
        .wait()
        .unwrap();
    // Emitting from a worker VM queues the event for the engine (tests/worker_events.rs).
    assert_eq!(emit, Message::Boolean(true));
    assert_eq!(domain.pending_events(), 1);
}

#[test]
fn a_payload_that_cannot_cross_is_refused_naming_its_path() {
    let pool = Pool::new(1);
    let domain = game(&pool, limits());
    let err = refusal(&domain, r#"events.emit("n", { f = print })"#);
    assert_contains(
        &err,
        "events.emit: payload.f: a function can't cross a worker or event boundary",
    );
    let err = refusal(&domain, r#"events.emit(42)"#);
    assert_contains(&err, "events.emit: name must be a string, got a number");
    assert_eq!(domain.pending_events(), 0);
    // A refusal that is not about room records no queue-full diagnostic.
    assert!(domain.drain_events().errors.is_empty());
}
