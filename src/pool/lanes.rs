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
//! [`enqueue`](KeyLanes::enqueue) on an idle (or new) lane answers the item straight back as the
//! one to run; on a running lane it queues it. [`settle`](KeyLanes::settle), called exactly once
//! per item handed out, after the item's outcome was sent, hands over the next entry. A
//! [`release`](KeyLanes::release) is an entry of the FIFO too, so it takes effect only after the
//! items enqueued before it settled: when it reaches the head the binding ends (the caller tells
//! the old worker, so its VM runs its release watchers) and whatever was queued behind it binds
//! anew. Because the hand-over happens under the lock and the lane is "running" until `settle`,
//! two items of a key can never be handed out at once, and none is handed out twice or lost.
//!
//! # Memory ordering
//!
//! All state sits behind one `Mutex`; its acquire/release edges order everything. The caller
//! delivers what a call answers after the lock is dropped. That is safe because an item answered
//! as "run" cannot settle before it is delivered, and a release answered by `settle` is delivered
//! before the next item of the same call (both by the same thread, in that order, through the
//! same FIFO inbox when they go to the same worker).

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;

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
struct Load {
    /// Keys bound to the worker.
    keys: usize,
    /// Items of those keys queued or running.
    items: usize,
}

struct Lanes<K, T> {
    lanes: HashMap<K, Lane<T>>,
    load: Vec<Load>,
}

/// The worker a new binding goes to: fewest keys bound, then fewest items, then lowest index.
fn choose_worker(load: &[Load]) -> usize {
    load.iter()
        .enumerate()
        .min_by_key(|(i, l)| (l.keys, l.items, *i))
        .map_or(0, |(i, _)| i)
}

/// An enqueue refused because the pool already holds [`MAX_KEYS`] keys; the item comes back.
#[derive(Debug)]
pub struct TooManyKeys<T>(pub T);

/// What [`KeyLanes::enqueue`] answers.
#[derive(Debug)]
pub struct Enqueued<T> {
    /// The item to deliver now, and to which worker: the lane was idle or new.
    pub run: Option<(usize, T)>,
    /// Items of the key that had not started and were dropped from the lane by a supersede, in
    /// the order they were queued. The caller rejects them.
    pub superseded: Vec<T>,
}

/// What [`KeyLanes::release`] answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Release {
    /// The pool did not hold the key (or only a release already pending): nothing was done.
    NotHeld,
    /// The key was bound and idle: the binding ended now; tell this worker.
    Now {
        /// The worker the key was bound to.
        worker: usize,
    },
    /// The release waits in the lane for the items before it; [`KeyLanes::settle`] reports it.
    Queued,
}

/// What [`KeyLanes::settle`] answers, to be delivered in field order.
#[derive(Debug)]
pub struct Handover<T> {
    /// A release reached the head: the binding to this worker ended.
    pub released: Option<usize>,
    /// The next item of the key and the worker to deliver it to.
    pub run: Option<(usize, T)>,
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
                lanes: HashMap::new(),
                load: vec![Load::default(); workers.max(1)],
            }),
        }
    }

    /// Adds `item` to `key`'s lane, binding the key when it is new. With `supersede`, every item
    /// of the key that has not been handed out is taken out first (the running one is
    /// untouched).
    ///
    /// # Errors
    ///
    /// [`TooManyKeys`] with the item when the key is new and [`MAX_KEYS`] keys are held.
    pub fn enqueue(
        &self,
        key: K,
        item: T,
        supersede: bool,
    ) -> Result<Enqueued<T>, TooManyKeys<T>> {
        let mut guard = self.inner.lock().unwrap();
        let lanes = &mut *guard;
        let Some(lane) = lanes.lanes.get_mut(&key) else {
            if lanes.lanes.len() >= MAX_KEYS {
                return Err(TooManyKeys(item));
            }
            let worker = choose_worker(&lanes.load);
            lanes.load[worker].keys += 1;
            lanes.load[worker].items += 1;
            lanes.lanes.insert(
                key,
                Lane {
                    worker,
                    running: true,
                    queue: VecDeque::new(),
                },
            );
            return Ok(Enqueued {
                run: Some((worker, item)),
                superseded: Vec::new(),
            });
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
            Ok(Enqueued {
                run: None,
                superseded,
            })
        } else {
            lane.running = true;
            Ok(Enqueued {
                run: Some((lane.worker, item)),
                superseded,
            })
        }
    }

    /// The item of `key` that was handed out has settled: hand over what comes next.
    ///
    /// Called exactly once per item [`enqueue`](Self::enqueue) or `settle` answered as `run`.
    pub fn settle(&self, key: &K) -> Handover<T> {
        let mut guard = self.inner.lock().unwrap();
        let lanes = &mut *guard;
        let mut out = Handover {
            released: None,
            run: None,
        };
        let Some(lane) = lanes.lanes.get_mut(key) else {
            debug_assert!(false, "settle of a key with no lane");
            return out;
        };
        debug_assert!(lane.running, "settle of a lane with nothing running");
        lane.running = false;
        lanes.load[lane.worker].items -= 1;
        loop {
            match lane.queue.pop_front() {
                None => return out,
                Some(Entry::Item(item)) => {
                    lane.running = true;
                    out.run = Some((lane.worker, item));
                    return out;
                }
                Some(Entry::Release) => {
                    let old = lane.worker;
                    out.released = Some(old);
                    lanes.load[old].keys -= 1;
                    if lane.queue.is_empty() {
                        lanes.lanes.remove(key);
                        return out;
                    }
                    // What was dispatched after the release binds anew.
                    let waiting = lane.queued_items();
                    lanes.load[old].items -= waiting;
                    let worker = choose_worker(&lanes.load);
                    lanes.load[worker].keys += 1;
                    lanes.load[worker].items += waiting;
                    lane.worker = worker;
                }
            }
        }
    }

    /// Ends `key`'s binding once the items enqueued before this call have settled.
    pub fn release(&self, key: &K) -> Release {
        let mut guard = self.inner.lock().unwrap();
        let lanes = &mut *guard;
        let Some(lane) = lanes.lanes.get_mut(key) else {
            return Release::NotHeld;
        };
        if !lane.running {
            let worker = lane.worker;
            lanes.load[worker].keys -= 1;
            lanes.lanes.remove(key);
            return Release::Now { worker };
        }
        if matches!(lane.queue.back(), Some(Entry::Release)) {
            // A release already ends the binding and nothing was dispatched after it.
            return Release::NotHeld;
        }
        lane.queue.push_back(Entry::Release);
        Release::Queued
    }

    /// How many keys are bound to each worker, in worker order.
    pub fn keys_held(&self) -> Vec<usize> {
        let lanes = self.inner.lock().unwrap();
        lanes.load.iter().map(|l| l.keys).collect()
    }

    /// How many keys are held in all.
    #[allow(clippy::len_without_is_empty)]
    pub fn len(&self) -> usize {
        self.inner.lock().unwrap().lanes.len()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn run_of(e: Enqueued<u32>) -> Option<(usize, u32)> {
        assert!(e.superseded.is_empty());
        e.run
    }

    #[test]
    fn a_new_key_runs_now_and_later_items_wait_in_order() {
        let lanes: KeyLanes<&str, u32> = KeyLanes::new(2);
        assert_eq!(run_of(lanes.enqueue("a", 1, false).unwrap()), Some((0, 1)));
        assert_eq!(run_of(lanes.enqueue("a", 2, false).unwrap()), None);
        assert_eq!(run_of(lanes.enqueue("a", 3, false).unwrap()), None);
        let h = lanes.settle(&"a");
        assert_eq!((h.released, h.run), (None, Some((0, 2))));
        let h = lanes.settle(&"a");
        assert_eq!((h.released, h.run), (None, Some((0, 3))));
        let h = lanes.settle(&"a");
        assert_eq!((h.released, h.run), (None, None));
        // Still bound while idle; the next item runs at once on the same worker.
        assert_eq!(lanes.keys_held(), [1, 0]);
        assert_eq!(run_of(lanes.enqueue("a", 4, false).unwrap()), Some((0, 4)));
    }

    #[test]
    fn keys_spread_by_fewest_keys_then_fewest_items() {
        let lanes: KeyLanes<&str, u32> = KeyLanes::new(3);
        assert_eq!(lanes.enqueue("a", 1, false).unwrap().run, Some((0, 1)));
        assert_eq!(lanes.enqueue("b", 2, false).unwrap().run, Some((1, 2)));
        assert_eq!(lanes.enqueue("c", 3, false).unwrap().run, Some((2, 3)));
        // Every worker holds one key; worker 1 has the fewest items once "b" settles.
        assert!(lanes.enqueue("a", 4, false).unwrap().run.is_none());
        lanes.settle(&"b");
        lanes.settle(&"c");
        assert!(lanes.enqueue("c", 5, false).unwrap().run.is_some());
        assert_eq!(lanes.enqueue("d", 6, false).unwrap().run, Some((1, 6)));
        assert_eq!(lanes.keys_held(), [1, 2, 1]);
    }

    #[test]
    fn release_waits_for_earlier_items_and_the_next_item_binds_anew() {
        let lanes: KeyLanes<&str, u32> = KeyLanes::new(2);
        assert_eq!(lanes.release(&"a"), Release::NotHeld);
        lanes.enqueue("a", 1, false).unwrap();
        assert_eq!(lanes.release(&"a"), Release::Queued);
        // A second release with nothing dispatched between them holds nothing.
        assert_eq!(lanes.release(&"a"), Release::NotHeld);
        lanes.enqueue("b", 2, false).unwrap(); // worker 1 now holds a key too
        assert!(lanes.enqueue("a", 3, false).unwrap().run.is_none());
        let h = lanes.settle(&"a");
        assert_eq!(h.released, Some(0));
        // "a" was released from worker 0, which then held no key: it binds there again.
        assert_eq!(h.run, Some((0, 3)));
        assert_eq!(lanes.keys_held(), [1, 1]);
        let h = lanes.settle(&"a");
        assert_eq!((h.released, h.run), (None, None));
        assert_eq!(lanes.release(&"a"), Release::Now { worker: 0 });
        assert_eq!(lanes.keys_held(), [0, 1]);
        assert_eq!(lanes.len(), 1);
    }

    #[test]
    fn supersede_takes_every_queued_item_and_leaves_the_running_one() {
        let lanes: KeyLanes<&str, u32> = KeyLanes::new(1);
        lanes.enqueue("a", 1, false).unwrap();
        lanes.enqueue("a", 2, false).unwrap();
        lanes.enqueue("a", 3, false).unwrap();
        let e = lanes.enqueue("a", 4, true).unwrap();
        assert_eq!(e.superseded, [2, 3]);
        assert!(e.run.is_none(), "1 still runs");
        assert_eq!(lanes.settle(&"a").run, Some((0, 4)));
        assert!(lanes.settle(&"a").run.is_none());
        // On an idle lane a supersede has nothing to take and runs at once.
        let e = lanes.enqueue("a", 5, true).unwrap();
        assert_eq!((e.run, e.superseded.len()), (Some((0, 5)), 0));
    }

    #[test]
    fn supersede_keeps_releases_and_merges_adjacent_ones() {
        let lanes: KeyLanes<&str, u32> = KeyLanes::new(1);
        lanes.enqueue("a", 1, false).unwrap();
        assert_eq!(lanes.release(&"a"), Release::Queued);
        lanes.enqueue("a", 2, false).unwrap();
        assert_eq!(lanes.release(&"a"), Release::Queued);
        let e = lanes.enqueue("a", 3, true).unwrap();
        assert_eq!(e.superseded, [2]);
        let h = lanes.settle(&"a");
        assert_eq!((h.released, h.run), (Some(0), Some((0, 3))));
        let h = lanes.settle(&"a");
        assert_eq!((h.released, h.run), (None, None));
        assert_eq!(lanes.len(), 1);
    }

    #[test]
    fn the_key_bound_is_exactly_max_keys() {
        let lanes: KeyLanes<u32, u32> = KeyLanes::new(2);
        for k in 0..MAX_KEYS as u32 {
            assert!(lanes.enqueue(k, k, false).is_ok(), "key {k}");
        }
        assert_eq!(lanes.len(), 65_536);
        let TooManyKeys(back) = lanes.enqueue(u32::MAX, 7, false).unwrap_err();
        assert_eq!(back, 7);
        assert_eq!(lanes.len(), 65_536);
        // A held key still takes items, and a released one makes room.
        assert!(lanes.enqueue(5, 8, false).unwrap().run.is_none());
        assert_eq!(lanes.keys_held(), [32_768, 32_768]);
        lanes.settle(&0);
        assert_eq!(lanes.release(&0), Release::Now { worker: 0 });
        assert!(lanes.enqueue(u32::MAX, 9, false).is_ok());
    }
}
