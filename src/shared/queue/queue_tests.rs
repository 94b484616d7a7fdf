use std::sync::mpsc;

use super::*;
use crate::shared::queue_error::PushErrorKind;
use crate::value::{Limits, ResourceHandle};

fn int(n: i64) -> Message {
    Message::Integer(n)
}

/// A waiter whose deliveries land in a channel, as a home inbox would receive them.
fn inbox() -> (Deliver, mpsc::Receiver<Delivery>) {
    let (tx, rx) = mpsc::channel();
    let deliver: Deliver = Box::new(move |d| tx.send(d).expect("inbox open"));
    (deliver, rx)
}

#[test]
fn the_capacity_bound_is_exact_and_a_refused_push_changes_nothing() {
    let q = SharedQueue::new("q", 3);
    for i in 0..3 {
        q.push(int(i)).unwrap();
    }
    let err = q.push(int(3)).unwrap_err();
    assert_eq!(err.kind, PushErrorKind::Full);
    assert_eq!(
        err.to_string(),
        "SharedQueue:push: queue 'q' is full (capacity 3)"
    );
    assert_eq!(err.into_inner(), int(3), "the refused value comes back");
    assert_eq!(q.len(), 3);
    assert_eq!(q.try_pop().unwrap(), Some(int(0)));
    q.push(int(3)).unwrap();
    assert_eq!(q.len(), 3);
}

#[test]
fn values_come_out_in_the_order_they_went_in() {
    let q = SharedQueue::new("q", 100);
    for i in 0..100 {
        q.push(int(i)).unwrap();
    }
    for i in 0..50 {
        assert_eq!(q.try_pop().unwrap(), Some(int(i)));
    }
    assert_eq!(
        q.try_pop_many(10).unwrap(),
        (50..60).map(int).collect::<Vec<_>>()
    );
    assert_eq!(q.try_pop_many(1000).unwrap().len(), 40);
    assert_eq!(q.try_pop().unwrap(), None);
}

#[test]
fn close_drains_what_is_left_then_answers_closed() {
    let q = SharedQueue::new("q", 4);
    q.push(int(1)).unwrap();
    q.push(int(2)).unwrap();
    assert_eq!(q.close(), Ok(true));
    assert_eq!(q.close(), Ok(false), "closing twice is not an error");
    let err = q.push(int(3)).unwrap_err();
    assert_eq!(err.to_string(), "SharedQueue:push: queue 'q' is closed");
    assert_eq!(q.try_pop().unwrap(), Some(int(1)));
    assert_eq!(q.try_pop_many(5).unwrap(), vec![int(2)]);
    assert_eq!(q.try_pop(), Err(PopError::Closed));
    assert_eq!(q.try_pop_many(5), Err(PopError::Closed));
    let (deliver, _rx) = inbox();
    assert_eq!(q.pop_or_wait(deliver), Ok(PopNow::Closed));
}

#[test]
fn close_answers_every_waiting_pop() {
    let q = SharedQueue::new("q", 4);
    let (a, rx_a) = inbox();
    let (b, rx_b) = inbox();
    assert!(matches!(q.pop_or_wait(a), Ok(PopNow::Waiting(_))));
    assert!(matches!(q.pop_or_wait(b), Ok(PopNow::Waiting(_))));
    q.close().unwrap();
    assert_eq!(rx_a.try_recv().unwrap(), Delivery::Closed);
    assert_eq!(rx_b.try_recv().unwrap(), Delivery::Closed);
    assert_eq!(q.waiters(), 0);
}

#[test]
fn end_rejects_waiters_drops_values_and_refuses_every_later_use() {
    let q = SharedQueue::new("q", 4);
    let (a, rx) = inbox();
    assert!(matches!(q.pop_or_wait(a), Ok(PopNow::Waiting(_))));
    let reason: Reason = Reason::from("domain 'main' stopped");
    q.end(&reason);
    assert_eq!(rx.try_recv().unwrap(), Delivery::Ended(reason.clone()));
    let err = q.push(int(1)).unwrap_err();
    assert_eq!(
        err.to_string(),
        "SharedQueue:push: queue 'q' has ended: domain 'main' stopped"
    );
    assert_eq!(q.try_pop(), Err(PopError::Ended(reason.clone())));
    assert_eq!(q.close(), Err(PopError::Ended(reason.clone())));
    let (b, _rx) = inbox();
    assert_eq!(q.pop_or_wait(b), Err(PopError::Ended(reason)));
    assert_eq!(q.len(), 0);
}

#[test]
fn a_push_hands_its_value_to_the_first_waiter_and_holds_its_slot_until_answered() {
    let q = SharedQueue::new("q", 1);
    let (a, rx_a) = inbox();
    let (b, rx_b) = inbox();
    assert!(matches!(q.pop_or_wait(a), Ok(PopNow::Waiting(_))));
    assert!(matches!(q.pop_or_wait(b), Ok(PopNow::Waiting(_))));
    q.push(int(7)).unwrap();
    assert_eq!(rx_a.try_recv().unwrap(), Delivery::Value(int(7)));
    assert!(rx_b.try_recv().is_err(), "one value, one waiter");
    assert_eq!(q.len(), 0);
    assert_eq!(q.in_flight(), 1);
    // The second push goes to the second waiter: a waiter takes no slot of its own.
    q.push(int(8)).unwrap();
    assert_eq!(rx_b.try_recv().unwrap(), Delivery::Value(int(8)));
    assert_eq!(q.in_flight(), 2);
    q.delivered();
    q.delivered();
    assert_eq!(q.in_flight(), 0);
    q.push(int(9)).unwrap();
    assert_eq!(q.push(int(10)).unwrap_err().kind, PushErrorKind::Full);
}

#[test]
fn a_value_in_flight_counts_against_the_capacity() {
    let q = SharedQueue::new("q", 1);
    let (a, _rx) = inbox();
    q.pop_or_wait(a).unwrap();
    q.push(int(1)).unwrap();
    assert_eq!(
        (q.len(), q.held()),
        (0, 1),
        "the value in flight holds the slot"
    );
    assert_eq!(q.push(int(2)).unwrap_err().kind, PushErrorKind::Full);
    q.delivered();
    assert_eq!(q.held(), 0);
    q.push(int(2)).unwrap();
}

#[test]
fn a_value_its_popper_could_not_take_goes_to_the_next_waiter() {
    let q = SharedQueue::new("q", 2);
    let (a, rx_a) = inbox();
    let (b, rx_b) = inbox();
    q.pop_or_wait(a).unwrap();
    q.pop_or_wait(b).unwrap();
    q.push(int(1)).unwrap();
    let Delivery::Value(v) = rx_a.try_recv().unwrap() else {
        panic!("a value")
    };
    q.give_back(v);
    assert_eq!(rx_b.try_recv().unwrap(), Delivery::Value(int(1)));
    assert_eq!(
        q.in_flight(),
        1,
        "the slot passed from one popper to the next"
    );
    q.delivered();
    assert_eq!(q.in_flight(), 0);
}

#[test]
fn a_value_given_back_with_no_waiter_goes_to_the_front() {
    let q = SharedQueue::new("q", 2);
    let (a, rx) = inbox();
    q.pop_or_wait(a).unwrap();
    q.push(int(1)).unwrap();
    q.push(int(2)).unwrap();
    assert_eq!(q.push(int(3)).unwrap_err().kind, PushErrorKind::Full);
    let Delivery::Value(v) = rx.try_recv().unwrap() else {
        panic!("a value")
    };
    q.give_back(v);
    assert_eq!(q.len(), 2, "never past the capacity");
    assert_eq!(q.try_pop().unwrap(), Some(int(1)), "it was the oldest");
    assert_eq!(q.try_pop().unwrap(), Some(int(2)));
}

#[test]
fn a_value_given_back_after_close_is_still_drained() {
    let q = SharedQueue::new("q", 2);
    let (a, rx) = inbox();
    q.pop_or_wait(a).unwrap();
    q.push(int(1)).unwrap();
    q.close().unwrap();
    let Delivery::Value(v) = rx.try_recv().unwrap() else {
        panic!("a value")
    };
    q.give_back(v);
    assert_eq!(q.try_pop().unwrap(), Some(int(1)));
    assert_eq!(q.try_pop(), Err(PopError::Closed));
}

#[test]
fn a_cancelled_waiter_gets_nothing_and_the_next_push_queues() {
    let q = SharedQueue::new("q", 2);
    let (a, rx) = inbox();
    let PopNow::Waiting(id) = q.pop_or_wait(a).unwrap() else {
        panic!("waits")
    };
    assert!(q.cancel_wait(id));
    assert!(!q.cancel_wait(id), "only once");
    q.push(int(1)).unwrap();
    assert!(rx.try_recv().is_err());
    assert_eq!(q.len(), 1);
    // A waiter a push already took can't be cancelled: its receiver answers for the value.
    q.try_pop().unwrap();
    let (b, rx) = inbox();
    let PopNow::Waiting(id) = q.pop_or_wait(b).unwrap() else {
        panic!("waits")
    };
    q.push(int(2)).unwrap();
    assert!(!q.cancel_wait(id));
    assert_eq!(rx.try_recv().unwrap(), Delivery::Value(int(2)));
}

#[test]
fn nil_and_resource_handles_are_refused_naming_the_path() {
    let q = SharedQueue::new("q", 2);
    let err = q.push(Message::Nil).unwrap_err();
    assert_eq!(
        err.to_string(),
        "SharedQueue:push: value: a queue value can't be nil"
    );
    let handle = ResourceHandle::new("mesh", 1);
    let nested = Message::Map(vec![(
        MapKey::String("items".into()),
        Message::List(vec![int(1), Message::Resource(handle)]),
    )]);
    let err = q.push(nested.clone()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "SharedQueue:push: value.items[2]: a resource handle can't be queued"
    );
    assert_eq!(err.into_inner(), nested);
    assert_eq!(q.len(), 0);
}

#[test]
fn a_capacity_is_one_to_the_bound() {
    assert!(check_capacity(1, "t").is_ok());
    assert!(check_capacity(MAX_QUEUE_CAPACITY, "t").is_ok());
    assert_eq!(
        check_capacity(0, "t").unwrap_err(),
        "t: capacity must be 1 to 65536, got 0"
    );
    assert_eq!(
        check_capacity(MAX_QUEUE_CAPACITY + 1, "t").unwrap_err(),
        "t: capacity must be 1 to 65536, got 65537"
    );
}

#[test]
fn the_registry_makes_a_name_once_and_refuses_another_capacity() {
    let queues = Queues::new(Arc::new(Ledger::new(MAX_QUEUE_BYTES)));
    let reserved = std::cell::Cell::new(0);
    let reserve = || {
        reserved.set(reserved.get() + 1);
        Ok(())
    };
    let a = queues.get_or_make(b"q", Some(4), reserve, "t").unwrap();
    let b = queues.get_or_make(b"q", None, reserve, "t").unwrap();
    assert!(Arc::ptr_eq(&a, &b));
    let c = queues.get_or_make(b"q", Some(4), reserve, "t").unwrap();
    assert!(Arc::ptr_eq(&a, &c));
    assert_eq!(
        queues.get_or_make(b"q", Some(5), reserve, "t").unwrap_err(),
        QueueOpenError::new(
            QueueOpenErrorKind::OtherCapacity,
            "t: queue 'q' exists with capacity 4, not 5"
        )
    );
    assert_eq!(reserved.get(), 1, "a name is taken once");
    let d = queues.get_or_make(b"other", None, reserve, "t").unwrap();
    assert_eq!(d.capacity(), DEFAULT_QUEUE_CAPACITY);
    assert_eq!(queues.count(), 2);
    let refused = queues
        .get_or_make(b"third", None, || Err("t: no names left".to_owned()), "t")
        .unwrap_err();
    assert_eq!(
        refused,
        QueueOpenError::new(QueueOpenErrorKind::Limit, "t: no names left")
    );
    assert_eq!(queues.count(), 2);
    queues.end("restart");
    assert_eq!(
        queues.get_or_make(b"q", None, reserve, "t").unwrap_err(),
        QueueOpenError::new(
            QueueOpenErrorKind::Ended,
            "t: the shared store has ended: restart"
        )
    );
    assert_eq!(a.ended().as_deref(), Some("restart"));
}

/// A string message of exactly `weight` bytes of queue weight.
fn weighing(weight: usize) -> Message {
    Message::String(vec![b'x'; weight - Limits::NODE_WEIGHT].into())
}

#[test]
fn the_byte_bound_is_exact_and_a_refused_push_changes_nothing() {
    let q = SharedQueue::new("q", 10);
    let half = MAX_QUEUE_BYTES / 2;
    q.push(weighing(half)).unwrap();
    q.push(weighing(MAX_QUEUE_BYTES - half)).unwrap();
    assert_eq!(q.bytes(), MAX_QUEUE_BYTES);
    let err = q.push(int(1)).unwrap_err();
    assert_eq!(
        err.kind,
        PushErrorKind::TooManyBytes {
            would: MAX_QUEUE_BYTES + 16
        }
    );
    assert_eq!(
        err.to_string(),
        "SharedQueue:push: queue 'q' would hold 67108880 bytes, past its bound of 67108864 bytes; \
         pop some first"
    );
    assert_eq!(err.into_inner(), int(1), "the refused value comes back");
    assert_eq!((q.len(), q.bytes()), (2, MAX_QUEUE_BYTES));
    // A pop gives its weight back, to the queue and to the budget.
    q.try_pop().unwrap().unwrap();
    assert_eq!(q.bytes(), MAX_QUEUE_BYTES - half);
    assert_eq!(q.budget.held(), MAX_QUEUE_BYTES - half);
    q.push(int(1)).unwrap();
    let taken = q.try_pop_many(10).unwrap();
    assert_eq!(taken.len(), 2);
    assert_eq!((q.bytes(), q.budget.held()), (0, 0));
}

#[test]
fn queues_of_one_store_share_its_budget_and_a_refusal_names_it() {
    let budget = Arc::new(Ledger::new(100));
    let a = SharedQueue::in_store("a", 10, budget.clone());
    let b = SharedQueue::in_store("b", 10, budget.clone());
    a.push(weighing(60)).unwrap();
    b.push(weighing(40)).unwrap();
    let err = b.push(int(1)).unwrap_err();
    assert_eq!(
        err.kind,
        PushErrorKind::StoreFull {
            would: 116,
            max: 100
        }
    );
    assert_eq!(
        err.to_string(),
        "SharedQueue:push: the domain's shared tables and queues would hold 116 bytes, past the \
         bound of 100"
    );
    assert_eq!((b.len(), b.bytes(), budget.held()), (1, 40, 100));
    a.try_pop().unwrap().unwrap();
    b.push(int(1)).unwrap();
    assert_eq!(budget.held(), 56);
    // An ended queue gives all it held back.
    b.end(&Reason::from("stopped"));
    assert_eq!(budget.held(), 0);
}

#[test]
fn a_value_handed_to_a_waiting_pop_weighs_nothing_and_a_give_back_is_counted_again() {
    let q = SharedQueue::new("q", 4);
    let (deliver, rx) = inbox();
    assert!(matches!(
        q.pop_or_wait(deliver).unwrap(),
        PopNow::Waiting(_)
    ));
    q.push(weighing(100)).unwrap();
    assert_eq!(q.bytes(), 0);
    let Delivery::Value(value) = rx.recv().unwrap() else {
        panic!("a value was delivered");
    };
    q.give_back(value);
    assert_eq!((q.len(), q.bytes(), q.budget.held()), (1, 100, 100));
}
