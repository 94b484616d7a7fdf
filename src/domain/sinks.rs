//! Where the engine thread's profile events go: the profile sink the current generation's
//! principal carries, attributed to its authority (and to a context, when a handler's work made
//! the event). Diagnostics go through [`Reporting::diagnose`](super::reporting::Reporting::diagnose),
//! which counts them.

use std::time::{Duration, Instant};

use crate::jobs::PrincipalShared;
use crate::principal::profile;
use crate::principal::Attribution;

/// Sends an engine-thread event to `principal`'s profile sink, if it has one: measured from
/// `started` to now, for work that waited `queue_delay` before `started`, named `name` or else
/// `domain`.
pub(crate) fn profile_engine(
    principal: &PrincipalShared,
    domain: &str,
    kind: profile::ProfileKind,
    context: Option<&str>,
    name: Option<String>,
    started: Instant,
    queue_delay: Option<Duration>,
) {
    if let Some(sink) = &principal.profile {
        let attribution = Attribution {
            context: context.map(str::to_owned),
            ..principal.authority.attribution().clone()
        };
        let name = name.unwrap_or_else(|| domain.to_owned());
        profile::emit(&**sink, kind, attribution, name, started, queue_delay);
    }
}
