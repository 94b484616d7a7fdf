//! The default memory budget of a pool: what this process can really get.
//!
//! A process meets the first of two ceilings: the address space it may map (`RLIMIT_AS`, set by
//! `ulimit -v`, a container runtime or a test harness) and the machine's memory. Past either,
//! an allocation fails, and in Rust, or in mlua's allocator for a VM's heap, a failed
//! allocation aborts the process. The budget keeps every charge below the lower ceiling with
//! room for what is never charged: code, thread stacks, the allocator's arenas and the short
//! copies a call makes on its way.

/// The room kept for what no ledger counts: a quarter of the ceiling, and at least this.
const UNCOUNTED_MIN: usize = 256 << 20;

/// The budget when neither ceiling can be read.
const UNKNOWN_CEILING: usize = 16 << 30;

/// The default budget of a pool: the lower of the address-space limit and the machine's
/// memory, less the room kept for what is never charged.
pub(crate) fn default_budget() -> usize {
    budget_below(ceiling())
}

/// The budget under a ceiling of `ceiling` bytes.
pub(crate) fn budget_below(ceiling: usize) -> usize {
    let room = (ceiling / 4).max(UNCOUNTED_MIN);
    ceiling.saturating_sub(room)
}

/// The lower of the address-space limit and the machine's memory.
fn ceiling() -> usize {
    match (address_space_limit(), machine_memory()) {
        (Some(a), Some(m)) => a.min(m),
        (Some(a), None) => a,
        (None, Some(m)) => m,
        (None, None) => UNKNOWN_CEILING,
    }
}

/// `RLIMIT_AS`, when one is set.
#[cfg(unix)]
pub(crate) fn address_space_limit() -> Option<usize> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `getrlimit` writes one `rlimit` through a pointer to a live, writable one.
    let read = unsafe { libc::getrlimit(libc::RLIMIT_AS, &mut limit) };
    if read != 0 || limit.rlim_cur == libc::RLIM_INFINITY {
        return None;
    }
    usize::try_from(limit.rlim_cur).ok()
}

#[cfg(not(unix))]
pub(crate) fn address_space_limit() -> Option<usize> {
    None
}

/// The machine's memory (`MemTotal` of `/proc/meminfo`), where it can be read.
fn machine_memory() -> Option<usize> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: usize = line
        .trim_start_matches("MemTotal:")
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    kib.checked_mul(1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_keeps_a_quarter_and_at_least_256_mib_for_what_is_not_counted() {
        assert_eq!(budget_below(4 << 30), 3 << 30);
        assert_eq!(budget_below(512 << 20), 256 << 20);
        assert_eq!(budget_below(100 << 20), 0);
        let budget = default_budget();
        assert!(budget > 0 && budget < ceiling(), "{budget}");
    }
}
