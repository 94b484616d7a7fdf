//! Resources: script packages loaded from folders with a `skein.toml` manifest, each one
//! [`ScriptDomain`](crate::ScriptDomain) on the host's shared pool, calling each other's
//! exports by name through `require("@skein/resources")`, started in dependency order and
//! stopped, reloaded and listed by the host through a [`ResourceHost`].
//!
//! A [`Manifest`] is a resource's `skein.toml`, a [`HostFile`] the served folder's
//! `skein-host.toml`; [`ResourceHost::list`] answers a [`ResourceInfo`] per resource,
//! [`ResourceHost::advance`] the [`ResourceReport`]s its domains made, a stop its
//! [`StopOutcome`]; a [`HostInterrupt`] stops every resource's running Luau from another thread.
//! A refusal is [`Error::Resource`](crate::Error::Resource), its rule a
//! [`ResourceRefusal`](crate::refusal::ResourceRefusal). `docs/embedding.md`, "Resources", has
//! the whole story.

// Inside (the decisions of `reference/003`):
//
// - `manifest.rs`: `Manifest` (`skein.toml`) and `HostFile` (`skein-host.toml`), read with
//   `toml` and serde;
// - `order.rs`: the start order (topological, the listed order kept), cycles named;
// - `registry.rs`: the export registry and the path of a cross-resource call (copies both ways,
//   the callee's deadline and authority, the depth cap): an engine VM's arguments copied
//   straight into the callee's VM when the copy takes them, as `Message`s otherwise;
// - `module.rs` (with `proxy.luau`, `call.luau`): `@skein/resources` in every VM of a resource,
//   registered through `vm`'s built-in module registry; a worker VM forwards its calls to the
//   engine thread as an engine-service query;
// - `interrupt.rs`: `HostInterrupt`, every resource's running Luau stopped from another thread;
// - `host.rs`: `ResourceHost`.

mod host;
mod interrupt;
mod manifest;
mod module;
mod order;
mod registry;

pub use host::{ResourceHost, ResourceInfo, ResourceReport, ResourceState, StopOutcome};
pub use interrupt::HostInterrupt;
pub use manifest::{HostFile, Manifest};
