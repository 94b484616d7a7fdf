//! [`HostInterrupt`]: stopping every resource's running Luau from another thread.
//!
//! A [`ResourceHost`](super::ResourceHost) is `!Send`, so the thread that learns the host must
//! stop (a runner's signal thread, a watchdog) can't stop it. The handle does from there what
//! each domain's [`InterruptHandle`] does, for every resource at once: it interrupts the domain
//! of every resource running or starting, and of every one started after, so a start script or
//! an export spinning in a busy loop stops at its next interrupt check. The stops themselves
//! stay the engine thread's ([`ResourceHost::shutdown`](super::ResourceHost::shutdown) or
//! drop).
//!
//! This file owns the handle and the list of domains it reaches; the host keeps the list
//! current as resources start and stop.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::domain::InterruptHandle;

/// Stops the running Luau of every resource of a [`ResourceHost`](super::ResourceHost), from
/// any thread.
///
/// [`interrupt`](Self::interrupt) interrupts the domain of every resource that runs or is
/// starting ([`InterruptHandle::interrupt`]): its start scripts, its tasks and its exports
/// (called from any other resource) stop at their next interrupt check, microseconds even in
/// `while true do end`, with the error `cancelled`. A resource started afterwards is
/// interrupted as soon as its domain exists, so its start fails. The host is then good only for
/// [`shutdown`](super::ResourceHost::shutdown) or drop, on its own thread, which the caller
/// should bring about next; its `stop` handlers are interrupted as well.
///
/// ```
/// use skein::capability::Grant;
/// use skein::resource::ResourceHost;
/// use skein::Pool;
///
/// let dir = tempfile::tempdir()?;
/// std::fs::create_dir(dir.path().join("spin"))?;
/// std::fs::write(dir.path().join("spin/skein.toml"), "[resource]\nscripts = ['main.luau']\n")?;
/// std::fs::write(dir.path().join("spin/main.luau"), "while true do end")?;
/// let mut host = ResourceHost::load(&Pool::new(1), dir.path(), Grant::default())?;
/// let handle = host.interrupt_handle();
/// std::thread::spawn(move || {
///     std::thread::sleep(std::time::Duration::from_millis(50));
///     handle.interrupt();
/// });
/// let err = host.start("spin").unwrap_err(); // the busy loop ran until the interrupt
/// assert!(err.to_string().ends_with("main.luau failed: cancelled"), "{err}");
/// host.shutdown();
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Default)]
pub struct HostInterrupt {
    shared: Arc<Shared>,
}

#[derive(Default)]
struct Shared {
    /// Set by the first interrupt: every domain added after is interrupted at once.
    requested: AtomicBool,
    /// The domains of the resources running or starting, by resource name.
    domains: Mutex<Vec<(Arc<str>, InterruptHandle)>>,
}

impl HostInterrupt {
    /// Interrupts every resource's domain, and every one added from now on (see the type's
    /// docs). Calling it again does nothing more.
    pub fn interrupt(&self) {
        let domains = {
            let domains = self.domains();
            // Set while the list is held, so a domain added concurrently is either in the list
            // read here or sees the flag.
            if self.shared.requested.swap(true, Ordering::AcqRel) {
                return;
            }
            domains.clone()
        };
        for (_, handle) in domains {
            handle.interrupt();
        }
    }

    /// Whether [`interrupt`](Self::interrupt) was called.
    pub fn is_interrupted(&self) -> bool {
        self.shared.requested.load(Ordering::Acquire)
    }

    /// Adds the domain of the resource `name`, which is starting: interrupted at once when the
    /// host was interrupted.
    pub(super) fn add(&self, name: &Arc<str>, handle: InterruptHandle) {
        let interrupted = {
            let mut domains = self.domains();
            domains.push((name.clone(), handle.clone()));
            self.shared.requested.load(Ordering::Acquire)
        };
        if interrupted {
            handle.interrupt();
        }
    }

    /// Forgets the domain of the resource `name`, which stopped or failed to start.
    pub(super) fn remove(&self, name: &str) {
        self.domains().retain(|(n, _)| &**n != name);
    }

    fn domains(&self) -> MutexGuard<'_, Vec<(Arc<str>, InterruptHandle)>> {
        self.shared
            .domains
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }
}

impl fmt::Debug for HostInterrupt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HostInterrupt")
            .field("interrupted", &self.is_interrupted())
            .finish_non_exhaustive()
    }
}
