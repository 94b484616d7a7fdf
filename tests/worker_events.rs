//! `events.emit` from pool worker VMs and actors: the event reaches the domain's engine
//! handlers at the next drain with its payload intact, many jobs' events each arrive once and
//! in their job's order, the queue's limits refuse as the engine's emit does, an emit of an
//! ended generation is stale, and routes carry workers' events too.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use skein::capability::{CapabilityId, CapabilitySet, RootAuthority};
use skein::event::EventLimits;
use skein::lifecycle::Load;
use skein::{DomainSpec, MapKey, Message, Plan, Pool, ScriptDomain};

use crate::support::{field, map, number, string, text, wait_until, Tree};

/// Binds a host handler to `name` that keeps every payload it is given.
fn collect(domain: &ScriptDomain, name: &str) -> Rc<RefCell<Vec<Message>>> {
    let seen = Rc::new(RefCell::new(Vec::new()));
    let sink = seen.clone();
    domain
        .bind_event_handler(name, move |m| {
            sink.borrow_mut().push(m);
            Ok(())
        })
        .unwrap();
    seen
}

const JOBS: &str = r#"
local events = require("@skein/events")
return {
    one = function(payload) events.emit("hit", payload) return true end,
    burst = function(job)
        for seq = 1, 125 do events.emit("tick", { job = job, seq = seq }) end
        return job
    end,
    fill = function(n)
        local payload = { keep = "me", list = { 1, 2, 3 } }
        local texts = {}
        for i = 1, n do
            local ok, err = pcall(events.emit, "fill", payload)
            if not ok then table.insert(texts, tostring(err)) end
        end
        -- The refused payload is the caller's, untouched.
        assert(payload.keep == "me" and #payload.list == 3)
        return texts
    end,
    big = function(bytes)
        local ok, err = pcall(events.emit, "big", string.rep("x", bytes))
        return tostring(err)
    end,
    bad = function()
        local out = {}
        for _, call in {
            function() events.emit(42) end,
            function() events.emit(string.rep("n", 257)) end,
            function() events.emit("n", { f = print }) end,
            function() events.on("n", print) end,
        } do
            local ok, err = pcall(call)
            table.insert(out, tostring(err))
        end
        return out
    end,
}
"#;

fn tree() -> Tree {
    Tree::new(&[("jobs.luau", JOBS)])
}

#[test]
fn a_job_emits_and_the_engine_gets_it_at_the_next_drain() {
    let tree = tree();
    let pool = Pool::new(1);
    let d = tree.domain(&pool);
    let seen = collect(&d, "hit");
    d.eval(r#"require("@skein/events").on("hit", function(p) got = p.name .. #p.list .. tostring(p.nested.deep) end)"#)
        .unwrap();
    let payload = map(&[
        (
            "list",
            Message::List(vec![
                Message::Integer(1),
                Message::Integer(2),
                Message::Integer(3),
            ]),
        ),
        ("nested", map(&[("deep", Message::Integer(39))])),
        ("name", string("orc")),
        ("big", Message::Integer(1 << 40)),
    ]);
    let done = d
        .dispatch("./jobs", "one", payload.clone())
        .unwrap()
        .wait()
        .unwrap();
    assert_eq!(done, Message::Boolean(true));
    // Queued, not delivered: nothing runs before the host drains.
    assert_eq!(d.pending_events(), 1);
    assert!(seen.borrow().is_empty());
    let report = d.drain_events();
    assert_eq!(
        (report.delivered, report.unhandled, report.pending),
        (1, 0, 0)
    );
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    assert_eq!(*seen.borrow(), [payload]);
    assert_eq!(d.eval("return got").unwrap(), string("orc339"));
}

#[test]
fn a_thousand_events_from_eight_jobs_arrive_once_each_in_job_order() {
    let tree = tree();
    let pool = Pool::new(2);
    let d = tree.domain(&pool);
    let seen = collect(&d, "tick");
    let promises: Vec<_> = (1..=8)
        .map(|job| {
            d.dispatch("./jobs", "burst", Message::Number(job as f64))
                .unwrap()
        })
        .collect();
    for (job, promise) in (1..=8).zip(promises) {
        assert_eq!(promise.wait().unwrap(), Message::Number((job) as f64));
    }
    assert_eq!(d.pending_events(), 1000);
    let report = d.drain_events();
    assert_eq!(
        (report.delivered, report.unhandled, report.pending),
        (1000, 0, 0)
    );
    let seen = seen.borrow();
    assert_eq!(seen.len(), 1000);
    let mut next = [1i64; 9];
    for event in seen.iter() {
        let (job, seq) = (number(field(event, "job")), number(field(event, "seq")));
        assert_eq!(seq, next[job as usize] as f64, "job {job} out of order");
        next[job as usize] += 1;
    }
    assert_eq!(&next[1..], &[126; 8]);
}

#[test]
fn a_full_queue_refuses_a_workers_emit_and_queues_nothing() {
    let tree = tree();
    let pool = Pool::new(1);
    let limits = EventLimits {
        pending: 2,
        bytes: 4096,
        ..EventLimits::default()
    };
    let d = ScriptDomain::new(
        &pool,
        DomainSpec::new("game")
            .plan(Plan::new().root(tree.path()))
            .event_limits(limits),
    )
    .unwrap();
    let texts = d
        .dispatch("./jobs", "fill", Message::Number(3.0))
        .unwrap()
        .wait()
        .unwrap();
    let Message::List(texts) = texts else {
        panic!("expected a list, got {texts:?}")
    };
    assert_eq!(texts.len(), 1);
    assert!(text(&texts[0]).contains(
        "events.emit: queue full: the queue holds its limit of 2 pending events (EventLimits::pending)"
    ), "{:?}", texts[0]);
    assert_eq!(d.pending_events(), 2);
    let bytes = d.pending_event_bytes();

    // The refusal is in the next drain's report, attributed to the domain, as an engine
    // emit's would be.
    let report = d.drain_events();
    assert_eq!(report.unhandled, 2);
    assert_eq!(report.errors.len(), 1);
    assert_eq!(
        report.errors[0].message,
        "events.emit: queue full: the queue holds its limit of 2 pending events (EventLimits::pending)"
    );
    assert_eq!(report.errors[0].attribution.domain_name, "game");
    assert_eq!(report.errors[0].attribution.generation, d.generation());

    // Past the byte bound: the string is refused while it is read, and nothing is queued.
    let big = d
        .dispatch("./jobs", "big", Message::Number(8192.0))
        .unwrap()
        .wait()
        .unwrap();
    assert!(text(&big).contains(
        "events.emit: queue full: the event does not fit in the 4096 bytes the queue may hold (EventLimits::bytes)"
    ), "{big:?}");
    assert_eq!((d.pending_events(), d.pending_event_bytes()), (0, 0));
    assert!(bytes > 0);
}

#[test]
fn a_workers_emit_is_refused_as_the_engines_is() {
    let tree = tree();
    let pool = Pool::new(1);
    let d = tree.domain(&pool);
    let out = d
        .dispatch("./jobs", "bad", Message::Nil)
        .unwrap()
        .wait()
        .unwrap();
    let Message::List(out) = out else {
        panic!("expected a list, got {out:?}")
    };
    let out: Vec<String> = out.iter().map(text).collect();
    let wanted = [
        "events.emit: name must be a string, got a number",
        "events.emit: an event name must be 1 to 256 bytes, got 257",
        "events.emit: payload.f: a function can't cross a worker or event boundary",
        "events.on: handlers bind only in the engine VM; a worker VM runs jobs, not event handlers",
    ];
    assert_eq!(out.len(), wanted.len());
    for (got, want) in out.iter().zip(wanted) {
        assert!(got.contains(want), "{got} lacks {want}");
    }
    assert_eq!(d.pending_events(), 0);
}

#[test]
fn an_emit_of_an_ended_generation_is_stale_and_never_delivered() {
    // The job's Luau is interrupted at its next interrupt check once its generation ends, so
    // the late emits are made from host code the job is in when the restart comes: it waits
    // there, then calls `events.emit` (a Rust function, which makes no interrupt check) with
    // the ended generation's VM, as a job between the end and its next check would.
    let tree = Tree::new(&[(
        "late.luau",
        r#"return { run = function()
            lateEmits(require("@skein/events").emit)
        end }"#,
    )]);
    let gate = Arc::new((Mutex::new(false), Condvar::new()));
    let arrived = Arc::new(AtomicUsize::new(0));
    let emitted = Arc::new(AtomicUsize::new(0));
    let (wait, came, count) = (gate.clone(), arrived.clone(), emitted.clone());
    let plan = Plan::new().root(tree.path()).function(
        "lateEmits",
        move |_, args: skein::mlua::MultiValue| {
            let Some(skein::mlua::Value::Function(emit)) = args.into_iter().next() else {
                return Err(skein::mlua::Error::runtime("lateEmits(emit)"));
            };
            came.fetch_add(1, Ordering::AcqRel);
            let (lock, cv) = &*wait;
            let open = lock.lock().unwrap();
            let _open = cv
                .wait_timeout_while(open, Duration::from_secs(10), |o| !*o)
                .unwrap();
            for i in 1..=3 {
                emit.call::<()>(("late", i))?;
            }
            count.fetch_add(1, Ordering::AcqRel);
            Ok(skein::mlua::MultiValue::new())
        },
    );
    let pool = Pool::new(1);
    let mut d = ScriptDomain::new(&pool, DomainSpec::new("game").plan(plan)).unwrap();
    let seen = collect(&d, "late");
    let other = ScriptDomain::new(&pool, DomainSpec::new("other")).unwrap();
    d.route("late", other.mailbox()).unwrap();
    let promise = d.dispatch("./late", "run", Message::Nil).unwrap();
    assert!(wait_until(Duration::from_secs(10), || arrived
        .load(Ordering::Acquire)
        == 1));
    d.restart(Load::Nothing).unwrap();
    let stale_before = d.stale_events();
    *gate.0.lock().unwrap() = true;
    gate.1.notify_all();
    assert!(wait_until(Duration::from_secs(10), || emitted
        .load(Ordering::Acquire)
        == 1));
    drop(promise);
    // The three posts went through the old generation's mailbox: each was discarded on
    // arrival, and the drain counts exactly those three (the job's host promise was rejected
    // by the restart, so its settlement is no mailbox event).
    let report = d.drain_events();
    assert_eq!(
        (report.delivered, report.unhandled, report.pending),
        (0, 0, 0)
    );
    assert_eq!(d.stale_events(), stale_before + 3);
    // Never delivered, so never routed either.
    assert_eq!(other.pending_events(), 0);
    assert_eq!(d.pending_events(), 0);
    assert!(seen.borrow().is_empty());
}

#[test]
fn an_actor_emits() {
    let pool = Pool::new(1);
    let grant = RootAuthority::new().grant(CapabilitySet::from_iter([CapabilityId::new(
        "worker.spawn",
    )
    .unwrap()]));
    let limits = EventLimits {
        pending: 2,
        ..EventLimits::default()
    };
    let spec = DomainSpec::new("game").grant(grant).event_limits(limits);
    let d = ScriptDomain::new(&pool, spec).unwrap();
    let seen = collect(&d, "from.actor");
    let out = d
        .eval(
            r#"
            local w = require("@skein/worker").spawn { name = "emitter", source = [[
                local events = require("@skein/events")
                return function(m)
                    events.emit("from.actor", { n = m, who = "emitter" })
                    events.emit("from.actor", { n = m + 1, who = "emitter" })
                    local _, full = pcall(events.emit, "from.actor", { n = m + 2 })
                    local _, on = pcall(events.on, "x", print)
                    return { tostring(full), tostring(on) }
                end
            ]] }
            w:send(10)
            return w:receive(20)
            "#,
        )
        .unwrap();
    let Message::List(texts) = out else {
        panic!("expected a list, got {out:?}")
    };
    assert!(
        text(&texts[0]).contains(
            "events.emit: queue full: the queue holds its limit of 2 pending events (EventLimits::pending)"
        ),
        "{texts:?}"
    );
    assert!(
        text(&texts[1]).contains("events.on: handlers bind only in the engine VM"),
        "{texts:?}"
    );
    let report = d.drain_events();
    assert_eq!(report.delivered, 2);
    let who = |n: i64| {
        Message::Map(
            [
                (MapKey::String("n".into()), Message::Number(n as f64)),
                (MapKey::String("who".into()), string("emitter")),
            ]
            .into_iter()
            .collect(),
        )
    };
    assert_eq!(*seen.borrow(), [who(10), who(11)]);
    // The refusal is reported, attributed to the worker that emitted.
    assert_eq!(report.errors.len(), 1, "{:?}", report.errors);
    assert_eq!(
        report.errors[0].attribution.actor.as_deref(),
        Some("emitter")
    );
}

#[test]
fn routes_carry_workers_events() {
    let tree = tree();
    let pool = Pool::new(1);
    let game = tree.domain(&pool);
    let mut audio = ScriptDomain::new(&pool, DomainSpec::new("audio")).unwrap();
    let heard = collect(&audio, "hit");
    game.route("hit", audio.mailbox()).unwrap();
    game.dispatch("./jobs", "one", Message::Integer(7))
        .unwrap()
        .wait()
        .unwrap();
    // The copy leaves when the emitting domain drains the worker's event.
    assert_eq!(audio.pending_events(), 0);
    let report = game.drain_events();
    assert_eq!((report.unhandled, report.warnings.len()), (1, 0));
    assert_eq!(audio.drain_events().delivered, 1);
    assert_eq!(*heard.borrow(), [Message::Integer(7)]);

    // A stopped recipient is a warning of the emitter's drain, not the job's error.
    audio.stop();
    game.dispatch("./jobs", "one", Message::Integer(8))
        .unwrap()
        .wait()
        .unwrap();
    let report = game.drain_events();
    assert_eq!(report.warnings.len(), 1);
    assert!(
        report.warnings[0]
            .message
            .contains("route 'hit' to a domain (generation 1): the copy was not delivered: the domain is stopped"),
        "{:?}",
        report.warnings
    );
}
