//! Signal waits: `events.wait` and `engine.wait` park a task until the next event of a name
//! and answer its payload, or `nil, "timeout"` once the timeout passed on the scheduler's clock.
//! Waiters of one name are released in arrival order, each once; a cancelled waiter, a timed-out
//! one and one whose generation ended are never resumed; the waiters of a VM are bounded (at
//! the bound and one past it). Engine waits work on the engine VM and in pool worker VMs.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use skein::lifecycle::Load;
use skein::{DomainSpec, Message, Pool, ScriptDomain};

use crate::support::{assert_contains, global_strings, refusal, text, wait_until, Tree};

fn domain(pool: &Pool) -> ScriptDomain {
    let domain = ScriptDomain::new(pool, DomainSpec::new("signals")).unwrap();
    domain
        .exec(r#"events = require("@skein/events") got = {}"#)
        .unwrap();
    domain
}

/// What the waiters wrote, after a pump runs the ones a drain released.
fn got(domain: &ScriptDomain) -> String {
    domain.pump();
    text(&domain.eval("return table.concat(got, ' ')").unwrap())
}

#[test]
fn waiters_take_the_next_event_in_arrival_order_each_once() {
    let pool = Pool::new(1);
    let domain = domain(&pool);
    domain
        .exec(
            r#"
            for i = 1, 3 do
                task.spawn(function()
                    local payload = events.wait("go")
                    table.insert(got, `{i}:{payload.n}`)
                end)
            end
            events.emit("go", { n = 7 })
            events.emit("go", { n = 8 })
            "#,
        )
        .unwrap();
    let report = domain.drain_events();
    // The first `go` released all three waiters; nobody waited for the second.
    assert_eq!((report.delivered, report.unhandled), (1, 1));
    assert_eq!(got(&domain), "1:7 2:7 3:7");
}

#[test]
fn a_wait_times_out_on_frame_time_and_no_later_event_resumes_it() {
    let pool = Pool::new(1);
    let domain = domain(&pool);
    domain.advance(Duration::ZERO).unwrap();
    domain
        .exec(
            r#"
            task.spawn(function()
                local payload, why = events.wait("late", 0.5)
                table.insert(got, `{payload}/{why}`)
            end)
            "#,
        )
        .unwrap();
    domain.advance(Duration::from_millis(400)).unwrap();
    assert_eq!(got(&domain), "");
    domain.advance(Duration::from_millis(100)).unwrap();
    assert_eq!(got(&domain), "nil/timeout");
    domain.exec(r#"events.emit("late", 1)"#).unwrap();
    let report = domain.advance(Duration::ZERO).unwrap();
    assert_eq!((report.events.delivered, report.events.unhandled), (0, 1));
    assert_eq!(got(&domain), "nil/timeout");
}

#[test]
fn a_cancelled_waiter_is_removed_and_never_resumed() {
    let pool = Pool::new(1);
    let domain = domain(&pool);
    domain
        .exec(
            r#"
            local t = task.spawn(function() events.wait("x") table.insert(got, "cancelled one") end)
            task.spawn(function() table.insert(got, events.wait("x")) end)
            task.cancel(t)
            events.emit("x", "kept one")
            "#,
        )
        .unwrap();
    domain.drain_events();
    assert_eq!(got(&domain), "kept one");
}

#[test]
fn a_restart_ends_the_waiters_of_the_old_generation() {
    let pool = Pool::new(1);
    let mut domain = domain(&pool);
    domain
        .exec(r#"task.spawn(function() events.wait("x") print("the old generation resumed") end)"#)
        .unwrap();
    domain.restart(Load::Nothing).unwrap();
    domain
        .exec(r#"require("@skein/events").emit("x", 1)"#)
        .unwrap();
    let report = domain.drain_events();
    assert_eq!((report.delivered, report.unhandled), (0, 1));
    assert!(domain.take_reports().is_empty());
}

#[test]
fn a_vm_holds_1024_waiters_and_refuses_the_next() {
    let pool = Pool::new(1);
    let domain = domain(&pool);
    domain
        .exec(r#"for i = 1, 1024 do task.spawn(events.wait, "many") end"#)
        .unwrap();
    let e = refusal(&domain, r#"events.wait("many")"#);
    assert_contains(
        &e,
        "events.wait: 1024 tasks of this VM already wait on events, the most that may (1024); \
         this wait was refused",
    );
    // Released, they make room again.
    domain.exec(r#"events.emit("many")"#).unwrap();
    assert_eq!(domain.drain_events().delivered, 1);
    domain
        .exec(r#"task.spawn(function() table.insert(got, events.wait("again")) end)"#)
        .unwrap();
    domain.exec(r#"events.emit("again", "room")"#).unwrap();
    domain.drain_events();
    assert_eq!(got(&domain), "room");
}

#[test]
fn bad_arguments_are_refused_naming_the_call() {
    let pool = Pool::new(1);
    let domain = domain(&pool);
    for (call, expected) in [
        (
            "events.wait(1)",
            "events.wait: name must be a string, got a number",
        ),
        (
            "events.wait('')",
            "events.wait: an event name must be 1 to 256 bytes, got 0",
        ),
        (
            "events.wait(string.rep('n', 257))",
            "events.wait: an event name must be 1 to 256 bytes, got 257",
        ),
        (
            "events.wait('x', 'soon')",
            "events.wait: timeout must be a number of seconds or nil, got a string",
        ),
        (
            "engine.wait(true)",
            "engine.wait: name must be a string, got a boolean",
        ),
    ] {
        assert_contains(&refusal(&domain, call), expected);
    }
    // Not UTF-8 text: the whole message, as the script reads it.
    for call in ["events.wait('\\255')", "engine.wait('\\255')"] {
        let what = &call[..call.find('(').unwrap()];
        let got = refusal(&domain, call);
        assert_eq!(got, format!("{what}: name must be UTF-8 text"), "{call}");
    }
    // 256 bytes is the longest name: it waits (and times out at once).
    assert_eq!(
        domain
            .eval("return select(2, events.wait(string.rep('n', 256), 0))")
            .unwrap(),
        Message::String("timeout".into())
    );
}

#[test]
fn engine_wait_takes_the_next_engine_event_on_the_engine_vm() {
    let pool = Pool::new(1);
    let domain = domain(&pool);
    // Raised before the wait: not the one it waits for.
    domain
        .raise_engine_event("spawned", Message::Integer(1))
        .unwrap();
    domain
        .exec(r#"task.spawn(function() table.insert(got, engine.wait("spawned")) end)"#)
        .unwrap();
    domain
        .raise_engine_event("spawned", Message::Integer(2))
        .unwrap();
    domain.pump();
    domain.pump();
    assert_eq!(got(&domain), "2");
}

const WAITER: &str = r#"
local events = require("@skein/events")
local M = {}
function M.waitFor(name)
    events.emit("got", engine.wait(name))
end
function M.timesOut()
    local payload, why = engine.wait("never", 0.05)
    return `{payload}/{why}`
end
function M.domainEvents()
    return events.wait("x")
end
return M
"#;

#[test]
fn engine_wait_works_in_a_pool_worker_vm() {
    let tree = Tree::new(&[("waiter.luau", WAITER)]);
    let pool = Pool::new(1);
    let domain = tree.domain(&pool);
    let seen = Rc::new(RefCell::new(Vec::new()));
    let sink = seen.clone();
    domain
        .bind_event_handler("got", move |m| {
            sink.borrow_mut().push(m);
            Ok(())
        })
        .unwrap();
    domain
        .exec(r#"jobs.dispatch("./waiter", "waitFor", "go")"#)
        .unwrap();
    // The job takes only an event raised after its wait began: raise until one reaches it.
    assert!(wait_until(Duration::from_secs(10), || {
        domain
            .raise_engine_event("go", Message::Integer(42))
            .unwrap();
        domain.pump();
        domain.drain_events();
        !seen.borrow().is_empty()
    }));
    assert_eq!(seen.borrow()[0], Message::Integer(42));
    let timed_out = domain
        .eval(r#"return jobs.dispatch("./waiter", "timesOut"):await()"#)
        .unwrap();
    assert_eq!(timed_out, Message::String("nil/timeout".into()));
    let e = domain
        .eval(r#"return jobs.dispatch("./waiter", "domainEvents"):await()"#)
        .unwrap_err();
    assert_contains(
        &e.to_string(),
        "events.wait: a domain's named events are delivered in its engine VM alone",
    );
}

#[test]
fn engine_wait_works_in_a_skein_worker_actor() {
    use skein::capability::{CapabilityId, CapabilitySet, RootAuthority};
    let pool = Pool::new(1);
    let grant = RootAuthority::new().grant(CapabilitySet::from_iter([CapabilityId::new(
        "worker.spawn",
    )
    .unwrap()]));
    let domain = ScriptDomain::new(&pool, DomainSpec::new("actors").grant(grant)).unwrap();
    domain
        .exec(
            r#"
            local w = require("@skein/worker").spawn { name = "waiter", source = [[
                return function(name)
                    local payload, why = engine.wait(name, if name == "never" then 0.05 else nil)
                    return `{payload}/{why}`
                end
            ]] }
            w:send("never")
            w:send("go")
            replies = {}
            task.spawn(function()
                table.insert(replies, w:receive(20))
                table.insert(replies, w:receive(20))
            end)
            "#,
        )
        .unwrap();
    let replies = || global_strings(&domain, "replies");
    // The second message waits on `go` raised after its wait began: raise until it is seen.
    assert!(wait_until(Duration::from_secs(10), || {
        domain
            .raise_engine_event("go", Message::Integer(5))
            .unwrap();
        domain.pump();
        replies().matches('/').count() == 2
    }));
    assert_eq!(replies(), "nil/timeout 5/nil");
}
