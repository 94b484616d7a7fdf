//! The ids and names of one generation's registered jobs, shared by the engine thread and the
//! worker VMs of the generation.
//!
//! A job registered from a worker VM reaches the engine's registry only when the engine next
//! drains its mailbox, yet its id and its name's uniqueness must be settled at the call, as
//! they are on the engine: both sides reserve here, under one lock, before anything is posted.

use std::collections::HashMap;
use std::sync::Mutex;

/// Ids (from 1) and live names of a generation's registered jobs. `Send + Sync`; lives in the
/// principal, so a restart starts a fresh one.
#[derive(Debug)]
pub(crate) struct JobDirectory {
    inner: Mutex<Inner>,
}

#[derive(Debug)]
struct Inner {
    next_id: u64,
    /// Live names and the job holding each.
    names: HashMap<String, u64>,
}

impl Default for JobDirectory {
    fn default() -> Self {
        JobDirectory {
            inner: Mutex::new(Inner {
                next_id: 1,
                names: HashMap::new(),
            }),
        }
    }
}

impl JobDirectory {
    /// Takes the next id, and `name` for it when given; refused (taking nothing) when a live job
    /// holds the name.
    pub(crate) fn reserve(&self, name: Option<&str>) -> Result<u64, String> {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(name) = name {
            if inner.names.contains_key(name) {
                return Err(format!(
                    "jobs.register: a job named '{name}' is registered already"
                ));
            }
        }
        let id = inner.next_id;
        inner.next_id += 1;
        if let Some(name) = name {
            inner.names.insert(name.to_owned(), id);
        }
        Ok(id)
    }

    /// Frees the name of job `id` (it was cancelled), so a new job may take it.
    pub(crate) fn release(&self, id: u64, name: Option<&str>) {
        let Some(name) = name else { return };
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if inner.names.get(name) == Some(&id) {
            inner.names.remove(name);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_is_held_until_its_job_releases_it() {
        let dir = JobDirectory::default();
        assert_eq!(dir.reserve(Some("a")), Ok(1));
        assert_eq!(dir.reserve(None), Ok(2));
        assert_eq!(
            dir.reserve(Some("a")),
            Err("jobs.register: a job named 'a' is registered already".to_owned())
        );
        // Another job's id does not free the name; its own does.
        dir.release(2, Some("a"));
        assert!(dir.reserve(Some("a")).is_err());
        dir.release(1, Some("a"));
        assert_eq!(dir.reserve(Some("a")), Ok(3));
    }
}
