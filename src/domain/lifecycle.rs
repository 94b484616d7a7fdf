//! Where a domain is in its life: [`DomainState`] and the transitions between its states.
//!
//! This file owns only the state names and what moves the domain between them; the moves
//! themselves happen where the work is (`run_file`/`exec`, the scheduler, `stop`).

use std::fmt;

/// Where a [`ScriptDomain`](crate::ScriptDomain) is in its life.
///
/// The transitions:
///
/// | from | to | when |
/// | --- | --- | --- |
/// | `Created` | `Ready` | [`ScriptDomain::new`](crate::ScriptDomain::new) has built the engine VM (`Created` is never seen after `new` returns) |
/// | `Ready`, `Failed` | `Loading` | [`run_file`](crate::ScriptDomain::run_file) or [`exec`](crate::ScriptDomain::exec) starts a main script |
/// | `Loading` | `Ready` | that script's task returns |
/// | `Loading` | `Failed` | that script does not compile, or its task raises |
/// | `Ready`, `Loading` | `Running` | the first [`run_phase`](crate::ScriptDomain::run_phase), [`advance`](crate::ScriptDomain::advance) or [`frame`](crate::ScriptDomain::frame) |
/// | `Running` | `Failed` | the main script that made the domain `Loading` raises after frames began (it had yielded) |
/// | any but `Stopped` | `Stopping` | [`stop`](crate::ScriptDomain::stop) (or `Drop`) begins: the `shutdown` phase runs |
/// | `Stopping` | `Stopped` | the generation has ended and the handlers are dropped |
/// | any but `Stopped` | `Loading` | [`restart`](crate::ScriptDomain::restart): the old generation has ended, the new one's load runs (a stopped domain refuses a restart or reload: a stop is final) |
/// | `Loading` | `Running` | that load ended well and the domain was `Running` before the restart (the `startup` phase has run) |
/// | `Loading` | `Ready` | that load ended well and the domain was not `Running` |
/// | `Loading` | `Failed` | that load failed |
/// | any but `Stopped` | as after a restart | [`reload`](crate::ScriptDomain::reload) whose load ended well; a failed reload changes nothing |
///
/// A script started while the domain is `Running` (more code for a live domain) leaves the
/// state alone. `Failed` is sticky until another main script loads or the domain restarts or
/// reloads:
/// handlers bound before the failure still run in their phases. Every main script's failure,
/// whether it decides the state or not, is a [`Report`](crate::Report) of kind
/// [`Script`](crate::ReportKind::Script).
///
/// ```
/// use skein::lifecycle::DomainState;
/// use skein::{DomainSpec, Pool, ScriptDomain};
///
/// let pool = Pool::new(1);
/// let mut domain = ScriptDomain::new(&pool, DomainSpec::new("game"))?;
/// assert_eq!(domain.state(), DomainState::Ready);
/// domain.exec("x = 1")?;
/// assert_eq!(domain.state(), DomainState::Ready);
/// domain.stop();
/// assert_eq!(domain.state(), DomainState::Stopped);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DomainState {
    /// Being built.
    Created,
    /// A main script is running its first part (until it returns or raises).
    Loading,
    /// Built (and loaded, if a script was given); no phase has run yet.
    Ready,
    /// Phases or frames are running.
    Running,
    /// `stop` is running the shutdown handlers and ending the generation.
    Stopping,
    /// Ended: phases, advances and frames are refused.
    Stopped,
    /// The main script failed to compile or raised.
    Failed,
}

impl DomainState {
    /// The state's name, as `Display` writes it.
    pub fn name(self) -> &'static str {
        match self {
            DomainState::Created => "created",
            DomainState::Loading => "loading",
            DomainState::Ready => "ready",
            DomainState::Running => "running",
            DomainState::Stopping => "stopping",
            DomainState::Stopped => "stopped",
            DomainState::Failed => "failed",
        }
    }
}

impl fmt::Display for DomainState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
