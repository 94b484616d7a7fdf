//! Loom models of the shared-queue hand-off: a pop that waits is never left asleep beside a
//! value (no lost wake-up), no value is delivered twice or lost (a popper that is gone gives its
//! value back), and the queue never holds more than its capacity, counting values in flight.
//!
//! A waiter's callback stands for the parcel posted to the popper's home: it drops the delivery
//! into a slot that a thread playing the home reads.
#![cfg(loom)]

use std::time::Duration;

use loom::sync::{Arc, Mutex};
use loom::thread;
use loom_tests::Branches;
use skein::__loom::{pop_blocking, Delivery, PopNow, SharedQueue};
use skein::Message;

type Slot = Arc<Mutex<Option<Delivery>>>;

/// A waiter callback that drops its delivery into a slot, and the slot.
fn slot() -> (Box<dyn FnOnce(Delivery) + Send>, Slot) {
    let slot: Slot = Arc::new(Mutex::new(None));
    let to = slot.clone();
    let deliver = Box::new(move |d: Delivery| {
        let mut held = to.lock().unwrap();
        assert!(held.is_none(), "a waiter was called twice");
        *held = Some(d);
    });
    (deliver, slot)
}

fn int(n: i64) -> Message {
    Message::Integer(n)
}

fn as_int(m: &Message) -> i64 {
    match m {
        Message::Integer(n) => *n,
        other => panic!("expected an integer, got {other:?}"),
    }
}

/// Waits (yielding to the model) until the slot is filled, and takes it.
fn wait_for(slot: &Slot) -> Delivery {
    loop {
        if let Some(d) = slot.lock().unwrap().take() {
            return d;
        }
        thread::yield_now();
    }
}

#[test]
fn a_pop_racing_a_push_gets_the_value_exactly_once() {
    static BRANCHES: Branches = Branches::new();
    loom::model(|| {
        let q = Arc::new(SharedQueue::new("q", 1));
        let pusher = {
            let q = q.clone();
            thread::spawn(move || {
                q.push(int(1)).expect("room for one");
                assert!(q.held() <= 1);
            })
        };
        let (deliver, slot) = slot();
        let now = q.pop_or_wait(deliver).expect("open");
        pusher.join().unwrap();
        // Side 1: the pop found the queue empty and waited for the push.
        BRANCHES.hit_if(matches!(now, PopNow::Waiting(_)));
        let got = match now {
            PopNow::Value(v) => v,
            PopNow::Waiting(_) => match slot.lock().unwrap().take() {
                // The push saw the waiter: it must have handed the value over, not queued it.
                Some(Delivery::Value(v)) => {
                    q.delivered();
                    v
                }
                other => panic!(
                    "a waiter left asleep beside a value: {other:?}, len {}",
                    q.len()
                ),
            },
            PopNow::Closed => panic!("not closed"),
        };
        assert_eq!(as_int(&got), 1);
        assert_eq!((q.len(), q.held(), q.waiters()), (0, 0, 0));
    });
    BRANCHES.assert_both();
}

#[test]
fn a_gone_popper_gives_its_value_back_and_nothing_is_lost_or_doubled() {
    static BRANCHES: Branches = Branches::new();
    loom::model(|| {
        let q = Arc::new(SharedQueue::new("q", 2));
        // The popper whose task is gone: its home withdraws it, or gives back what reached it.
        let (gone, gone_slot) = slot();
        let PopNow::Waiting(gone_id) = q.pop_or_wait(gone).unwrap() else {
            panic!("empty queue waits")
        };
        let pusher = {
            let q = q.clone();
            thread::spawn(move || {
                for n in [1, 2] {
                    q.push(int(n)).expect("two slots for two values");
                    assert!(q.held() <= 2, "past the capacity");
                }
            })
        };
        let home = {
            let q = q.clone();
            thread::spawn(move || {
                let withdrawn = q.cancel_wait(gone_id);
                if !withdrawn {
                    // A push took the waiter: its value is on the way and must go back.
                    match wait_for(&gone_slot) {
                        Delivery::Value(v) => q.give_back(v),
                        other => panic!("unexpected {other:?}"),
                    }
                }
                assert!(q.held() <= 2, "past the capacity");
                withdrawn
            })
        };
        // A live popper.
        let (live, live_slot) = slot();
        let mut got = Vec::new();
        let live_now = q.pop_or_wait(live).unwrap();
        pusher.join().unwrap();
        // Side 1: a push reached the gone popper before its home withdrew it.
        BRANCHES.hit_if(!home.join().unwrap());
        match live_now {
            PopNow::Value(v) => got.push(as_int(&v)),
            PopNow::Waiting(_) => match live_slot.lock().unwrap().take() {
                Some(Delivery::Value(v)) => {
                    q.delivered();
                    got.push(as_int(&v));
                }
                other => panic!(
                    "the live popper was left waiting: {other:?}, len {}",
                    q.len()
                ),
            },
            PopNow::Closed => panic!("not closed"),
        }
        while let Some(v) = q.try_pop().unwrap() {
            got.push(as_int(&v));
        }
        got.sort_unstable();
        assert_eq!(got, vec![1, 2], "each value exactly once");
        assert_eq!(q.in_flight(), 0);
    });
    BRANCHES.assert_both();
}

#[test]
fn close_and_push_race_a_parked_pop_which_gets_one_answer() {
    static BRANCHES: Branches = Branches::new();
    loom::model(|| {
        let q = Arc::new(SharedQueue::new("q", 1));
        let (deliver, slot) = slot();
        assert!(matches!(q.pop_or_wait(deliver), Ok(PopNow::Waiting(_))));
        let pusher = {
            let q = q.clone();
            thread::spawn(move || q.push(int(5)).map_err(|e| e.into_inner()))
        };
        let closer = {
            let q = q.clone();
            thread::spawn(move || q.close().unwrap())
        };
        let pushed = pusher.join().unwrap();
        assert!(closer.join().unwrap());
        let answer = slot
            .lock()
            .unwrap()
            .take()
            .expect("the parked pop was answered");
        // Side 1: the push reached the parked pop before the close.
        BRANCHES.hit_if(pushed.is_ok());
        match (answer, pushed) {
            (Delivery::Value(v), Ok(())) => {
                q.delivered();
                assert_eq!(as_int(&v), 5);
            }
            (Delivery::Closed, Err(back)) => assert_eq!(as_int(&back), 5, "refused, handed back"),
            other => panic!("a value lost or a pop answered wrongly: {other:?}"),
        }
        assert!(q.try_pop().is_err(), "closed and drained");
        assert_eq!(q.held(), 0);
    });
    BRANCHES.assert_both();
}

#[test]
fn a_host_pop_that_times_out_never_strands_a_value() {
    static BRANCHES: Branches = Branches::new();
    loom::model(|| {
        let q = Arc::new(SharedQueue::new("q", 1));
        let pusher = {
            let q = q.clone();
            thread::spawn(move || q.push(int(3)).expect("room"))
        };
        // A zero timeout: the pop withdraws at once unless a push beat it to the waiter.
        let popped = pop_blocking(&q, Duration::ZERO).unwrap();
        pusher.join().unwrap();
        let left = q.try_pop().unwrap();
        // Side 1: the push beat the timeout and the pop took the value.
        BRANCHES.hit_if(popped.is_some());
        match (popped, left) {
            (Some(v), None) | (None, Some(v)) => assert_eq!(as_int(&v), 3),
            other => panic!("lost or doubled: {other:?}"),
        }
        assert_eq!((q.held(), q.waiters()), (0, 0));
    });
    BRANCHES.assert_both();
}

#[test]
fn ending_the_store_answers_a_parked_pop_and_drops_a_value_in_flight() {
    static BRANCHES: Branches = Branches::new();
    loom::model(|| {
        let q = Arc::new(SharedQueue::new("q", 1));
        let (deliver, slot) = slot();
        assert!(matches!(q.pop_or_wait(deliver), Ok(PopNow::Waiting(_))));
        let pusher = {
            let q = q.clone();
            thread::spawn(move || q.push(int(8)).is_ok())
        };
        let ender = {
            let q = q.clone();
            thread::spawn(move || q.end(&std::sync::Arc::<str>::from("restart")))
        };
        let pushed = pusher.join().unwrap();
        ender.join().unwrap();
        // Side 1: the push reached the parked pop before the store ended.
        BRANCHES.hit_if(pushed);
        match slot.lock().unwrap().take().expect("answered") {
            Delivery::Value(v) => {
                assert!(pushed);
                // Its popper is gone with the store: giving it back after the end drops it.
                q.give_back(v);
            }
            Delivery::Ended(reason) => {
                assert!(!pushed, "a push after the end is refused");
                assert_eq!(&*reason, "restart");
            }
            Delivery::Closed => panic!("not closed"),
        }
        assert_eq!(q.in_flight(), 0);
        assert!(q.try_pop().is_err(), "ended");
    });
    BRANCHES.assert_both();
}

#[test]
fn a_give_back_never_takes_the_queue_past_its_capacity() {
    static BRANCHES: Branches = Branches::new();
    loom::model(|| {
        let q = Arc::new(SharedQueue::new("q", 1));
        let (gone, gone_slot) = slot();
        let PopNow::Waiting(gone_id) = q.pop_or_wait(gone).unwrap() else {
            panic!("empty queue waits")
        };
        let pusher = {
            let q = q.clone();
            thread::spawn(move || {
                let mut accepted = Vec::new();
                for n in [1, 2] {
                    if q.push(int(n)).is_ok() {
                        accepted.push(n);
                    }
                    assert!(q.held() <= 1, "past the capacity");
                }
                accepted
            })
        };
        let home = {
            let q = q.clone();
            thread::spawn(move || {
                let withdrawn = q.cancel_wait(gone_id);
                if !withdrawn {
                    match wait_for(&gone_slot) {
                        Delivery::Value(v) => q.give_back(v),
                        other => panic!("unexpected {other:?}"),
                    }
                }
                assert!(q.held() <= 1, "past the capacity");
                withdrawn
            })
        };
        let mut accepted = pusher.join().unwrap();
        // Side 1: a push reached the gone popper, whose home gave the value back.
        BRANCHES.hit_if(!home.join().unwrap());
        let mut left = Vec::new();
        while let Some(v) = q.try_pop().unwrap() {
            left.push(as_int(&v));
        }
        accepted.sort_unstable();
        assert_eq!(left, accepted, "every accepted value is in the queue, once");
        assert_eq!(q.in_flight(), 0);
    });
    BRANCHES.assert_both();
}
