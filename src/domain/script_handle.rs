//! [`ScriptHandle`]: a main script the host started with
//! [`run_file`](crate::ScriptDomain::run_file), which the host polls from its frame loop or
//! waits on. This file owns the handle and the slot a script's completion writes; starting the
//! script is `scripts.rs`'s.

use std::cell::RefCell;
use std::fmt;
use std::rc::Rc;
use std::time::{Duration, Instant};

use crate::domain::ScriptDomain;
use crate::error::{Error, Result};
use crate::principal::Generation;
use crate::value::Message;

/// Where a main script is: still running (loading, or parked on a wait), returned, or failed.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ScriptStatus {
    /// It has not returned or raised yet.
    Running,
    /// It returned.
    Returned,
    /// It raised: the text is the report's message (`script main.luau failed: ...` and the
    /// Luau stack).
    Failed(String),
}

/// What a script's completion writes: its status for the handle, and its answer for `eval`.
#[derive(Default)]
pub(super) struct ChunkEnd {
    pub(super) status: Option<ScriptStatus>,
    pub(super) answer: Option<Result<Message>>,
}

/// The slot a chunk's completion writes and its handle reads.
pub(super) type ChunkSlot = Rc<RefCell<ChunkEnd>>;

/// A main script started by [`run_file`](ScriptDomain::run_file): poll it from a frame loop with
/// [`status`](Self::status), or block on it with [`wait`](Self::wait). The script's failure is
/// also a [`Report`](crate::Report) (kind [`Script`](crate::ReportKind::Script)), and makes the
/// domain [`Failed`](crate::lifecycle::DomainState::Failed), whether the host holds the handle or not:
/// dropping it changes nothing.
///
/// ```
/// use std::time::Duration;
/// use skein::lifecycle::DomainState;
/// use skein::{DomainSpec, Pool, ScriptDomain, ScriptStatus};
///
/// let dir = tempfile::tempdir()?;
/// let path = dir.path().join("main.luau");
/// std::fs::write(&path, "task.wait(0.01)\nerror('late')")?;
/// let pool = Pool::new(1);
/// let domain = ScriptDomain::new(&pool, DomainSpec::new("game"))?;
/// let script = domain.run_file(&path, &[])?;
/// while script.status() == ScriptStatus::Running {
///     domain.frame(Duration::from_millis(1));
///     # std::thread::sleep(Duration::from_millis(1));
/// }
/// assert!(matches!(script.status(), ScriptStatus::Failed(text) if text.contains("main.luau:2: late")));
/// assert_eq!(domain.state(), DomainState::Failed);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct ScriptHandle {
    name: String,
    generation: Generation,
    slot: ChunkSlot,
}

impl ScriptHandle {
    pub(super) fn new(name: String, generation: Generation, slot: ChunkSlot) -> ScriptHandle {
        ScriptHandle {
            name,
            generation,
            slot,
        }
    }

    /// What the script is named in reports: `script main.luau`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Where the script is now. Never blocks.
    pub fn status(&self) -> ScriptStatus {
        self.slot
            .borrow()
            .status
            .clone()
            .unwrap_or(ScriptStatus::Running)
    }

    /// Whether the script has returned or raised.
    pub fn is_finished(&self) -> bool {
        self.slot.borrow().status.is_some()
    }

    /// Pumps `domain` (its mailbox, timers and registered jobs, as
    /// [`run_until_idle`](ScriptDomain::run_until_idle) does) until the script returns or
    /// raises. Unlike `run_until_idle` it does not wait for the rest of the domain's work: it
    /// ends with the script.
    ///
    /// ```
    /// use skein::{DomainSpec, Pool, ScriptDomain};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let path = dir.path().join("main.luau");
    /// std::fs::write(&path, "task.wait(0.01)\nerror('late')")?;
    /// let pool = Pool::new(1);
    /// let domain = ScriptDomain::new(&pool, DomainSpec::new("game"))?;
    /// let err = domain.run_file(&path, &[])?.wait(&domain).unwrap_err();
    /// assert!(err.to_string().contains("main.luau:2: late"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::Script`] with the script's failure when it raised; [`Error::Script`] saying so
    /// when nothing is left that could wake it (no task ready, no timer, no promise pending,
    /// no registered job live) or that its generation ended (a restart or reload);
    /// [`Error::Stopped`] when the domain is stopped.
    ///
    /// It blocks for as long as the script runs: while a live registered job keeps the
    /// domain busy, a script parked on a wait nothing will end blocks it for good, so a host
    /// with such jobs polls [`status`](Self::status) from its frames instead.
    pub fn wait(&self, domain: &ScriptDomain) -> Result<()> {
        // Without a deadline it answers only once the script has ended.
        self.wait_until(domain, None).map(drop)
    }

    /// [`wait`](Self::wait) for at most `timeout`: answers [`ScriptStatus::Returned`] when the
    /// script returned, [`ScriptStatus::Running`] when the timeout passed first. While it waits,
    /// the engine thread parks on the domain's mailbox and timers (as
    /// [`run_until_idle`](ScriptDomain::run_until_idle) does), never spinning.
    ///
    /// ```
    /// use std::time::Duration;
    /// use skein::{DomainSpec, Pool, ScriptDomain, ScriptStatus};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let path = dir.path().join("main.luau");
    /// std::fs::write(&path, "task.wait(0.2)")?;
    /// let pool = Pool::new(1);
    /// let domain = ScriptDomain::new(&pool, DomainSpec::new("game"))?;
    /// let script = domain.run_file(&path, &[])?;
    /// let status = script.wait_timeout(&domain, Duration::from_millis(10))?;
    /// assert_eq!(status, ScriptStatus::Running);
    /// let status = script.wait_timeout(&domain, Duration::from_secs(10))?;
    /// assert_eq!(status, ScriptStatus::Returned);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// As [`wait`](Self::wait).
    pub fn wait_timeout(&self, domain: &ScriptDomain, timeout: Duration) -> Result<ScriptStatus> {
        // A timeout too long to add to the clock waits as `wait` does.
        self.wait_until(domain, Instant::now().checked_add(timeout))
    }

    /// Pumps the domain until the script ends or `until` passes.
    fn wait_until(&self, domain: &ScriptDomain, until: Option<Instant>) -> Result<ScriptStatus> {
        // At least one round, so a zero timeout still moves the domain on once.
        let mut pumped = false;
        loop {
            match self.status() {
                ScriptStatus::Returned => return Ok(ScriptStatus::Returned),
                ScriptStatus::Failed(text) => return Err(Error::Script(text)),
                ScriptStatus::Running => {}
            }
            if pumped && until.is_some_and(|at| Instant::now() >= at) {
                return Ok(ScriptStatus::Running);
            }
            pumped = true;
            domain.refuse_if_stopped("ScriptHandle::wait")?;
            if domain.generation() != self.generation {
                return Err(Error::Script(format!(
                    "{}: its generation ended before it did",
                    self.name
                )));
            }
            if !domain.pump_once_until(true, true, until) {
                return Err(Error::Script(format!(
                    "{}: the script is waiting on something that will never happen",
                    self.name
                )));
            }
        }
    }
}

impl fmt::Debug for ScriptHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScriptHandle")
            .field("name", &self.name)
            .field("status", &self.status())
            .finish()
    }
}
