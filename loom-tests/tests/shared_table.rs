//! Loom models of the shared-table version protocol: plain writes and `atomic` on one key, the
//! turn after four losses and the give-up, a reader walking an old version while a new one is
//! published, nested write-through racing the replacement of its parent entry, and `revision`.
//!
//! Under `cfg(loom)` the root cell is a loom `Mutex<Arc<Node>>` with arc-swap's load /
//! compare-and-swap contract: these models check Skein's protocol around the cell, not
//! arc-swap's own algorithm.
#![cfg(loom)]

use loom::thread;
use loom_tests::Branches;
use skein::__loom::{new_store, turn_taken};
use skein::{MapKey, Message, SharedTableErrorKind};

fn int(i: i64) -> Message {
    Message::Integer(i)
}

fn incr(n: Option<Message>) -> Option<Message> {
    match n {
        Some(Message::Integer(n)) => Some(int(n + 1)),
        _ => Some(int(1)),
    }
}

fn map(entries: &[(&str, Message)]) -> Message {
    Message::Map(
        entries
            .iter()
            .map(|(k, v)| (MapKey::from(*k), v.clone()))
            .collect(),
    )
}

/// Two `atomic` increments and a plain write to another key of the same table: whatever the
/// interleaving, both increments land.
#[test]
fn atomic_increments_are_never_lost() {
    static BRANCHES: Branches = Branches::new();
    loom::model(|| {
        let store = new_store();
        let t = store.table("c").unwrap();
        let other = {
            let t = t.clone();
            thread::spawn(move || {
                let mut runs = 0;
                t.atomic("n", |n| {
                    runs += 1;
                    incr(n)
                })
                .unwrap();
                runs
            })
        };
        let plain = {
            let t = t.clone();
            thread::spawn(move || t.set("x", int(7)).unwrap())
        };
        let mut runs = 0;
        t.atomic("n", |n| {
            runs += 1;
            incr(n)
        })
        .unwrap();
        runs += other.join().unwrap();
        plain.join().unwrap();
        // Side 1: an increment lost to the other and ran its function again.
        BRANCHES.hit_if(runs > 2);
        assert_eq!(t.get("n").unwrap(), Some(int(2)), "an increment was lost");
        assert_eq!(t.get("x").unwrap(), Some(int(7)));
        assert_eq!(t.revision().unwrap(), 3);
    });
    BRANCHES.assert_both();
}

/// A call that loses four times takes the turn; a concurrent `atomic` waits for it and both
/// commit, each on the value the other left.
#[test]
fn the_turn_after_four_losses_lets_both_commit() {
    static BRANCHES: Branches = Branches::new();
    loom::model(|| {
        let store = new_store();
        let t = store.table("c").unwrap();
        t.set("n", int(0)).unwrap();
        let rival = {
            let t = t.clone();
            thread::spawn(move || {
                t.atomic("n", incr).unwrap();
            })
        };
        let writer = t.clone();
        let mut runs = 0;
        let mut held_turn = false;
        let mut turn_saw = None;
        t.atomic("n", |n| {
            runs += 1;
            if runs <= 4 {
                // A plain write between read and commit: a sure loss.
                writer.set("noise", int(runs)).unwrap();
            } else {
                held_turn = turn_taken(&writer);
                turn_saw = n.clone();
            }
            incr(n)
        })
        .unwrap();
        rival.join().unwrap();
        assert!(held_turn, "the fifth attempt ran holding the turn");
        // Side 1: the rival committed before the turn's attempt, which then read its value.
        BRANCHES.hit_if(turn_saw == Some(int(1)));
        assert!(!turn_taken(&t));
        assert_eq!(t.get("n").unwrap(), Some(int(2)));
    });
    BRANCHES.assert_both();
}

/// A call whose every attempt loses to a plain write gives up after 256 and stores nothing; a
/// concurrent `atomic` waiting on its turn then goes ahead.
#[test]
fn the_give_up_after_256_releases_the_turn() {
    static BRANCHES: Branches = Branches::new();
    // 256 attempts, each a plain write and a lost commit, pass loom's default branch bound.
    let mut model = loom::model::Builder::new();
    model.max_branches = 50_000;
    // One preemption already lets the rival run at every point of the give-up; two take minutes.
    model.preemption_bound = Some(1);
    model.check(|| {
        let store = new_store();
        let t = store.table("counters").unwrap();
        let rival = {
            let t = t.clone();
            thread::spawn(move || {
                t.atomic("other", incr).unwrap();
            })
        };
        let writer = t.clone();
        let mut runs = 0;
        let err = t
            .atomic("done", |n| {
                runs += 1;
                writer.set("noise", int(runs)).unwrap();
                incr(n)
            })
            .unwrap_err();
        // Side 1: the rival had committed by the time the call gave up.
        BRANCHES.hit_if(t.get("other").unwrap().is_some());
        rival.join().unwrap();
        assert_eq!(err.kind(), SharedTableErrorKind::GaveUp);
        assert_eq!(runs, 256);
        assert_eq!(t.get("done").unwrap(), None);
        assert_eq!(t.get("other").unwrap(), Some(int(1)));
        assert!(!turn_taken(&t));
    });
    BRANCHES.assert_both();
}

/// A reader that took a version while a writer publishes the next sees one whole version, never
/// a mix, and keeps seeing it.
#[test]
fn a_reader_walks_one_whole_version() {
    static BRANCHES: Branches = Branches::new();
    loom::model(|| {
        let store = new_store();
        let t = store.table("t").unwrap();
        t.set("pair", map(&[("x", int(0)), ("y", int(0))])).unwrap();
        let writer = {
            let t = t.clone();
            thread::spawn(move || {
                t.set("pair", map(&[("x", int(1)), ("y", int(1))])).unwrap();
                t.set("pair", map(&[("x", int(2)), ("y", int(2))])).unwrap();
            })
        };
        let first = t.freeze().unwrap();
        let pair = first.table_at("pair").unwrap();
        let (x, y) = (pair.get("x"), pair.get("y"));
        assert_eq!(x, y, "a torn version");
        // Side 1: the reader took a version the writer published.
        BRANCHES.hit_if(x != Some(int(0)));
        writer.join().unwrap();
        assert_eq!(pair.get("x"), x, "the old version changed under its reader");
        assert_eq!(
            t.get("pair").unwrap(),
            Some(map(&[("x", int(2)), ("y", int(2))]))
        );
    });
    BRANCHES.assert_both();
}

/// A write through a nested handle racing the replacement of its parent entry either lands
/// before the replacement (and is replaced with it) or is refused: it never lands in the
/// detached table, and the new table never sees it.
#[test]
fn no_write_lands_in_a_detached_table() {
    static BRANCHES: Branches = Branches::new();
    loom::model(|| {
        let store = new_store();
        let t = store.table("players").unwrap();
        t.set("alice", map(&[])).unwrap();
        let alice = t.table_at("alice").unwrap();
        let nested = thread::spawn(move || alice.set("hp", int(5)));
        t.set("alice", map(&[("fresh", Message::Boolean(true))]))
            .unwrap();
        let result = nested.join().unwrap();
        // Side 1: the nested write came after the replacement and was refused.
        BRANCHES.hit_if(result.is_err());
        if let Err(err) = &result {
            assert_eq!(err.kind(), SharedTableErrorKind::Detached);
            assert_eq!(err.to_string(), "shared table 'players'.alice was replaced");
        }
        assert_eq!(
            t.get("alice").unwrap(),
            Some(map(&[("fresh", Message::Boolean(true))]))
        );
    });
    BRANCHES.assert_both();
}

/// `revision` of the named table and of a nested one never goes back, and a nested write moves
/// both.
#[test]
fn revisions_only_climb() {
    static BRANCHES: Branches = Branches::new();
    loom::model(|| {
        let store = new_store();
        let t = store.table("t").unwrap();
        t.set("a", map(&[])).unwrap();
        let a = t.table_at("a").unwrap();
        let writer = {
            let a = a.clone();
            let t = t.clone();
            thread::spawn(move || {
                a.set("x", int(1)).unwrap();
                t.set("b", int(1)).unwrap();
            })
        };
        let (r0, n0) = (t.revision().unwrap(), a.revision().unwrap());
        let (r1, n1) = (t.revision().unwrap(), a.revision().unwrap());
        writer.join().unwrap();
        let (r2, n2) = (t.revision().unwrap(), a.revision().unwrap());
        assert!(r0 <= r1 && r1 <= r2);
        assert!(n0 <= n1 && n1 <= n2);
        assert!(n2 > 1, "the nested write moved the nested revision");
        assert_eq!(r2, 3);
        assert!(n2 <= r2);
        // Side 1: a write landed after the reader's first look.
        BRANCHES.hit_if(r0 < r2);
    });
    BRANCHES.assert_both();
}
