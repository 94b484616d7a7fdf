//! The data of registered jobs, apart from the Luau that runs them (`jobs/luau/registered/`):
//! which jobs a generation has and the references their handles hold (`directory.rs`), a
//! phase's order from what each job declares (`order.rs`), the `JobInfo` snapshot a script or
//! the host reads (`info.rs`), and what crosses threads for a job registered from a worker VM
//! (`remote_job.rs`). The principal's cross-thread state holds the directory, and the messages
//! between threads carry remote registrations, so these sit below the protocol.

pub(crate) mod directory;
pub(crate) mod info;
pub(crate) mod order;
pub(crate) mod remote_job;
