//! The Luau `jobs` API on top of `vm` and `executor`: dispatch, the worker side of a pool thread,
//! principals and promises for host code.
//!
//! The files sit in rows, one folder each, lowest first; a file names only files of its own row
//! or an earlier one (`tests/layers.rs` checks it; the rows and why the protocol row is one
//! cycle: `docs/architecture.md`, "Inside `jobs`"):
//!
//! - `leaves/`: plain data and the rules of the calls' arguments (`options`, `chunking`,
//!   `entry`, `outcome_slot`, `service_names`, `event_log`, and the data of registered jobs in
//!   `registered/`);
//! - `protocol/`: what travels between threads and the one function every settle path ends in
//!   (`job`, `item`, `messages`, `reply`, `gather`, `pool_shared`, `keys`, `warm`,
//!   `principal_shared`);
//! - `luau/`: the bindings of one VM (`home`, `api`, `dispatch_raw`, `issue`, `parallel_for`,
//!   `map`, `warm_api`, `registered/`, `service_stubs`, `engine_events`);
//! - `worker/`: the Luau side of a pool thread, and the steps of starting an item;
//! - `host/`: `Pool`, `Promise`, `JobOptions`.

mod host;
mod leaves;
mod luau;
mod protocol;
mod worker;

pub(crate) use host::{check_key, reserve_vms};
pub use host::{JobOptions, Pool, Promise, PromiseStatus};
pub(crate) use leaves::event_log::check_event_name;
pub(crate) use leaves::event_log::EVENT_LOG_BOUND;
pub(crate) use leaves::options::MAX_DEADLINE;
pub(crate) use leaves::outcome_slot::OutcomeSlot;
pub use leaves::registered::info::{JobInfo, JobOrder, JobStatus, WorkerCalls};
pub(crate) use leaves::service_names::{
    check_name as check_service_name, check_requirement, service_failed, ServiceKind,
};
pub(crate) use luau::api::{install, BUILTINS};
pub(crate) use luau::engine_events::deliver as deliver_events;
pub(crate) use luau::engine_events::release_waits as release_engine_waits;
pub(crate) use luau::home::{home_principal, registering_authority, HomeKind, JobsHome};
pub(crate) use luau::registered::{FailureSink, PhaseHost, RegisteredJobs};
pub(crate) use luau::service_stubs::{forward as forward_query, install_at, read_args};
pub(crate) use protocol::item::{Item, ItemArgs};
pub(crate) use protocol::job::{JobShared, JobTarget, NOT_STARTED};
pub(crate) use protocol::job::{JOB_WEIGHT, MAX_JOB_BYTES};
pub(crate) use protocol::messages::{ActorWake, DomainEvent, Query};
pub(crate) use protocol::pool_shared::PoolShared;
pub(crate) use protocol::principal_shared::PrincipalShared;
pub(crate) use protocol::principal_shared::{MailboxReceiver, MailboxSender};
pub(crate) use protocol::reply::{reply, ReplyTo};
pub(crate) use protocol::warm::WARM_BOUND;
pub(crate) use worker::VM_RETIRED;
