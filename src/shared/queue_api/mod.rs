//! `jobs.shared.queue` and the queue handle's methods: the Luau side of shared queues.
//!
//! # A pop that is ready now
//!
//! `q:pop()` reaches the Luau `pop` through the handle's `__index` table (no Rust call to find
//! it), and `pop` calls one primitive, a raw C function (`raw.rs`), which takes the front value
//! if there is one: no promise, no `coroutine.isyieldable`, no app-data lookups and no `mlua`
//! callback on that path. Only an empty queue goes on to park.
//!
//! # Parking a pop
//!
//! A pop that finds its queue empty must suspend its *task*, never its thread. It makes a promise
//! homed in the calling VM, registers a waiter on the queue, and awaits the promise with the
//! prelude's `task.await` (the yield happens in Luau: see `pop.luau`). The waiter's callback
//! runs on whichever thread pushes: it wraps the delivery in a [`Parcel`] and hands it to the
//! VM's [`Courier`], which posts it to the home's inbox (the domain mailbox for the engine VM, the
//! worker's inbox for a worker VM). There, [`receive_parcel`] keeps the delivery beside the
//! parked pop and settles the promise, which wakes the task; the task then takes the delivery.
//!
//! A value in a parcel belongs to nobody until someone answers for it, so every path that cannot
//! hand it to its popper gives it back to the queue (`SharedQueue::give_back`): a parcel dropped
//! unopened (its home is gone or is another VM now), a popper whose task died before the value
//! arrived, or one that died after it arrived but before it resumed ([`sweep_parked_pops`]).

mod raw;

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::{Rc, Weak};
use std::sync::atomic::{AtomicU64, Ordering};

use mlua::{Function, Lua, Table, Value};

use super::queue::{Delivery, PopNow, SharedQueue, WaiterId, MAX_QUEUE_CAPACITY};
use super::queue_error::PopError;
use super::StoreCore;
use crate::sync::Arc;
use crate::value::path::number_text;
use crate::value::{Message, MessageArg};
use crate::vm::{a_type, for_each_option, promise_handle, promise_of};
use crate::vm::{await_function, Embedded, Outcome, PromiseCell, PromiseId, TaskId, VmCore};

/// How the parked pops of one VM reach it: posts a parcel to the VM's home inbox. A parcel it
/// cannot post is simply dropped, which gives its value back. Set by the `jobs` layer as app data.
pub(crate) type Courier = std::sync::Arc<dyn Fn(Parcel) + Send + Sync>;

/// A delivery on its way to the VM where its pop is parked.
pub(crate) struct Parcel {
    /// The [`Poppers`] the pop is parked in: a VM built later in the same place (after a
    /// worker replaced a VM) has another token and refuses the parcel.
    vm: u64,
    promise: PromiseId,
    queue: Arc<SharedQueue>,
    delivery: Option<Delivery>,
}

impl Drop for Parcel {
    fn drop(&mut self) {
        if let Some(Delivery::Value(value)) = self.delivery.take() {
            self.queue.give_back(value);
        }
    }
}

/// One pop parked in this VM.
struct ParkedPop {
    queue: Arc<SharedQueue>,
    waiter: WaiterId,
    task: TaskId,
    /// The delivery, once its parcel arrived; the task takes it when it resumes.
    arrived: Option<Delivery>,
}

/// The parked pops of one VM, kept in its app data.
struct Poppers {
    token: u64,
    parked: RefCell<HashMap<PromiseId, ParkedPop>>,
}

/// Tells the [`Poppers`] of one VM from those of every other.
static NEXT_TOKEN: AtomicU64 = AtomicU64::new(1);

impl Drop for Poppers {
    /// The VM is going away: its waiters leave their queues, and values that reached it unread
    /// go back.
    fn drop(&mut self) {
        for (_, pop) in self.parked.get_mut().drain() {
            give_up(pop);
        }
    }
}

/// A parked pop whose popper is gone: withdraw its waiter, or give its value back. A waiter that
/// could not be withdrawn has a parcel on its way, which gives the value back when it is refused.
fn give_up(pop: ParkedPop) {
    match pop.arrived {
        Some(Delivery::Value(value)) => pop.queue.give_back(value),
        Some(_) => {}
        None => {
            pop.queue.cancel_wait(pop.waiter);
        }
    }
}

fn poppers(lua: &Lua) -> mlua::Result<Rc<Poppers>> {
    lua.app_data_ref::<Rc<Poppers>>()
        .map(|p| p.clone())
        .ok_or_else(|| mlua::Error::runtime("jobs.shared.queue: this VM has no queue state"))
}

/// Takes a parcel into the VM it was sent to (on that VM's thread): the pop it belongs to gets
/// the delivery and its task is woken. A parcel for a pop that is gone gives its value back.
pub(crate) fn receive_parcel(lua: &Lua, mut parcel: Parcel) {
    let (Ok(poppers), Ok(core)) = (poppers(lua), VmCore::of(lua)) else {
        return; // dropped: gives back
    };
    if poppers.token != parcel.vm {
        return;
    }
    let mut parked = poppers.parked.borrow_mut();
    let Some(pop) = parked.get_mut(&parcel.promise) else {
        return;
    };
    if !core.task_alive(pop.task) {
        let pop = parked.remove(&parcel.promise);
        drop(parked);
        drop(pop);
        core.settle_if_pending(lua, parcel.promise, Outcome::Cancelled);
        return; // dropped: gives back
    }
    pop.arrived = parcel.delivery.take();
    drop(parked);
    core.settle_if_pending(lua, parcel.promise, Outcome::Resolved(Message::Nil));
}

/// The name of the queue the pop parked on promise `promise` of this VM waits on, if it is a
/// parked pop: what a stall report names.
pub(crate) fn parked_pop_queue(lua: &Lua, promise: PromiseId) -> Option<String> {
    let poppers = poppers(lua).ok()?;
    let parked = poppers.parked.borrow();
    parked.get(&promise).map(|pop| pop.queue.display_name())
}

/// Gives up the parked pops of this VM whose tasks have ended (cancelled, timed out, their job
/// cancelled) so their waiters leave the queues and their promises stop counting as pending.
/// Cheap when nothing is parked.
pub(crate) fn sweep_parked_pops(lua: &Lua) {
    let (Ok(poppers), Ok(core)) = (poppers(lua), VmCore::of(lua)) else {
        return;
    };
    let dead: Vec<(PromiseId, ParkedPop)> = {
        let mut parked = poppers.parked.borrow_mut();
        if parked.is_empty() {
            return;
        }
        let ids: Vec<PromiseId> = parked
            .iter()
            .filter(|(_, pop)| !core.task_alive(pop.task))
            .map(|(id, _)| *id)
            .collect();
        let mut dead = Vec::with_capacity(ids.len());
        for id in ids {
            let pop = &parked[&id];
            // A waiter already taken by a push has its parcel on the way: leave the pop for
            // `receive_parcel`, which gives the value back when it finds the task gone.
            if pop.arrived.is_some() || pop.queue.cancel_wait(pop.waiter) {
                if let Some(pop) = parked.remove(&id) {
                    dead.push((id, pop));
                }
            }
        }
        dead
    };
    for (id, mut pop) in dead {
        if let Some(Delivery::Value(value)) = pop.arrived.take() {
            pop.queue.give_back(value);
        }
        core.settle_if_pending(lua, id, Outcome::Cancelled);
    }
}

/// The Luau handle of one queue.
struct QueueHandle(Arc<SharedQueue>);

impl QueueHandle {
    fn refuse(&self, method: &str, e: PopError) -> mlua::Error {
        match e {
            PopError::Ended(reason) => mlua::Error::runtime(format!(
                "SharedQueue:{method}: queue '{}' has ended: {reason}",
                self.0.display_name()
            )),
            PopError::Closed => mlua::Error::runtime(format!(
                "SharedQueue:{method}: queue '{}' is closed",
                self.0.display_name()
            )),
        }
    }

    /// Refuses every use once the store ended.
    fn check_open(&self, method: &str) -> mlua::Result<()> {
        match self.0.ended() {
            Some(reason) => Err(self.refuse(method, PopError::Ended(reason))),
            None => Ok(()),
        }
    }
}

/// The methods every queue handle of a VM shares: the Luau `pop` and `popMany` (which may wait;
/// a Rust callback cannot yield), the raw `push` and the Rust `tryPop`, `len` and `close`. Each
/// takes `self` as an argument of its own, so `q.push(1)` is refused naming the method and its
/// `self`.
fn methods(lua: &Lua, pop: Function, pop_many: Function) -> mlua::Result<Table> {
    let methods = lua.create_table()?;
    methods.raw_set("pop", pop)?;
    methods.raw_set("popMany", pop_many)?;
    let slow_push = lua.create_function(|_, (this, value): (QueueSelf, MessageArg)| {
        let this = this.handle("push")?;
        let message = value
            .0
            .map_err(|e| mlua::Error::runtime(format!("SharedQueue:push: {e}")))?;
        this.0
            .push(message)
            .map_err(|e| mlua::Error::runtime(e.to_string()))
    })?;
    methods.raw_set("push", raw::push_function(lua, slow_push)?)?;
    methods.raw_set(
        "tryPop",
        lua.create_function(|_, this: QueueSelf| {
            let this = this.handle("tryPop")?;
            match this.0.try_pop() {
                Ok(value) => Ok(value.unwrap_or(Message::Nil)),
                Err(PopError::Closed) => Ok(Message::Nil),
                Err(e) => Err(this.refuse("tryPop", e)),
            }
        })?,
    )?;
    methods.raw_set(
        "len",
        lua.create_function(|_, this: QueueSelf| {
            let this = this.handle("len")?;
            this.check_open("len")?;
            Ok(this.0.len() as f64)
        })?,
    )?;
    methods.raw_set(
        "close",
        lua.create_function(|_, this: QueueSelf| {
            let this = this.handle("close")?;
            this.0.close().map_err(|e| this.refuse("close", e))
        })?,
    )?;
    Ok(methods)
}

/// A new handle on `queue`: its own metatable, whose locked, read-only `__index` table holds
/// the shared methods and the queue's `name` and `capacity`, so `q:pop()` and `q.name` are one
/// table read each (Luau's method call on a userdata whose `__index` is a table).
fn new_handle(lua: &Lua, queue: Arc<SharedQueue>, methods: &Table) -> mlua::Result<Value> {
    let index = lua.create_table_with_capacity(0, 8)?;
    for pair in methods.pairs::<Value, Value>() {
        let (name, method) = pair?;
        index.raw_set(name, method)?;
    }
    index.raw_set("name", lua.create_string(queue.name())?)?;
    index.raw_set("capacity", queue.capacity() as f64)?;
    index.set_readonly(true);
    let meta = lua.create_table_with_capacity(0, 4)?;
    meta.raw_set("__index", index)?;
    meta.raw_set("__type", "SharedQueue")?;
    meta.raw_set(
        "__tostring",
        lua.named_registry_value::<Function>(TOSTRING_KEY)?,
    )?;
    meta.raw_set("__metatable", false)?;
    meta.set_readonly(true);
    raw::new_handle(lua, QueueHandle(queue), meta)
}

/// `tostring(q)`.
fn describe(lua: &Lua) -> mlua::Result<Function> {
    lua.create_function(|_, this: QueueSelf| {
        let this = this.handle("tostring")?;
        Ok(format!(
            "SharedQueue('{}', capacity {})",
            this.0.display_name(),
            this.0.capacity()
        ))
    })
}

/// Registry keys of the handles' `__tostring` and the per-VM handle cache.
const TOSTRING_KEY: &str = "skein.queue.tostring";
const HANDLES_KEY: &str = "skein.queue.handles";

/// The waiting half of `pop` and `popMany`, in Luau because it yields. `P.pop` answers a value
/// at once, or a promise to await; `P.finish` then takes what arrived.
static POP: Embedded = Embedded::new("=skein queue", include_str!("pop.luau"));

/// What `P.pop` answers: a value now, or a promise to await.
enum Popped {
    Now(Message),
    Parked(Value),
}

impl Popped {
    /// `(value, promise)` as `pop.luau` receives them. The value stays a `Message` until
    /// mlua pushes it, so a top-level 64-bit integer arrives exact.
    fn into_lua(self) -> (Message, Value) {
        match self {
            Popped::Now(value) => (value, Value::Nil),
            Popped::Parked(promise) => (Message::Nil, promise),
        }
    }
}

/// The ready-now half of `pop` and `popMany`: takes from the queue if `take` finds something
/// (or the queue closed: `on_closed`), answering `(value, false)`; `(nil, true)` when the queue
/// is empty and the pop must park (`pop_or_park`). Makes no promise and reads no app data.
fn take_now(
    lua: &Lua,
    poppers: &Weak<Poppers>,
    this: &QueueHandle,
    method: &str,
    take: impl FnOnce(&SharedQueue) -> Result<Option<Message>, PopError>,
    on_closed: Message,
) -> mlua::Result<(Message, bool)> {
    // A value a dead pop of this VM holds is older than anything queued: give it back first.
    if poppers
        .upgrade()
        .is_some_and(|p| !p.parked.borrow().is_empty())
    {
        sweep_parked_pops(lua);
    }
    match take(&this.0) {
        Ok(Some(value)) => Ok((value, false)),
        Ok(None) => Ok((Message::Nil, true)),
        Err(PopError::Closed) => Ok((on_closed, false)),
        Err(e) => Err(this.refuse(method, e)),
    }
}

/// The `self` of a queue method or primitive: a queue handle, read in place off the Luau stack
/// (its userdata stays in the argument's slot, holding the queue, for the whole callback), or
/// anything else, which is refused naming the method.
enum QueueSelf {
    Held(*const QueueHandle),
    Other(Value),
}

impl QueueSelf {
    fn handle(&self, method: &str) -> mlua::Result<&QueueHandle> {
        match self {
            // SAFETY: see `QueueSelf`: the slot holds the userdata until the callback returns,
            // and a `QueueSelf` does not outlive the callback.
            QueueSelf::Held(h) => Ok(unsafe { &**h }),
            QueueSelf::Other(other) => Err(crate::vm::not_self(
                &format!("SharedQueue:{method}"),
                "queue",
                other,
            )),
        }
    }
}

impl mlua::FromLua for QueueSelf {
    fn from_lua(value: Value, _: &Lua) -> mlua::Result<Self> {
        // Only reached for a missing argument: a handle always comes off the stack.
        Ok(QueueSelf::Other(value))
    }

    unsafe fn from_stack(idx: std::ffi::c_int, lua: &mlua::state::RawLua) -> mlua::Result<Self> {
        // SAFETY: mlua hands a valid index, whose slot lives for the callback.
        let held = unsafe { raw::held(lua.state(), idx) };
        if held.is_null() {
            // SAFETY: as above.
            return Ok(QueueSelf::Other(unsafe { Value::from_stack(idx, lua)? }));
        }
        Ok(QueueSelf::Held(held))
    }
}

/// Takes from the queue now, or parks the calling task's pop. `take` reads the queue without
/// waiting and answers `None` when it would have to wait.
fn pop_or_park(
    lua: &Lua,
    this: &QueueSelf,
    yieldable: bool,
    method: &str,
    take: impl FnOnce(&SharedQueue) -> Result<Option<Message>, PopError>,
    on_closed: Message,
    wrap: impl FnOnce(Message) -> Message,
) -> mlua::Result<Popped> {
    let queue = this.handle(method)?.0.clone();
    let refuse = |e| QueueHandle(queue.clone()).refuse(method, e);
    sweep_parked_pops(lua);
    match take(&queue) {
        Ok(Some(value)) => return Ok(Popped::Now(value)),
        Ok(None) => {}
        Err(PopError::Closed) => return Ok(Popped::Now(on_closed)),
        Err(e) => return Err(refuse(e)),
    }
    if !yieldable {
        return Err(mlua::Error::runtime(format!(
            "SharedQueue:{method} can't wait here: queue '{}' is empty; call it from a task, \
             not from a metamethod or a module's top level, or use tryPop",
            queue.display_name()
        )));
    }
    let core = VmCore::of(lua)?;
    let poppers = poppers(lua)?;
    let courier = lua
        .app_data_ref::<Courier>()
        .map(|c| c.clone())
        .ok_or_else(|| mlua::Error::runtime("jobs.shared.queue: this VM has no inbox"))?;
    let cell: Rc<PromiseCell> = core.promises.borrow_mut().make("SharedQueue:pop");
    let (token, promise) = (poppers.token, cell.id());
    let to = queue.clone();
    let deliver = Box::new(move |delivery: Delivery| {
        courier(Parcel {
            vm: token,
            promise,
            queue: to,
            delivery: Some(delivery),
        });
    });
    let waiting = queue.pop_or_wait(deliver);
    let popped = match waiting {
        Ok(PopNow::Waiting(waiter)) => {
            let task = core.current_task(lua);
            poppers.parked.borrow_mut().insert(
                promise,
                ParkedPop {
                    queue,
                    waiter,
                    task,
                    arrived: None,
                },
            );
            return Ok(Popped::Parked(promise_handle(lua, cell)?));
        }
        // A push came between the look and the wait: no need to park after all.
        Ok(PopNow::Value(value)) => Ok(Popped::Now(wrap(value))),
        Ok(PopNow::Closed) => Ok(Popped::Now(on_closed)),
        Err(e) => Err(refuse(e)),
    };
    // Out of the pending table, never awaited.
    core.settle_if_pending(lua, promise, Outcome::Cancelled);
    popped
}

/// Takes the delivery that woke a parked pop.
fn take_arrival(
    lua: &Lua,
    promise: &Value,
    method: &str,
) -> mlua::Result<(Arc<SharedQueue>, Delivery)> {
    let id = promise_of(lua, promise)
        .map(|handle| handle.id())
        .ok_or_else(|| mlua::Error::runtime(format!("SharedQueue:{method}: no parked pop")))?;
    let pop = poppers(lua)?.parked.borrow_mut().remove(&id);
    match pop {
        Some(ParkedPop {
            queue,
            arrived: Some(delivery),
            ..
        }) => Ok((queue, delivery)),
        Some(pop) => {
            give_up(pop);
            Err(mlua::Error::runtime(format!(
                "SharedQueue:{method}: woken with nothing delivered"
            )))
        }
        None => Err(mlua::Error::runtime(format!(
            "SharedQueue:{method}: no parked pop"
        ))),
    }
}

fn ended(queue: &SharedQueue, method: &str, reason: &str) -> mlua::Error {
    mlua::Error::runtime(format!(
        "SharedQueue:{method}: queue '{}' has ended: {reason}",
        queue.display_name()
    ))
}

/// Reads `n` of `popMany(n)`: a whole number from 1 to the capacity.
fn read_count(queue: &SharedQueue, n: &Value) -> mlua::Result<usize> {
    let max = queue.capacity();
    let n = match n {
        Value::Integer(i) => *i as f64,
        Value::Number(x) => *x,
        other => {
            return Err(mlua::Error::runtime(format!(
                "SharedQueue:popMany: n must be a number from 1 to {max}, got {}",
                a_type(other)
            )))
        }
    };
    if n.fract() != 0.0 || n < 1.0 || n > max as f64 {
        return Err(mlua::Error::runtime(format!(
            "SharedQueue:popMany: n must be a whole number from 1 to {max}, got {}",
            number_text(n)
        )));
    }
    Ok(n as usize)
}

/// The primitives `pop.luau` is built on. `pop` and `popMany` answer what is ready now;
/// `park` and `parkMany` take what came meanwhile or park the pop; `finish` and `finishMany`
/// take what woke it. The ready-now pair holds the VM's [`Poppers`] weakly: the app data owns
/// them, so they are dropped (giving back what their pops held) with the app data, never from a
/// finalizer of the VM's functions.
fn primitives(lua: &Lua, poppers: Weak<Poppers>) -> mlua::Result<Table> {
    let p = lua.create_table()?;
    let mine = poppers.clone();
    let slow_pop = lua.create_function(move |lua, this: QueueSelf| {
        let this = this.handle("pop")?;
        take_now(lua, &mine, this, "pop", SharedQueue::try_pop, Message::Nil)
    })?;
    p.raw_set("pop", raw::pop_function(lua, poppers.clone(), slow_pop)?)?;
    p.raw_set(
        "popMany",
        lua.create_function(move |lua, (this, n): (QueueSelf, Value)| {
            let this = this.handle("popMany")?;
            let n = read_count(&this.0, &n)?;
            take_now(
                lua,
                &poppers,
                this,
                "popMany",
                |queue| {
                    let values = queue.try_pop_many(n)?;
                    Ok((!values.is_empty()).then(|| Message::List(values)))
                },
                Message::List(Vec::new()),
            )
        })?,
    )?;
    p.raw_set(
        "park",
        lua.create_function(|lua, (this, yieldable): (QueueSelf, bool)| {
            pop_or_park(
                lua,
                &this,
                yieldable,
                "pop",
                SharedQueue::try_pop,
                Message::Nil,
                |value| value,
            )
            .map(Popped::into_lua)
        })?,
    )?;
    p.raw_set(
        "finish",
        lua.create_function(|lua, (_this, promise): (QueueSelf, Value)| {
            let (queue, delivery) = take_arrival(lua, &promise, "pop")?;
            match delivery {
                Delivery::Value(value) => {
                    queue.delivered();
                    Ok(value)
                }
                Delivery::Closed => Ok(Message::Nil),
                Delivery::Ended(reason) => Err(ended(&queue, "pop", &reason)),
            }
        })?,
    )?;
    p.raw_set(
        "parkMany",
        lua.create_function(|lua, (this, n, yieldable): (QueueSelf, Value, bool)| {
            let n = read_count(&this.handle("popMany")?.0, &n)?;
            pop_or_park(
                lua,
                &this,
                yieldable,
                "popMany",
                |queue| {
                    let values = queue.try_pop_many(n)?;
                    Ok((!values.is_empty()).then(|| Message::List(values)))
                },
                Message::List(Vec::new()),
                |value| Message::List(vec![value]),
            )
            .map(Popped::into_lua)
        })?,
    )?;
    p.raw_set(
        "finishMany",
        lua.create_function(|lua, (_this, promise, n): (QueueSelf, Value, Value)| {
            let (queue, delivery) = take_arrival(lua, &promise, "popMany")?;
            let n = read_count(&queue, &n)?;
            match delivery {
                Delivery::Value(first) => {
                    queue.delivered();
                    let mut values = vec![first];
                    // The rest, if more came meanwhile: it never waits for them.
                    if n > 1 {
                        if let Ok(more) = queue.try_pop_many(n - 1) {
                            values.extend(more);
                        }
                    }
                    Ok(Message::List(values))
                }
                Delivery::Closed => Ok(Message::List(Vec::new())),
                Delivery::Ended(reason) => Err(ended(&queue, "popMany", &reason)),
            }
        })?,
    )?;
    Ok(p)
}

/// Reads `opts` (nil, or a table whose one option is `capacity`: nil, or a whole number).
fn read_capacity(opts: &Value) -> mlua::Result<Option<usize>> {
    const WHAT: &str = "jobs.shared.queue";
    if !matches!(opts, Value::Nil | Value::Table(_)) {
        return Err(mlua::Error::runtime(format!(
            "{WHAT}: opts must be a table, got {}",
            a_type(opts)
        )));
    }
    let mut capacity = Value::Nil;
    for_each_option(opts, WHAT, "capacity", |key, value| match key {
        "capacity" => {
            capacity = value;
            Ok(true)
        }
        _ => Ok(false),
    })
    .map_err(mlua::Error::runtime)?;
    let n = match capacity {
        Value::Nil => return Ok(None),
        Value::Integer(i) => i as f64,
        Value::Number(x) => x,
        other => {
            return Err(mlua::Error::runtime(format!(
                "{WHAT}: opts.capacity must be a number, got {}",
                a_type(&other)
            )))
        }
    };
    if n.fract() != 0.0 || !n.is_finite() {
        return Err(mlua::Error::runtime(format!(
            "{WHAT}: opts.capacity must be a whole number, got {}",
            number_text(n)
        )));
    }
    if !(1.0..=MAX_QUEUE_CAPACITY as f64).contains(&n) {
        return Err(mlua::Error::runtime(format!(
            "{WHAT}: capacity must be 1 to {MAX_QUEUE_CAPACITY}, got {}",
            number_text(n)
        )));
    }
    Ok(Some(n as usize))
}

/// Adds the queue functions to `jobs.shared`.
pub(crate) fn install(lua: &Lua, shared: &Table, store: &Arc<StoreCore>) -> mlua::Result<()> {
    let poppers = Rc::new(Poppers {
        token: NEXT_TOKEN.fetch_add(1, Ordering::Relaxed),
        parked: RefCell::new(HashMap::new()),
    });
    lua.set_app_data(poppers.clone());
    let (pop, pop_many): (Function, Function) = POP.load(lua)?.call((
        primitives(lua, Rc::downgrade(&poppers))?,
        await_function(lua)?,
    ))?;
    raw::install(lua)?;
    let methods = methods(lua, pop, pop_many)?;
    lua.set_named_registry_value(TOSTRING_KEY, describe(lua)?)?;
    lua.set_named_registry_value(HANDLES_KEY, lua.create_table()?)?;

    let store = store.clone();
    shared.raw_set(
        "queue",
        lua.create_function(move |lua, (name, opts): (Value, Value)| {
            const WHAT: &str = "jobs.shared.queue";
            let Value::String(name) = name else {
                return Err(mlua::Error::runtime(format!(
                    "{WHAT}: name must be a string, got {}",
                    a_type(&name)
                )));
            };
            let capacity = read_capacity(&opts)?;
            let bytes = name.as_bytes();
            store
                .check_name(&bytes, WHAT)
                .map_err(mlua::Error::runtime)?;
            let queue =
                store
                    .queues
                    .get_or_make(&bytes, capacity, || store.reserve_name(WHAT), WHAT)?;
            let handles: Table = lua.named_registry_value(HANDLES_KEY)?;
            let known = handles.raw_get::<Value>(&name)?;
            if raw::queue_in(lua, &known).is_some_and(|known| Arc::ptr_eq(&known, &queue)) {
                return Ok(known);
            }
            let made = new_handle(lua, queue, &methods)?;
            handles.raw_set(name, &made)?;
            Ok(made)
        })?,
    )?;
    Ok(())
}
