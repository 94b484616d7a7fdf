//! Source text on its way into a VM: the one door through which a script's own text becomes a
//! Luau function.
//!
//! Luau's loader takes bytecode as readily as text, and decides which by the first byte: below
//! `0x09` is bytecode. Bytecode made by hand is a memory-corruption door into the loader, not
//! just a crash, so every script-supplied chunk (a main script, an `exec`, a restart or reload
//! load, a `@skein/worker` source) comes through [`compile`], which refuses anything that looks
//! like bytecode and hands Luau only what Skein's own compiler produced. Modules take the same
//! rule through the bytecode cache, which compiles every file it reads.
//!
//! Reading a source file is bounded too ([`read_bounded`]): a script path naming `/dev/zero`, a
//! FIFO or a huge file is refused before its bytes are read, naming the path and the bound.

use std::fs::File;
use std::io::{self, Read};
use std::path::Path;

use mlua::chunk::{ChunkMode, Compiler};
use mlua::{ffi, Function, Lua};

use super::{native, native_hint};

/// The largest source text Skein compiles: 16 MiB. Hand-written Luau is far smaller; the bound
/// keeps a script that names a huge or endless file from making the host read it all.
pub(crate) const MAX_SOURCE_BYTES: usize = 16 << 20;

/// Luau's default optimisation level: inlining and unrolling within a module.
pub(crate) const OPTIMIZATION_LEVEL: u8 = 1;
/// Line info in the bytecode, so errors and tracebacks name lines.
pub(crate) const DEBUG_LEVEL: u8 = 1;

/// The compiler every script and module goes through, with Skein's settings.
pub(crate) fn compiler() -> Compiler {
    Compiler::new()
        .set_optimization_level(OPTIMIZATION_LEVEL)
        .set_debug_level(DEBUG_LEVEL)
}

/// Why a chunk was not accepted as source text, before the compiler saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SourceRefusal {
    /// The first byte marks precompiled bytecode.
    Bytecode { first: u8 },
    /// Longer than [`MAX_SOURCE_BYTES`].
    TooLarge { len: usize },
}

impl SourceRefusal {
    /// The refusal's text, naming the chunk as a user wrote it (`=name` or `@path` shown bare).
    pub(crate) fn message(&self, chunk_name: &str) -> String {
        let name = chunk_name.strip_prefix(['@', '=']).unwrap_or(chunk_name);
        match self {
            SourceRefusal::Bytecode { first } => format!(
                "'{name}' is not Luau source text: it starts with byte 0x{first:02x}, which marks \
                 precompiled bytecode; Skein loads only source it compiles itself"
            ),
            SourceRefusal::TooLarge { len } => format!(
                "'{name}' is {len} bytes of source, past the bound of {MAX_SOURCE_BYTES} bytes"
            ),
        }
    }
}

/// Checks that `source` may be handed to the compiler: not bytecode, not past the size bound.
pub(crate) fn check(source: &[u8]) -> Result<(), SourceRefusal> {
    // The loader's own rule, so the two can never disagree: below 0x09 is bytecode, and so is
    // a version byte up to 11 followed by a types version byte of 1 to 3 (`\n\x01...`).
    // SAFETY: the pointer and length describe `source`, which the call only reads.
    if unsafe { ffi::luaL_isbytecode(source.as_ptr().cast(), source.len()) } {
        return Err(SourceRefusal::Bytecode { first: source[0] });
    }
    if source.len() > MAX_SOURCE_BYTES {
        return Err(SourceRefusal::TooLarge { len: source.len() });
    }
    Ok(())
}

/// Compiles `source` (text) with Skein's compiler and loads the result into `lua` as a function
/// named `chunk_name`, compiled on to native code when the VM's native mode asks for it.
///
/// # Errors
/// A runtime error naming the chunk when the text looks like bytecode or is too large, and the
/// compiler's syntax error (with the chunk's name and line) when it does not compile. Luau's
/// loader only ever sees bytecode this function's compiler produced.
pub(crate) fn compile(lua: &Lua, source: &[u8], chunk_name: &str) -> mlua::Result<Function> {
    check(source).map_err(|refusal| mlua::Error::runtime(refusal.message(chunk_name)))?;
    match compiler().compile(source) {
        Ok(bytecode) => {
            let function = lua
                .load(&bytecode)
                .set_name(chunk_name)
                .set_mode(ChunkMode::Binary)
                .into_function()?;
            let annotation = native_hint::annotation(&bytecode);
            native::compile_loaded(lua, &function, annotation, bytecode.len());
            Ok(function)
        }
        // The compiler's own text lacks the chunk name; Luau's loader adds it to the same
        // message when handed the text in text mode, and refuses it there (it does not
        // compile), so what the user reads is what Luau itself prints.
        Err(_) => lua
            .load(source)
            .set_name(chunk_name)
            .set_mode(ChunkMode::Text)
            .into_function(),
    }
}

/// Reads the source file at `path`, refusing what is not a regular file or is longer than
/// [`MAX_SOURCE_BYTES`]. The kind is looked at before the file is opened (opening a FIFO blocks
/// until a writer comes) and again on the open file (the path may have changed meanwhile: the
/// open does not wait, so a FIFO swapped in between is refused, not waited on); no more than
/// the bound and one byte is ever read, so a file that grows while read is refused too.
///
/// # Errors
/// The I/O error, or `InvalidInput` with the reason, without the path: callers name it in their
/// own words (`cannot read the script PATH: ...`, `could not read module PATH: ...`).
pub(crate) fn read_bounded(path: &Path) -> io::Result<Vec<u8>> {
    read_within(path, MAX_SOURCE_BYTES)
}

/// [`read_bounded`] with a bound of `bound` bytes, for files other than source (`.luaurc`).
pub(crate) fn read_within(path: &Path, bound: usize) -> io::Result<Vec<u8>> {
    let refused = |why: String| io::Error::new(io::ErrorKind::InvalidInput, why);
    let kind = std::fs::metadata(path)?.file_type();
    if !kind.is_file() {
        return Err(refused(not_a_file(kind).to_owned()));
    }
    read_open_within(open_without_waiting(path)?, bound)
}

/// Opens `path` for reading without waiting: a FIFO that had no writer would block the open.
/// The flag changes nothing for a regular file, the only kind read on.
pub(crate) fn open_without_waiting(path: &Path) -> io::Result<File> {
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NONBLOCK);
    }
    options.open(path)
}

/// Reads the open `file` as [`read_bounded`] reads a path: a regular file of at most
/// [`MAX_SOURCE_BYTES`], no more than the bound and one byte read. For a file opened through a
/// directory handle; its kind is checked on the open file.
///
/// # Errors
/// As [`read_bounded`].
pub(crate) fn read_open_bounded(file: File) -> io::Result<Vec<u8>> {
    read_open_within(file, MAX_SOURCE_BYTES)
}

fn read_open_within(file: File, bound: usize) -> io::Result<Vec<u8>> {
    let refused = |why: String| io::Error::new(io::ErrorKind::InvalidInput, why);
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(refused(not_a_file(meta.file_type()).to_owned()));
    }
    let too_long = || refused(format!("it is longer than the limit of {bound} bytes"));
    if meta.len() > bound as u64 {
        return Err(too_long());
    }
    let mut source = Vec::with_capacity(meta.len() as usize);
    file.take(bound as u64 + 1).read_to_end(&mut source)?;
    if source.len() > bound {
        return Err(too_long());
    }
    Ok(source)
}

/// What a file is, with its article, as a refusal names what is not a regular file: `a
/// directory`, `a FIFO`, `a socket`, `a character device`, `a block device`.
pub(crate) fn file_kind(kind: std::fs::FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if kind.is_fifo() {
            return "a FIFO";
        } else if kind.is_socket() {
            return "a socket";
        } else if kind.is_char_device() {
            return "a character device";
        } else if kind.is_block_device() {
            return "a block device";
        }
    }
    if kind.is_dir() {
        "a directory"
    } else if kind.is_file() {
        "a regular file"
    } else {
        "a special file"
    }
}

/// Why a file type that is not a regular file can't be source.
fn not_a_file(kind: std::fs::FileType) -> &'static str {
    if kind.is_dir() {
        "it is a directory, not a file"
    } else {
        "it is not a regular file (a device, FIFO or socket is never read as a script)"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vm::error_message;

    #[test]
    fn bytecode_is_refused_before_the_loader_sees_it() {
        let lua = Lua::new();
        // The ten bytes that ended the process with SIGILL inside Luau's loader.
        let hostile = [6u8, 3, 1, 0, 0, 0, 0, 0, 0, 0];
        let err = compile(&lua, &hostile, "@/tmp/evil.luau").unwrap_err();
        assert_eq!(
            error_message(&err),
            "'/tmp/evil.luau' is not Luau source text: it starts with byte 0x06, which marks \
             precompiled bytecode; Skein loads only source it compiles itself"
        );
        // Real bytecode from Luau's own compiler is refused the same way.
        let real = compiler().compile("return 1").unwrap();
        let err = compile(&lua, &real, "=worker").unwrap_err();
        assert!(
            error_message(&err).starts_with("'worker' is not Luau source text"),
            "{err}"
        );
        for first in 0..b'\t' {
            assert_eq!(
                check(&[first, b' ']),
                Err(SourceRefusal::Bytecode { first })
            );
        }
        // Tab (0x09) starts text.
        assert!(compile(&lua, b"\treturn 1", "=tab").is_ok());
    }

    #[test]
    fn text_compiles_and_syntax_errors_keep_luau_s_wording() {
        let lua = Lua::new();
        let f = compile(&lua, b"return 40 + 2", "=ok").unwrap();
        assert_eq!(f.call::<i64>(()).unwrap(), 42);
        let err = compile(&lua, b"return +", "=broken").unwrap_err();
        assert_eq!(
            error_message(&err),
            "broken:1: Expected identifier when parsing expression, got '+'"
        );
    }

    #[test]
    fn source_size_is_bounded_at_the_bound_and_one_past() {
        let at = vec![b' '; MAX_SOURCE_BYTES];
        assert_eq!(check(&at), Ok(()));
        let past = vec![b' '; MAX_SOURCE_BYTES + 1];
        assert_eq!(
            check(&past),
            Err(SourceRefusal::TooLarge {
                len: MAX_SOURCE_BYTES + 1
            })
        );
        assert_eq!(
            SourceRefusal::TooLarge {
                len: MAX_SOURCE_BYTES + 1
            }
            .message("=big"),
            format!(
                "'big' is {} bytes of source, past the bound of {MAX_SOURCE_BYTES} bytes",
                MAX_SOURCE_BYTES + 1
            )
        );
    }

    #[test]
    fn reading_a_file_is_bounded_and_refuses_what_is_not_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let err = read_bounded(dir.path()).unwrap_err();
        assert_eq!(err.to_string(), "it is a directory, not a file");
        let err = read_bounded(Path::new("/dev/zero")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "it is not a regular file (a device, FIFO or socket is never read as a script)"
        );
        let path = dir.path().join("s.luau");
        std::fs::write(&path, vec![b'-'; 100]).unwrap();
        assert_eq!(read_within(&path, 100).unwrap().len(), 100);
        std::fs::write(&path, vec![b'-'; 101]).unwrap();
        let err = read_within(&path, 100).unwrap_err();
        assert_eq!(err.to_string(), "it is longer than the limit of 100 bytes");
        // The real bound, at it and one past it, on a sparse file.
        let big = dir.path().join("big.luau");
        let file = File::create(&big).unwrap();
        file.set_len(MAX_SOURCE_BYTES as u64).unwrap();
        assert_eq!(read_bounded(&big).unwrap().len(), MAX_SOURCE_BYTES);
        file.set_len(MAX_SOURCE_BYTES as u64 + 1).unwrap();
        assert_eq!(
            read_bounded(&big).unwrap_err().to_string(),
            "it is longer than the limit of 16777216 bytes"
        );
    }
}
