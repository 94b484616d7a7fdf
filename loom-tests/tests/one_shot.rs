//! Loom models of the one-shot cell a host `Promise` waits on (`src/executor/one_shot.rs`): a
//! settle on one thread races the waiter going to park on another, and two settles (a reply
//! and a cancel) race each other. A lost wake-up leaves the waiter parked on a settled cell:
//! loom reports that as a deadlock.
#![cfg(loom)]

use loom::sync::Arc;
use loom::thread;
use loom_tests::Branches;
use skein::__loom::{OneShot, Standing, Took, Waited};

/// Side 1: the waiter parked before the value came, so the settle had to wake it.
#[test]
fn a_settle_racing_the_waiter_going_to_park_wakes_it() {
    static BRANCHES: Branches = Branches::new();
    loom::model(|| {
        let cell = Arc::new(OneShot::new());
        let settler = {
            let cell = cell.clone();
            thread::spawn(move || cell.settle(7u32, 1).unwrap())
        };
        let waited = cell.wait_until(None);
        assert_ne!(waited, Waited::TimedOut);
        assert_eq!(cell.standing(), Standing::Settled(1));
        assert_eq!(cell.take(), Took::Value(7));
        assert_eq!(cell.take(), Took::Taken);
        settler.join().unwrap();
        BRANCHES.hit_if(waited == Waited::Woken);
    });
    BRANCHES.assert_both();
}

/// A reply and a cancel settle at once while the owner waits: exactly one lands, the other gets
/// its value back, and the owner takes the one that landed. Side 1: the cancel won.
#[test]
fn a_reply_racing_a_cancel_settles_once() {
    static BRANCHES: Branches = Branches::new();
    loom::model(|| {
        let cell = Arc::new(OneShot::new());
        let settle = |value: &'static str, kind: u8| {
            let cell = cell.clone();
            thread::spawn(move || cell.settle(value, kind).is_ok())
        };
        let (reply, cancel) = (settle("reply", 0), settle("cancel", 2));
        cell.wait_until(None);
        let (replied, cancelled) = (reply.join().unwrap(), cancel.join().unwrap());
        assert!(replied ^ cancelled, "exactly one settle lands");
        let expected = if cancelled { "cancel" } else { "reply" };
        assert_eq!(cell.take(), Took::Value(expected));
        BRANCHES.hit_if(cancelled);
    });
    BRANCHES.assert_both();
}
