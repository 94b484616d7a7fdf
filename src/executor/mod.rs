//! The generic work-stealing executor: threads, queues, sleep/wake, item hand-off, key lanes and
//! stats; beside it, the queue a domain's mailbox is made of (`wake_queue.rs`) and the one-shot
//! cell a host `Promise` waits on (`one_shot.rs`).
//!
//! Generic over what an item does ([`threads::WorkerLogic`]), so it has no Luau in it and loom can
//! model it (`loom-tests/`). The Luau worker that implements the logic, and the public
//! [`Pool`](crate::Pool) that starts the executor with it, live in `jobs`. See `README.md` in
//! this folder for the sleep/wake protocol and the hand-off state machine.
//!
//! Types the loom models use are `pub` so `crate::__loom` can re-export them; the module itself
//! is private, so outside `cfg(loom)` they are crate-internal like everything else here.
// A few items (state inspectors, `HandoffState`) exist for the loom models and unit tests only.
#![cfg_attr(not(any(test, loom)), allow(dead_code))]

mod deques;
pub(crate) mod handoff;
pub(crate) mod lanes;
pub(crate) mod one_shot;
pub(crate) mod sleep;
pub(crate) mod spin;
pub(crate) mod stats;
pub(crate) mod threads;
pub(crate) mod wake_queue;

/// Polls `done` every millisecond until it holds or `limit` passes; answers its last answer.
/// The unit tests of this folder wait with it (`tests/support.rs` has the integration tests'
/// own), so a broken protocol fails a test instead of hanging it.
#[cfg(all(test, not(loom)))]
fn wait_until(limit: std::time::Duration, done: impl Fn() -> bool) -> bool {
    let end = std::time::Instant::now() + limit;
    while std::time::Instant::now() < end {
        if done() {
            return true;
        }
        // The poll interval, not a wait for a state: `done` is the state.
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    done()
}
