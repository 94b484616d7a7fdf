//! Who a failure belongs to ([`Attribution`]) and the structured record of a failure the
//! scheduler kept going past ([`Diagnostic`]).

use std::fmt;

use super::context::Phase;
use crate::jobs::{DomainId, Generation};

/// Who was running: the domain (its name and id), its generation and the context, if there was
/// one.
///
/// `Display` gives `domain 'game' (domain#3, generation 1, context 'ui')`; the name leads
/// because that is what a user wrote, the id tells two domains of one name apart.
///
/// ```
/// use skein::{DomainSpec, Plan, Pool, ScriptDomain};
/// let plan = Plan::new().function("observe", |lua, _| {
///     skein::require_capability("input.observe")?;
///     lua.pack_multi(())
/// });
/// let pool = Pool::new(1);
/// let domain = ScriptDomain::new(&pool, DomainSpec::new("game").plan(plan))?;
/// let err = domain.eval("observe()").unwrap_err().to_string();
/// let who = format!("domain 'game' ({}, generation 1)", domain.id());
/// assert!(err.contains(&format!("capability 'input.observe' is not granted to {who}")), "{err}");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attribution {
    /// The domain's name (empty for work of no named domain: then only the id is shown).
    pub domain_name: String,
    /// The domain.
    pub domain: DomainId,
    /// Its generation.
    pub generation: Generation,
    /// The context whose handler was running, if any.
    pub context: Option<String>,
    /// The `@skein/worker` worker whose code was running, if any.
    pub worker: Option<String>,
}

impl fmt::Display for Attribution {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.domain_name.is_empty() {
            write!(f, "{} (generation {}", self.domain, self.generation.get())?;
        } else {
            write!(
                f,
                "domain '{}' ({}, generation {}",
                self.domain_name,
                self.domain,
                self.generation.get()
            )?;
        }
        if let Some(context) = &self.context {
            write!(f, ", context '{context}'")?;
        }
        if let Some(worker) = &self.worker {
            write!(f, ", worker '{worker}'")?;
        }
        f.write_str(")")
    }
}

/// A failure the domain went on past: a handler that raised or ran out of budget.
///
/// `Display` gives `<attribution> <phase> handler failed: <message>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnostic {
    /// Who was running.
    pub attribution: Attribution,
    /// The phase it ran in, when the failure came from a phase handler.
    pub phase: Option<Phase>,
    /// What happened, with the Luau stack when there is one.
    pub message: String,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.phase {
            Some(phase) => write!(
                f,
                "{}: {phase} handler failed: {}",
                self.attribution, self.message
            ),
            None => write!(f, "{}: {}", self.attribution, self.message),
        }
    }
}
