//! Jobs registered from a worker VM: their functions stay in that VM, and the engine only posts
//! each frame's call there.
//!
//! The parts, and which thread holds each:
//!
//! - [`RemoteJob`] (`Send + Sync`): the job's id, its cancelled flag and a snapshot of its
//!   [`JobInfo`] the engine publishes after each change. A handle in the worker VM reads these,
//!   so `info()` and `status()` there answer as the engine last saw the job (at its last frame
//!   or drain).
//! - [`LocalJobs`] (app data of the worker VM): the job's functions (`run`, or `input` and
//!   `apply` with the module's entry) and the call running now, if any.
//! - The engine registry's entry ([`JobBody::Remote`]): the worker and VM serial to post to, the
//!   counts, and whether a call is in flight.
//!
//! A frame posts
//! [`WorkerMsg::Registered`](crate::jobs::protocol::messages::WorkerMsg::Registered) with
//! [`RemoteOp::Run`] to the worker's inbox and goes on. The worker starts the call as a task of
//! the job's VM with a command log; when the task ends it posts [`DomainEvent::RegisteredDone`]
//! with the commands it recorded and its failure, if any. The engine handles that at its next
//! drain (so one frame later): it applies the commands, then marks the call done or the job
//! errored. A frame that finds the call still in flight posts nothing and counts a late call.
//!
//! The VM stays: workers drop a principal's VMs only when it ends (a restart or a stop, which
//! ends its jobs too) or after a panic, when every job the VM held is errored with the reason.

use std::cell::RefCell;
use std::collections::HashMap;
use std::path::Path;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use mlua::{Function, Lua, MultiValue, Value};

use super::descriptor::{self, JobBody};
use crate::jobs::leaves::entry::entry_function;
use crate::jobs::leaves::registered::directory::Dropped;
use crate::jobs::leaves::registered::info::{JobInfo, JobOrder, JobStatus, WorkerCalls};
use crate::jobs::leaves::registered::remote_job::{
    Control, RemoteJob, RemoteOp, RemoteRegistration,
};
use crate::jobs::luau::home::{registering_authority, HomeKind, JobsHome};
use crate::jobs::protocol::messages::DomainEvent;
use crate::jobs::protocol::principal_shared::PrincipalShared;
use crate::principal::capability::Authority;
use crate::vm::{self, Embedded, Owner, OwnerIdentity, TaskFailure, Vm};

/// What a worker VM runs for one of its jobs.
enum LocalCall {
    Luau {
        run: Function,
    },
    Worker {
        path: Arc<Path>,
        entry: Arc<str>,
        input: Function,
        apply: Function,
    },
}

struct LocalJob {
    shared: Arc<RemoteJob>,
    label: String,
    call: LocalCall,
    deadline: Duration,
    /// The authority of the task that registered it (an item's: a context's part when a
    /// handler dispatched that item): each call, and the commands it records, run under it.
    /// `None`: the VM's own.
    authority: Option<Arc<Authority>>,
    /// The owner of the call running now.
    running: Option<Rc<Owner>>,
}

/// The jobs a worker VM registered and still holds: app data of that VM.
#[derive(Default)]
pub(crate) struct LocalJobs {
    jobs: RefCell<HashMap<u64, LocalJob>>,
}

/// How a call's tasks name themselves in reports, and which job their forwarded queries count
/// for.
struct CallIdentity {
    label: String,
    id: u64,
}

impl std::fmt::Display for CallIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "job '{}'", self.label)
    }
}

impl OwnerIdentity for CallIdentity {
    fn registered_job(&self) -> Option<u64> {
        Some(self.id)
    }
}

fn local_jobs(lua: &Lua) -> Rc<LocalJobs> {
    if let Some(jobs) = lua.app_data_ref::<Rc<LocalJobs>>() {
        return jobs.clone();
    }
    let jobs = Rc::new(LocalJobs::default());
    lua.set_app_data(jobs.clone());
    jobs
}

const KERNEL_REFUSED: &str = "jobs.register: executor.kind 'kernel' can't be registered from a \
     worker VM: a kernel job runs a host function and has no VM to stay in; register it from \
     the engine VM";

const REGISTER_IN_ACTOR: &str = "jobs.register: a @skein/worker worker's VM can't register \
     jobs: its functions would end with the worker; register them from the domain's own code \
     or a job";

/// `jobs.register` in a worker VM: checks the descriptor here (with the engine's texts), keeps
/// the functions in this VM, reserves the id and name, and posts the job to the engine.
pub(crate) fn register(lua: &Lua, home: &JobsHome, descriptor: &Value) -> Result<u64, String> {
    let HomeKind::Worker { index, vm, .. } = &home.kind else {
        return Err(REGISTER_IN_ACTOR.to_owned());
    };
    let principal = &home.principal;
    let d = descriptor::read(
        lua,
        descriptor,
        |_| Err(KERNEL_REFUSED.to_owned()),
        principal.max_deadline,
    )?;
    // The metadata is kept twice: in this VM's snapshot of the job and in the engine's entry.
    let held = d.hold(&principal.memory, 2)?;
    let (call, deadline) = match d.body {
        JobBody::Luau { run } => (LocalCall::Luau { run }, principal.max_deadline),
        JobBody::Worker {
            path,
            entry,
            input,
            apply,
            key,
            deadline,
            ..
        } => {
            if key.is_some() {
                return Err(
                    "jobs.register: executor.key can't be used from a worker VM: the \
                     job's calls all run in the VM that registers it"
                        .to_owned(),
                );
            }
            let call = LocalCall::Worker {
                path,
                entry,
                input,
                apply,
            };
            (call, deadline)
        }
        JobBody::Kernel { .. } | JobBody::Remote { .. } => return Err(KERNEL_REFUSED.to_owned()),
    };
    let kind = match call {
        LocalCall::Luau { .. } => "luau",
        LocalCall::Worker { .. } => "worker",
    };
    let id = principal
        .jobs
        .reserve(d.name.as_deref(), &d.phase, &d.declared, held)?;
    let label = d.name.clone().unwrap_or_else(|| format!("#{id}"));
    let shared = Arc::new(RemoteJob::new(
        id,
        JobInfo {
            id,
            name: d.name.clone(),
            phase: d.phase.to_string(),
            kind,
            status: JobStatus::Pending,
            paused: false,
            origin: d.origin.clone(),
            metadata: d.metadata.clone(),
            order: JobOrder::declared(&d.declared),
            last_error: None,
            forwarded_calls: 0,
            waited_for_vm: Duration::ZERO,
            calls: 0,
            failed_calls: 0,
            worker: Some(WorkerCalls::default()),
        },
    ));
    let registration = RemoteRegistration {
        shared: shared.clone(),
        name: d.name.clone(),
        phase: d.phase,
        origin: d.origin,
        metadata: d.metadata,
        declared: d.declared,
        kind,
        worker: *index,
        vm: *vm,
    };
    let posted = principal
        .mailbox
        .send(DomainEvent::Registered(Box::new(registration)));
    if !posted {
        principal.jobs.release(id);
        return Err(format!(
            "jobs.register: the domain has stopped: {}",
            principal.end_reason()
        ));
    }
    local_jobs(lua).jobs.borrow_mut().insert(
        id,
        LocalJob {
            shared,
            label,
            call,
            deadline,
            authority: registering_authority(lua),
            running: None,
        },
    );
    Ok(id)
}

/// The job `id` as a handle in this worker VM sees it: held here and not cancelled.
fn live(lua: &Lua, id: u64) -> Option<Arc<RemoteJob>> {
    let jobs = local_jobs(lua);
    let jobs = jobs.jobs.borrow();
    jobs.get(&id)
        .map(|j| j.shared.clone())
        .filter(|s| !s.is_cancelled())
}

/// `JobHandle:valid()` in a worker VM.
pub(crate) fn valid(lua: &Lua, id: u64) -> bool {
    live(lua, id).is_some()
}

/// `JobHandle:info()` in a worker VM: the snapshot of the engine's last frame.
pub(crate) fn info(lua: &Lua, id: u64) -> Option<JobInfo> {
    live(lua, id).map(|s| s.snapshot())
}

/// `JobHandle:pause()` and `resume()` in a worker VM: they take effect at the engine's next
/// drain. Answers whether the job was live.
pub(crate) fn control(lua: &Lua, home: &JobsHome, id: u64, control: Control) -> bool {
    if live(lua, id).is_none() {
        return false;
    }
    home.principal
        .mailbox
        .send(DomainEvent::RegisteredControl { job: id, control });
    true
}

/// `JobHandle:cancel()` in a worker VM, for a handle that still holds its reference: drops it.
/// While another handle (one `jobs.find` answered on the engine) holds the job, nothing else
/// changes. The last reference unregisters the job here at once (no further call starts, the
/// name is free again); the engine drops it at its next drain. Answers whether the job was
/// registered.
pub(crate) fn cancel(lua: &Lua, home: &JobsHome, id: u64) -> bool {
    let Some(shared) = live(lua, id) else {
        return false;
    };
    match home.principal.jobs.drop_reference(id) {
        Dropped::NotRegistered => return false,
        Dropped::StillHeld => return true,
        Dropped::Last => {}
    }
    shared.cancelled.store(true, Ordering::Release);
    // A call running now (perhaps the one cancelling) ends on its own and its end still
    // reaches the engine, so its writes apply; the entry goes when it ends.
    let jobs = local_jobs(lua);
    let mut held = jobs.jobs.borrow_mut();
    if held.get(&id).is_some_and(|job| job.running.is_none()) {
        held.remove(&id);
    }
    drop(held);
    home.principal.mailbox.send(DomainEvent::RegisteredControl {
        job: id,
        control: Control::Unregister,
    });
    true
}

/// Handles the engine's [`RemoteOp`] for job `id` of this VM.
pub(crate) fn on_op(vm: &Vm, principal: &Arc<PrincipalShared>, id: u64, op: RemoteOp) {
    match op {
        RemoteOp::Run => run(vm, principal, id),
        RemoteOp::Forget => {
            let removed = local_jobs(&vm.lua).jobs.borrow_mut().remove(&id);
            if let Some(job) = removed {
                job.shared.cancelled.store(true, Ordering::Release);
                if let Some(owner) = job.running {
                    vm.drop_owner(&owner);
                }
            }
        }
    }
}

/// Tells the engine a call of job `id` ended; its commands apply there under `authority`.
fn done(
    principal: &PrincipalShared,
    id: u64,
    commands: Vec<vm::ServiceCall>,
    failure: Option<String>,
    authority: Option<Arc<Authority>>,
) {
    principal.mailbox.send(DomainEvent::RegisteredDone {
        job: id,
        commands,
        failure,
        authority,
    });
}

/// The Luau half of a `worker` job's call: `input()`, then `entry(value)` unless it is nil,
/// then `apply(result)`, all in one task so any of them may yield.
static WORKER_CALL: Embedded =
    Embedded::new("=skein registered job", include_str!("worker_call.luau"));

const WORKER_CALL_KEY: &str = "skein.registered.workerCall";

fn worker_call(lua: &Lua) -> mlua::Result<Function> {
    WORKER_CALL.load_kept(lua, WORKER_CALL_KEY)
}

/// Starts this frame's call of job `id` as a task of the VM. A job this VM no longer holds (it
/// cancelled it) answers at once, so the engine never keeps a call in flight for it.
fn run(vm: &Vm, principal: &Arc<PrincipalShared>, id: u64) {
    let lua = &vm.lua;
    let jobs = local_jobs(lua);
    let prepared = {
        let held = jobs.jobs.borrow();
        match held.get(&id) {
            None => None,
            Some(job) if job.shared.is_cancelled() => None,
            Some(job) if job.running.is_some() => return,
            Some(job) => Some((
                job.label.clone(),
                job.deadline,
                job.authority.clone(),
                match &job.call {
                    LocalCall::Luau { run } => Ok((run.clone(), MultiValue::new())),
                    LocalCall::Worker {
                        path,
                        entry,
                        input,
                        apply,
                    } => worker_args(lua, vm, path, entry, input, apply),
                },
            )),
        }
    };
    let Some((label, deadline, authority, call)) = prepared else {
        return done(principal, id, Vec::new(), None, None);
    };
    let (f, args) = match call {
        Ok(call) => call,
        Err(message) => return done(principal, id, Vec::new(), Some(message), None),
    };
    let applies_as = authority.clone();
    let post_to = principal.clone();
    let held = Rc::downgrade(&jobs);
    let completion: vm::Completion = Box::new(move |_lua: &Lua, result, commands| {
        if let Some(jobs) = held.upgrade() {
            let mut held = jobs.jobs.borrow_mut();
            match held.get_mut(&id) {
                Some(job) if job.shared.is_cancelled() => drop(held.remove(&id)),
                Some(job) => job.running = None,
                None => {}
            }
        }
        let failure = match result {
            Ok(_) | Err(TaskFailure::Cancelled) => None,
            Err(TaskFailure::Raised { message, traceback }) if !traceback.is_empty() => {
                Some(format!("{message}\n{traceback}"))
            }
            Err(TaskFailure::Raised { message, .. }) => Some(message),
            Err(other) => Some(other.to_string()),
        };
        done(&post_to, id, commands, failure, applies_as);
    });
    let identity: Arc<dyn OwnerIdentity> = Arc::new(CallIdentity { label, id });
    let mut owner = Owner::new(identity, deadline, Some(completion)).with_commands();
    if let Some(authority) = authority {
        owner = owner.with_authority(authority);
    }
    let owner = Rc::new(owner);
    if let Some(job) = jobs.jobs.borrow_mut().get_mut(&id) {
        job.running = Some(owner.clone());
    }
    if let Err(e) = vm.start(f, args, owner.clone()) {
        let failure = TaskFailure::raised(vm::error_message(&e), String::new());
        owner.complete(lua, Err(failure));
    }
}

/// A `worker` job's call: the combining function and its arguments, the module's entry found
/// (and the module required) first.
fn worker_args(
    lua: &Lua,
    vm: &Vm,
    path: &Path,
    entry: &str,
    input: &Function,
    apply: &Function,
) -> Result<(Function, MultiValue), String> {
    let key = lua
        .create_string(entry)
        .map_err(|e| vm::error_message(&e))?;
    let entry = entry_function(lua, vm, path, entry, key)?;
    let f = worker_call(lua).map_err(|e| vm::error_message(&e))?;
    let args = MultiValue::from_iter([
        Value::Function(input.clone()),
        Value::Function(entry),
        Value::Function(apply.clone()),
    ]);
    Ok((f, args))
}

/// The VM was dropped after a panic: every job it held is errored, naming why.
pub(crate) fn vm_lost(lua: &Lua, principal: &PrincipalShared, why: &str) {
    let Some(jobs) = lua.app_data_ref::<Rc<LocalJobs>>().map(|j| j.clone()) else {
        return;
    };
    let ids: Vec<u64> = jobs.jobs.borrow_mut().drain().map(|(id, _)| id).collect();
    for id in ids {
        done(principal, id, Vec::new(), Some(why.to_owned()), None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_worker_call_runs_input_entry_and_apply_in_order() {
        let lua = Lua::new();
        let f = worker_call(&lua).unwrap();
        let log: mlua::Table = lua
            .load(
                r#"
                local log = {}
                return log, function() table.insert(log, "input") return 2 end,
                    function(v) table.insert(log, "entry " .. v) return v * 10 end,
                    function(r) table.insert(log, "apply " .. r) end
                "#,
            )
            .call::<(mlua::Table, Function, Function, Function)>(())
            .map(|(log, input, entry, apply)| {
                f.call::<()>((input, entry, apply)).unwrap();
                log
            })
            .unwrap();
        let seen: Vec<String> = log.sequence_values().map(Result::unwrap).collect();
        assert_eq!(seen, ["input", "entry 2", "apply 20"]);
    }
}
