//! Stopping stops: a pool job that never yields (`while true do end`) is interrupted at its next
//! interrupt check when its domain stops or is dropped, and dropping the last `Pool` handle
//! returns within the same bound; other domains' work on the pool is untouched.

use std::time::{Duration, Instant};

use skein::{Message, Pool, ScriptDomain};

use crate::support::{wait_until, Gate, Marks, Tree};

/// The bound the issue sets for each of them; the interrupt itself takes microseconds.
const BOUND: Duration = Duration::from_secs(1);

/// How long a test waits for the runaway job to start (a debug build starts a VM slowly).
const START: Duration = Duration::from_secs(10);

/// A tree with the runaway job (it marks itself started, then loops with no yield) and a
/// quick one.
fn tree() -> Tree {
    Tree::new(&[
        (
            "spin.luau",
            "return { go = function() hostMark() while true do end end }\n",
        ),
        (
            "ping.luau",
            "return { go = function(x) return x + 1 end }\n",
        ),
    ])
}

/// A domain of `tree` on `pool` that has dispatched the runaway job, once the job is running.
fn spinning(tree: &Tree, pool: &Pool, marks: &Marks) -> ScriptDomain {
    let domain = tree.domain_with(pool, marks.plan());
    domain
        .exec("spinning = jobs.dispatch('./spin', 'go')")
        .expect("dispatch");
    assert!(
        wait_until(START, || marks.count() == 1),
        "the runaway job never started"
    );
    domain
}

/// Answers once a quick job of a fresh domain has run on `pool`: with one worker, proof that
/// the worker is free again.
fn ping(tree: &Tree, pool: &Pool) -> Message {
    let other = tree.domain(pool);
    other
        .eval("return jobs.dispatch('./ping', 'go', 41):await()")
        .expect("the other domain's job")
}

#[test]
fn stop_interrupts_a_running_job_within_the_bound() {
    let (tree, pool, marks) = (tree(), Pool::new(1), Marks::default());
    let mut domain = spinning(&tree, &pool, &marks);
    let started = Instant::now();
    domain.stop();
    // The only worker runs the next item once the runaway run has stopped.
    assert_eq!(ping(&tree, &pool), Message::Number(42.0));
    let took = started.elapsed();
    assert!(took < BOUND, "stop left the job running for {took:?}");
}

#[test]
fn stop_interrupts_a_running_keyed_job_and_refuses_its_queued_successor() {
    let (tree, pool, marks) = (tree(), Pool::new(1), Marks::default());
    let mut domain = tree.domain_with(&pool, marks.plan());
    domain
        .exec(
            "jobs.dispatch('./spin', 'go', nil, { key = 'k' }) \
             jobs.dispatch('./spin', 'go', nil, { key = 'k' })",
        )
        .expect("dispatch");
    assert!(
        wait_until(START, || marks.count() == 1),
        "the runaway job never started"
    );
    let started = Instant::now();
    domain.stop();
    assert_eq!(ping(&tree, &pool), Message::Number(42.0));
    let took = started.elapsed();
    assert!(took < BOUND, "stop left the keyed job running for {took:?}");
    assert_eq!(marks.count(), 1, "the key's queued item ran");
    assert_eq!(
        pool.stats()[0].keys_held,
        0,
        "the stopped domain's key is still bound"
    );
}

#[test]
fn dropping_the_domain_interrupts_a_running_job_within_the_bound() {
    let (tree, pool, marks) = (tree(), Pool::new(1), Marks::default());
    let domain = spinning(&tree, &pool, &marks);
    let started = Instant::now();
    drop(domain);
    assert_eq!(ping(&tree, &pool), Message::Number(42.0));
    let took = started.elapsed();
    assert!(took < BOUND, "the dropped domain's job ran on for {took:?}");
}

#[test]
fn dropping_the_pool_returns_within_the_bound_with_a_runaway_job_in_flight() {
    // The case: the domain goes first (0.65 ms), then the pool, which joined its
    // threads only when the job's 60 s deadline passed.
    let (tree, marks) = (tree(), Marks::default());
    let pool = Pool::new(2);
    let domain = spinning(&tree, &pool, &marks);
    drop(domain);
    let started = Instant::now();
    drop(pool);
    let took = started.elapsed();
    assert!(took < BOUND, "dropping the pool took {took:?}");

    // The host's handle goes first and the domain holds the last one: dropping the domain
    // stops it and then joins the pool's threads.
    let marks = Marks::default();
    let pool = Pool::new(2);
    let domain = spinning(&tree, &pool, &marks);
    drop(pool);
    let started = Instant::now();
    drop(domain);
    let took = started.elapsed();
    assert!(
        took < BOUND,
        "dropping the domain with the last pool handle took {took:?}"
    );
}

#[test]
fn a_running_host_job_settles_cancelled_and_a_queued_one_is_refused_when_its_domain_stops() {
    let (tree, pool, marks) = (tree(), Pool::new(1), Marks::default());
    let mut domain = tree.domain_with(&pool, marks.plan());
    let mut promise = domain
        .dispatch("./spin", "go", Message::Nil)
        .expect("dispatch");
    assert!(
        wait_until(START, || marks.count() == 1),
        "the runaway job never started"
    );
    let mut queued = domain
        .dispatch("./spin", "go", Message::Nil)
        .expect("dispatch");
    domain.stop();
    let outcome = promise.wait_timeout(BOUND).expect("the promise settled");
    let err = outcome.expect_err("a runaway job can't resolve");
    assert!(matches!(err, skein::Error::Cancelled), "{err:?}");
    assert_eq!(err.to_string(), "cancelled");
    // The item queued behind it never ran: refused, naming the stop.
    let err = queued
        .wait_timeout(BOUND)
        .expect("the queued promise settled")
        .expect_err("a refused item can't resolve");
    assert!(err.to_string().contains("domain 'test' stopped"), "{err}");
    assert_eq!(marks.count(), 1, "the queued item ran");
}

#[test]
fn stopping_one_domain_leaves_another_domains_running_job_alone() {
    let tree = Tree::new(&[
        (
            "spin.luau",
            "return { go = function() hostMark() while true do end end }\n",
        ),
        (
            "work.luau",
            // Blocked in host code while the other domain stops (its worker's signal is raised
            // then, so the loop after the gate meets the raised interrupt), then a loop with
            // back-edges, and a result.
            "return { go = function() gate() local n = 0 for i = 1, 1000 do n += i end return n end }\n",
        ),
    ]);
    let pool = Pool::new(2);
    let (marks, gate) = (Marks::default(), Gate::default());
    let other = tree.domain_with(&pool, gate.plan(marks.plan()));
    other
        .exec("task.spawn(function() result = jobs.dispatch('./work', 'go'):await() end)")
        .expect("dispatch the other domain's job");
    assert!(
        wait_until(START, || gate.arrived() == 1),
        "the other domain's job never started"
    );
    let mut domain = spinning(&tree, &pool, &marks);
    domain.stop();
    gate.open();
    let done = wait_until(START, || {
        other.pump();
        other.eval("return result").expect("eval") != Message::Nil
    });
    assert!(done, "the other domain's job never finished");
    assert_eq!(
        other.eval("return result").expect("eval"),
        Message::Number(500_500.0)
    );
    assert!(other.take_reports().is_empty());
    // Both workers serve the other domain again: the stopped domain's job is gone.
    let started = Instant::now();
    assert_eq!(
        other
            .eval("local a, b = jobs.dispatch('./work', 'go'), jobs.dispatch('./work', 'go') return a:await() + b:await()")
            .expect("two more jobs"),
        Message::Number(1_001_000.0)
    );
    assert!(started.elapsed() < START);
}
