//! `JobInfo`: a snapshot of one registered job, as `job:info()`, `jobs.inspect` and
//! `jobs.list` answer it in Luau and `ScriptDomain::jobs` in Rust.

use std::time::Duration;

use mlua::{Lua, Table};

use super::order::{Declared, Placed};
use crate::value::Message;

/// Where a registered job stands.
///
/// A paused job reads as [`Pending`](JobStatus::Pending) (it is registered and waits), with
/// [`JobInfo::paused`] set; an item of it already in flight reads as
/// [`Running`](JobStatus::Running) until it lands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JobStatus {
    /// Registered and waiting for its next frame (or paused).
    Pending,
    /// Its luau run (or an `apply`) is executing, or an item of it is on a worker.
    Running,
    /// It failed and is skipped until resumed.
    Errored,
}

impl JobStatus {
    /// The status as Luau reads it: `"pending"`, `"running"` or `"errored"`.
    pub fn as_str(self) -> &'static str {
        match self {
            JobStatus::Pending => "pending",
            JobStatus::Running => "running",
            JobStatus::Errored => "errored",
        }
    }
}

/// A snapshot of one registered job.
///
/// ```
/// use skein::job::JobStatus;
/// use skein::{DomainSpec, Pool, ScriptDomain};
///
/// let pool = Pool::new(1);
/// let domain = ScriptDomain::new(&pool, DomainSpec::new("main"))?;
/// domain.eval(r#"jobs.register({ name = "tick", phase = "main", executor = { kind = "luau", run = function() end } })"#)?;
/// let jobs = domain.jobs();
/// assert_eq!(jobs[0].name.as_deref(), Some("tick"));
/// assert_eq!(jobs[0].status, JobStatus::Pending);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct JobInfo {
    /// Unique among the domain's jobs, from 1.
    pub id: u64,
    /// Its `name`, when it has one.
    pub name: Option<String>,
    /// The phase it runs in.
    pub phase: String,
    /// `"luau"`, `"worker"` or `"kernel"`.
    pub kind: &'static str,
    /// Where it stands.
    pub status: JobStatus,
    /// Whether it is paused.
    pub paused: bool,
    /// The chunk that registered it, or the descriptor's `origin`.
    pub origin: String,
    /// A copy of the descriptor's `metadata`.
    pub metadata: Option<Message>,
    /// What it declared about its order and access, and where that puts it in its phase.
    pub order: JobOrder,
    /// The last failure, kept until the next one (resuming does not clear it).
    pub last_error: Option<String>,
    /// Engine-service queries its items forwarded to the engine thread.
    pub forwarded_calls: u64,
    /// The total time its items waited from queueing to their start on a worker.
    pub waited_for_vm: Duration,
    /// Runs (luau) or items (worker, kernel) it started.
    pub calls: u64,
    /// Those of them that failed (their `apply` included).
    pub failed_calls: u64,
    /// For a job registered from a worker VM, the calls the engine posted to that VM; `None`
    /// for a job registered on the engine VM.
    pub worker: Option<WorkerCalls>,
}

/// A registered job's declared order and access (`reads`, `writes`, `after`, `before`,
/// `pure`), and its resolved place in its phase: `position` in the phase's run order and the
/// `wave` it runs in (both from 1; 0 for a job a worker VM registered that has not reached the
/// engine yet).
///
/// ```
/// use skein::{DomainSpec, Pool, ScriptDomain};
///
/// let pool = Pool::new(1);
/// let domain = ScriptDomain::new(&pool, DomainSpec::new("main"))?;
/// domain.eval(r#"
///     local run = function() end
///     jobs.register({ name = "draw", phase = "main", reads = { "mesh" }, executor = { kind = "luau", run = run } })
///     jobs.register({ name = "build", phase = "main", writes = { "mesh" }, executor = { kind = "luau", run = run } })
/// "#)?;
/// let jobs = domain.jobs();
/// // "draw" reads what "build" writes, so it runs after it, in the next wave.
/// assert_eq!((jobs[0].order.position, jobs[0].order.wave), (2, 2));
/// assert_eq!((jobs[1].order.position, jobs[1].order.wave), (1, 1));
/// assert_eq!(jobs[0].order.reads, ["mesh"]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct JobOrder {
    /// Names of what it reads.
    pub reads: Vec<String>,
    /// Names of what it changes.
    pub writes: Vec<String>,
    /// Jobs it runs after.
    pub after: Vec<String>,
    /// Jobs it runs before.
    pub before: Vec<String>,
    /// It changes nothing outside its result.
    pub pure: bool,
    /// Its place in its phase's run order, from 1.
    pub position: u32,
    /// Its wave in its phase, from 1.
    pub wave: u32,
}

impl JobOrder {
    /// What `declared` says, not placed yet.
    pub(crate) fn declared(declared: &Declared) -> JobOrder {
        JobOrder {
            reads: declared.reads.clone(),
            writes: declared.writes.clone(),
            after: declared.after.clone(),
            before: declared.before.clone(),
            pure: declared.pure,
            position: 0,
            wave: 0,
        }
    }

    /// What `declared` says, placed at `placed`.
    pub(crate) fn placed(declared: &Declared, placed: Option<Placed>) -> JobOrder {
        let mut order = JobOrder::declared(declared);
        if let Some(placed) = placed {
            order.position = placed.position;
            order.wave = placed.wave;
        }
        order
    }
}

/// The calls of a job registered from a worker VM, as `job:info().worker` reports them.
///
/// ```
/// use skein::{DomainSpec, Plan, Pool, ScriptDomain};
///
/// let dir = tempfile::tempdir()?;
/// std::fs::write(dir.path().join("m.luau"), r#"
///     return { start = function()
///         jobs.register({ name = "tick", phase = "main", executor = { kind = "luau", run = function() end } })
///         return true
///     end }
/// "#)?;
/// let pool = Pool::new(1);
/// let domain = ScriptDomain::new(&pool, DomainSpec::new("main").plan(Plan::new().root(dir.path())))?;
/// domain.eval(r#"return jobs.dispatch("./m", "start"):await()"#)?;
/// // The job reached the engine with the item's reply; no frame has posted a call yet.
/// let calls = domain.jobs()[0].worker.expect("registered from a worker VM");
/// assert_eq!((calls.calls, calls.late_calls, calls.failed_calls), (0, 0, 0));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct WorkerCalls {
    /// Calls the engine posted to the worker VM.
    pub calls: u64,
    /// Frames that found the previous call still running, and so posted none.
    pub late_calls: u64,
    /// Calls that raised (or ended any other way than returning).
    pub failed_calls: u64,
}

/// The Luau table of a snapshot; times in milliseconds.
pub(crate) fn to_lua(lua: &Lua, info: &JobInfo) -> mlua::Result<Table> {
    let t = lua.create_table_with_capacity(0, 21)?;
    t.raw_set("id", info.id as f64)?;
    t.raw_set("name", info.name.as_deref())?;
    t.raw_set("phase", info.phase.as_str())?;
    t.raw_set("kind", info.kind)?;
    t.raw_set("status", info.status.as_str())?;
    t.raw_set("paused", info.paused)?;
    t.raw_set("origin", info.origin.as_str())?;
    if let Some(metadata) = &info.metadata {
        t.raw_set("metadata", metadata.to_lua(lua)?)?;
    }
    let order = &info.order;
    for (key, names) in [
        ("reads", &order.reads),
        ("writes", &order.writes),
        ("after", &order.after),
        ("before", &order.before),
    ] {
        let list = lua.create_table_with_capacity(names.len(), 0)?;
        for name in names {
            list.raw_push(name.as_str())?;
        }
        t.raw_set(key, list)?;
    }
    t.raw_set("pure", order.pure)?;
    t.raw_set("position", order.position)?;
    t.raw_set("wave", order.wave)?;
    t.raw_set("last_error", info.last_error.as_deref())?;
    t.raw_set("forwarded_calls", info.forwarded_calls as f64)?;
    t.raw_set(
        "waited_for_vm_ms",
        info.waited_for_vm.as_secs_f64() * 1000.0,
    )?;
    t.raw_set("calls", info.calls as f64)?;
    t.raw_set("failed_calls", info.failed_calls as f64)?;
    if let Some(worker) = &info.worker {
        let w = lua.create_table_with_capacity(0, 3)?;
        w.raw_set("calls", worker.calls as f64)?;
        w.raw_set("late_calls", worker.late_calls as f64)?;
        w.raw_set("failed_calls", worker.failed_calls as f64)?;
        t.raw_set("worker", w)?;
    }
    Ok(t)
}
