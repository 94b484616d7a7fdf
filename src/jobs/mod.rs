//! The Luau `jobs` API on top of `vm` and `pool`: dispatch, the worker side of a pool thread,
//! principals and promises for host code.
//!
//! The files by row, lowest first; a file imports only files of its own row or an earlier one
//! (the rows and why the protocol row is one cycle: `docs/architecture.md`, "Inside `jobs`"):
//!
//! - leaves: `chunking`, `entry`, `host_slot`, `service_names`, `event_log`, and
//!   `registered/`'s `directory`, `info`, `order`, `remote_job`;
//! - the protocol: `job` (a job's shared state and budget), `item` (what travels to a worker),
//!   `messages` (what travels between threads), `reply` (where an outcome goes, and `reply()`),
//!   `gather` (a `parallelFor`'s collector), `pool_shared` (the executor's queues and inboxes),
//!   `keys` (key lanes), `warm` (the warm registry), `principal_cell`;
//! - the Luau API: `options` (it keeps a key's bytes through `keys`), `home` (a VM's jobs
//!   home), `service_stubs`, `engine_events`, `registered/`, `parallel_for`, `map`, `warm_api`,
//!   `dispatch_raw`, `api` (installs `jobs`);
//! - `worker/`: the Luau side of a pool thread, and the steps of starting an item;
//! - `host/`: `Pool`, `Promise`, `JobOptions`.

mod api;
mod chunking;
mod dispatch_raw;
mod engine_events;
mod entry;
mod event_log;
mod gather;
mod home;
mod host;
mod host_slot;
mod item;
mod job;
mod keys;
mod map;
mod messages;
mod options;
mod parallel_for;
mod pool_shared;
mod principal_cell;
mod registered;
mod reply;
mod service_names;
mod service_stubs;
mod warm;
mod warm_api;
mod worker;

pub(crate) use api::{install, BUILTINS};
pub(crate) use engine_events::deliver as deliver_events;
pub(crate) use engine_events::release_waits as release_engine_waits;
pub(crate) use event_log::check_event_name;
pub(crate) use event_log::EVENT_LOG_BOUND;
pub(crate) use home::{home_principal, registering_authority, HomeKind, JobsHome};
pub(crate) use host::{check_key, reserve_vms};
pub use host::{JobOptions, Pool, Promise, PromiseStatus};
pub(crate) use host_slot::HostSlot;
pub(crate) use item::{Item, ItemArgs};
pub(crate) use job::{JobShared, NOT_STARTED};
pub(crate) use job::{JOB_WEIGHT, MAX_JOB_BYTES};
pub(crate) use messages::{ActorWake, DomainEvent};
pub(crate) use options::MAX_DEADLINE;
pub(crate) use pool_shared::PoolShared;
pub(crate) use principal_cell::PrincipalCell;
pub(crate) use principal_cell::{MailboxReceiver, MailboxSender};
pub(crate) use registered::{FailureSink, PhaseHost, Registry};
pub use registered::{JobInfo, JobOrder, JobStatus, WorkerCalls};
pub(crate) use reply::{reply, ReplyTo};
pub(crate) use service_names::{check_name as check_service_name, ServiceKind};
pub(crate) use service_stubs::{forward as forward_query, install_at, read_args};
pub(crate) use warm::WARM_BOUND;
pub(crate) use worker::VM_RETIRED;
