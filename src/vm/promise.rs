//! Promises homed in one VM.
//!
//! A promise lives in the VM that made it (its *home*); whoever completes the work sends the
//! outcome to the home's inbox as plain data, and the home settles the promise there and queues
//! the tasks that await it. No promise state is ever shared between threads.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use mlua::{AnyUserData, Lua, MetaMethod, UserData, UserDataMethods, Value};

use super::scheduler::TaskId;
use crate::value::Message;

/// Identifies a promise within its home VM.
pub(crate) type PromiseId = u64;

/// How a promise settled.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Outcome {
    /// The work answered this value.
    Resolved(Message),
    /// The work failed.
    Rejected(std::sync::Arc<super::JobFailure>),
    /// The promise was cancelled.
    Cancelled,
}

impl Outcome {
    /// The `status()` string of a promise settled this way.
    pub(crate) fn status(&self) -> &'static str {
        match self {
            Outcome::Resolved(_) => "resolved",
            Outcome::Rejected(_) => "rejected",
            Outcome::Cancelled => "cancelled",
        }
    }
}

enum State {
    Pending { waiters: Vec<TaskId> },
    Settled(Rc<Outcome>),
}

/// Stops the work behind a promise when the promise is cancelled.
pub(crate) type Canceller = Box<dyn FnOnce()>;

/// One promise's state, shared by its handle and the home's pending table.
pub(crate) struct PromiseCell {
    id: PromiseId,
    state: RefCell<State>,
    canceller: RefCell<Option<Canceller>>,
    /// What the promise stands for, for error messages: `jobs.dispatch promise`.
    pub(crate) what: &'static str,
}

impl PromiseCell {
    /// The promise's id in its home.
    pub(crate) fn id(&self) -> PromiseId {
        self.id
    }

    /// `"pending" | "resolved" | "rejected" | "cancelled"`.
    pub(crate) fn status(&self) -> &'static str {
        match &*self.state.borrow() {
            State::Pending { .. } => "pending",
            State::Settled(outcome) => outcome.status(),
        }
    }

    /// The outcome, once settled.
    pub(crate) fn outcome(&self) -> Option<Rc<Outcome>> {
        match &*self.state.borrow() {
            State::Pending { .. } => None,
            State::Settled(outcome) => Some(outcome.clone()),
        }
    }

    /// Adds a task to wake when the promise settles.
    pub(crate) fn add_waiter(&self, task: TaskId) {
        if let State::Pending { waiters } = &mut *self.state.borrow_mut() {
            waiters.push(task);
        }
    }

    /// Sets the function that stops the work when the promise is cancelled.
    pub(crate) fn set_canceller(&self, canceller: Canceller) {
        *self.canceller.borrow_mut() = Some(canceller);
    }

    /// Settles the promise; answers the waiters to wake, or `None` when it had settled already.
    fn settle(&self, outcome: Outcome) -> Option<(Vec<TaskId>, Rc<Outcome>)> {
        let mut state = self.state.borrow_mut();
        match &mut *state {
            State::Settled(_) => None,
            State::Pending { waiters } => {
                let waiters = std::mem::take(waiters);
                let outcome = Rc::new(outcome);
                *state = State::Settled(outcome.clone());
                Some((waiters, outcome))
            }
        }
    }
}

/// The promises of one VM that are still pending.
#[derive(Default)]
pub(crate) struct Promises {
    next_id: PromiseId,
    pending: HashMap<PromiseId, Rc<PromiseCell>>,
}

impl Promises {
    /// Makes a pending promise homed here.
    pub(crate) fn make(&mut self, what: &'static str) -> Rc<PromiseCell> {
        self.next_id += 1;
        let cell = Rc::new(PromiseCell {
            id: self.next_id,
            state: RefCell::new(State::Pending {
                waiters: Vec::new(),
            }),
            canceller: RefCell::new(None),
            what,
        });
        self.pending.insert(cell.id, cell.clone());
        cell
    }

    /// Settles promise `id`; answers the tasks to wake and the shared outcome. An unknown or
    /// already settled promise (a cancelled one whose work answered late) answers `None`.
    pub(crate) fn settle(
        &mut self,
        id: PromiseId,
        outcome: Outcome,
    ) -> Option<(Vec<TaskId>, Rc<Outcome>)> {
        let cell = self.pending.remove(&id)?;
        cell.settle(outcome)
    }

    /// Cancels a pending promise: it settles as cancelled and its work is told to stop.
    /// Answers the tasks to wake, or `None` if it had settled already.
    pub(crate) fn cancel(&mut self, cell: &PromiseCell) -> Option<(Vec<TaskId>, Rc<Outcome>)> {
        self.pending.remove(&cell.id)?;
        let woken = cell.settle(Outcome::Cancelled);
        if let Some(canceller) = cell.canceller.borrow_mut().take() {
            canceller();
        }
        woken
    }

    /// Number of promises still pending.
    pub(crate) fn pending(&self) -> usize {
        self.pending.len()
    }
}

/// The Luau `PromiseHandle`: `await`, `cancel`, `status`.
///
/// `await` is written in Luau (it yields), so `__index` hands out the prelude's function for it.
#[derive(Clone)]
pub(crate) struct PromiseHandle(pub(crate) Rc<PromiseCell>);

impl UserData for PromiseHandle {
    fn add_methods<M: UserDataMethods<Self>>(methods: &mut M) {
        methods.add_method("status", |_, this, ()| Ok(this.0.status()));
        methods.add_method("cancel", |lua, this, ()| {
            super::core::cancel_promise(lua, &this.0)
        });
        methods.add_meta_method(MetaMethod::Index, |lua, _, key: Value| {
            match key.as_string().map(|s| s.as_bytes().to_vec()) {
                Some(k) if k == b"await" => lua.named_registry_value::<Value>(AWAIT_KEY),
                _ => Ok(Value::Nil),
            }
        });
        methods.add_meta_method(MetaMethod::ToString, |_, this, ()| {
            Ok(format!(
                "PromiseHandle({}, {})",
                this.0.what,
                this.0.status()
            ))
        });
    }
}

/// Registry key of the prelude's `task.await`, which `PromiseHandle.await` is.
pub(crate) const AWAIT_KEY: &str = "skein.await";

/// The promise behind a Luau value, if it is a `PromiseHandle`.
pub(crate) fn promise_of(value: &Value) -> Option<Rc<PromiseCell>> {
    let ud: &AnyUserData = value.as_userdata()?;
    ud.borrow::<PromiseHandle>().ok().map(|h| h.0.clone())
}

/// Makes the Luau handle of a promise.
pub(crate) fn handle(lua: &Lua, cell: Rc<PromiseCell>) -> mlua::Result<AnyUserData> {
    lua.create_userdata(PromiseHandle(cell))
}
