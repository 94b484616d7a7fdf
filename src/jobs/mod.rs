//! The Luau `jobs` API on top of `vm` and `pool`: dispatch, the worker side of a pool thread,
//! principals and promises for host code.

mod api;
mod chunking;
mod events;
mod gather;
mod host_options;
mod item;
mod item_clock;
mod kernel;
mod keys;
mod options;
mod parallel_for;
mod pool;
mod principal_cell;
mod promise;
mod registered;
mod services;
mod warm;
mod warm_pass;
mod worker;

pub(crate) use api::{
    home_principal, install, registering_authority, HomeKind, JobsHome, BUILTINS,
};
pub use events::EVENT_LOG_BOUND;
pub(crate) use events::{check_event_name, deliver as deliver_events};
pub(crate) use host_options::check_key;
pub use host_options::JobOptions;
pub(crate) use item::{ActorWake, DomainEvent, Item, ItemArgs, JobShared, ReplyTo, NOT_STARTED};
pub use item::{JOB_WEIGHT, MAX_JOB_BYTES};
pub use options::MAX_DEADLINE;
pub use pool::Pool;
pub(crate) use pool::PoolShared;
pub(crate) use principal_cell::MailboxSender;
pub(crate) use principal_cell::PrincipalCell;
pub(crate) use promise::HostSlot;
pub use promise::{Promise, PromiseStatus};
pub(crate) use registered::{FailureSink, Registry};
pub use registered::{JobInfo, JobStatus, WorkerCalls};
pub(crate) use services::{check_name as check_service_name, install_at, read_args, ServiceKind};
pub use warm::WARM_BOUND;
pub(crate) use worker::reply;
pub use worker::VM_RETIRED;
