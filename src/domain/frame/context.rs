//! What the host declares about when code may run: [`ContextSpec`] and [`FixedStep`] (the
//! [`Phase`] names they use are in `principal/phase.rs`, low enough for diagnostics to name).
//!
//! These are plain declarations: the bindings scripts make and the scheduler that runs them
//! live in `phases.rs`. A context is *when*; what its code may do is its part of the
//! domain's grant ([`ContextSpec::capabilities`]), checked and installed by the scheduler.

use std::time::Duration;

use crate::error::{Error, Result, SpecSetting};
use crate::jobs::MAX_DEADLINE;
use crate::principal::capability::CapabilitySet;
use crate::principal::Phase;

/// The longest context name, in bytes.
pub(crate) const MAX_CONTEXT_NAME: usize = 64;

/// A context the host declares: a name scripts bind to, the phases it schedules, its priority
/// and its budget.
///
/// Within a phase, contexts run by priority, higher first; contexts of equal priority run in
/// the order the host declared them ([`DomainSpec::context`](crate::DomainSpec::context)).
///
/// ```
/// use std::time::Duration;
/// use skein::{ContextSpec, Phase};
///
/// let game = ContextSpec::new("game")
///     .phases([Phase::FixedUpdate, Phase::Update])
///     .priority(10)
///     .budget(Duration::from_millis(4));
/// assert_eq!(game.name(), "game");
/// assert!(game.schedules(Phase::Update));
/// assert!(!game.schedules(Phase::Input));
/// ```
///
/// # Capabilities
/// A context may hold a part of the domain's grant ([`capabilities`](Self::capabilities)):
/// its handlers, the tasks they start, the pool items they dispatch and those items' forwarded
/// calls all run under that part, and a denial names the context. A context that sets none
/// holds the domain's whole grant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContextSpec {
    name: String,
    phases: Vec<Phase>,
    priority: i32,
    budget: Option<Duration>,
    capabilities: Option<CapabilitySet>,
}

impl ContextSpec {
    /// The longest context name, in bytes: 64.
    pub const MAX_NAME: usize = MAX_CONTEXT_NAME;

    /// A context named `name` that schedules no phase yet, at priority 0, with no budget of
    /// its own (each handler run is held to the domain's deadline cap,
    /// [`MAX_DEADLINE`](crate::job::JobOptions::MAX_DEADLINE)).
    pub fn new(name: impl Into<String>) -> ContextSpec {
        ContextSpec {
            name: name.into(),
            phases: Vec::new(),
            priority: 0,
            budget: None,
            capabilities: None,
        }
    }

    /// Adds the phases the context schedules (a phase given twice counts once).
    pub fn phases(mut self, phases: impl IntoIterator<Item = Phase>) -> ContextSpec {
        for phase in phases {
            if !self.phases.contains(&phase) {
                self.phases.push(phase);
            }
        }
        self
    }

    /// Sets the priority: within a phase, higher runs first.
    pub fn priority(mut self, priority: i32) -> ContextSpec {
        self.priority = priority;
        self
    }

    /// Sets the budget: the longest one run of a handler (from its call, or a resume, to its
    /// next yield or return) may take before it is stopped and reported.
    pub fn budget(mut self, budget: Duration) -> ContextSpec {
        self.budget = Some(budget);
        self
    }

    /// Limits the context's handlers to `capabilities`, a subset of the domain's grant (the
    /// file-system roots of a kept `filesystem.read` / `filesystem.write` are the domain's).
    /// Without this call the context holds the domain's whole grant.
    ///
    /// ```
    /// use skein::capability::{CapabilityId, CapabilitySet, RootAuthority};
    /// use skein::{ContextSpec, DomainSpec, Phase, Pool, ScriptDomain};
    ///
    /// let id = |s| CapabilityId::new(s).unwrap();
    /// let grant = RootAuthority::new().grant(CapabilitySet::from_iter([id("input.observe")]));
    /// let ui = ContextSpec::new("ui")
    ///     .phases([Phase::Input])
    ///     .capabilities(CapabilitySet::from_iter([id("input.observe"), id("net.connect")]));
    /// let spec = DomainSpec::new("game").grant(grant).context(ui)?;
    /// let pool = Pool::new(1);
    /// let err = ScriptDomain::new(&pool, spec).err().expect("over-delegation is refused");
    /// assert_eq!(
    ///     err.to_string(),
    ///     "context 'ui' cannot delegate capabilities it does not hold: net.connect"
    /// );
    /// # Ok::<(), skein::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`ScriptDomain::new`](crate::ScriptDomain::new) refuses a context that asks for more
    /// than the domain's grant with [`Error::OverDelegation`].
    pub fn capabilities(mut self, capabilities: CapabilitySet) -> ContextSpec {
        self.capabilities = Some(capabilities);
        self
    }

    /// The capabilities it asked for, if it limits itself.
    pub fn get_capabilities(&self) -> Option<&CapabilitySet> {
        self.capabilities.as_ref()
    }

    /// The context's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The phases it schedules, in the order they were given.
    pub fn scheduled(&self) -> &[Phase] {
        &self.phases
    }

    /// Whether it schedules `phase`.
    pub fn schedules(&self, phase: Phase) -> bool {
        self.phases.contains(&phase)
    }

    /// Its priority.
    pub fn get_priority(&self) -> i32 {
        self.priority
    }

    /// Its budget, if it has its own.
    pub fn get_budget(&self) -> Option<Duration> {
        self.budget
    }

    /// Checks the declaration against the ones made before it.
    pub(crate) fn check(&self, declared: &[ContextSpec]) -> Result<()> {
        let len = self.name.len();
        if len == 0 || len > MAX_CONTEXT_NAME {
            return Err(Error::Spec {
                setting: SpecSetting::Context,
                message: format!(
                    "context: a context name is 1 to {MAX_CONTEXT_NAME} bytes, got {len} bytes"
                ),
            });
        }
        if declared.iter().any(|c| c.name == self.name) {
            return Err(Error::Spec {
                setting: SpecSetting::Context,
                message: format!(
                    "context: a context named '{}' is declared already",
                    self.name
                ),
            });
        }
        if let Some(budget) = self.budget {
            if budget.is_zero() || budget > MAX_DEADLINE {
                return Err(Error::Spec {
                    setting: SpecSetting::Context,
                    message: format!(
                        "context '{}': a budget is more than 0 and at most {} s, got {budget:?}",
                        self.name,
                        MAX_DEADLINE.as_secs()
                    ),
                });
            }
        }
        Ok(())
    }
}

/// How [`advance`](crate::ScriptDomain::advance) turns wall time into fixed steps: the step's
/// length, and how many owed steps one advance may run before it drops the rest.
///
/// ```
/// use std::time::Duration;
/// use skein::frame::FixedStep;
///
/// let fixed = FixedStep::default();
/// assert_eq!(fixed.step, Duration::from_nanos(16_666_667));
/// assert_eq!(fixed.max_catch_up, 5);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FixedStep {
    /// The length of one `fixedUpdate` step.
    pub step: Duration,
    /// The most steps one advance runs; the accumulator drops what it owes beyond that.
    pub max_catch_up: u32,
}

impl Default for FixedStep {
    /// 1/60 s (rounded to the nanosecond), at most 5 steps per advance.
    fn default() -> FixedStep {
        FixedStep {
            step: Duration::from_nanos(16_666_667),
            max_catch_up: 5,
        }
    }
}

impl FixedStep {
    pub(crate) fn check(&self) -> Result<()> {
        if self.step.is_zero() {
            return Err(Error::Spec {
                setting: SpecSetting::FixedStep,
                message: "fixed_step: the step must be longer than 0".to_owned(),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_phase_name_reads_back_as_its_phase_and_names_are_unique() {
        for phase in Phase::ALL {
            assert_eq!(Phase::from_name(phase.name()), Some(phase));
        }
        let mut names: Vec<&str> = Phase::ALL.iter().map(|p| p.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), Phase::ALL.len());
        // The scheduler indexes its handler lists by discriminant.
        for (i, phase) in Phase::ALL.into_iter().enumerate() {
            assert_eq!(phase as usize, i);
        }
        // Luau names are case-sensitive.
        assert_eq!(Phase::from_name("FixedUpdate"), None);
    }

    #[test]
    fn a_phase_given_twice_is_scheduled_once() {
        let spec = ContextSpec::new("a").phases([Phase::Update, Phase::Input, Phase::Update]);
        assert_eq!(spec.scheduled(), [Phase::Update, Phase::Input]);
    }

    #[test]
    fn a_budget_is_checked_at_both_ends() {
        let at_cap = ContextSpec::new("a").budget(MAX_DEADLINE);
        assert!(at_cap.check(&[]).is_ok());
        let past = ContextSpec::new("a").budget(MAX_DEADLINE + Duration::from_nanos(1));
        let text = past.check(&[]).unwrap_err().to_string();
        assert!(
            text.starts_with("context 'a': a budget is more than 0 and at most 60 s"),
            "{text}"
        );
    }
}
