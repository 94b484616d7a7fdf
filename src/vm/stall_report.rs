//! What the parked tasks of one VM wait on, and where each stands in its script: the matter of
//! a stall report. The verdict that a principal is stalled is [`Liveness`]'s; this only reads
//! the VM it is asked about, on its own thread.

use std::ffi::CStr;
use std::sync::Arc;

use mlua::{Lua, Thread};

use super::liveness::Liveness;
use super::luau_promise::PromiseId;
use super::scheduler::ParkedOn;
use super::{Vm, VmCore};

/// How many frames of a parked task's stack are looked at for the script line it stands on.
const MAX_LEVELS: i32 = 64;

/// One parked task: where it stands and what it waits on.
#[derive(Debug)]
pub(crate) struct TaskWait {
    /// `path:line` of the innermost frame of a script or module (not the prelude), if any.
    pub(crate) at: Option<String>,
    pub(crate) on: WaitOn,
}

/// What a parked task waits on.
#[derive(Debug)]
pub(crate) enum WaitOn {
    /// A promise of this VM, by its id and what it stands for (`jobs.dispatch`,
    /// `SharedQueue:pop`...); `None` when no pending promise lists the task.
    Promise(Option<(PromiseId, &'static str)>),
    /// `task.waitFrames`.
    Frames,
    /// `task.wait`, or a `task.delay` not started yet (`delay`).
    Timer { delay: bool },
    /// `events.wait` or `engine.wait` (its call's name) of the event `name`.
    Signal { call: &'static str, name: Arc<str> },
}

/// The waits of one VM: its parked tasks, and its pending promises that no task awaits.
#[derive(Debug, Default)]
pub(crate) struct VmWaits {
    pub(crate) tasks: Vec<TaskWait>,
    pub(crate) unawaited: Vec<(PromiseId, &'static str)>,
}

/// Makes the VM of `lua` report its progress to `live` (see [`Liveness`]).
pub(crate) fn watch(lua: &Lua, live: Arc<Liveness>) -> mlua::Result<()> {
    VmCore::of(lua)?.sched.borrow_mut().watch(live);
    Ok(())
}

impl Vm {
    /// What this VM's parked tasks wait on, oldest task first.
    pub(crate) fn waits(&self) -> VmWaits {
        let parked = self.core.sched.borrow().parked();
        let promises = self.core.promises.borrow();
        let mut awaited = Vec::new();
        let tasks = parked
            .into_iter()
            .map(|(id, thread, on)| {
                let on = match on {
                    ParkedOn::Promise => {
                        let cell = promises
                            .pending_cells()
                            .find(|cell| cell.waiters().contains(&id));
                        if let Some(cell) = cell {
                            awaited.push(cell.id());
                        }
                        WaitOn::Promise(cell.map(|c| (c.id(), c.what)))
                    }
                    ParkedOn::Frames => WaitOn::Frames,
                    ParkedOn::Timer { delay } => WaitOn::Timer { delay },
                    ParkedOn::Signal { kind, name } => WaitOn::Signal {
                        call: kind.call(),
                        name,
                    },
                };
                TaskWait {
                    at: script_line(&thread),
                    on,
                }
            })
            .collect();
        let unawaited = promises
            .pending_cells()
            .filter(|cell| !awaited.contains(&cell.id()))
            .map(|cell| (cell.id(), cell.what))
            .collect();
        VmWaits { tasks, unawaited }
    }
}

/// `path:line` of the innermost frame of `thread` that belongs to a script or module (its chunk
/// name starts with `@`); for a coroutine that has not started, where its function is defined.
fn script_line(thread: &Thread) -> Option<String> {
    let state = thread.state();
    for level in 0..MAX_LEVELS {
        // SAFETY: a plain C struct of pointers and integers, for which all zeroes is valid.
        let mut ar = unsafe { std::mem::zeroed::<mlua::ffi::lua_Debug>() };
        // SAFETY: `thread` is a suspended coroutine of this VM, on this thread; `lua_getinfo`
        // with "sl" reads one frame's debug info into `ar` (on this stack) and pushes nothing.
        if unsafe { mlua::ffi::lua_getinfo(state, level, c"sl".as_ptr(), &mut ar) } == 0 {
            break;
        }
        if let Some(at) = frame_line(&ar, ar.currentline) {
            return Some(at);
        }
    }
    // Not started (a `task.delay` still waiting): its function sits on top of its stack.
    // SAFETY: a plain C struct of pointers and integers, for which all zeroes is valid.
    let mut ar = unsafe { std::mem::zeroed::<mlua::ffi::lua_Debug>() };
    // SAFETY: a negative level reads the function at that stack index, if it is one (checked
    // by `lua_getinfo` against the stack's bounds); nothing is pushed.
    if unsafe { mlua::ffi::lua_getinfo(state, -1, c"sl".as_ptr(), &mut ar) } == 0 {
        return None;
    }
    frame_line(&ar, ar.linedefined)
}

/// `path:line` of a frame whose chunk is a script or module.
fn frame_line(ar: &mlua::ffi::lua_Debug, line: i32) -> Option<String> {
    if ar.source.is_null() || line <= 0 {
        return None;
    }
    // SAFETY: a non-null `source` is the NUL-terminated chunk name of the frame's prototype,
    // which the suspended coroutine keeps alive.
    let source = unsafe { CStr::from_ptr(ar.source) }.to_bytes();
    let path = source.strip_prefix(b"@")?;
    Some(format!("{}:{line}", String::from_utf8_lossy(path)))
}
