//! Loom models of the mailbox transport (`src/executor/wake_queue.rs`): senders on other threads
//! push while the one consumer takes everything queued and parks when there is nothing. A lost
//! wake-up leaves the consumer parked with a value queued and nobody left to wake it: loom
//! reports that as a deadlock.
#![cfg(loom)]

use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;
use loom_tests::Branches;
use skein::__loom::{wake_queue, Waited};

/// Takes values until `n` arrived, waiting (with no deadline) whenever the queue is empty.
/// Answers them in the order taken and whether the consumer ever parked and was woken.
fn consume(
    rx: &skein::__loom::WakeReceiver<(usize, usize)>,
    n: usize,
) -> (Vec<(usize, usize)>, bool) {
    let mut got = Vec::new();
    let mut woken = false;
    while got.len() < n {
        woken |= rx.wait_until(None) == Waited::Woken;
        rx.drain(|value| got.push(value));
    }
    (got, woken)
}

/// One sender, two values: the consumer races the second send toward sleep after taking the
/// first. Every value arrives once, in order; side 1: the consumer parked and a send woke it.
#[test]
fn a_send_racing_the_consumer_going_to_sleep_is_never_lost() {
    static BRANCHES: Branches = Branches::new();
    loom::model(|| {
        let (tx, rx) = wake_queue();
        // A sender held here outlives the consumer's waits: the last sender's drop wakes a
        // waiting consumer too, which would hide a lost wake of the sends themselves.
        let keep = tx.clone();
        let sender = thread::spawn(move || {
            tx.send((0, 0)).unwrap();
            tx.send((0, 1)).unwrap();
        });
        let (got, woken) = consume(&rx, 2);
        sender.join().unwrap();
        drop(keep);
        assert_eq!(got, [(0, 0), (0, 1)]);
        assert!(rx.take_all().is_empty(), "a value arrived twice");
        BRANCHES.hit_if(woken);
    });
    BRANCHES.assert_both();
}

/// Two senders, one value each: only the send that finds the consumer asleep wakes it, and the
/// other's value must still be taken. Side 1: both values came in one take.
#[test]
fn two_senders_each_value_taken_exactly_once() {
    static BRANCHES: Branches = Branches::new();
    loom::model(|| {
        let (tx, rx) = wake_queue();
        let senders: Vec<_> = (0..2)
            .map(|who| {
                let tx = tx.clone();
                thread::spawn(move || tx.send((who, 0)).unwrap())
            })
            .collect();
        // Kept past the waits, as above: only the sends may wake the consumer.
        let keep = tx;
        let mut got = Vec::new();
        let mut takes = 0;
        while got.len() < 2 {
            rx.wait_until(None);
            let before = got.len();
            rx.drain(|value| got.push(value));
            takes += usize::from(got.len() > before);
        }
        for sender in senders {
            sender.join().unwrap();
        }
        drop(keep);
        got.sort();
        assert_eq!(got, [(0, 0), (1, 0)]);
        BRANCHES.hit_if(takes == 1);
    });
    BRANCHES.assert_both();
}

/// A value whose drop is counted.
struct Counted(Arc<AtomicUsize>);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// A send racing the receiver's drop: the value is either handed back to the sender or dropped
/// with the receiver, once, and never left in the queue. Side 1: the send was refused.
#[test]
fn a_send_racing_the_receivers_drop_is_handed_back_or_dropped_once() {
    static BRANCHES: Branches = Branches::new();
    loom::model(|| {
        let (tx, rx) = wake_queue();
        // A sender kept alive past the assertion keeps the queue's memory alive too: a value
        // left in it would not be dropped by the queue's own end.
        let keep = tx.clone();
        let drops = Arc::new(AtomicUsize::new(0));
        let sender = {
            let drops = drops.clone();
            thread::spawn(move || match tx.send(Counted(drops)) {
                Ok(()) => false,
                Err(back) => {
                    drop(back);
                    true
                }
            })
        };
        drop(rx);
        let refused = sender.join().unwrap();
        assert_eq!(
            drops.load(Ordering::SeqCst),
            1,
            "the value was dropped once"
        );
        drop(keep);
        BRANCHES.hit_if(refused);
    });
    BRANCHES.assert_both();
}
