//! The script's arguments as the bytes the user gave.
//!
//! Luau strings are bytes, so an argument reaches the script as given, UTF-8 or not. On Unix an
//! argument is bytes already. Elsewhere (Windows) it is UTF-16 underneath, and one that is not
//! valid Unicode has no faithful byte form: it is refused, naming its position after `--`.

use std::ffi::OsString;

/// The bytes of each script argument, in order.
///
/// # Errors
/// On a platform whose arguments are not bytes, the text naming the first argument that is not
/// valid Unicode.
pub(crate) fn bytes(args: &[OsString]) -> Result<Vec<&[u8]>, String> {
    args.iter()
        .enumerate()
        .map(|(at, arg)| of(arg).ok_or_else(|| not_unicode(at)))
        .collect()
}

#[cfg(unix)]
fn of(arg: &OsString) -> Option<&[u8]> {
    use std::os::unix::ffi::OsStrExt;
    Some(arg.as_bytes())
}

#[cfg(not(unix))]
fn of(arg: &OsString) -> Option<&[u8]> {
    arg.to_str().map(str::as_bytes)
}

fn not_unicode(at: usize) -> String {
    format!(
        "script argument {} (after `--`) is not valid Unicode, so it can't be passed as bytes",
        at + 1
    )
}
