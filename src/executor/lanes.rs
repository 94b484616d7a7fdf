//! Key lanes: the FIFO of each key, bound to one worker, running one item at a time.
//!
//! A key (`opts.key`) asks that its items run in one worker VM, one after another in dispatch
//! order, so module state an item leaves is there for the next. This file owns that ordering and
//! the binding of keys to workers. It never runs anything and never touches Luau: it answers the
//! caller *what* to deliver to *which* worker, and the caller delivers it to that worker alone
//! (the Luau pool posts it to the worker's inbox, which no sibling reads), so a lane item is never
//! stolen. Generic over the item and key types, so loom models this very code.
//!
//! # Protocol
//!
//! Every lane is in one of two shapes, and the lock makes each transition atomic:
//!
//! - **idle**: bound to a worker, nothing running, nothing queued;
//! - **running**: one item was handed to the worker and has not settled; later entries wait in
//!   the FIFO.
//!
//! [`enqueue`](KeyLanes::enqueue) on an idle (or new) lane delivers the item at once; on a
//! running lane it queues it. [`settle`](KeyLanes::settle), called exactly once per item
//! delivered, after the item's outcome was sent, delivers the next entry. A
//! [`release`](KeyLanes::release) is an entry of the FIFO too, so it takes effect only after the
//! items enqueued before it settled: when it reaches the head the binding ends (the caller tells
//! the old worker, so its VM runs its release watchers) and whatever was queued behind it binds
//! anew. Because the hand-over happens under the lock and the lane is "running" until `settle`,
//! two items of a key can never be handed out at once, and none is handed out twice or lost.
//!
//! # Memory ordering
//!
//! All state sits behind one `Mutex`; its acquire/release edges order everything. Deliveries
//! ([`Deliver`]) are made through the caller's callback *while the lock is held*, so every
//! delivery to a worker is in one total order with the lane transitions. Without that, a release
//! answered to one thread and a new binding of the same key made by another could reach the worker
//! as "run the item" before "the key was released", and the item would see the old binding's
//! state. A delivery is a push onto a worker's FIFO inbox and a wake, never a call back into the
//! lanes, so holding the lock across it cannot deadlock.

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::time::Duration;

use foldhash::fast::RandomState;

use crate::sync::Mutex;

/// The most keys the pool holds at once. A dispatch with a key not already held past this is
/// refused.
pub const MAX_KEYS: usize = 65_536;

/// One entry of a lane's FIFO.
enum Entry<T> {
    Item(T),
    Release,
}

/// One key's lane.
struct Lane<T> {
    /// The worker the key is bound to.
    worker: usize,
    /// Whether an item of this lane was handed out and has not settled.
    running: bool,
    /// What waits behind the running item. Empty whenever `running` is false.
    queue: VecDeque<Entry<T>>,
    /// What the key's settled items waited for their turn, since the key was bound.
    waited: KeyWait,
}

/// What the items of one key waited, from dispatch to start, for their turn in the key's VM:
/// counted as each settles, since the key was bound.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KeyWait {
    /// Items of the key that settled.
    pub items: u64,
    /// Their waits added up.
    pub total: Duration,
    /// The longest of them.
    pub longest: Duration,
}

impl KeyWait {
    fn add(&mut self, waited: Duration) {
        self.items += 1;
        self.total = self.total.saturating_add(waited);
        self.longest = self.longest.max(waited);
    }
}

impl<T> Lane<T> {
    fn queued_items(&self) -> usize {
        self.queue
            .iter()
            .filter(|e| matches!(e, Entry::Item(_)))
            .count()
    }
}

/// Per-worker load, used to choose where a key binds.
#[derive(Clone, Copy, Default)]
struct WorkerLoad {
    /// Keys bound to the worker.
    keys: usize,
    /// Items of those keys queued or running.
    items: usize,
}

struct Lanes<K, T> {
    /// foldhash with a seed drawn per map, not SipHash: each keyed item hashes its key twice
    /// (enqueue, settle), where SipHash cost about 250 instructions a time; the seed keeps a
    /// script from choosing keys that collide.
    lanes: HashMap<K, Lane<T>, RandomState>,
    load: Vec<WorkerLoad>,
}

/// The worker a new binding goes to: fewest keys bound, then fewest items, then lowest index.
fn choose_worker(load: &[WorkerLoad]) -> usize {
    load.iter()
        .enumerate()
        .min_by_key(|(i, l)| (l.keys, l.items, *i))
        .map_or(0, |(i, _)| i)
}

/// An enqueue refused because the pool already holds [`MAX_KEYS`] keys; the item comes back.
#[derive(Debug)]
pub struct TooManyKeys<T>(pub T);

/// What a lane hands to one worker. The caller must deliver it to that worker alone.
#[derive(Debug, PartialEq, Eq)]
pub enum Deliver<T> {
    /// Run this item of the key; settle it afterwards.
    Run {
        /// The worker the key is bound to.
        worker: usize,
        /// The item.
        item: T,
    },
    /// The key's binding to this worker ended: its VM drops what it kept for the key.
    Released {
        /// The worker the key was bound to.
        worker: usize,
    },
}

/// What [`KeyLanes::release`] answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Release {
    /// The pool did not hold the key (or only a release already pending): nothing was done.
    NotHeld,
    /// The key was bound and idle: the binding ended now (and was delivered).
    Now,
    /// The release waits in the lane for the items before it; a later settle delivers it.
    Queued,
}

/// The key lanes of one pool.
pub struct KeyLanes<K, T> {
    inner: Mutex<Lanes<K, T>>,
}

impl<K: Hash + Eq + Clone, T> KeyLanes<K, T> {
    /// Lanes for a pool of `workers` workers (at least one).
    pub fn new(workers: usize) -> Self {
        KeyLanes {
            inner: Mutex::new(Lanes {
                lanes: HashMap::default(),
                load: vec![WorkerLoad::default(); workers.max(1)],
            }),
        }
    }

    /// Adds `item` to `key`'s lane, binding the key when it is new, and delivers it when the lane
    /// was idle. With `supersede`, every item of the key that has not been delivered is taken out
    /// first and answered, in queue order, for the caller to reject (the running one is
    /// untouched).
    ///
    /// The key is borrowed and cloned only when it binds: the caller keeps it for its
    /// deliveries.
    ///
    /// # Errors
    ///
    /// [`TooManyKeys`] with the item when the key is new and [`MAX_KEYS`] keys are held.
    pub fn enqueue(
        &self,
        key: &K,
        item: T,
        supersede: bool,
        deliver: impl FnOnce(Deliver<T>),
    ) -> Result<Vec<T>, TooManyKeys<T>> {
        let mut guard = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let lanes = &mut *guard;
        let Some(lane) = lanes.lanes.get_mut(key) else {
            if lanes.lanes.len() >= MAX_KEYS {
                return Err(TooManyKeys(item));
            }
            let worker = choose_worker(&lanes.load);
            lanes.load[worker].keys += 1;
            lanes.load[worker].items += 1;
            lanes.lanes.insert(
                key.clone(),
                Lane {
                    worker,
                    running: true,
                    queue: VecDeque::new(),
                    waited: KeyWait::default(),
                },
            );
            deliver(Deliver::Run { worker, item });
            return Ok(Vec::new());
        };
        let mut superseded = Vec::new();
        if supersede && !lane.queue.is_empty() {
            let mut kept = VecDeque::with_capacity(lane.queue.len());
            for entry in lane.queue.drain(..) {
                match entry {
                    Entry::Item(old) => superseded.push(old),
                    // Two releases with nothing between them end the same binding: keep one.
                    Entry::Release if matches!(kept.back(), Some(Entry::Release)) => {}
                    Entry::Release => kept.push_back(Entry::Release),
                }
            }
            lane.queue = kept;
            lanes.load[lane.worker].items -= superseded.len();
        }
        lanes.load[lane.worker].items += 1;
        if lane.running {
            lane.queue.push_back(Entry::Item(item));
        } else {
            lane.running = true;
            deliver(Deliver::Run {
                worker: lane.worker,
                item,
            });
        }
        Ok(superseded)
    }

    /// The item of `key` that was delivered has settled: deliver what comes next (a release
    /// that reached the head, then the next item).
    ///
    /// Called exactly once per item delivered as [`Deliver::Run`].
    pub fn settle(&self, key: &K, deliver: impl FnMut(Deliver<T>)) {
        self.settle_after(key, None, deliver);
    }

    /// As [`settle`](Self::settle), adding `waited` (how long the item waited for its turn) to
    /// the key's [`KeyWait`]: the lock `settle` takes anyway records it, so a keyed item pays no
    /// second one.
    pub fn settle_waited(&self, key: &K, waited: Duration, deliver: impl FnMut(Deliver<T>)) {
        self.settle_after(key, Some(waited), deliver);
    }

    fn settle_after(&self, key: &K, waited: Option<Duration>, mut deliver: impl FnMut(Deliver<T>)) {
        let mut guard = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let lanes = &mut *guard;
        let Some(lane) = lanes.lanes.get_mut(key) else {
            return; // forgotten while its item ran (see `forget`)
        };
        debug_assert!(lane.running, "settle of a lane with nothing running");
        lane.running = false;
        if let Some(waited) = waited {
            lane.waited.add(waited);
        }
        lanes.load[lane.worker].items -= 1;
        loop {
            match lane.queue.pop_front() {
                None => return,
                Some(Entry::Item(item)) => {
                    lane.running = true;
                    deliver(Deliver::Run {
                        worker: lane.worker,
                        item,
                    });
                    return;
                }
                Some(Entry::Release) => {
                    let old = lane.worker;
                    deliver(Deliver::Released { worker: old });
                    lanes.load[old].keys -= 1;
                    if lane.queue.is_empty() {
                        lanes.lanes.remove(key);
                        return;
                    }
                    // What was dispatched after the release binds anew.
                    let waiting = lane.queued_items();
                    lanes.load[old].items -= waiting;
                    let worker = choose_worker(&lanes.load);
                    lanes.load[worker].keys += 1;
                    lanes.load[worker].items += waiting;
                    lane.worker = worker;
                    lane.waited = KeyWait::default();
                }
            }
        }
    }

    /// Ends `key`'s binding once the items enqueued before this call have settled; when none is
    /// queued or running it ends now and [`Deliver::Released`] is delivered before this returns.
    pub fn release(&self, key: &K, deliver: impl FnOnce(Deliver<T>)) -> Release {
        let mut guard = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let lanes = &mut *guard;
        let Some(lane) = lanes.lanes.get_mut(key) else {
            return Release::NotHeld;
        };
        if !lane.running {
            let worker = lane.worker;
            lanes.load[worker].keys -= 1;
            lanes.lanes.remove(key);
            // The mutant tells the worker after letting the lock go (loom-tests/README.md).
            #[cfg(loom_mutant = "lanes_release_unlocked")]
            drop(guard);
            deliver(Deliver::Released { worker });
            return Release::Now;
        }
        if matches!(lane.queue.back(), Some(Entry::Release)) {
            // A release already ends the binding and nothing was dispatched after it.
            return Release::NotHeld;
        }
        lane.queue.push_back(Entry::Release);
        Release::Queued
    }

    /// Drops every lane whose key matches `ends` (the keys of a principal that ended), bound or
    /// not, and answers the items that were queued in them, for the caller to drop outside the
    /// lock. An item of such a lane that is out settles into nothing.
    pub fn forget(&self, ends: impl Fn(&K) -> bool) -> Vec<T> {
        let mut guard = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let lanes = &mut *guard;
        let mut queued = Vec::new();
        let load = &mut lanes.load;
        lanes.lanes.retain(|key, lane| {
            if !ends(key) {
                return true;
            }
            // A queued release would have ended the binding; count the key once either way.
            load[lane.worker].keys -= 1;
            load[lane.worker].items -= lane.queued_items() + usize::from(lane.running);
            for entry in lane.queue.drain(..) {
                if let Entry::Item(item) = entry {
                    queued.push(item);
                }
            }
            false
        });
        queued
    }

    /// How many keys are bound to each worker, in worker order.
    pub fn keys_held(&self) -> Vec<usize> {
        let lanes = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        lanes.load.iter().map(|l| l.keys).collect()
    }

    /// The keys bound to each worker (in worker order) that `shown` lets through, with their
    /// waits: at most `per_worker` of each worker's, those that waited longest in total first.
    /// Keys are cloned under the lock and chosen after it, so a stats call holds the lanes no
    /// longer than one pass over them.
    pub fn held(&self, per_worker: usize, shown: impl Fn(&K) -> bool) -> Vec<Vec<(K, KeyWait)>> {
        let mut held: Vec<Vec<(K, KeyWait)>> = {
            let lanes = self.inner.lock().unwrap_or_else(|e| e.into_inner());
            let mut held = vec![Vec::new(); lanes.load.len()];
            for (key, lane) in &lanes.lanes {
                if shown(key) {
                    held[lane.worker].push((key.clone(), lane.waited));
                }
            }
            held
        };
        let longest_first = |a: &(K, KeyWait), b: &(K, KeyWait)| b.1.total.cmp(&a.1.total);
        for keys in &mut held {
            if keys.len() > per_worker && per_worker > 0 {
                keys.select_nth_unstable_by(per_worker - 1, longest_first);
            }
            keys.truncate(per_worker);
            keys.sort_by(longest_first);
        }
        held
    }

    /// How many keys are held in all.
    #[allow(clippy::len_without_is_empty)]
    pub fn len(&self) -> usize {
        self.inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .lanes
            .len()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    use Deliver::{Released, Run};

    /// Lanes whose deliveries are recorded, for asserting what each call handed over.
    struct Recorded<K> {
        lanes: KeyLanes<K, u32>,
        out: std::cell::RefCell<Vec<Deliver<u32>>>,
    }

    impl<K: Hash + Eq + Clone> Recorded<K> {
        fn new(workers: usize) -> Self {
            Recorded {
                lanes: KeyLanes::new(workers),
                out: Default::default(),
            }
        }
        fn take(&self) -> Vec<Deliver<u32>> {
            std::mem::take(&mut *self.out.borrow_mut())
        }
        fn enqueue(&self, key: K, item: u32) -> Vec<Deliver<u32>> {
            let superseded = self.supersede(key, item, false);
            assert!(superseded.is_empty());
            self.take()
        }
        fn supersede(&self, key: K, item: u32, supersede: bool) -> Vec<u32> {
            self.lanes
                .enqueue(&key, item, supersede, |d| self.out.borrow_mut().push(d))
                .unwrap()
        }
        fn settle(&self, key: K) -> Vec<Deliver<u32>> {
            self.lanes.settle(&key, |d| self.out.borrow_mut().push(d));
            self.take()
        }
        fn release(&self, key: K) -> (Release, Vec<Deliver<u32>>) {
            let r = self.lanes.release(&key, |d| self.out.borrow_mut().push(d));
            (r, self.take())
        }
    }

    #[test]
    fn a_new_key_runs_now_and_later_items_wait_in_order() {
        let l = Recorded::new(2);
        assert_eq!(l.enqueue("a", 1), [Run { worker: 0, item: 1 }]);
        assert_eq!(l.enqueue("a", 2), []);
        assert_eq!(l.enqueue("a", 3), []);
        assert_eq!(l.settle("a"), [Run { worker: 0, item: 2 }]);
        assert_eq!(l.settle("a"), [Run { worker: 0, item: 3 }]);
        assert_eq!(l.settle("a"), []);
        // Still bound while idle; the next item runs at once on the same worker.
        assert_eq!(l.lanes.keys_held(), [1, 0]);
        assert_eq!(l.enqueue("a", 4), [Run { worker: 0, item: 4 }]);
    }

    #[test]
    fn held_lists_each_workers_keys_with_their_waits_longest_first_and_bounded() {
        let l = Recorded::new(2);
        let ms = Duration::from_millis;
        for (key, item) in [("a", 1), ("b", 2), ("c", 3), ("a", 4)] {
            l.enqueue(key, item);
        }
        // a and c on worker 0, b on worker 1.
        l.lanes.settle_waited(&"a", ms(1), |_| {});
        l.lanes.settle_waited(&"a", ms(5), |_| {});
        l.lanes.settle_waited(&"c", ms(4), |_| {});
        l.settle("b"); // settled without a wait to record
        let wait = |items, total, longest| KeyWait {
            items,
            total: ms(total),
            longest: ms(longest),
        };
        assert_eq!(
            l.lanes.held(8, |_| true),
            [
                vec![("a", wait(2, 6, 5)), ("c", wait(1, 4, 4))],
                vec![("b", wait(0, 0, 0))]
            ]
        );
        // At the bound and one under it: the longest total wait is kept.
        assert_eq!(l.lanes.held(2, |_| true)[0].len(), 2);
        assert_eq!(l.lanes.held(1, |_| true)[0], [("a", wait(2, 6, 5))]);
        assert_eq!(l.lanes.held(0, |_| true), [vec![], vec![]]);
        // Only the keys let through are listed.
        assert_eq!(
            l.lanes.held(8, |k| *k != "a"),
            [vec![("c", wait(1, 4, 4))], vec![("b", wait(0, 0, 0))]]
        );
        // A released key is no longer listed; bound again, it starts from nothing.
        l.release("c");
        l.enqueue("c", 5);
        assert_eq!(l.lanes.held(8, |k| *k == "c")[0], [("c", wait(0, 0, 0))]);
    }

    #[test]
    fn keys_spread_by_fewest_keys_then_fewest_items() {
        let l = Recorded::new(3);
        assert_eq!(l.enqueue("a", 1), [Run { worker: 0, item: 1 }]);
        assert_eq!(l.enqueue("b", 2), [Run { worker: 1, item: 2 }]);
        assert_eq!(l.enqueue("c", 3), [Run { worker: 2, item: 3 }]);
        assert_eq!(l.enqueue("a", 4), []);
        l.settle("b");
        l.settle("c");
        assert_eq!(l.enqueue("c", 5), [Run { worker: 2, item: 5 }]);
        // One key each; worker 1 has no item left, 0 has two and 2 has one.
        assert_eq!(l.enqueue("d", 6), [Run { worker: 1, item: 6 }]);
        assert_eq!(l.lanes.keys_held(), [1, 2, 1]);
    }

    #[test]
    fn release_waits_for_earlier_items_and_the_next_item_binds_anew() {
        let l = Recorded::new(2);
        assert_eq!(l.release("a"), (Release::NotHeld, vec![]));
        l.enqueue("a", 1);
        assert_eq!(l.release("a"), (Release::Queued, vec![]));
        // A second release with nothing dispatched between them holds nothing.
        assert_eq!(l.release("a"), (Release::NotHeld, vec![]));
        l.enqueue("b", 2); // worker 1 now holds a key too
        assert_eq!(l.enqueue("a", 3), []);
        // Released first, then the item binds anew: worker 0 held no key any more.
        assert_eq!(
            l.settle("a"),
            [Released { worker: 0 }, Run { worker: 0, item: 3 }]
        );
        assert_eq!(l.lanes.keys_held(), [1, 1]);
        assert_eq!(l.settle("a"), []);
        assert_eq!(l.release("a"), (Release::Now, vec![Released { worker: 0 }]));
        assert_eq!(l.lanes.keys_held(), [0, 1]);
        assert_eq!(l.lanes.len(), 1);
    }

    #[test]
    fn supersede_takes_every_queued_item_and_leaves_the_running_one() {
        let l = Recorded::new(1);
        l.enqueue("a", 1);
        l.enqueue("a", 2);
        l.enqueue("a", 3);
        assert_eq!(l.supersede("a", 4, true), [2, 3]);
        assert_eq!(l.take(), [], "1 still runs");
        assert_eq!(l.settle("a"), [Run { worker: 0, item: 4 }]);
        assert_eq!(l.settle("a"), []);
        // On an idle lane a supersede has nothing to take and runs at once.
        assert_eq!(l.supersede("a", 5, true), Vec::<u32>::new());
        assert_eq!(l.take(), [Run { worker: 0, item: 5 }]);
    }

    #[test]
    fn supersede_keeps_releases_and_merges_adjacent_ones() {
        let l = Recorded::new(1);
        l.enqueue("a", 1);
        assert_eq!(l.release("a").0, Release::Queued);
        l.enqueue("a", 2);
        assert_eq!(l.release("a").0, Release::Queued);
        assert_eq!(l.supersede("a", 3, true), [2]);
        assert_eq!(
            l.settle("a"),
            [Released { worker: 0 }, Run { worker: 0, item: 3 }]
        );
        assert_eq!(l.settle("a"), []);
        assert_eq!(l.lanes.len(), 1);
    }

    #[test]
    fn the_key_bound_is_exactly_max_keys() {
        let l: Recorded<u32> = Recorded::new(2);
        for k in 0..MAX_KEYS as u32 {
            assert!(l.lanes.enqueue(&k, k, false, |_| {}).is_ok(), "key {k}");
        }
        assert_eq!(l.lanes.len(), 65_536);
        let TooManyKeys(back) = l.lanes.enqueue(&u32::MAX, 7, false, |_| {}).unwrap_err();
        assert_eq!(back, 7);
        assert_eq!(l.lanes.len(), 65_536);
        // A held key still takes items, and a released one makes room.
        assert_eq!(l.enqueue(5, 8), []);
        assert_eq!(l.lanes.keys_held(), [32_768, 32_768]);
        l.settle(0);
        assert_eq!(l.release(0).0, Release::Now);
        assert!(l.lanes.enqueue(&u32::MAX, 9, false, |_| {}).is_ok());
    }

    #[test]
    fn forget_drops_matching_lanes_and_answers_their_queued_items() {
        let l = Recorded::new(2);
        l.enqueue(("p1", "a"), 1);
        l.enqueue(("p1", "a"), 2);
        l.enqueue(("p2", "a"), 3);
        assert_eq!(l.lanes.keys_held(), [1, 1]);
        assert_eq!(l.lanes.forget(|k| k.0 == "p1"), [2]);
        assert_eq!(l.lanes.keys_held(), [0, 1]);
        // The item that was out settles into nothing; the other principal's lane is untouched.
        assert_eq!(l.settle(("p1", "a")), []);
        assert_eq!(l.enqueue(("p2", "a"), 4), []);
        assert_eq!(l.settle(("p2", "a")), [Run { worker: 1, item: 4 }]);
        // The forgotten key binds anew when used again.
        assert_eq!(l.enqueue(("p1", "a"), 5), [Run { worker: 0, item: 5 }]);
    }
}
