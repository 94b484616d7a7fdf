//! The host's side of `jobs`: the public [`Pool`] handle, the [`Promise`] a host awaits, and the
//! [`JobOptions`] it dispatches with. Everything here sits on top of the protocol and the
//! worker; nothing below names it.

pub(super) mod host_promise;
mod job_options;
mod pool_handle;

pub use host_promise::{Promise, PromiseStatus};
pub(crate) use job_options::check_key;
pub use job_options::JobOptions;
pub(crate) use pool_handle::reserve_vms;
pub use pool_handle::Pool;
