//! Byte counts as people write them: `512 MiB` in texts, `512M` on a command line.

/// `bytes` in its largest whole unit: `8 MiB`, `64 KiB`, `1000 bytes`.
pub fn format_bytes(bytes: usize) -> String {
    const KIB: usize = 1024;
    const MIB: usize = 1024 * KIB;
    const GIB: usize = 1024 * MIB;
    match bytes {
        0 => "0 bytes".to_owned(),
        b if b % GIB == 0 => format!("{} GiB", b / GIB),
        b if b % MIB == 0 => format!("{} MiB", b / MIB),
        b if b % KIB == 0 => format!("{} KiB", b / KIB),
        b => format!("{b} bytes"),
    }
}

/// Reads a size: a whole number of bytes, or one followed by `K`, `M` or `G` (binary units;
/// `KiB`, `MiB`, `GiB` and lower case are taken too). A size that does not fit a `usize` is
/// refused, as is anything else, with the text saying what is accepted.
///
/// ```
/// assert_eq!(skein::size::parse_size("512M"), Ok(512 << 20));
/// assert_eq!(skein::size::parse_size("2GiB"), Ok(2 << 30));
/// assert_eq!(skein::size::parse_size("4096"), Ok(4096));
/// assert!(skein::size::parse_size("lots").is_err());
/// ```
pub fn parse_size(text: &str) -> Result<usize, String> {
    let refuse = || {
        format!("'{text}' is not a size: give a whole number of bytes, or one ending in K, M or G")
    };
    let trimmed = text.trim();
    let digits = trimmed
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(trimmed.len());
    let (number, unit) = trimmed.split_at(digits);
    if number.is_empty() {
        return Err(refuse());
    }
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kib" | "kb" => 10,
        "m" | "mib" | "mb" => 20,
        "g" | "gib" | "gb" => 30,
        _ => return Err(refuse()),
    };
    let value: usize = number.parse().map_err(|_| refuse())?;
    value
        .checked_mul(1usize << shift)
        .ok_or_else(|| format!("'{text}' is past the largest size this machine can count"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_size_is_written_in_its_largest_whole_unit() {
        assert_eq!(format_bytes(0), "0 bytes");
        assert_eq!(format_bytes(1000), "1000 bytes");
        assert_eq!(format_bytes(64 * 1024), "64 KiB");
        assert_eq!(format_bytes(8 << 20), "8 MiB");
        assert_eq!(format_bytes((8 << 20) + 1), "8388609 bytes");
        assert_eq!(format_bytes(2 << 30), "2 GiB");
    }

    #[test]
    fn a_size_is_read_in_bytes_or_binary_units_and_anything_else_is_refused() {
        assert_eq!(parse_size("0"), Ok(0));
        assert_eq!(parse_size("1k"), Ok(1024));
        assert_eq!(parse_size("3 MiB"), Ok(3 << 20));
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert_eq!(
            parse_size("1.5G").unwrap_err(),
            "'1.5G' is not a size: give a whole number of bytes, or one ending in K, M or G"
        );
        assert!(parse_size("-1").is_err());
        assert!(parse_size("M").is_err());
        assert!(parse_size("12T").is_err());
        assert_eq!(
            parse_size("99999999999999999999G").unwrap_err(),
            "'99999999999999999999G' is not a size: give a whole number of bytes, or one ending in K, M or G"
        );
        assert_eq!(
            parse_size("17179869184G").unwrap_err(),
            "'17179869184G' is past the largest size this machine can count"
        );
    }
}
