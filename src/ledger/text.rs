//! Texts a script makes the host keep, cut to a bound: a failure's message and its stack, an
//! error a script raised with a string of any size. What is cut is said at the end.

/// The most bytes of one kept text: 64 KiB.
pub const MAX_TEXT_BYTES: usize = 64 << 10;

/// `text`, cut at a character boundary to at most `max` bytes plus the note that says how
/// many bytes were cut; a text within `max` is answered as it is.
pub(crate) fn bounded_text(mut text: String, max: usize) -> String {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let cut = text.len() - end;
    text.truncate(end);
    text.push_str(&format!(" ... ({cut} more bytes cut)"));
    text.shrink_to_fit();
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_text_at_its_bound_is_kept_and_one_byte_past_is_cut_on_a_character() {
        assert_eq!(bounded_text("abcd".to_owned(), 4), "abcd");
        assert_eq!(
            bounded_text("abcde".to_owned(), 4),
            "abcd ... (1 more bytes cut)"
        );
        // 'é' is two bytes: a cut inside it goes back to its start.
        assert_eq!(
            bounded_text("abcé".to_owned(), 4),
            "abc ... (2 more bytes cut)"
        );
        let big = bounded_text("x".repeat(40 << 20), MAX_TEXT_BYTES);
        assert!(big.capacity() < MAX_TEXT_BYTES + 64, "{}", big.capacity());
        assert!(big.ends_with(&format!(
            " ... ({} more bytes cut)",
            (40 << 20) - MAX_TEXT_BYTES
        )));
    }
}
