//! Scheduler time from frame time: a domain driven by `advance(dt)` moves its engine VM's timers
//! by `dt` (a large `dt` fires what is due, in order, each waiter seeing the frame's time; a
//! `dt` of zero fires nothing new, however long the wall clock ran), a blocking `eval` still
//! waits its timers out, and `task.waitFrames` counts the frames `advance` runs.

use std::time::Duration;

use skein::{DomainSpec, Message, Pool, ScriptDomain};

use crate::support::{assert_contains, global_strings, refusal};

/// A global of the engine VM, read without running a round (which would count a frame).
fn global(domain: &ScriptDomain, name: &str) -> skein::mlua::Value {
    domain.lua().globals().get(name).unwrap()
}

fn order(domain: &ScriptDomain) -> String {
    global_strings(domain, "order")
}

#[test]
fn timers_follow_frame_time_under_advance() {
    let pool = Pool::new(1);
    let domain = ScriptDomain::new(&pool, DomainSpec::new("clock")).unwrap();
    // The first advance puts the engine VM on frame time.
    domain.advance(Duration::ZERO).unwrap();
    domain
        .exec(
            r#"
            order = {}
            task.delay(0.03, function() table.insert(order, "c") end)
            task.delay(0.01, function()
                table.insert(order, "a")
                -- Parked at the frame's time: due one more second of frames on.
                task.wait(1)
                table.insert(order, "late")
            end)
            task.spawn(function()
                waited = task.wait(0.02)
                table.insert(order, "b")
            end)
            "#,
        )
        .unwrap();
    // Wall time passes, frames of no time do not: nothing is due.
    std::thread::sleep(Duration::from_millis(60));
    for _ in 0..3 {
        domain.advance(Duration::ZERO).unwrap();
    }
    assert_eq!(order(&domain), "");
    // One long frame fires everything due, in wake order, and each waiter sees the frame's
    // time, not the wall clock's.
    domain.advance(Duration::from_secs(10)).unwrap();
    assert_eq!(order(&domain), "a b c");
    let waited = match global(&domain, "waited") {
        skein::mlua::Value::Number(n) => n,
        skein::mlua::Value::Integer(n) => n as f64,
        other => panic!("{other:?}"),
    };
    assert!((waited - 10.0).abs() < 1e-6, "{waited}");
    domain.advance(Duration::from_millis(999)).unwrap();
    assert_eq!(order(&domain), "a b c");
    domain.advance(Duration::from_millis(1)).unwrap();
    assert_eq!(order(&domain), "a b c late");
}

#[test]
fn a_blocking_eval_waits_its_timers_out_on_frame_time() {
    let pool = Pool::new(1);
    let domain = ScriptDomain::new(&pool, DomainSpec::new("clock")).unwrap();
    domain.advance(Duration::from_millis(16)).unwrap();
    let waited = domain.eval("return task.wait(0.02)").unwrap();
    let Message::Number(waited) = waited else {
        panic!("{waited:?}")
    };
    assert!(waited >= 0.02, "{waited}");
}

#[test]
fn a_domain_no_frame_drives_keeps_the_wall_clock() {
    let pool = Pool::new(1);
    let domain = ScriptDomain::new(&pool, DomainSpec::new("clock")).unwrap();
    domain
        .exec("task.delay(0.01, function() fired = true end)")
        .unwrap();
    // No advance: pumping alone runs the timer once the wall clock reaches it.
    assert!(crate::support::wait_until(Duration::from_secs(5), || {
        domain.pump();
        global(&domain, "fired") == skein::mlua::Value::Boolean(true)
    }));
}

#[test]
fn wait_frames_counts_the_frames_advance_runs_from_1_up() {
    let pool = Pool::new(1);
    let domain = ScriptDomain::new(&pool, DomainSpec::new("clock")).unwrap();
    domain
        .exec("passed = task.waitFrames(1) done = true")
        .unwrap();
    assert_eq!(global(&domain, "done"), skein::mlua::Value::Nil);
    domain.advance(Duration::ZERO).unwrap();
    assert_eq!(global(&domain, "done"), skein::mlua::Value::Boolean(true));
    assert_eq!(global(&domain, "passed"), skein::mlua::Value::Number(1.0));
    // The bound: 1 frame is the least; 0 is one past it.
    let e = refusal(&domain, "task.waitFrames(0)");
    assert_contains(
        &e,
        "task.waitFrames: n must be a whole number of frames, 1 or more, got 0",
    );
}
