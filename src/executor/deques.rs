//! The queues the executor takes items and messages from, behind one small API.
//!
//! Normally these are crossbeam-deque's lock-free injector, worker deques and stealers. Under
//! `cfg(loom)` crossbeam cannot be modelled, so each queue becomes a `Mutex<VecDeque>` with the
//! same methods: the model then checks *our* sleep/wake and hand-off protocol around the queues,
//! and trusts crossbeam for the queues themselves.
//!
//! Every `is_empty` here is a read of the same memory a `push` writes (crossbeam's head/tail
//! indices, or the model's mutex), which is what the sleep protocol's fences pair up; see
//! `sleep.rs`.

#[cfg(not(loom))]
mod imp {
    use crossbeam_deque::{Steal, Stealer as CbStealer, Worker};

    /// Runs a crossbeam steal operation until it stops asking to be retried.
    fn settle<T>(mut attempt: impl FnMut() -> Steal<T>) -> Option<T> {
        loop {
            match attempt() {
                Steal::Success(value) => return Some(value),
                Steal::Empty => return None,
                Steal::Retry => {}
            }
        }
    }

    /// The global FIFO every thread may push to and every worker takes from.
    pub(crate) struct Injector<T>(crossbeam_deque::Injector<T>);

    impl<T> Injector<T> {
        pub(crate) fn new() -> Self {
            Self(crossbeam_deque::Injector::new())
        }

        pub(crate) fn push(&self, value: T) {
            self.0.push(value);
        }

        pub(crate) fn is_empty(&self) -> bool {
            self.0.is_empty()
        }

        /// Moves a batch into `local` and returns one of its items, so the next few takes are
        /// local pops instead of contended injector steals.
        pub(crate) fn steal_batch_and_pop(&self, local: &LocalQueue<T>) -> Option<T> {
            settle(|| self.0.steal_batch_and_pop(&local.0))
        }
    }

    /// A worker's own deque. FIFO: items are independent jobs, and taking the oldest first keeps
    /// dispatch order and starves nothing.
    pub(crate) struct LocalQueue<T>(Worker<T>);

    impl<T> LocalQueue<T> {
        pub(crate) fn new() -> Self {
            Self(Worker::new_fifo())
        }

        pub(crate) fn push(&self, value: T) {
            self.0.push(value);
        }

        pub(crate) fn pop(&self) -> Option<T> {
            self.0.pop()
        }

        pub(crate) fn is_empty(&self) -> bool {
            self.0.is_empty()
        }

        pub(crate) fn stealer(&self) -> Stealer<T> {
            Stealer(self.0.stealer())
        }
    }

    /// The handle other workers steal a worker's items through.
    pub(crate) struct Stealer<T>(CbStealer<T>);

    impl<T> Stealer<T> {
        pub(crate) fn steal(&self) -> Option<T> {
            settle(|| self.0.steal())
        }

        pub(crate) fn is_empty(&self) -> bool {
            self.0.is_empty()
        }
    }

    /// A worker's inbox: many producers, one consumer (its worker), FIFO.
    pub(crate) struct Inbox<T>(crossbeam_deque::Injector<T>);

    impl<T> Inbox<T> {
        pub(crate) fn new() -> Self {
            Self(crossbeam_deque::Injector::new())
        }

        pub(crate) fn push(&self, value: T) {
            self.0.push(value);
        }

        pub(crate) fn pop(&self) -> Option<T> {
            settle(|| self.0.steal())
        }

        pub(crate) fn is_empty(&self) -> bool {
            self.0.is_empty()
        }
    }
}

#[cfg(loom)]
mod imp {
    use crate::sync::{Arc, AtomicUsize, Mutex, Ordering};
    use std::collections::VecDeque;

    /// One model queue: the items behind a mutex, and their count in an atomic that `is_empty`
    /// reads without the lock, as crossbeam's `is_empty` reads its indices.
    ///
    /// `is_empty` is the sleep protocol's re-check, made after a worker announced sleep and
    /// before it parks. Loom 0.7 loses a pending unpark token when the thread is (even briefly)
    /// blocked on a loom mutex, because blocking overwrites the thread's state. A re-check that
    /// touched the mutex would make the model report lost wake-ups that std (whose park token is
    /// independent of mutexes) cannot have, so the re-check reads only the atomic.
    struct Model<T> {
        items: Mutex<VecDeque<T>>,
        len: AtomicUsize,
    }

    impl<T> Model<T> {
        fn new() -> Self {
            Self {
                items: Mutex::new(VecDeque::new()),
                len: AtomicUsize::new(0),
            }
        }

        fn push(&self, value: T) {
            let mut items = self.items.lock().unwrap_or_else(|e| e.into_inner());
            items.push_back(value);
            self.len.store(items.len(), Ordering::SeqCst);
        }

        fn pop(&self) -> Option<T> {
            let mut items = self.items.lock().unwrap_or_else(|e| e.into_inner());
            let value = items.pop_front();
            self.len.store(items.len(), Ordering::SeqCst);
            value
        }

        fn is_empty(&self) -> bool {
            self.len.load(Ordering::SeqCst) == 0
        }
    }

    pub(crate) struct Injector<T>(Model<T>);

    impl<T> Injector<T> {
        pub(crate) fn new() -> Self {
            Self(Model::new())
        }

        pub(crate) fn push(&self, value: T) {
            self.0.push(value);
        }

        pub(crate) fn is_empty(&self) -> bool {
            self.0.is_empty()
        }

        /// The model takes one item and moves no batch: fewer operations, same protocol.
        pub(crate) fn steal_batch_and_pop(&self, _local: &LocalQueue<T>) -> Option<T> {
            self.0.pop()
        }
    }

    pub(crate) struct LocalQueue<T>(Arc<Model<T>>);

    impl<T> LocalQueue<T> {
        pub(crate) fn new() -> Self {
            Self(Arc::new(Model::new()))
        }

        pub(crate) fn push(&self, value: T) {
            self.0.push(value);
        }

        pub(crate) fn pop(&self) -> Option<T> {
            self.0.pop()
        }

        pub(crate) fn is_empty(&self) -> bool {
            self.0.is_empty()
        }

        pub(crate) fn stealer(&self) -> Stealer<T> {
            Stealer(self.0.clone())
        }
    }

    pub(crate) struct Stealer<T>(Arc<Model<T>>);

    impl<T> Stealer<T> {
        pub(crate) fn steal(&self) -> Option<T> {
            self.0.pop()
        }

        pub(crate) fn is_empty(&self) -> bool {
            self.0.is_empty()
        }
    }

    pub(crate) struct Inbox<T>(Model<T>);

    impl<T> Inbox<T> {
        pub(crate) fn new() -> Self {
            Self(Model::new())
        }

        pub(crate) fn push(&self, value: T) {
            self.0.push(value);
        }

        pub(crate) fn pop(&self) -> Option<T> {
            self.0.pop()
        }

        pub(crate) fn is_empty(&self) -> bool {
            self.0.is_empty()
        }
    }
}

pub(crate) use imp::{Inbox, Injector, LocalQueue, Stealer};
