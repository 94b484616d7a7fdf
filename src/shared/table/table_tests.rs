//! The core without Luau: versions, paths, detaching, bounds, `atomic`'s losses and end.

use super::*;
use crate::shared::{
    FrozenTable, SharedLimits, SharedStore, SharedTableErrorKind, SharedTableRef, StoreCore,
};
use crate::value::{Limits, MapKey, Message, ResourceHandle};

fn store_with(limits: SharedLimits, tables: TableLimits) -> SharedStore {
    let mut core = StoreCore::new(limits);
    core.tables = Tables::with_limits(tables);
    SharedStore::new(Arc::new(core))
}

fn store() -> SharedStore {
    store_with(SharedLimits::DEFAULT, TableLimits::DEFAULT)
}

fn map(entries: &[(&str, Message)]) -> Message {
    Message::Map(
        entries
            .iter()
            .map(|(k, v)| (MapKey::from(*k), v.clone()))
            .collect(),
    )
}

fn int(i: i64) -> Message {
    Message::Integer(i)
}

#[test]
fn every_write_makes_a_new_version_and_values_keep_their_type() {
    let t = store().table("t").unwrap();
    assert_eq!(t.revision().unwrap(), 0);
    t.set("i", int(1)).unwrap();
    t.set("n", Message::Number(1.0)).unwrap();
    t.set("s", Message::String("x".into())).unwrap();
    t.set("v", Message::Vector([1.0, 2.0, 3.0])).unwrap();
    t.set("b", Message::Buffer("\0\x01".into())).unwrap();
    t.set("f", Message::Boolean(false)).unwrap();
    assert_eq!(t.revision().unwrap(), 6);
    assert_eq!(t.get("i").unwrap(), Some(int(1)));
    assert_eq!(t.get("n").unwrap(), Some(Message::Number(1.0)));
    assert_eq!(t.get("v").unwrap(), Some(Message::Vector([1.0, 2.0, 3.0])));
    assert_eq!(t.get("b").unwrap(), Some(Message::Buffer("\0\x01".into())));
    assert_eq!(t.get("f").unwrap(), Some(Message::Boolean(false)));
    t.set("i", Message::Nil).unwrap();
    assert_eq!(t.get("i").unwrap(), None);
    assert_eq!(t.revision().unwrap(), 7);
}

#[test]
fn a_version_held_by_a_reader_never_changes() {
    let t = store().table("t").unwrap();
    t.set(1.0, int(10)).unwrap();
    t.set(2.0, int(20)).unwrap();
    let before = t.current().unwrap();
    t.set(1.0, int(11)).unwrap();
    t.set(3.0, int(30)).unwrap();
    assert_eq!(before.to_message(), Message::List(vec![int(10), int(20)]));
    assert_eq!(
        t.snapshot().unwrap(),
        Message::List(vec![int(11), int(20), int(30)])
    );
    assert_eq!(t.len().unwrap(), 3);
}

#[test]
fn nested_handles_write_through_and_revisions_climb() {
    let t = store().table("players").unwrap();
    t.set("alice", map(&[("hp", int(10))])).unwrap();
    t.set("bob", map(&[("hp", int(5))])).unwrap();
    let alice = t.table_at("alice").unwrap();
    let bob = t.table_at("bob").unwrap();
    let (root0, alice0, bob0) = (
        t.revision().unwrap(),
        alice.revision().unwrap(),
        bob.revision().unwrap(),
    );
    alice.set("hp", int(7)).unwrap();
    assert_eq!(
        t.get("alice").unwrap(),
        Some(map(&[("hp", int(7))])),
        "the write went through to the named table"
    );
    assert_eq!(t.revision().unwrap(), root0 + 1);
    assert_eq!(alice.revision().unwrap(), root0 + 1);
    assert!(alice.revision().unwrap() > alice0);
    assert_eq!(bob.revision().unwrap(), bob0, "a sibling's revision stays");
    t.set("x", int(1)).unwrap();
    assert_eq!(
        alice.revision().unwrap(),
        root0 + 1,
        "a write above leaves it"
    );
    assert_eq!(alice.location(), "'players'.alice");
}

#[test]
fn a_replaced_or_removed_table_refuses_every_use() {
    let t = store().table("players").unwrap();
    t.set("alice", map(&[("inv", map(&[("gold", int(1))]))]))
        .unwrap();
    let alice = t.table_at("alice").unwrap();
    let inv = alice.table_at("inv").unwrap();
    t.set("alice", map(&[("inv", map(&[]))])).unwrap();
    let err = alice.set("hp", int(1)).unwrap_err();
    assert_eq!(err.kind(), SharedTableErrorKind::Detached);
    assert_eq!(err.to_string(), "shared table 'players'.alice was replaced");
    assert_eq!(
        inv.get("gold").unwrap_err().to_string(),
        "shared table 'players'.alice.inv is detached: 'players'.alice was replaced"
    );
    assert_eq!(
        t.get("alice").unwrap(),
        Some(map(&[("inv", map(&[]))])),
        "no write landed in the new table"
    );
    let fresh = t.table_at("alice").unwrap();
    t.set("alice", Message::Nil).unwrap();
    assert_eq!(
        fresh.revision().unwrap_err().to_string(),
        "shared table 'players'.alice was removed"
    );
    t.set("alice", int(3)).unwrap();
    assert_eq!(
        fresh.snapshot().unwrap_err().to_string(),
        "shared table 'players'.alice was replaced"
    );
    assert_eq!(
        t.table_at("alice").unwrap_err().to_string(),
        "shared table 'players'.alice: no table there"
    );
}

#[test]
fn a_table_written_in_is_a_copy() {
    let s = store();
    let t = s.table("t").unwrap();
    t.set("a", map(&[("x", int(1))])).unwrap();
    let a = t.table_at("a").unwrap();
    let copied = a.snapshot().unwrap();
    t.set("b", copied).unwrap();
    a.set("x", int(2)).unwrap();
    assert_eq!(t.get("b").unwrap(), Some(map(&[("x", int(1))])));
}

#[test]
fn the_entry_bound_counts_nested_entries_at_and_past() {
    let limits = TableLimits {
        entries: 10,
        ..TableLimits::DEFAULT
    };
    let t = store_with(SharedLimits::DEFAULT, limits)
        .table("t")
        .unwrap();
    // 1 entry for "list" and 8 inside: 9.
    t.set("list", Message::List((0..8).map(int).collect()))
        .unwrap();
    t.set("x", int(1)).unwrap();
    let before = t.snapshot().unwrap();
    let rev = t.revision().unwrap();
    let err = t.table_at("list").unwrap().set(9.0, int(9)).unwrap_err();
    assert_eq!(err.kind(), SharedTableErrorKind::Limit);
    assert_eq!(
        err.to_string(),
        "shared table 't'.list: the write would make 't' hold 11 entries, past the bound of 10"
    );
    assert_eq!(t.snapshot().unwrap(), before, "nothing changed");
    assert_eq!(t.revision().unwrap(), rev);
}

#[test]
fn the_real_entry_bound() {
    let s = store();
    let t = s.table("big").unwrap();
    let n = TableLimits::DEFAULT.entries - 1;
    t.set("list", Message::List(vec![Message::Boolean(true); n]))
        .unwrap();
    let err = t.set("one", Message::Boolean(true)).unwrap_err();
    assert_eq!(
        err.to_string(),
        "shared table 'big': the write would make 'big' hold 1048577 entries, past the bound of 1048576"
    );
    t.set("list", Message::Nil).unwrap();
    t.set("one", Message::Boolean(true)).unwrap();
}

#[test]
fn the_byte_bound_at_and_past() {
    let empty = Limits::NODE_WEIGHT;
    // "s" = key 17, value 16 + len.
    let limits = TableLimits {
        bytes: empty + 17 + 16 + 100,
        ..TableLimits::DEFAULT
    };
    let s = store_with(SharedLimits::DEFAULT, limits);
    let t = s.table("t").unwrap();
    t.set("s", Message::String(vec![b'a'; 100].into())).unwrap();
    assert_eq!(s.core.bytes(), empty + 17 + 16 + 100);
    let err = t
        .set("s", Message::String(vec![b'a'; 101].into()))
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "shared table 't': the write would make 't' hold 150 bytes, past the bound of 149"
    );
    assert_eq!(s.core.bytes(), empty + 17 + 16 + 100, "nothing changed");
    t.set("s", Message::Nil).unwrap();
    assert_eq!(s.core.bytes(), empty, "a removal gives its bytes back");
}

#[test]
fn the_store_byte_bound_spans_tables() {
    let empty = Limits::NODE_WEIGHT;
    let limits = SharedLimits {
        store_bytes: 2 * empty + 2 * (17 + 16),
        ..SharedLimits::DEFAULT
    };
    let s = store_with(limits, TableLimits::DEFAULT);
    let a = s.table("a").unwrap();
    let b = s.table("b").unwrap();
    a.set("x", int(1)).unwrap();
    b.set("x", int(1)).unwrap();
    let err = b.set("y", int(1)).unwrap_err();
    assert_eq!(err.kind(), SharedTableErrorKind::Limit);
    assert_eq!(
        err.to_string(),
        "shared table 'b': the domain's shared tables and queues would hold 131 bytes, past the bound of 98"
    );
    assert_eq!(b.get("y").unwrap(), None);
    a.set("x", Message::Nil).unwrap();
    b.set("y", int(1)).unwrap();
}

#[test]
fn nesting_is_bounded_at_64() {
    fn nest(levels: usize) -> Message {
        let mut m = map(&[]);
        for _ in 1..levels {
            m = map(&[("n", m)]);
        }
        m
    }
    let t = store().table("t").unwrap();
    // The named table is level 1: a value of 63 levels fills it to 64.
    t.set("n", nest(63)).unwrap();
    let err = t.set("m", nest(64)).unwrap_err();
    assert_eq!(
        err.to_string(),
        "shared table 't'.m: tables would nest 65 deep, past the bound of 64"
    );
    let mut deep = t.table_at("n").unwrap();
    for _ in 1..62 {
        deep = deep.table_at("n").unwrap();
    }
    assert_eq!(deep.path.depth(), 63);
    deep.set("leaf", map(&[])).unwrap();
    assert!(deep.set("more", nest(2)).is_err());
    assert_eq!(t.get("m").unwrap(), None);
}

#[test]
fn names_are_bounded() {
    let limits = SharedLimits {
        names: 2,
        ..SharedLimits::DEFAULT
    };
    let s = store_with(limits, TableLimits::DEFAULT);
    assert_eq!(
        s.table(vec![b'n'; 257]).unwrap_err().to_string(),
        "jobs.shared.table: a name must be 1 to 256 bytes, got 257 bytes"
    );
    assert_eq!(
        s.table("").unwrap_err().kind(),
        SharedTableErrorKind::BadName
    );
    let _ = s.table(vec![b'n'; 256]).unwrap();
    let _ = s.table("b").unwrap();
    let _ = s.table("b").unwrap();
    assert_eq!(
        s.table("c").unwrap_err().to_string(),
        "jobs.shared.table: the domain holds at most 2 shared names"
    );
}

#[test]
fn resources_and_nan_keys_are_refused() {
    let t = store().table("t").unwrap();
    let err = t
        .set(
            "a",
            map(&[("r", Message::Resource(ResourceHandle::new("q", 1)))]),
        )
        .unwrap_err();
    assert_eq!(err.kind(), SharedTableErrorKind::NotData);
    assert_eq!(
        err.to_string(),
        "'t'.a.r: a resource handle can't be stored in a shared table"
    );
    assert_eq!(
        t.set(f64::NAN, int(1)).unwrap_err().to_string(),
        "shared table 't': a NaN can't be a key of a shared table"
    );
    assert_eq!(t.revision().unwrap(), 0);
}

#[test]
fn atomic_counts_and_removes() {
    let t = store().table("c").unwrap();
    for _ in 0..5 {
        t.atomic("n", |n| match n {
            Some(Message::Integer(n)) => Some(int(n + 1)),
            _ => Some(int(1)),
        })
        .unwrap();
    }
    assert_eq!(t.get("n").unwrap(), Some(int(5)));
    assert_eq!(t.atomic("n", |_| None).unwrap(), None);
    assert_eq!(t.get("n").unwrap(), None);
}

#[test]
fn atomic_reruns_after_a_plain_write_and_takes_the_turn_after_four() {
    let t = store().table("c").unwrap();
    t.set("n", int(0)).unwrap();
    let mut runs = 0;
    let writer = t.clone();
    let stored = t
        .atomic("n", |n| {
            runs += 1;
            if runs <= 5 {
                // A plain write lands between the read and the commit.
                writer.set("other", int(runs)).unwrap();
                if runs == 5 {
                    assert!(writer.root.turn_taken(), "four losses took the turn");
                }
            }
            match n {
                Some(Message::Integer(n)) => Some(int(n + 1)),
                _ => None,
            }
        })
        .unwrap();
    assert_eq!(runs, 6);
    assert_eq!(stored, Some(int(1)));
    assert!(!t.root.turn_taken(), "the turn is given back");
}

#[test]
fn atomic_gives_up_after_256_losses_naming_the_key() {
    let t = store().table("counters").unwrap();
    let writer = t.clone();
    let mut runs = 0;
    let err = t
        .atomic("done", |_| {
            runs += 1;
            writer.set("noise", int(runs)).unwrap();
            Some(int(1))
        })
        .unwrap_err();
    assert_eq!(runs, 256);
    assert_eq!(err.kind(), SharedTableErrorKind::GaveUp);
    assert_eq!(
        err.to_string(),
        "jobs.shared.atomic: gave up on 'counters'.done after 256 attempts: plain writes kept changing the table"
    );
    assert_eq!(t.get("done").unwrap(), None, "nothing was stored");
    assert!(!t.root.turn_taken());
}

#[test]
fn atomic_inside_atomic_on_the_turn_holder_does_not_wait_on_itself() {
    let t = store().table("c").unwrap();
    let inner = t.clone();
    let mut runs = 0;
    t.atomic("outer", |_| {
        runs += 1;
        // Each inner atomic is a write that beats the outer call; after four the outer holds
        // the turn, and the inner calls (same thread) must still go through.
        if runs <= 6 {
            inner.atomic("inner", |_| Some(int(runs))).unwrap();
        }
        Some(int(runs))
    })
    .unwrap();
    assert_eq!(runs, 7);
    assert_eq!(t.get("inner").unwrap(), Some(int(6)));
}

#[test]
fn a_write_elsewhere_does_not_rerun_atomic() {
    let t = store().table("t").unwrap();
    t.set("a", map(&[])).unwrap();
    t.set("b", map(&[])).unwrap();
    let a = t.table_at("a").unwrap();
    let b = t.table_at("b").unwrap();
    let mut runs = 0;
    a.atomic("x", |_| {
        runs += 1;
        b.set("y", int(runs)).unwrap();
        Some(int(1))
    })
    .unwrap();
    assert_eq!(runs, 1, "the sibling's write lost nothing for 'a'");
    assert_eq!(a.get("x").unwrap(), Some(int(1)));
    assert_eq!(b.get("y").unwrap(), Some(int(1)));
}

#[test]
fn concurrent_atomic_counts_exactly() {
    let t = store().table("c").unwrap();
    let threads: Vec<_> = (0..4)
        .map(|i| {
            let t = t.clone();
            std::thread::spawn(move || {
                for j in 0..500 {
                    t.atomic("n", |n| match n {
                        Some(Message::Integer(n)) => Some(int(n + 1)),
                        _ => Some(int(1)),
                    })
                    .unwrap();
                    t.set(format!("k{i}"), int(j)).unwrap();
                }
            })
        })
        .collect();
    for th in threads {
        th.join().unwrap();
    }
    assert_eq!(t.get("n").unwrap(), Some(int(2000)));
    assert_eq!(t.revision().unwrap(), 4000);
}

#[test]
fn frozen_tables_keep_their_version() {
    let t = store().table("cfg").unwrap();
    t.set("a", map(&[("x", int(1))])).unwrap();
    let frozen = t.freeze().unwrap();
    t.table_at("a").unwrap().set("x", int(2)).unwrap();
    let a = frozen.table_at("a").unwrap();
    assert_eq!(a.get("x"), Some(int(1)));
    assert_eq!(a.location(), "'cfg'.a");
    assert_eq!(
        frozen.refuse_write().to_string(),
        "shared table 'cfg' is frozen: it can't be written"
    );
    let nested = t.table_at("a").unwrap().freeze().unwrap();
    assert_eq!(nested.get("x"), Some(int(2)));
}

#[test]
fn a_held_table_after_the_end_names_the_reason() {
    let s = store();
    let t = s.table("t").unwrap();
    let nested = {
        t.set("a", map(&[])).unwrap();
        t.table_at("a").unwrap()
    };
    s.core.end("domain 'main' stopped");
    for err in [
        t.get("x").unwrap_err(),
        t.set("x", int(1)).unwrap_err(),
        nested.revision().unwrap_err(),
        s.table("t").unwrap_err(),
    ] {
        assert_eq!(err.kind(), SharedTableErrorKind::Ended);
    }
    assert_eq!(
        t.set("x", int(1)).unwrap_err().to_string(),
        "shared table 't' is gone: domain 'main' stopped"
    );
    assert_eq!(
        nested.get("x").unwrap_err().to_string(),
        "shared table 't'.a is gone: domain 'main' stopped"
    );
}

#[test]
fn handles_are_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<SharedTableRef>();
    assert_send_sync::<FrozenTable>();
}

#[test]
fn turn_holders_nesting_atomics_across_two_tables_in_opposite_orders_both_finish() {
    let s = store();
    let (a, b) = (s.table("a").unwrap(), s.table("b").unwrap());
    let both_hold = Arc::new(std::sync::Barrier::new(2));
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    for (mine, other) in [(a.clone(), b.clone()), (b, a)] {
        let (both_hold, done_tx) = (both_hold.clone(), done_tx.clone());
        std::thread::spawn(move || {
            let writer = mine.clone();
            let mut runs = 0;
            let stored = mine.atomic("n", |_| {
                runs += 1;
                if runs <= 4 {
                    // Lose four times: the fifth run holds this table's turn.
                    writer.set("noise", int(runs)).unwrap();
                } else if runs == 5 {
                    assert!(writer.root.turn_taken());
                    // Both threads hold their own table's turn now; each reaches into the other's.
                    both_hold.wait();
                    other.atomic("from_other", |_| Some(int(1))).unwrap();
                }
                Some(int(runs))
            });
            done_tx.send(stored.is_ok()).unwrap();
        });
    }
    for _ in 0..2 {
        let ok = done_rx
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("two turn holders waited on each other");
        assert!(ok);
    }
    assert_eq!(
        s.table("a").unwrap().get("from_other").unwrap(),
        Some(int(1))
    );
    assert_eq!(
        s.table("b").unwrap().get("from_other").unwrap(),
        Some(int(1))
    );
}
