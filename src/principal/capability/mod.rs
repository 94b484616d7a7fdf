//! Capabilities: what code may do, granted by the host and checked where a native service
//! starts.
//!
//! The host holds the [`RootAuthority`], the only source of a first [`Grant`]. A grant goes
//! with a domain ([`DomainSpec::grant`](crate::DomainSpec::grant)); from there authority only
//! shrinks ([`CapabilitySet::delegate`]). While a task runs, the scheduler installs its
//! authority on the thread ([`authority`]), and [`require_capability`] reads it: there is no
//! process-global, so many domains and workers can check at once and each sees its own.

mod authority;
mod grant;
mod id;
mod set;

pub(crate) use authority::{
    current_arc, current_or, deny_escape, install, lacking, require_path, resolve_path, Authority,
    DenialLog, Installed,
};
pub use authority::{require_capability, Attribution, CapabilityDenied, CapabilityError};
pub use grant::{Grant, RootAuthority, FILESYSTEM_READ, FILESYSTEM_WRITE};
pub use id::{CapabilityId, InvalidCapability};
pub use set::{CapabilitySet, OverDelegation};
