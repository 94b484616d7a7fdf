//! The `@skein/*` modules every VM of a domain serves, registered in the domain's plan, which
//! builds its engine VM, the pool threads' VMs for it and its `@skein/worker` VMs.
//!
//! `vm`'s `require` looks names up in the plan's table and never names a module itself; this
//! file is the one place that lists them. Each module decides what it does in a VM that does
//! not serve it (a worker VM's `@skein/context` refuses `bind`).

use super::actor;
use super::events::handlers::events_module;
use super::frame::bindings::context_module;
use super::fs;
use super::interfaces::interfaces_module;
use super::log_api;
use crate::jobs;
use crate::vm::{Builtin, Plan};

/// The domain layer's built-in modules.
const BUILTINS: &[Builtin] = &[
    Builtin {
        name: "@skein/context",
        build: context_module,
    },
    Builtin {
        name: "@skein/events",
        build: events_module,
    },
    Builtin {
        name: "@skein/interfaces",
        build: interfaces_module,
    },
    Builtin {
        name: "@skein/worker",
        build: actor::module,
    },
    Builtin {
        name: "@skein/log",
        build: log_api::module,
    },
    Builtin {
        name: "@skein/fs",
        build: fs::module,
    },
];

/// The host's `plan` with the built-in modules of the layers a domain stands on (`@skein/jobs`)
/// and its own, and the `print` that writes to the domain's log sink.
pub(crate) fn with_builtins(plan: &Plan) -> Plan {
    plan.clone()
        .builtins(jobs::BUILTINS)
        .builtins(BUILTINS)
        .base_setup("print", log_api::install_print)
}
