//! What an actor (`@skein/worker`) reports when it fails, and what it does next.

use std::fmt;

use crate::principal::diagnostic::Attribution;

/// Where in its life an actor failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ActorStage {
    /// Building its VM from the domain's plan.
    Start,
    /// Loading its module: the source did not compile, raised, or returned no function.
    Load,
    /// Running its handler on a message.
    Handler,
    /// Copying the handler's reply out: it held a value that can't cross.
    Reply,
}

impl ActorStage {
    /// The stage's name, as failure texts give it.
    pub fn name(self) -> &'static str {
        match self {
            ActorStage::Start => "start",
            ActorStage::Load => "load",
            ActorStage::Handler => "handler",
            ActorStage::Reply => "reply",
        }
    }
}

impl fmt::Display for ActorStage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An actor's failure, attributed to its domain, generation and actor. It never fails the
/// domain: the domain's code reads it once from `Worker:receive`, and the host from
/// [`ScriptDomain::take_actor_failures`](crate::ScriptDomain::take_actor_failures).
///
/// `Display` gives `<domain> generation <n> worker '<name>' (<module>) failed at <stage>:
/// <message>`.
///
/// ```
/// use skein::actor::ActorStage;
/// use skein::capability::{CapabilityId, CapabilitySet, RootAuthority};
/// use skein::{DomainSpec, Pool, ScriptDomain};
/// let pool = Pool::new(1);
/// let domain = ScriptDomain::new(&pool, DomainSpec::new("main").grant(RootAuthority::new()
///     .grant(CapabilitySet::from_iter([CapabilityId::new("worker.spawn")?]))))?;
/// let state = domain.eval(r#"
///     local w = require("@skein/worker").spawn { name = "broken", source = "return 42" }
///     return w:join(20)
/// "#)?;
/// assert_eq!(state, skein::Message::String("failed".into()));
/// let failure = &domain.take_actor_failures()[0];
/// assert_eq!(failure.stage, ActorStage::Load);
/// assert_eq!(failure.attribution.actor.as_deref(), Some("broken"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ActorError {
    /// The domain, generation and actor.
    pub attribution: Attribution,
    /// The actor's module: the chunk name its source was loaded under.
    pub module: String,
    /// Where it failed.
    pub stage: ActorStage,
    /// What happened, as the Luau error said it.
    pub message: String,
}

impl fmt::Display for ActorError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} generation {} worker '{}' ({}) failed at {}: {}",
            self.attribution.domain,
            self.attribution.generation.get(),
            self.attribution.actor.as_deref().unwrap_or("?"),
            self.module,
            self.stage,
            self.message
        )
    }
}

impl std::error::Error for ActorError {}

/// What an actor does after its handler fails on a message. The host chooses it for all of a
/// domain's actors ([`DomainSpec::actor_failures`](crate::DomainSpec::actor_failures)); a
/// script can't.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum FailurePolicy {
    /// Report the failure and stop: the actor takes no more messages (the default).
    #[default]
    Stop,
    /// Report the failure and handle the next message.
    Continue,
}
