//! [`JobOptions`]: what a host dispatch may ask for, the Rust twin of `jobs.dispatch`'s `opts`.

use std::time::Duration;

use bytes::Bytes;

use crate::error::{DispatchRefusal, Error, Result};
use crate::jobs::leaves::options::{DispatchOptions, MAX_DEADLINE, MAX_KEY_BYTES};
use crate::vm::format_seconds;

/// Options of one host dispatch ([`ScriptDomain::dispatch_with`](crate::ScriptDomain::dispatch_with)),
/// with the meaning and the bounds `opts` has in Luau.
///
/// Nothing is checked until the dispatch: a bad option refuses that call with
/// [`Error::Dispatch`] naming the option and its rule, and nothing is queued.
///
/// ```
/// use std::time::Duration;
/// use skein::job::JobOptions;
///
/// let opts = JobOptions::new()
///     .name("rebuild navmesh")
///     .key("level-3") // runs in the VM the key is bound to, after the key's earlier items
///     .supersede(true) // and drops the key's items that have not started
///     .deadline(Duration::from_secs(5));
/// # let _ = opts;
/// ```
#[derive(Debug, Clone, Default)]
pub struct JobOptions {
    name: Option<String>,
    key: Option<Bytes>,
    supersede: bool,
    deadline: Option<Duration>,
}

impl JobOptions {
    /// The longest one run of an item may take, and the default: 60 seconds.
    pub const MAX_DEADLINE: Duration = MAX_DEADLINE;

    /// No name, no key, the domain's longest deadline.
    pub fn new() -> JobOptions {
        JobOptions::default()
    }

    /// The job's name in errors and stats (`opts.name`).
    pub fn name(mut self, name: impl Into<String>) -> JobOptions {
        self.name = Some(name.into());
        self
    }

    /// The key whose VM runs the item (`opts.key`): 1 to 256 bytes.
    pub fn key(mut self, key: impl AsRef<[u8]>) -> JobOptions {
        self.key = Some(Bytes::copy_from_slice(key.as_ref()));
        self
    }

    /// Rejects every item of the key that has not started (`opts.supersede`); needs a key.
    pub fn supersede(mut self, supersede: bool) -> JobOptions {
        self.supersede = supersede;
        self
    }

    /// The longest one run of the entry may take (`opts.deadline`): above zero and at most the
    /// domain's cap, [`MAX_DEADLINE`](crate::job::JobOptions::MAX_DEADLINE) unless the plan lowered it.
    pub fn deadline(mut self, deadline: Duration) -> JobOptions {
        self.deadline = Some(deadline);
        self
    }

    /// Checks the options against the rules `jobs.dispatch` applies, with `cap` as the default
    /// and longest deadline.
    pub(crate) fn check(&self, cap: Duration) -> Result<DispatchOptions> {
        if let Some(key) = &self.key {
            check_key(key, "dispatch: key")?;
        }
        if self.supersede && self.key.is_none() {
            return Err(refused(
                DispatchRefusal::Supersede,
                "dispatch: supersede needs a key: only the items of a key can be superseded"
                    .to_owned(),
            ));
        }
        let deadline = match self.deadline {
            None => cap,
            Some(d) if d.is_zero() => {
                return Err(refused(
                    DispatchRefusal::Deadline,
                    "dispatch: deadline must be above 0".to_owned(),
                ));
            }
            Some(d) if d > cap => {
                return Err(refused(
                    DispatchRefusal::Deadline,
                    format!(
                        "dispatch: deadline of {} s is past the cap of {} s: a deadline may be lowered, never raised",
                        format_seconds(d),
                        format_seconds(cap)
                    ),
                ));
            }
            Some(d) => d,
        };
        Ok(DispatchOptions {
            deadline,
            name: self.name.clone(),
            key: self.key.clone(),
            supersede: self.supersede,
        })
    }
}

/// Checks a key given from Rust: 1 to [`MAX_KEY_BYTES`] bytes. `what` names it in the refusal.
pub(crate) fn check_key(key: &[u8], what: &str) -> Result<()> {
    if key.is_empty() || key.len() > MAX_KEY_BYTES {
        let n = key.len();
        let unit = if n == 1 { "byte" } else { "bytes" };
        return Err(refused(
            DispatchRefusal::Key,
            format!("{what} must be 1 to {MAX_KEY_BYTES} bytes, got {n} {unit}"),
        ));
    }
    Ok(())
}

fn refused(refusal: DispatchRefusal, message: String) -> Error {
    Error::Dispatch { refusal, message }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CAP: Duration = Duration::from_secs(60);

    /// The refusal of `opts` under [`CAP`] and its text.
    fn refusal(opts: JobOptions) -> (DispatchRefusal, String) {
        match opts.check(CAP) {
            Err(Error::Dispatch { refusal, message }) => (refusal, message),
            other => panic!("not a dispatch refusal: {other:?}"),
        }
    }

    #[test]
    fn keys_of_1_and_256_bytes_pass_and_0_and_257_are_refused() {
        assert!(JobOptions::new().key("k").check(CAP).is_ok());
        assert!(JobOptions::new().key([b'k'; 256]).check(CAP).is_ok());
        assert_eq!(
            refusal(JobOptions::new().key("")),
            (
                DispatchRefusal::Key,
                "dispatch: key must be 1 to 256 bytes, got 0 bytes".to_owned()
            )
        );
        assert_eq!(
            refusal(JobOptions::new().key([b'k'; 257])),
            (
                DispatchRefusal::Key,
                "dispatch: key must be 1 to 256 bytes, got 257 bytes".to_owned()
            )
        );
    }

    #[test]
    fn supersede_needs_a_key() {
        assert_eq!(
            refusal(JobOptions::new().supersede(true)),
            (
                DispatchRefusal::Supersede,
                "dispatch: supersede needs a key: only the items of a key can be superseded"
                    .to_owned()
            )
        );
        assert!(JobOptions::new().supersede(false).check(CAP).is_ok());
    }

    #[test]
    fn deadlines_above_zero_up_to_the_cap() {
        assert_eq!(JobOptions::new().check(CAP).unwrap().deadline, CAP);
        assert_eq!(
            JobOptions::new().deadline(CAP).check(CAP).unwrap().deadline,
            CAP
        );
        assert_eq!(
            refusal(JobOptions::new().deadline(Duration::ZERO)),
            (
                DispatchRefusal::Deadline,
                "dispatch: deadline must be above 0".to_owned()
            )
        );
        let (why, past) = refusal(JobOptions::new().deadline(CAP + Duration::from_millis(1)));
        assert_eq!(why, DispatchRefusal::Deadline);
        assert!(
            past.starts_with("dispatch: deadline of 60.001 s is past the cap of 60 s"),
            "{past}"
        );
    }
}
