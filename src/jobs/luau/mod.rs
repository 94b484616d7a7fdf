//! The bindings of one VM, above the protocol: its `jobs` home (`home.rs`: who it runs as and
//! where its replies go), the `jobs` library (`api.rs`) with `jobs.dispatch`'s raw entrance
//! (`dispatch_raw.rs`) and the issuing side both entrances share (`issue.rs`), `jobs.parallelFor` (`parallel_for.rs`), `jobs.map` (`map.rs`),
//! `jobs.warm` (`warm_api.rs`), registered jobs (`registered/`), engine-service stubs
//! (`service_stubs.rs`) and `engine.on` (`engine_events.rs`).
//!
//! Every binding reaches its VM's home through `home.rs`, never through `api.rs`, so the row has
//! no cycle. Nothing here names the worker or the host's handles.

pub(super) mod api;
pub(super) mod dispatch_raw;
pub(super) mod engine_events;
pub(super) mod home;
mod issue;
pub(super) mod map;
pub(super) mod parallel_for;
pub(super) mod registered;
pub(super) mod service_stubs;
pub(super) mod warm_api;
