//! The process-wide bytecode cache: each module source is compiled once per version and the
//! bytecode is shared by every VM on every thread.
//!
//! A lookup re-stats the file. When its length and mtime match the cached stamp, the cached
//! bytecode is returned without reading the file. Otherwise the file is read and hashed; only a
//! changed hash compiles again (a `touch` or a save with the same text costs a read, not a
//! compile). An edit that keeps both length and mtime is not seen, which file systems with
//! nanosecond mtimes make unlikely.
//!
//! # Locking
//!
//! The map lock is held only to find or insert a file's slot. Each file has its own slot lock,
//! held across the read and compile, so two threads asking for the same new file compile it once
//! and threads asking for other files are never held up by it.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::SystemTime;

use mlua::chunk::ChunkMode;
use mlua::{Function, Lua};

use super::super::native_hint::{self, Annotation};
use super::super::{native, source};
use super::error::RequireError;

/// The most module files whose bytecode the process keeps: 4,096. Past it a new file's bytecode
/// takes the place of another file's.
pub(crate) const MAX_CACHED_MODULES: usize = 4_096;

/// What identifies one version of a source file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SourceStamp {
    /// The file's length in bytes.
    pub(crate) len: u64,
    /// The file's modification time, when the platform reports one.
    pub(crate) mtime: Option<SystemTime>,
    /// A 64-bit hash of the file's bytes.
    pub(crate) hash: u64,
}

impl SourceStamp {
    /// Whether `meta` describes the same length and mtime (so the hash need not be checked).
    fn matches_meta(&self, meta: &std::fs::Metadata) -> bool {
        let mtime = meta.modified().ok();
        self.len == meta.len() && self.mtime == mtime && mtime.is_some()
    }
}

/// One compiled version of a module file.
#[derive(Debug)]
pub(crate) struct CompiledModule {
    /// The canonical path of the source file.
    pub(crate) path: PathBuf,
    /// The source version the bytecode was compiled from (its len/mtime follow the latest stat).
    pub(crate) stamp: SourceStamp,
    /// Luau bytecode, shared by every VM that loads this version.
    pub(crate) bytecode: Arc<[u8]>,
    /// `@` and the path: the chunk name errors and tracebacks show.
    pub(crate) chunk_name: String,
    /// What the bytecode asks of the code generator, read once when it was compiled.
    pub(crate) annotation: Annotation,
}

impl CompiledModule {
    /// Loads the bytecode into `lua` as a function, named after the file, and compiles it to
    /// native code when the VM's native mode asks for it. The module cache runs a body once per
    /// VM and version, so this is once per module per VM.
    pub(crate) fn load(&self, lua: &Lua) -> mlua::Result<Function> {
        let function = lua
            .load(&self.bytecode[..])
            .set_name(self.chunk_name.as_str())
            .set_mode(ChunkMode::Binary)
            .into_function()?;
        native::compile_loaded(lua, &function, self.annotation, self.bytecode.len());
        Ok(function)
    }
}

/// One file's latest compiled version, behind the lock held while it is (re)compiled.
type FileSlot = Arc<Mutex<Option<Arc<CompiledModule>>>>;

/// Compiles module sources once per version, for every VM in the process.
#[derive(Debug, Default)]
pub(crate) struct BytecodeCache {
    slots: Mutex<HashMap<PathBuf, FileSlot>>,
    compiles: AtomicU64,
}

impl BytecodeCache {
    /// An empty cache, separate from the global one (tests count its compiles).
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// The cache every VM in the process shares.
    pub(crate) fn global() -> Arc<BytecodeCache> {
        static GLOBAL: OnceLock<Arc<BytecodeCache>> = OnceLock::new();
        GLOBAL
            .get_or_init(|| Arc::new(BytecodeCache::new()))
            .clone()
    }

    /// How many files the cache keeps bytecode for.
    #[cfg(test)]
    pub(crate) fn files(&self) -> usize {
        lock(&self.slots).len()
    }

    /// How many times this cache has run the compiler.
    #[cfg(test)]
    pub(crate) fn compile_count(&self) -> u64 {
        self.compiles.load(Ordering::Relaxed)
    }

    /// Drops what was compiled from the file at `path` (canonical), so its next load reads it.
    pub(crate) fn forget(&self, path: &Path) {
        lock(&self.slots).remove(path);
    }

    /// Whether the text of any file this cache compiled changed on disk since (or the file went
    /// away). One `stat` per known file; a file whose length and mtime are unchanged is not read.
    pub(crate) fn any_changed(&self) -> bool {
        let slots: Vec<_> = lock(&self.slots).values().cloned().collect();
        slots.iter().any(|slot| {
            let cached = lock(slot).clone();
            match cached {
                Some(module) => {
                    current_hash(&module.path, &module.stamp) != Some(module.stamp.hash)
                }
                None => false,
            }
        })
    }

    /// Returns the bytecode for the file at `path` (canonical), compiling it at most once per
    /// source version.
    ///
    /// # Errors
    ///
    /// `Io` when the file cannot be read, `Compile` (naming the file and line) when it does not
    /// compile. A failed compile is not cached: the next call tries again.
    pub(crate) fn load(&self, path: &Path) -> Result<Arc<CompiledModule>, RequireError> {
        let io = |e: std::io::Error| RequireError::Io {
            path: path.to_owned(),
            message: e.to_string(),
        };
        let slot = {
            let mut slots = lock(&self.slots);
            if slots.len() >= MAX_CACHED_MODULES && !slots.contains_key(path) {
                // Bounded: a script that can write files could otherwise make the process keep
                // the bytecode of every module it ever wrote. One other file's bytecode goes; a
                // VM that loaded it keeps its own Arc, and a later require compiles it again.
                if let Some(evicted) = slots.keys().next().cloned() {
                    slots.remove(&evicted);
                }
            }
            slots.entry(path.to_owned()).or_default().clone()
        };
        let mut slot = lock(&slot);
        let meta = std::fs::metadata(path).map_err(io)?;
        if let Some(cached) = slot.as_ref() {
            if cached.stamp.matches_meta(&meta) {
                return Ok(cached.clone());
            }
        }
        let source = source::read_bounded(path).map_err(io)?;
        let stamp = SourceStamp {
            len: source.len() as u64,
            mtime: meta.modified().ok(),
            hash: hash(&source),
        };
        if let Some(cached) = slot.as_ref() {
            if cached.stamp.hash == stamp.hash {
                // Same text under a new stamp: keep the bytecode, remember the stamp.
                let refreshed = Arc::new(CompiledModule {
                    path: cached.path.clone(),
                    stamp,
                    bytecode: cached.bytecode.clone(),
                    chunk_name: cached.chunk_name.clone(),
                    annotation: cached.annotation,
                });
                *slot = Some(refreshed.clone());
                return Ok(refreshed);
            }
        }
        self.compiles.fetch_add(1, Ordering::Relaxed);
        let bytecode = source::compiler()
            .compile(&source)
            .map_err(|e| RequireError::Compile {
                path: path.to_owned(),
                message: compile_message(e),
            })?;
        let compiled = Arc::new(CompiledModule {
            path: path.to_owned(),
            stamp,
            annotation: native_hint::annotation(&bytecode),
            bytecode: bytecode.into(),
            chunk_name: format!("@{}", path.display()),
        });
        *slot = Some(compiled.clone());
        Ok(compiled)
    }
}

/// The stat-and-hash view of a file now, for callers that only need to know if it changed.
/// Read as a module is read: a file swapped for a FIFO, a device or a huge file counts as
/// changed without being opened or read whole.
pub(crate) fn current_hash(path: &Path, known: &SourceStamp) -> Option<u64> {
    let meta = std::fs::metadata(path).ok()?;
    if known.matches_meta(&meta) {
        return Some(known.hash);
    }
    source::read_bounded(path).ok().map(|source| hash(&source))
}

fn hash(bytes: &[u8]) -> u64 {
    // SipHash with fixed keys: stable within the process, which is all a stamp needs.
    let mut hasher = std::hash::DefaultHasher::new();
    bytes.hash(&mut hasher);
    hasher.finish()
}

/// mlua reports a syntax error as `<line>: <message>`; keep just that text.
fn compile_message(error: mlua::Error) -> String {
    match error {
        mlua::Error::SyntaxError { message, .. } => message,
        other => other.to_string(),
    }
}

/// Locks a cache lock; a panic elsewhere while it was held leaves plain data behind, so the
/// poison is ignored.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
