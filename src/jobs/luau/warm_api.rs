//! `jobs.warm(module, entry)`: resolves the module as `jobs.dispatch` does, adds the entry to
//! the principal's warm registry (`warm.rs`) and posts it to every worker's inbox.

use mlua::{Lua, Value};

use super::home::{home, refuse, registering_authority};
use crate::jobs::leaves::options::{module_refused, read_target};
use crate::jobs::protocol::messages::WorkerMsg;
use crate::vm::{promise_handle, with_caller_source, VmCore};

/// `jobs.warm(module, entry) -> PromiseHandle`.
pub(crate) fn warm(lua: &Lua, (module, entry): (Value, Value)) -> mlua::Result<Value> {
    let home = home(lua)?;
    let core = VmCore::of(lua)?;
    let (module, entry) = read_target("jobs.warm", module, entry).map_err(refuse)?;
    let module = with_caller_source(lua, |source| {
        core.modules.resolve(source, &module.to_string_lossy())
    })
    .map_err(|e| refuse(module_refused("jobs.warm", "module", &e)))?;
    let workers = home.pool.exec.threads();
    let (entry, added) = home.principal.warms.find_or_add(
        module.path,
        module.spec,
        &entry.to_string_lossy(),
        workers,
        registering_authority(lua),
    );

    let cell = core.promises.borrow_mut().make("jobs.warm");
    let to = home.reply_to(cell.id());
    if let Err((outcome, _)) = entry.wait(to) {
        // Settled by an earlier call: this handle answers the same, now. Nobody waits on the
        // new promise yet, so there is no task to wake.
        core.promises.borrow_mut().settle(cell.id(), outcome);
    }
    if added {
        // Inbox messages are never stolen: each worker warms its own VM.
        for worker in 0..workers {
            home.pool.exec.post(
                worker,
                WorkerMsg::Warm {
                    principal: home.principal.clone(),
                    entry: entry.clone(),
                },
            );
        }
    }
    promise_handle(lua, cell)
}
