//! The authority a running task holds, installed on its thread for the length of one resume.
//!
//! # The thread-local swap
//!
//! Each thread has one slot holding a pointer to the [`Authority`] of the task it is running,
//! or null. The scheduler fills it at every resume of a task ([`install`]) and the guard puts
//! the previous pointer back when the resume ends (a yield, a return or an error), so resumes
//! that nest (a task resuming another) restore in order. No reference count moves: the slot
//! borrows the authority from the task's owner, which the scheduler keeps alive across the
//! resume. [`require_capability`] reads the slot, so a check costs one thread-local load and a
//! set lookup, and two domains' tasks interleaved on one thread each see only their own grant.

use std::cell::Cell;
use std::fmt;
use std::marker::PhantomData;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::grant::{lexical_absolute_in, Grant, Root, FILESYSTEM_READ, FILESYSTEM_WRITE};
use super::id::{validate, CapabilityId, InvalidCapability};
use super::set::CapabilitySet;
pub use crate::principal::diagnostic::Attribution;
use crate::principal::diagnostic::Diagnostics;
use crate::principal::profile::{self, Profile};
use crate::principal::Generation;
use crate::principal::{Diagnostic, DiagnosticKind, ProfileKind, Severity};

/// How many denial texts a domain keeps for its reports; more are counted, not kept.
const DENIALS_KEPT: usize = 256;

/// A capability check failed: the capability and who asked for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CapabilityDenied {
    /// The capability that was not granted.
    pub capability: CapabilityId,
    /// Who asked.
    pub attribution: Attribution,
    /// For a file-system check that failed on its scope: the path (absolute, `..` taken off
    /// by name) that was refused.
    pub path: Option<PathBuf>,
    /// For a file-system check: the roots granted for the capability when `path` lies outside
    /// all of them, or the roots `path` lies below by name when it `escapes`. Empty otherwise.
    pub roots: Vec<PathBuf>,
    /// `path` lies below `roots` by name, but a symbolic link on its way leads out of them.
    pub escapes: bool,
}

/// `'a'` or `'a', 'b'`.
fn quoted(paths: &[PathBuf]) -> String {
    let quoted: Vec<String> = paths.iter().map(|p| format!("'{}'", p.display())).collect();
    quoted.join(", ")
}

impl fmt::Display for CapabilityDenied {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.path {
            None => write!(
                f,
                "capability '{}' denied to {}",
                self.capability, self.attribution
            ),
            Some(path) if self.escapes => write!(
                f,
                "permission denied: '{}' leads out of the {} {} granted for '{}' to {}: a \
                 symbolic link on its way points outside",
                path.display(),
                if self.roots.len() == 1 {
                    "root"
                } else {
                    "roots"
                },
                quoted(&self.roots),
                self.capability,
                self.attribution
            ),
            Some(path) => {
                write!(
                    f,
                    "permission denied: '{}' is outside every root granted for '{}' to {}",
                    path.display(),
                    self.capability,
                    self.attribution
                )?;
                if self.roots.is_empty() {
                    write!(f, "; it holds no root")
                } else {
                    write!(f, "; its roots: {}", quoted(&self.roots))
                }
            }
        }
    }
}

impl std::error::Error for CapabilityDenied {}

/// Why [`require_capability`] refused.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CapabilityError {
    /// The running task's authority does not hold the capability (or the path is out of scope).
    Denied(Box<CapabilityDenied>),
    /// The check ran outside any task: host code called it directly, so no authority is
    /// installed on the thread. Nothing is counted.
    NoAuthority(CapabilityId),
    /// The name is not a capability name.
    Invalid(InvalidCapability),
}

impl fmt::Display for CapabilityError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CapabilityError::Denied(d) => write!(f, "{d}"),
            CapabilityError::NoAuthority(id) => write!(
                f,
                "capability '{id}' was checked outside any task: no authority is installed on this thread"
            ),
            CapabilityError::Invalid(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for CapabilityError {}

impl From<CapabilityError> for mlua::Error {
    fn from(e: CapabilityError) -> Self {
        mlua::Error::runtime(e.to_string())
    }
}

/// The denials of one domain, across its generations: counted, the latest texts kept, and each
/// sent as it happens to the domain's profile sink (an instant) and diagnostic sink, on the
/// thread that was denied (both sinks are `Send + Sync` for that).
#[derive(Default)]
pub(crate) struct DenialLog {
    count: AtomicU64,
    recent: Mutex<Vec<String>>,
    profile: Profile,
    diagnostics: Diagnostics,
}

impl DenialLog {
    /// A log that also sends each denial to the domain's sinks.
    pub(crate) fn new(profile: Profile, diagnostics: Diagnostics) -> DenialLog {
        DenialLog {
            profile,
            diagnostics,
            ..DenialLog::default()
        }
    }

    fn record(&self, denied: &CapabilityDenied) {
        self.count.fetch_add(1, Ordering::Relaxed);
        {
            let mut recent = self.recent.lock().unwrap_or_else(|e| e.into_inner());
            if recent.len() < DENIALS_KEPT {
                recent.push(denied.to_string());
            }
        }
        if let Some(sink) = &self.profile {
            profile::instant(
                &**sink,
                ProfileKind::Denial,
                denied.attribution.clone(),
                denied.capability.to_string(),
            );
        }
        if let Some(sink) = &self.diagnostics {
            let mut diagnostic = Diagnostic::new(
                DiagnosticKind::CapabilityDenied,
                denied.attribution.clone(),
                denied.to_string(),
            );
            diagnostic.capability = Some(denied.capability.clone());
            sink.diagnostic(Severity::Error, &diagnostic);
        }
    }

    /// How many checks were denied.
    pub(crate) fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    /// Takes the kept denial texts, oldest first.
    pub(crate) fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.recent.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// What a piece of work may do, and who it is: a grant with its attribution. Pool items carry
/// one to the worker; tasks run under their owner's.
pub(crate) struct Authority {
    grant: Grant,
    attribution: Attribution,
    denials: Arc<DenialLog>,
}

impl Authority {
    pub(crate) fn new(grant: Grant, attribution: Attribution, denials: Arc<DenialLog>) -> Self {
        Authority {
            grant,
            attribution,
            denials,
        }
    }

    /// The same grant for the domain's next generation, counting into the same log.
    pub(crate) fn for_generation(&self, generation: Generation) -> Authority {
        Authority {
            grant: self.grant.clone(),
            attribution: Attribution {
                generation,
                ..self.attribution.clone()
            },
            denials: self.denials.clone(),
        }
    }

    /// An authority over `grant` (a part of this one's), counting into the same log, named
    /// for `context` when it is a context's.
    pub(crate) fn narrowed(&self, grant: Grant, context: Option<&str>) -> Authority {
        Authority {
            grant,
            attribution: Attribution {
                context: context.map(str::to_owned),
                ..self.attribution.clone()
            },
            denials: self.denials.clone(),
        }
    }

    /// Who holds it.
    pub(crate) fn attribution(&self) -> &Attribution {
        &self.attribution
    }

    pub(crate) fn grant(&self) -> &Grant {
        &self.grant
    }

    pub(crate) fn denials(&self) -> &Arc<DenialLog> {
        &self.denials
    }

    fn deny(&self, capability: CapabilityId, scope: Option<Scope>) -> CapabilityError {
        let (path, roots, escapes) = match scope {
            None => (None, Vec::new(), false),
            Some(s) => (Some(s.path), s.roots, s.escapes),
        };
        let denied = CapabilityDenied {
            capability,
            attribution: self.attribution.clone(),
            path,
            roots,
            escapes,
        };
        self.denials.record(&denied);
        CapabilityError::Denied(Box::new(denied))
    }

    fn check(&self, name: &str) -> Result<(), CapabilityError> {
        if self.grant.capabilities().contains_name(name) {
            Ok(())
        } else {
            Err(self.deny(known(name), None))
        }
    }
}

thread_local! {
    /// The authority of the task this thread is running, or null outside any task.
    static CURRENT: Cell<*const Authority> = const { Cell::new(std::ptr::null()) };
}

/// Puts the previous authority back when a resume ends.
pub(crate) struct Installed<'a> {
    previous: *const Authority,
    _borrow: PhantomData<&'a Authority>,
}

/// Installs `authority` on this thread until the guard drops. `None` leaves the slot empty
/// (work with no authority: checks answer [`CapabilityError::NoAuthority`]). The slot holds
/// `Arc::as_ptr`, so [`current_arc`] can hand out a counted handle.
#[inline]
pub(crate) fn install(authority: Option<&Arc<Authority>>) -> Installed<'_> {
    let ptr = authority.map_or(std::ptr::null(), Arc::as_ptr);
    let previous = CURRENT.with(|c| c.replace(ptr));
    Installed {
        previous,
        _borrow: PhantomData,
    }
}

impl Drop for Installed<'_> {
    #[inline]
    fn drop(&mut self) {
        let previous = self.previous;
        CURRENT.with(|c| c.set(previous));
    }
}

/// Calls `f` with the authority installed on this thread.
fn with_current<R>(f: impl FnOnce(Option<&Authority>) -> R) -> R {
    let ptr = CURRENT.with(Cell::get);
    // SAFETY: the slot is either null or was set by `install` from a `&'a Authority` whose
    // guard (`Installed<'a>`) is still alive: guards are stack values dropped in reverse order,
    // each restoring the pointer it replaced, and none is leaked (the type is crate-private and
    // every use binds it to a local for the length of one resume). So a non-null pointer here
    // points to an `Authority` borrowed for at least as long as this call.
    let authority = unsafe { ptr.as_ref() };
    f(authority)
}

/// The authority installed on this thread, as an owned handle for work that leaves it (a pool
/// item dispatched by the running task).
pub(crate) fn current_arc() -> Option<Arc<Authority>> {
    let ptr = CURRENT.with(Cell::get);
    if ptr.is_null() {
        return None;
    }
    // SAFETY: a non-null slot holds `Arc::as_ptr` of an `Arc<Authority>` that `install`
    // borrowed and that outlives its guard (see `with_current`), so the allocation is live and
    // its strong count is at least one; adding one and taking ownership of that one is sound.
    unsafe {
        Arc::increment_strong_count(ptr);
        Some(Arc::from_raw(ptr))
    }
}

/// The capabilities of `wanted` that the task running on this thread does not hold, in order:
/// what a callback bound now to work that holds `wanted` would gain over the code binding it.
/// Empty outside any task (host code binds as the domain).
pub(crate) fn lacking(wanted: &CapabilitySet) -> Vec<CapabilityId> {
    with_current(|authority| match authority {
        None => Vec::new(),
        Some(a) => {
            let held = a.grant.capabilities();
            wanted
                .iter()
                .filter(|c| !held.contains(c))
                .cloned()
                .collect()
        }
    })
}

/// The authority installed on this thread, or `fallback` when none is (host code).
pub(crate) fn current_or(fallback: &Arc<Authority>) -> Arc<Authority> {
    current_arc().unwrap_or_else(|| fallback.clone())
}

/// Checks that the task running on this thread holds the capability `name`. A native service
/// calls it at its entry; a [`Plan::function`](crate::Plan::function) can too, and `?` turns the
/// refusal into the Luau error the script sees.
///
/// ```
/// use skein::capability::{
///     require_capability, CapabilityError, CapabilityId, CapabilitySet, RootAuthority,
/// };
/// use skein::{DomainSpec, Message, Plan, Pool, ScriptDomain};
///
/// let plan = Plan::new().function("observe", |lua, _| {
///     require_capability("input.observe")?;
///     lua.pack_multi("observed")
/// });
/// let pool = Pool::new(1);
/// let open = RootAuthority::new().grant(CapabilitySet::from_iter([CapabilityId::new("input.observe")?]));
/// let allowed = ScriptDomain::new(&pool, DomainSpec::new("allowed").plan(plan.clone()).grant(open))?;
/// assert_eq!(allowed.eval("return observe()")?, Message::String("observed".into()));
///
/// let denied = ScriptDomain::new(&pool, DomainSpec::new("denied").plan(plan))?;
/// let err = denied.eval("return observe()").unwrap_err().to_string();
/// assert!(err.contains("capability 'input.observe' denied to domain 'denied' (domain#"));
/// assert_eq!(denied.denials(), 1);
///
/// // Host code outside any task has no authority installed.
/// let outside = require_capability("input.observe").unwrap_err();
/// assert!(matches!(outside, CapabilityError::NoAuthority(_)));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Errors
/// [`CapabilityError::Denied`] (counted in the domain's [`denials`](crate::ScriptDomain::denials)
/// and reported) when the running task's authority does not hold it;
/// [`CapabilityError::NoAuthority`] outside any task; [`CapabilityError::Invalid`] for a name
/// that is not a capability name.
pub fn require_capability(name: &str) -> Result<(), CapabilityError> {
    validate(name).map_err(CapabilityError::Invalid)?;
    with_current(|authority| match authority {
        Some(a) => a.check(name),
        None => Err(CapabilityError::NoAuthority(known(name))),
    })
}

/// What a file-system denial refused: the path, the roots, and whether it escaped them.
struct Scope {
    path: PathBuf,
    roots: Vec<PathBuf>,
    escapes: bool,
}

fn fs_capability(write: bool) -> &'static str {
    if write {
        FILESYSTEM_WRITE
    } else {
        FILESYSTEM_READ
    }
}

/// Checks `filesystem.read` or `filesystem.write` and finds the roots granted for it that
/// `path` (absolute, lexically normal) lies below by name, each with the path relative to it,
/// deepest root first. Nothing is opened here: the caller opens the relative path beneath a
/// root's handle, which refuses a link out of the root ([`deny_escape`] reports that).
///
/// # Errors
/// Denied (counted and reported) when the capability is not granted, or when `path` lies
/// below none of its roots.
pub(crate) fn require_path(
    write: bool,
    path: &Path,
) -> Result<Vec<(Root, PathBuf)>, CapabilityError> {
    let name = fs_capability(write);
    require_capability(name)?;
    with_current(|authority| {
        let Some(a) = authority else {
            return Err(CapabilityError::NoAuthority(known(name)));
        };
        let roots = a.grant.dirs(write);
        let mut below: Vec<(Root, PathBuf)> = roots
            .iter()
            .filter_map(|root| Some((root.clone(), root.beneath(path)?.to_owned())))
            .collect();
        if below.is_empty() {
            let scope = Scope {
                path: path.to_owned(),
                roots: roots.iter().map(|r| r.path().to_owned()).collect(),
                escapes: false,
            };
            return Err(a.deny(known(name), Some(scope)));
        }
        below.sort_by_key(|(_, rel)| rel.components().count());
        Ok(below)
    })
}

/// `path` as an `@skein/fs` call names it, made absolute (`..` taken off by name) from the
/// working folder of the running task's grant ([`Grant::with_working_dir`]), else from the
/// process's current directory.
///
/// # Errors
/// The current directory cannot be read (a relative `path` with no working folder needs it).
pub(crate) fn resolve_path(path: &Path) -> std::io::Result<PathBuf> {
    with_current(|authority| {
        let base = authority.and_then(|a| a.grant.working_dir());
        lexical_absolute_in(base, path)
    })
}

/// Denies (counts and reports) `path`, which lies below `roots` by name but leads out of each
/// of them through a symbolic link, for the task running on this thread.
pub(crate) fn deny_escape(write: bool, path: &Path, roots: Vec<PathBuf>) -> CapabilityError {
    let name = fs_capability(write);
    with_current(|authority| match authority {
        Some(a) => a.deny(
            known(name),
            Some(Scope {
                path: path.to_owned(),
                roots,
                escapes: true,
            }),
        ),
        None => CapabilityError::NoAuthority(known(name)),
    })
}

fn known(name: &str) -> CapabilityId {
    CapabilityId::new(name).expect("validated before")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::principal::capability::{CapabilitySet, RootAuthority};
    use crate::principal::DomainId;

    fn authority(names: &[&str]) -> Arc<Authority> {
        let set = names
            .iter()
            .map(|n| CapabilityId::new(n).unwrap())
            .collect();
        let grant = RootAuthority::new().grant(CapabilitySet::from_iter::<Vec<_>>(set));
        let attribution = Attribution {
            domain_name: String::new(),
            domain: DomainId(7),
            generation: Generation(2),
            context: None,
            actor: None,
        };
        Arc::new(Authority::new(grant, attribution, Arc::default()))
    }

    #[test]
    fn lacking_is_what_the_installed_authority_does_not_hold() {
        let wanted: CapabilitySet = ["a.b", "c.d"]
            .iter()
            .map(|n| CapabilityId::new(n).unwrap())
            .collect();
        // Host code (nothing installed) binds as the domain: nothing is lacking.
        assert!(lacking(&wanted).is_empty());
        let narrow = authority(&["a.b"]);
        let _n = install(Some(&narrow));
        assert_eq!(lacking(&wanted), [CapabilityId::new("c.d").unwrap()]);
        let wide = authority(&["a.b", "c.d", "e.f"]);
        let _w = install(Some(&wide));
        assert!(lacking(&wanted).is_empty());
        // Asking is not a check: nothing is counted.
        assert_eq!(narrow.denials.count() + wide.denials.count(), 0);
    }

    #[test]
    fn install_nests_and_restores() {
        let outer = authority(&["a.b"]);
        let inner = authority(&[]);
        assert!(matches!(
            require_capability("a.b"),
            Err(CapabilityError::NoAuthority(_))
        ));
        {
            let _o = install(Some(&outer));
            assert_eq!(require_capability("a.b"), Ok(()));
            let handle = current_arc().expect("installed");
            assert!(Arc::ptr_eq(&handle, &outer));
            {
                let _i = install(Some(&inner));
                let err = require_capability("a.b").unwrap_err();
                assert_eq!(
                    err.to_string(),
                    "capability 'a.b' denied to domain#7 (generation 2)"
                );
                assert_eq!(inner.denials.count(), 1);
            }
            assert_eq!(require_capability("a.b"), Ok(()));
        }
        assert!(matches!(
            require_capability("a.b"),
            Err(CapabilityError::NoAuthority(_))
        ));
        assert_eq!(
            require_capability("A").unwrap_err().to_string(),
            "invalid capability name 'A': each dotted segment must be a lowercase letter \
             followed by lowercase letters, digits or '_'"
        );
    }
}
