//! Loom models of the shared-table version protocol: plain writes and `atomic` on one key, the
//! turn after four losses and the give-up, a reader walking an old version while a new one is
//! published, nested write-through racing the replacement of its parent entry, and `revision`;
//! then of the per-key cells and the table's gate: writes in place racing snapshots, freezes,
//! new versions, `add`, checked and unchecked `atomic`, and `revision`.
//!
//! Under `cfg(loom)` the root cell is a loom `Mutex<Arc<Node>>` with arc-swap's load /
//! compare-and-swap contract, and a boxed cell value a loom `UnsafeCell` behind a loom
//! `AtomicPtr` published with crossbeam-epoch's orderings: these models check Skein's protocol
//! around them, not arc-swap's algorithm or crossbeam's reclamation.
#![cfg(loom)]

use loom::thread;
use loom_tests::Branches;
use skein::__loom::{new_store, turn_taken};
use skein::shared::SharedTableErrorKind;
use skein::{MapKey, Message};

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

// Per-key cells (`src/shared/table/gate.rs`, `value_cell.rs`): a value of the key's shape is
// written in place in its cell, and the table's gate keeps many-key reads, revisions and the
// checked `atomic` consistent with those writes.

/// Sets each key to an integer before the model's threads start, so the models' later integer
/// writes to those keys are in place.
fn ints(t: &skein::shared::SharedTableRef, keys: &[(&str, i64)]) {
    for (k, v) in keys {
        t.set(*k, int(*v)).unwrap();
    }
}

/// The integer under `key` in a snapshot's map.
fn int_at(m: &Message, key: &str) -> Option<i64> {
    let Message::Map(entries) = m else {
        panic!("not a map: {m:?}");
    };
    entries
        .iter()
        .find(|(k, _)| *k == MapKey::from(key))
        .and_then(|(_, v)| v.as_i64())
}

/// A snapshot, then a freeze, racing two writes in place (x then y) each see one moment of the
/// table: never y's write without x's, and the frozen table's revision counts exactly the
/// writes it shows. The snapshot reads x before y (it copies in key order), so a read that kept
/// what it read without validating it against the writes counted meanwhile would see
/// `x == 0, y == 1`; the freeze copies in the trie's order, which the revision check covers
/// either way.
#[test]
fn a_snapshot_racing_writes_in_place_sees_one_moment() {
    static BRANCHES: Branches = Branches::new();
    loom::model(|| {
        let store = new_store();
        let t = store.table("t").unwrap();
        ints(&t, &[("x", 0), ("y", 0)]);
        let before = t.revision().unwrap();
        let writer = {
            let t = t.clone();
            thread::spawn(move || {
                t.set("x", int(1)).unwrap();
                t.set("y", int(1)).unwrap();
            })
        };
        let snap = t.snapshot().unwrap();
        let (x, y) = (int_at(&snap, "x"), int_at(&snap, "y"));
        assert!(
            !(y == Some(1) && x == Some(0)),
            "a torn snapshot: x = {x:?}, y = {y:?}"
        );
        let frozen = t.freeze().unwrap();
        let (fx, fy) = (frozen.get("x"), frozen.get("y"));
        assert!(
            !(fy == Some(int(1)) && fx == Some(int(0))),
            "a torn freeze: x = {fx:?}, y = {fy:?}"
        );
        let shown = [&fx, &fy].iter().filter(|v| ***v == Some(int(1))).count() as u64;
        assert_eq!(
            frozen.revision(),
            before + shown,
            "the frozen revision is not its moment's"
        );
        // Side 1: the snapshot saw the writer's first write.
        BRANCHES.hit_if(x == Some(1));
        writer.join().unwrap();
    });
    BRANCHES.assert_both();
}

/// Two `add`s and an `atomic` increment on one integer cell, from three threads: every one
/// lands, whichever compare-and-swap or fetch-add wins, and each moves the revision once.
#[test]
fn adds_and_an_atomic_on_one_cell_lose_nothing() {
    static BRANCHES: Branches = Branches::new();
    loom::model(|| {
        let store = new_store();
        let t = store.table("c").unwrap();
        ints(&t, &[("n", 0)]);
        let before = t.revision().unwrap();
        let adders: Vec<_> = (0..2)
            .map(|_| {
                let t = t.clone();
                thread::spawn(move || t.add("n", int(1)).unwrap())
            })
            .collect();
        let mut runs = 0;
        t.atomic("n", |n| {
            runs += 1;
            incr(n)
        })
        .unwrap();
        for adder in adders {
            adder.join().unwrap();
        }
        // Side 1: the atomic's compare-and-swap lost to an add and ran its function again.
        BRANCHES.hit_if(runs > 1);
        assert_eq!(t.get("n").unwrap(), Some(int(3)), "an increment was lost");
        assert_eq!(t.revision().unwrap(), before + 3);
    });
    BRANCHES.assert_both();
}

/// A new key (a new version, published with the gate closed) racing a write in place to
/// another key: both land, and the revision moves once for each.
#[test]
fn a_new_key_racing_a_write_in_place_keeps_both() {
    static BRANCHES: Branches = Branches::new();
    loom::model(|| {
        let store = new_store();
        let t = store.table("t").unwrap();
        ints(&t, &[("x", 0)]);
        let before = t.revision().unwrap();
        let writer = {
            let t = t.clone();
            thread::spawn(move || t.set("x", int(1)).unwrap())
        };
        t.set("y", int(5)).unwrap();
        // Side 1: the write in place had landed when the new key was published.
        BRANCHES.hit_if(t.get("x").unwrap() == Some(int(1)));
        writer.join().unwrap();
        assert_eq!(
            t.get("x").unwrap(),
            Some(int(1)),
            "the write in place was lost"
        );
        assert_eq!(t.get("y").unwrap(), Some(int(5)));
        assert_eq!(t.revision().unwrap(), before + 2);
    });
    BRANCHES.assert_both();
}

/// An `atomic` whose function reads another key of the table (so it commits by the checked
/// path: gate closed, the table's revision compared, the value stored) racing an `add` in place
/// to the same key: neither increment is lost. A write in place that ignored the closed gate
/// would land between the check and the store, and the store would overwrite it.
#[test]
fn a_checked_atomic_racing_an_add_in_place_loses_nothing() {
    static BRANCHES: Branches = Branches::new();
    loom::model(|| {
        let store = new_store();
        let t = store.table("c").unwrap();
        ints(&t, &[("n", 0), ("other", 0)]);
        let adder = {
            let t = t.clone();
            thread::spawn(move || t.add("n", int(1)).unwrap())
        };
        let reader = t.clone();
        let mut runs = 0;
        t.atomic("n", |n| {
            runs += 1;
            assert_eq!(reader.get("other").unwrap(), Some(int(0)));
            incr(n)
        })
        .unwrap();
        adder.join().unwrap();
        // The first run finds that the function reads another key (its read had no revision to
        // check), the second commits. Side 1: the add landed between the second run's read and
        // its commit, which ran the function a third time.
        BRANCHES.hit_if(runs > 2);
        assert_eq!(t.get("n").unwrap(), Some(int(2)), "an increment was lost");
    });
    BRANCHES.assert_both();
}

/// Two checked `atomic` increments (each function reads another key) on a nested table: the
/// nested table's own revision is the check, and neither increment is lost.
#[test]
fn checked_atomics_on_a_nested_table_lose_nothing() {
    static BRANCHES: Branches = Branches::new();
    loom::model(|| {
        let store = new_store();
        let t = store.table("t").unwrap();
        t.set("p", map(&[("n", int(0)), ("other", int(0))]))
            .unwrap();
        let p = t.table_at("p").unwrap();
        let bump = |p: skein::shared::SharedTableRef| {
            let reader = p.clone();
            let mut runs = 0;
            p.atomic("n", |n| {
                runs += 1;
                assert_eq!(reader.get("other").unwrap(), Some(int(0)));
                incr(n)
            })
            .unwrap();
            runs
        };
        let other = {
            let p = p.clone();
            thread::spawn(move || bump(p))
        };
        let runs = bump(p.clone()) + other.join().unwrap();
        // Each call runs its function twice at least (the first run finds that it reads another
        // key). Side 1: one call lost to the other and ran its function again.
        BRANCHES.hit_if(runs > 4);
        assert_eq!(p.get("n").unwrap(), Some(int(2)), "an increment was lost");
    });
    BRANCHES.assert_both();
}

/// A frozen table keeps the moment it was frozen while a write in place lands in the live
/// table: its cells are its own, and its revision names that moment.
#[test]
fn a_freeze_keeps_its_moment_while_a_write_lands() {
    static BRANCHES: Branches = Branches::new();
    loom::model(|| {
        let store = new_store();
        let t = store.table("t").unwrap();
        ints(&t, &[("x", 0)]);
        let before = t.revision().unwrap();
        let writer = {
            let t = t.clone();
            thread::spawn(move || t.set("x", int(1)).unwrap())
        };
        let frozen = t.freeze().unwrap();
        let x = frozen.get("x");
        let seen = u64::from(x == Some(int(1)));
        assert_eq!(
            frozen.revision(),
            before + seen,
            "the revision is not the moment's"
        );
        // Side 1: the freeze came after the write.
        BRANCHES.hit_if(seen == 1);
        writer.join().unwrap();
        assert_eq!(frozen.get("x"), x, "the frozen table changed");
        assert_eq!(t.get("x").unwrap(), Some(int(1)));
    });
    BRANCHES.assert_both();
}

/// A reader loading a boxed cell (a string) while a writer replaces its value twice in place
/// sees a value that was written, and never an older one after a newer. Under `cfg(loom)` the
/// box is a loom `UnsafeCell` behind a loom `AtomicPtr`, standing in for crossbeam-epoch's
/// atomic pointer with its orderings (`value_cell.rs`; `cell_load_relaxed` fails this model): this checks the cell's place in the protocol (the writes land in place,
/// in order, in the cell every reader finds), not the epoch's reclamation itself, which
/// crossbeam's own tests and the stress tests cover.
#[test]
fn a_boxed_cell_read_while_replaced_twice_gives_a_written_value() {
    static BRANCHES: Branches = Branches::new();
    let order = ["aa", "bb", "cc"];
    loom::model(move || {
        let store = new_store();
        let t = store.table("t").unwrap();
        t.set("s", "aa").unwrap();
        let before = t.revision().unwrap();
        let writer = {
            let t = t.clone();
            thread::spawn(move || {
                t.set("s", "bb").unwrap();
                t.set("s", "cc").unwrap();
            })
        };
        let at = |m: Option<Message>| {
            let m = m.expect("the key is always present");
            order
                .iter()
                .position(|s| m == Message::from(*s))
                .unwrap_or_else(|| panic!("a value never written: {m:?}"))
        };
        let first = at(t.get("s").unwrap());
        let second = at(t.get("s").unwrap());
        assert!(first <= second, "an older value after a newer one");
        // Side 1: the reader saw a value the writer wrote.
        BRANCHES.hit_if(first > 0);
        writer.join().unwrap();
        assert_eq!(at(t.get("s").unwrap()), 2);
        // In place: the same shape, so no new version, and one revision a write.
        assert_eq!(t.revision().unwrap(), before + 2);
    });
    BRANCHES.assert_both();
}

/// `revision` only climbs, and moves exactly once for each write, in place or not: two writers
/// write once each (one in place, one a new key) while a reader looks twice.
#[test]
fn revision_moves_once_per_write() {
    static BRANCHES: Branches = Branches::new();
    loom::model(|| {
        let store = new_store();
        let t = store.table("t").unwrap();
        ints(&t, &[("x", 0)]);
        let before = t.revision().unwrap();
        let writers: Vec<_> = [("x", 1), ("z", 2)]
            .into_iter()
            .map(|(k, v)| {
                let t = t.clone();
                thread::spawn(move || t.set(k, int(v)).unwrap())
            })
            .collect();
        let r0 = t.revision().unwrap();
        let r1 = t.revision().unwrap();
        for writer in writers {
            writer.join().unwrap();
        }
        let r2 = t.revision().unwrap();
        assert!(
            before <= r0 && r0 <= r1 && r1 <= r2,
            "the revision went back: {before}, {r0}, {r1}, {r2}"
        );
        assert_eq!(r2, before + 2, "a write did not move the revision once");
        // Side 1: a write landed before the reader's first look.
        BRANCHES.hit_if(r0 > before);
    });
    BRANCHES.assert_both();
}
