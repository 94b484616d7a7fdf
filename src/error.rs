//! Skein's error type: one [`Error`] whose variants are the families of failure an embedder
//! tells apart, each keeping what the layer that refused knows about it.
//!
//! This file sits above `value`, `executor`, `vm` and `shared` and below `jobs` and `domain`: it
//! names the structured errors of the lower layers (a [`PushError`], a [`SharedTableError`]…)
//! and turns them into an [`Error`] here, so no lower layer ever names `Error`. The upper
//! layers build the refusal families ([`Error::Dispatch`], [`Error::Spec`], [`Error::Name`],
//! [`Error::Stopped`]) at the place that refuses.

use std::fmt;

use crate::principal::capability::{CapabilityError, OverDelegation};
use crate::shared::{PopError, PushError, QueueError, QueueOpenError, SharedTableError};
use crate::value::{ConvertError, TransferError};
use crate::vm::{self, JobFailure, LoadStage};

/// Everything that can go wrong in Skein, with the wording a user greps for.
///
/// Each refusal family is its own variant: match the variant for the family and its small
/// enum for the rule that was broken. The `Display` text is the one the reference quotes.
///
/// ```
/// use skein::job::JobOptions;
/// use skein::refusal::DispatchRefusal;
/// use skein::{DomainSpec, Error, Message, Pool, ScriptDomain};
///
/// let pool = Pool::new(1);
/// let domain = ScriptDomain::new(&pool, DomainSpec::new("main"))?;
/// let opts = JobOptions::new().supersede(true);
/// let err = domain.dispatch_with("./m", "f", Message::Nil, &opts).unwrap_err();
/// assert!(matches!(err, Error::Dispatch { refusal: DispatchRefusal::Supersede, .. }));
/// assert_eq!(
///     err.to_string(),
///     "dispatch: supersede needs a key: only the items of a key can be superseded"
/// );
/// # Ok::<(), skein::Error>(())
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// A value can't cross a VM boundary; the message names its path.
    Transfer(TransferError),
    /// A [`Message`](crate::Message) could not be read as the Rust type asked for, or a Rust
    /// value could not be made one; the message names where the value sits. `?` turns a
    /// [`ConvertError`] into this variant.
    ///
    /// ```
    /// use skein::{DomainSpec, Error, Pool, ScriptDomain};
    ///
    /// fn level(domain: &ScriptDomain) -> skein::Result<u8> {
    ///     Ok(domain.eval("return 300")?.try_into()?)
    /// }
    ///
    /// let pool = Pool::new(1);
    /// let domain = ScriptDomain::new(&pool, DomainSpec::new("main"))?;
    /// let err = level(&domain).unwrap_err();
    /// assert!(matches!(err, Error::Convert(_)));
    /// assert_eq!(err.to_string(), "value: expected an integer from 0 to 255, got the number 300");
    /// # Ok::<(), skein::Error>(())
    /// ```
    Convert(ConvertError),
    /// A host dispatch or release was refused before anything was queued.
    Dispatch {
        /// The rule the call broke.
        refusal: DispatchRefusal,
        /// The text, naming the call and the option.
        message: String,
    },
    /// A setting of a [`DomainSpec`](crate::DomainSpec) or
    /// [`ContextSpec`](crate::ContextSpec) breaks its rule; nothing was built.
    Spec {
        /// The setting that was refused.
        setting: SpecSetting,
        /// The text, naming the setting and its rule.
        message: String,
    },
    /// A name the host gave (an engine service, a kernel, an event) is malformed or taken;
    /// nothing was registered or raised.
    Name {
        /// What was wrong with which name.
        refusal: NameRefusal,
        /// The text, naming the call and the name.
        message: String,
    },
    /// A call on a domain that is stopping or stopped: a stop is final.
    Stopped {
        /// The call that was refused (`advance`, `restart`…).
        entry: &'static str,
        /// The domain's name.
        domain: String,
        /// Whether the domain is still stopping or has stopped.
        state: Halt,
        /// The call would have begun a new generation (`restart`, `reload`), which no stopped
        /// domain gets: the text says to make a new domain.
        new_generation: bool,
    },
    /// A shared queue refused to open, take a value or give one; the [`QueueError`] keeps its
    /// kind and, for a push, the value. [`source`](std::error::Error::source) answers it.
    ///
    /// ```
    /// use std::error::Error as _;
    /// use skein::shared::{PushErrorKind, QueueError};
    /// use skein::{DomainSpec, Error, Message, Pool, ScriptDomain};
    ///
    /// fn fill(domain: &ScriptDomain) -> skein::Result<()> {
    ///     let queue = domain.shared().queue("results", 1)?;
    ///     queue.push(Message::Integer(1))?;
    ///     queue.push(Message::Integer(2))?;
    ///     Ok(())
    /// }
    ///
    /// let pool = Pool::new(1);
    /// let domain = ScriptDomain::new(&pool, DomainSpec::new("main"))?;
    /// let err = fill(&domain).unwrap_err();
    /// assert!(err.source().is_some_and(|s| s.is::<QueueError>()));
    /// let Error::Queue(QueueError::Push(refused)) = err else { panic!("{err:?}") };
    /// assert_eq!(refused.kind, PushErrorKind::Full);
    /// assert_eq!(refused.into_inner(), Message::Integer(2));
    /// # Ok::<(), skein::Error>(())
    /// ```
    Queue(QueueError),
    /// A shared-table operation was refused; its [`kind`](SharedTableError::kind) tells why.
    SharedTable(SharedTableError),
    /// Luau code raised an error; the text carries the Luau stack.
    Script(String),
    /// A job failed: which job, module and entry, what happened and the Luau stack.
    Job(Box<JobFailure>),
    /// The promise was cancelled before it settled.
    Cancelled,
    /// An [`InterruptHandle`](crate::InterruptHandle) stopped the domain's work while the call
    /// ran: `<entry>: domain '<name>' was interrupted`.
    Interrupted {
        /// The call that was cut short (`run_until_idle`).
        entry: &'static str,
        /// The domain's name.
        domain: String,
    },
    /// The value of a [`Promise`](crate::Promise) was taken already.
    PromiseTaken,
    /// The pool has shut down.
    PoolShutDown,
    /// Building a VM failed.
    Vm(String),
    /// A memory budget refused what was asked: the pool's, for the VMs a domain or a worker
    /// actor needs, or a domain's host memory. The text names the budget, what it would hold
    /// and its size.
    Memory(String),
    /// Reading a file failed.
    Io(std::io::Error),
    /// A scheduler entry (`run_phase`, `advance`) was called while one of the same domain was
    /// running: a handler reached back into its own domain through host code. The field names
    /// the entry that was refused.
    Reentrant(&'static str),
    /// A capability check failed ([`require_capability`](crate::capability::require_capability)).
    Capability(CapabilityError),
    /// A delegation asked for capabilities the delegator does not hold.
    OverDelegation(OverDelegation),
    /// [`ScriptDomain::reload`](crate::ScriptDomain::reload) discarded the generation it
    /// built: its load failed at `stage`. The running generation is untouched.
    ReloadFailed {
        /// Where the load failed.
        stage: LoadStage,
        /// What went wrong, with the Luau stack when there is one.
        message: String,
    },
    /// [`ScriptDomain::run_until_idle`](crate::ScriptDomain::run_until_idle) of a domain whose
    /// host asked for a stall check ([`DomainSpec::detect_stalls`](crate::DomainSpec::detect_stalls))
    /// found that nothing can ever wake its tasks again.
    Stalled {
        /// Each wait of the engine VM: `path:line waits on ...`, oldest task first, then the
        /// pending promises no task awaits.
        waits: Vec<String>,
    },
    /// A [`ResourceHost`](crate::resource::ResourceHost) refused to load, start, stop or reload a
    /// resource; what was running before runs still, and nothing of the refused start does.
    Resource {
        /// What was wrong.
        refusal: ResourceRefusal,
        /// The text, naming the resource (and the file, key and line for a manifest).
        message: String,
    },
}

/// `Result<T, skein::Error>`.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The rule a refused host dispatch or release broke ([`Error::Dispatch`]).
///
/// ```
/// use skein::refusal::DispatchRefusal;
/// use skein::{DomainSpec, Error, Pool, ScriptDomain};
///
/// let pool = Pool::new(1);
/// let domain = ScriptDomain::new(&pool, DomainSpec::new("main"))?;
/// let err = domain.release("").unwrap_err();
/// assert!(matches!(err, Error::Dispatch { refusal: DispatchRefusal::Key, .. }));
/// assert_eq!(err.to_string(), "release: key must be 1 to 256 bytes, got 0 bytes");
/// # Ok::<(), skein::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DispatchRefusal {
    /// A key of 0 or more than 256 bytes.
    Key,
    /// `supersede` without a key.
    Supersede,
    /// A deadline of zero, or past the domain's cap.
    Deadline,
    /// The module can't be resolved.
    Module,
    /// The key is new and the pool holds as many keys as it may.
    KeyLimit,
}

/// The setting of a spec that was refused ([`Error::Spec`]).
///
/// ```
/// use skein::refusal::SpecSetting;
/// use skein::{ContextSpec, DomainSpec, Error};
///
/// let err = DomainSpec::new("game").context(ContextSpec::new("")).unwrap_err();
/// assert!(matches!(err, Error::Spec { setting: SpecSetting::Context, .. }));
/// assert_eq!(err.to_string(), "context: a context name is 1 to 64 bytes, got 0 bytes");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SpecSetting {
    /// A context: its name is not 1 to 64 bytes or is declared already, or its budget is zero
    /// or past [`MAX_DEADLINE`](crate::job::JobOptions::MAX_DEADLINE).
    Context,
    /// The fixed step is zero ([`DomainSpec::fixed_step`](crate::DomainSpec::fixed_step)).
    FixedStep,
    /// The event limits' `per_drain` or `name` is zero.
    EventLimits,
    /// The budget of one run of a `@skein/worker` handler
    /// ([`DomainSpec::actor_budget`](crate::DomainSpec::actor_budget)).
    ActorBudget,
    /// The run deadline ([`DomainSpec::run_deadline`](crate::DomainSpec::run_deadline)).
    RunDeadline,
    /// The load bound ([`DomainSpec::load_bound`](crate::DomainSpec::load_bound)).
    LoadBound,
    /// The frame budget ([`DomainSpec::frame_budget`](crate::DomainSpec::frame_budget)).
    FrameBudget,
    /// The host memory ([`DomainSpec::host_memory`](crate::DomainSpec::host_memory)).
    HostMemory,
}

/// What was wrong with a name the host gave ([`Error::Name`]).
///
/// ```
/// use skein::refusal::NameRefusal;
/// use skein::{DomainSpec, Error, Message, Pool, ScriptDomain};
///
/// let pool = Pool::new(1);
/// let domain = ScriptDomain::new(&pool, DomainSpec::new("main"))?;
/// domain.register_kernel("sum", |m: Message| Ok(m))?;
/// let err = domain.register_kernel("sum", |m: Message| Ok(m)).unwrap_err();
/// assert!(matches!(err, Error::Name { refusal: NameRefusal::KernelTaken, .. }));
/// assert_eq!(err.to_string(), "register_kernel: kernel 'sum' is registered already");
/// # Ok::<(), skein::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum NameRefusal {
    /// An engine service name that is not 1 to 256 bytes of dotted Luau identifiers.
    ServiceName,
    /// An engine service registered already.
    ServiceTaken,
    /// An engine service whose dotted path can't be made in the engine VM: a value is there
    /// already, or a table on the way is not one a service may be added to.
    ServicePath,
    /// A kernel name that is not 1 to 256 bytes.
    KernelName,
    /// A kernel registered already.
    KernelTaken,
    /// An event name that is empty or too long.
    EventName,
}

/// How far a domain that refused an [`Error::Stopped`] call has stopped.
///
/// ```
/// use skein::refusal::Halt;
/// use skein::{DomainSpec, Error, Phase, Pool, ScriptDomain};
///
/// let pool = Pool::new(1);
/// let mut domain = ScriptDomain::new(&pool, DomainSpec::new("game"))?;
/// domain.stop();
/// let err = domain.run_phase(Phase::Update, &[]).unwrap_err();
/// assert!(matches!(err, Error::Stopped { state: Halt::Stopped, new_generation: false, .. }));
/// assert_eq!(err.to_string(), "run_phase: domain 'game' is stopped");
/// # Ok::<(), skein::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Halt {
    /// Its shutdown handlers are running.
    Stopping,
    /// It has stopped.
    Stopped,
}

/// Why a [`ResourceHost`](crate::resource::ResourceHost) refused ([`Error::Resource`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ResourceRefusal {
    /// A `skein.toml` or `skein-host.toml` that can't be read, is not TOML, has a key it does
    /// not know or a value of the wrong type.
    Manifest,
    /// No resource of that name was loaded.
    Unknown,
    /// A dependency that is not loaded, or (for a start on demand) not running.
    MissingDependency,
    /// Dependencies that form a cycle, named in order (`a -> b -> a`).
    DependencyCycle,
    /// A resource that names itself among its dependencies.
    SelfDependency,
    /// A declared export that is not a global function once the scripts ran.
    MissingExport,
    /// A script of the resource failed to load or raised while it started.
    Script,
    /// A capability or file root that the host's own grant does not hold.
    Grant,
    /// A start of a running resource, or a stop of one that is not running.
    State,
}

impl Halt {
    fn name(self) -> &'static str {
        match self {
            Halt::Stopping => "stopping",
            Halt::Stopped => "stopped",
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Transfer(e) => write!(f, "{e}"),
            Error::Convert(e) => write!(f, "{e}"),
            Error::Dispatch { message, .. }
            | Error::Resource { message, .. }
            | Error::Spec { message, .. }
            | Error::Name { message, .. } => f.write_str(message),
            Error::Stopped {
                entry,
                domain,
                state,
                new_generation,
            } => {
                write!(f, "{entry}: domain '{domain}' is {}", state.name())?;
                if *new_generation {
                    f.write_str("; a stopped domain stays stopped, make a new one")?;
                }
                Ok(())
            }
            Error::Queue(e) => write!(f, "{e}"),
            Error::SharedTable(e) => write!(f, "{e}"),
            Error::Script(m) => f.write_str(m),
            Error::Job(failure) => write!(f, "{failure}"),
            Error::Cancelled => write!(f, "cancelled"),
            Error::Interrupted { entry, domain } => {
                write!(f, "{entry}: domain '{domain}' was interrupted")
            }
            Error::PromiseTaken => write!(f, "the promise's value was already taken"),
            Error::PoolShutDown => write!(f, "the pool has shut down"),
            Error::Vm(m) => write!(f, "could not build a VM: {m}"),
            Error::Memory(m) => write!(f, "not enough memory: {m}"),
            Error::Io(e) => write!(f, "{e}"),
            Error::Reentrant(entry) => write!(
                f,
                "{entry}: re-entered the scheduler of a domain from one of its own handlers; \
                 queue an event or a task for the next frame instead"
            ),
            Error::Capability(e) => write!(f, "{e}"),
            Error::OverDelegation(e) => write!(f, "{e}"),
            Error::ReloadFailed { stage, message } => write!(
                f,
                "reload: the new generation failed to {stage}, the running one is kept: {message}"
            ),
            Error::Stalled { waits } => write!(
                f,
                "the run can never end: nothing can settle what its tasks wait on: {}",
                waits.join("; ")
            ),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Transfer(e) => Some(e),
            Error::Convert(e) => Some(e),
            Error::Queue(e) => Some(e),
            Error::SharedTable(e) => Some(e),
            Error::Io(e) => Some(e),
            Error::Capability(e) => Some(e),
            Error::OverDelegation(e) => Some(e),
            _ => None,
        }
    }
}

impl From<TransferError> for Error {
    fn from(e: TransferError) -> Self {
        Error::Transfer(e)
    }
}

impl From<ConvertError> for Error {
    fn from(e: ConvertError) -> Self {
        Error::Convert(e)
    }
}

impl From<QueueError> for Error {
    fn from(e: QueueError) -> Self {
        Error::Queue(e)
    }
}

impl From<QueueOpenError> for Error {
    fn from(e: QueueOpenError) -> Self {
        Error::Queue(QueueError::Open(e))
    }
}

impl From<PushError> for Error {
    fn from(e: PushError) -> Self {
        Error::Queue(QueueError::Push(e))
    }
}

impl From<PopError> for Error {
    fn from(e: PopError) -> Self {
        Error::Queue(QueueError::Pop(e))
    }
}

impl From<SharedTableError> for Error {
    fn from(e: SharedTableError) -> Self {
        Error::SharedTable(e)
    }
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error::Io(e)
    }
}

impl From<CapabilityError> for Error {
    fn from(e: CapabilityError) -> Self {
        Error::Capability(e)
    }
}

impl From<OverDelegation> for Error {
    fn from(e: OverDelegation) -> Self {
        Error::OverDelegation(e)
    }
}

impl From<mlua::Error> for Error {
    fn from(e: mlua::Error) -> Self {
        Error::Script(vm::error_message(&e))
    }
}
