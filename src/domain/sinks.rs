//! Where the engine thread's diagnostics and profile events go: the domain's diagnostic sink
//! (counted for [`ScriptDomain::stats`]) and the profile sink its principal carries.

use std::time::{Duration, Instant};

use crate::domain::ScriptDomain;
use crate::principal::profile;
use crate::principal::{Attribution, Diagnostic, Severity};

impl ScriptDomain {
    /// Sends `d` to the domain's diagnostic sink, if it has one.
    pub(crate) fn diagnose(&self, severity: Severity, d: &Diagnostic) {
        self.reporting.diagnose(severity, d);
    }

    /// Sends an engine-thread event to the domain's profile sink, if it has one: measured from
    /// `started` to now, named `name` or else the domain's name.
    pub(crate) fn profiled(
        &self,
        kind: profile::ProfileKind,
        context: Option<&str>,
        name: Option<String>,
        started: Instant,
    ) {
        self.profiled_after(kind, context, name, started, None);
    }

    /// As [`profiled`](Self::profiled), for work that waited `queue_delay` before `started`.
    pub(crate) fn profiled_after(
        &self,
        kind: profile::ProfileKind,
        context: Option<&str>,
        name: Option<String>,
        started: Instant,
        queue_delay: Option<Duration>,
    ) {
        if let Some(sink) = &self.current.principal.profile {
            let attribution = Attribution {
                context: context.map(str::to_owned),
                ..self.current.principal.authority.attribution().clone()
            };
            let name = name.unwrap_or_else(|| self.name.clone());
            profile::emit(&**sink, kind, attribution, name, started, queue_delay);
        }
    }
}
