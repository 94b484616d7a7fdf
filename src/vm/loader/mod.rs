//! Skein's module loader: require-by-string resolution, `.luaurc` aliases, the process-wide
//! bytecode cache and the per-VM module cache.
//!
//! This replaces mlua's file-system `require`. It owns how a specifier becomes a file, how a file
//! becomes bytecode (once per source version, shared by every VM) and how a VM keeps each
//! module's value; it never installs globals or decides which VM runs what, which the rest of
//! `vm` does.

mod bytecode;
mod error;
mod luaurc;
mod module_cache;
pub(crate) mod project;
mod resolve;

pub(crate) use bytecode::BytecodeCache;
#[cfg(test)]
pub(crate) use error::RequireError;
pub(crate) use error::MAX_SPEC_BYTES;
pub(crate) use module_cache::ModuleCache;
pub(crate) use resolve::resolve;

#[cfg(test)]
mod loader_tests;
