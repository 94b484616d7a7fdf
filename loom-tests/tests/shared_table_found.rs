//! A loom model of the cell an `atomic` found: its compare-and-swap reuses the cell its read
//! found, without walking the table again, only while the table's version is the one that read
//! saw. A concurrent commit that replaces the key's cell (a value of another shape) publishes a
//! new version, and the `atomic` must then find the key anew, never write into the cell the
//! table dropped.
#![cfg(loom)]

use loom::thread;
use loom_tests::Branches;
use skein::__loom::new_store;
use skein::Message;

/// An increment, or a mark added to a string: each side's answer from what it read.
fn step(n: Option<Message>, mark: &str) -> Option<Message> {
    match n {
        Some(Message::Integer(n)) => Some(Message::Integer(n + 1)),
        Some(Message::String(s)) => {
            let mut s = s.to_vec();
            s.extend_from_slice(mark.as_bytes());
            Some(Message::from(String::from_utf8(s).unwrap()))
        }
        other => other,
    }
}

/// One `atomic` increments the integer under "n"; another turns it into a string (a new cell,
/// a new version). Either order is an answer: 1 → 2 → "s2", or 1 → "s1" → "s1a". Writing the
/// increment into the dropped integer cell would leave "s1" and lose it.
#[test]
fn an_atomic_racing_a_replaced_cell_never_writes_into_the_dropped_one() {
    static BRANCHES: Branches = Branches::new();
    loom::model(|| {
        let store = new_store();
        let t = store.table("c").unwrap();
        t.set("n", Message::Integer(1)).unwrap();
        let other = {
            let t = t.clone();
            thread::spawn(move || {
                t.atomic("n", |n| match n {
                    Some(Message::Integer(i)) => Some(Message::from(format!("s{i}"))),
                    other => step(other, "b"),
                })
                .unwrap()
            })
        };
        let mut runs = 0;
        let mine = t
            .atomic("n", |n| {
                runs += 1;
                step(n, "a")
            })
            .unwrap();
        let theirs = other.join().unwrap();
        let last = t.get("n").unwrap();
        // Side 1: the increment lost its cell to the other commit and ran again.
        BRANCHES.hit_if(runs > 1);
        let both = (mine.clone(), theirs.clone(), last.clone());
        assert!(
            both == (
                Some(Message::Integer(2)),
                Some(Message::from("s2")),
                Some(Message::from("s2"))
            ) || both
                == (
                    Some(Message::from("s1a")),
                    Some(Message::from("s1")),
                    Some(Message::from("s1a"))
                ),
            "an atomic wrote into a dropped cell: mine {mine:?}, theirs {theirs:?}, stored {last:?}"
        );
    });
    BRANCHES.assert_both();
}
