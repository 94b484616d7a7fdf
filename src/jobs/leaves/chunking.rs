//! What `jobs.parallelFor` loops over, and how it is cut into chunks.
//!
//! Pure arithmetic, no Luau: the refusals at the call and the chunk bounds live here so they can
//! be tested exactly. Indices stay within ±2^53 so every bound survives a trip through a Luau
//! number unrounded.

use bytes::Bytes;

use crate::vm::a_type;

/// The largest index a chunk may name: past it a Luau number no longer holds every whole number.
pub(crate) const MAX_INDEX: i64 = 1 << 53;

/// What a `parallelFor` loops over, checked.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Over {
    /// Indices `first..=last`: a count `n` is `1..=n`.
    Range { first: i64, last: i64 },
    /// A buffer's bytes, copied once at the call, cut into elements of `stride` bytes.
    Buffer { bytes: Bytes, stride: usize },
}

impl Over {
    /// How many elements the loop covers (at least one once checked).
    pub(crate) fn elements(&self) -> u64 {
        match self {
            Over::Range { first, last } => (last - first + 1) as u64,
            Over::Buffer { bytes, stride } => (bytes.len() / stride) as u64,
        }
    }

    /// The index the first element carries: a buffer's elements are numbered from 1.
    fn first_index(&self) -> i64 {
        match self {
            Over::Range { first, .. } => *first,
            Over::Buffer { .. } => 1,
        }
    }

    /// The chunk's slice of a buffer (sharing the one copy made at the call), or `None`.
    pub(crate) fn data(&self, run: &Run) -> Option<Bytes> {
        match self {
            Over::Range { .. } => None,
            Over::Buffer { bytes, stride } => {
                let start = (run.first - 1) as usize * stride;
                let end = run.last as usize * stride;
                Some(bytes.slice(start..end))
            }
        }
    }
}

/// One chunk's run of indices, both ends included.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Run {
    pub(crate) first: i64,
    pub(crate) last: i64,
}

impl Run {
    pub(crate) fn count(&self) -> i64 {
        self.last - self.first + 1
    }
}

/// Cuts `over` into `chunks` runs as even as it divides: the first `elements % chunks` runs hold
/// one element more than the rest. `chunks` is between 1 and the element count.
pub(crate) fn cut(over: &Over, chunks: u64) -> Vec<Run> {
    let elements = over.elements();
    debug_assert!((1..=elements).contains(&chunks));
    let (base, extra) = (elements / chunks, elements % chunks);
    let mut next = over.first_index();
    (0..chunks)
        .map(|i| {
            let len = (base + u64::from(i < extra)) as i64;
            let run = Run {
                first: next,
                last: next + len - 1,
            };
            next += len;
            run
        })
        .collect()
}

/// Reads a whole number out of a Luau number, naming `what` in the refusal.
pub(crate) fn whole(value: &mlua::Value, what: &str) -> Result<i64, String> {
    let n = match value {
        mlua::Value::Integer(i) => return within(*i, what),
        mlua::Value::Number(n) => *n,
        other => {
            return Err(format!(
                "{what} must be a whole number, got {}",
                a_type(other)
            ))
        }
    };
    if n.fract() != 0.0 || !n.is_finite() {
        return Err(format!("{what} must be a whole number, got {n}"));
    }
    within(n as i64, what)
}

fn within(i: i64, what: &str) -> Result<i64, String> {
    if !(-MAX_INDEX..=MAX_INDEX).contains(&i) {
        return Err(format!(
            "{what} of {i} is past ±2^53: a Luau number could not hold every index up to it"
        ));
    }
    Ok(i)
}

/// Reads a count: a whole number of at least 1.
pub(crate) fn count(value: &mlua::Value) -> Result<Over, String> {
    let n = whole(value, "jobs.parallelFor: over")?;
    if n < 1 {
        return Err(format!(
            "jobs.parallelFor: over must be a count of at least 1, got {n}"
        ));
    }
    Ok(Over::Range { first: 1, last: n })
}

/// Checks a `{ first, last }` range.
pub(crate) fn range(first: i64, last: i64) -> Result<Over, String> {
    if first > last {
        return Err(format!(
            "jobs.parallelFor: over.first ({first}) is past over.last ({last}): a range runs from first up to last"
        ));
    }
    Ok(Over::Range { first, last })
}

/// Checks a buffer's length against the element size.
pub(crate) fn buffer(bytes: Bytes, stride: usize) -> Result<Over, String> {
    let len = bytes.len();
    if len == 0 {
        return Err(
            "jobs.parallelFor: over is an empty buffer: there is nothing to loop over".to_owned(),
        );
    }
    if !len.is_multiple_of(stride) {
        return Err(format!(
            "jobs.parallelFor: a buffer of {len} bytes is not a whole number of {stride}-byte elements (opts.stride)"
        ));
    }
    Ok(Over::Buffer { bytes, stride })
}

/// The most chunks one `jobs.parallelFor` may cut its loop into: 65,536. Each chunk is an item
/// the host queues (and a slot in the result list it gathers), so the count is bounded before
/// any is made; a loop of more elements puts more of them in each chunk.
pub(crate) const MAX_CHUNKS: u64 = 1 << 16;

/// The number of chunks: `asked`, or four per worker, never more than the elements nor
/// [`MAX_CHUNKS`]. `call` (`jobs.parallelFor`, `jobs.map`) names the function in a refusal.
pub(crate) fn chunk_count(
    call: &str,
    asked: Option<i64>,
    elements: u64,
    workers: usize,
) -> Result<u64, String> {
    match asked {
        None => Ok((4 * workers as u64).clamp(1, elements).min(MAX_CHUNKS)),
        Some(n) if n < 1 => Err(format!("{call}: opts.chunks must be at least 1, got {n}")),
        Some(n) if n as u64 > MAX_CHUNKS => Err(format!(
            "{call}: opts.chunks of {n} is past the bound of {MAX_CHUNKS} chunks; a chunk may hold many elements"
        )),
        Some(n) if n as u64 > elements => Err(format!(
            "{call}: opts.chunks of {n} is more than the {elements} elements: a chunk holds at least one"
        )),
        Some(n) => Ok(n as u64),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PF: &str = "jobs.parallelFor";

    fn runs(over: &Over, chunks: u64) -> Vec<(i64, i64)> {
        cut(over, chunks)
            .iter()
            .map(|r| (r.first, r.last))
            .collect()
    }

    #[test]
    fn chunks_are_bounded_at_max_chunks_and_refused_one_past() {
        let many = 1u64 << 40;
        assert_eq!(
            chunk_count(PF, Some(MAX_CHUNKS as i64), many, 2).unwrap(),
            MAX_CHUNKS
        );
        assert_eq!(
            chunk_count(PF, Some(MAX_CHUNKS as i64 + 1), many, 2).unwrap_err(),
            "jobs.parallelFor: opts.chunks of 65537 is past the bound of 65536 chunks; a chunk may hold many elements"
        );
        assert_eq!(
            chunk_count(PF, Some(1_000_000_000), many, 2).unwrap_err(),
            "jobs.parallelFor: opts.chunks of 1000000000 is past the bound of 65536 chunks; a chunk may hold many elements"
        );
        // The default never passes it either, however many workers.
        assert_eq!(chunk_count(PF, None, many, 1 << 20).unwrap(), MAX_CHUNKS);
    }

    #[test]
    fn an_uneven_split_puts_the_extra_elements_first() {
        let over = Over::Range { first: 1, last: 10 };
        assert_eq!(runs(&over, 3), vec![(1, 4), (5, 7), (8, 10)]);
        assert_eq!(runs(&over, 10).len(), 10);
        assert_eq!(runs(&over, 1), vec![(1, 10)]);
    }

    #[test]
    fn a_range_keeps_its_own_first_index_even_below_zero() {
        let over = range(-3, 3).unwrap();
        assert_eq!(runs(&over, 2), vec![(-3, 0), (1, 3)]);
    }

    #[test]
    fn a_buffer_chunk_slices_whole_elements() {
        let over = buffer(Bytes::from_static(b"aabbccddee"), 2).unwrap();
        let cut = cut(&over, 2);
        assert_eq!(
            cut,
            vec![Run { first: 1, last: 3 }, Run { first: 4, last: 5 }]
        );
        assert_eq!(over.data(&cut[0]).unwrap(), &b"aabbcc"[..]);
        assert_eq!(over.data(&cut[1]).unwrap(), &b"ddee"[..]);
    }

    #[test]
    fn refusals_name_the_value_and_the_rule() {
        assert_eq!(
            buffer(Bytes::from_static(b"abc"), 2).unwrap_err(),
            "jobs.parallelFor: a buffer of 3 bytes is not a whole number of 2-byte elements (opts.stride)"
        );
        assert_eq!(
            chunk_count(PF, Some(0), 5, 2).unwrap_err(),
            "jobs.parallelFor: opts.chunks must be at least 1, got 0"
        );
        assert_eq!(
            chunk_count(PF, None, 3, 2).unwrap(),
            3,
            "at most one per element"
        );
        assert_eq!(chunk_count(PF, None, 100, 2).unwrap(), 8, "four per worker");
        assert!(whole(&mlua::Value::Number(2.0f64.powi(54)), "x")
            .unwrap_err()
            .contains("past ±2^53"));
    }
}
