//! The per-VM module cache: each module's value, the stack of modules being loaded, and cycle
//! detection.
//!
//! # Re-entrancy
//!
//! Running a module body runs Luau, and that body calls `require` again, which comes back here.
//! So no borrow of the cache may be held while a body runs. The cache therefore splits one
//! require into three short steps the caller drives: [`ModuleCache::begin`] (a cached value, or
//! the bytecode to run, with the module pushed on the loading stack), running the body with no
//! borrow held, then [`ModuleCache::finish`] or [`ModuleCache::abort`]. [`ModuleCache::require`]
//! does exactly that over a `RefCell`, and a guard aborts the step if the body unwinds, so the
//! loading stack is never left with a stale entry.

use std::cell::RefCell;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use mlua::{Lua, MultiValue, RegistryKey, Value};

use super::bytecode::{current_hash, BytecodeCache, CompiledModule, SourceStamp};
use super::error::{RequireError, MAX_REQUIRE_DEPTH};

/// One loaded module: its value and the source version it came from.
struct LoadedModule {
    stamp: SourceStamp,
    value: RegistryKey,
}

/// What [`ModuleCache::begin`] found.
pub(crate) enum Begin {
    /// The module is loaded and its source unchanged: here is its value.
    Cached(Value),
    /// The module must run: it is now on the loading stack, and the caller runs this bytecode
    /// and then calls `finish` or `abort` with the same path.
    Run(Arc<CompiledModule>),
}

/// The modules one VM has loaded. Paths are canonical module files, as `resolve` returns them.
pub(crate) struct ModuleCache {
    bytecode: Arc<BytecodeCache>,
    loaded: HashMap<PathBuf, LoadedModule>,
    loading: Vec<PathBuf>,
}

impl ModuleCache {
    /// An empty cache that compiles through `bytecode` (normally [`BytecodeCache::global`]).
    pub(crate) fn new(bytecode: Arc<BytecodeCache>) -> Self {
        Self {
            bytecode,
            loaded: HashMap::new(),
            loading: Vec::new(),
        }
    }

    /// How many modules hold a value.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.loaded.len()
    }

    /// The cached value of `path` if its source is unchanged, or else its bytecode to run (with
    /// `path` pushed on the loading stack).
    ///
    /// # Errors
    ///
    /// `Cycle` when `path` is already being loaded, naming every module from it back to it;
    /// `TooDeep` when the module must run and [`MAX_REQUIRE_DEPTH`] modules are loading one
    /// inside the other already (a loaded module's value is answered at any depth); `Io` or
    /// `Compile` from the bytecode cache.
    pub(crate) fn begin(&mut self, lua: &Lua, path: &Path) -> Result<Begin, RequireError> {
        if let Some(start) = self.loading.iter().position(|p| p == path) {
            let mut chain = self.loading[start..].to_vec();
            chain.push(path.to_owned());
            return Err(RequireError::Cycle { chain });
        }
        let compiled = self.bytecode.load(path)?;
        if let Some(loaded) = self.loaded.get(path) {
            if loaded.stamp.hash == compiled.stamp.hash {
                let value =
                    lua.registry_value(&loaded.value)
                        .map_err(|error| RequireError::Runtime {
                            path: path.to_owned(),
                            error,
                        })?;
                return Ok(Begin::Cached(value));
            }
        }
        if self.loading.len() >= MAX_REQUIRE_DEPTH {
            let mut chain = self.loading.clone();
            chain.push(path.to_owned());
            return Err(RequireError::TooDeep { chain });
        }
        self.loading.push(path.to_owned());
        Ok(Begin::Run(compiled))
    }

    /// Records what the body of `module` returned: exactly one value, which becomes the module's
    /// value. Pops the module off the loading stack either way.
    ///
    /// # Errors
    ///
    /// `BadReturn` when the body returned no value or several.
    pub(crate) fn finish(
        &mut self,
        lua: &Lua,
        module: &CompiledModule,
        returned: MultiValue,
    ) -> Result<Value, RequireError> {
        self.abort(&module.path);
        if returned.len() != 1 {
            return Err(RequireError::BadReturn {
                path: module.path.clone(),
                count: returned.len(),
            });
        }
        let value = returned.into_iter().next().unwrap_or(Value::Nil);
        let key =
            lua.create_registry_value(value.clone())
                .map_err(|error| RequireError::Runtime {
                    path: module.path.clone(),
                    error,
                })?;
        self.loaded.insert(
            module.path.clone(),
            LoadedModule {
                stamp: module.stamp,
                value: key,
            },
        );
        Ok(value)
    }

    /// Takes `path` off the loading stack after its body failed; nothing is cached.
    pub(crate) fn abort(&mut self, path: &Path) {
        if let Some(at) = self.loading.iter().rposition(|p| p == path) {
            self.loading.truncate(at);
        }
    }

    /// Drops every module whose source changed (or vanished) on disk, so the next require runs it
    /// again. Returns how many were dropped.
    pub(crate) fn invalidate_changed(&mut self) -> usize {
        let before = self.loaded.len();
        self.loaded
            .retain(|path, loaded| current_hash(path, &loaded.stamp) == Some(loaded.stamp.hash));
        before - self.loaded.len()
    }

    /// Requires the module at `path` (canonical): its cached value, or its body run once with no
    /// arguments. The body may itself require through the same `cache`.
    ///
    /// # Errors
    ///
    /// Everything `begin` and `finish` return, and `Runtime` with the body's own error.
    pub(crate) fn require(
        cache: &RefCell<Self>,
        lua: &Lua,
        path: &Path,
    ) -> Result<Value, RequireError> {
        let compiled = match cache.borrow_mut().begin(lua, path)? {
            Begin::Cached(value) => return Ok(value),
            Begin::Run(compiled) => compiled,
        };
        let guard = AbortOnUnwind { cache, path };
        // No borrow of `cache` is held here: the body may require other modules through it.
        // A module's top level may set globals even in a VM whose globals are closed: what it
        // sets is module state, made once per VM. The body runs to its end without yielding.
        let returned = super::super::with_open_globals(lua, || {
            compiled
                .load(lua)
                .and_then(|body| body.call::<MultiValue>(()))
        });
        std::mem::forget(guard);
        match returned {
            Ok(returned) => cache.borrow_mut().finish(lua, &compiled, returned),
            Err(error) => {
                cache.borrow_mut().abort(path);
                Err(RequireError::Runtime {
                    path: path.to_owned(),
                    error,
                })
            }
        }
    }
}

/// Takes a module off the loading stack if its body unwinds (a Rust panic inside a callback).
struct AbortOnUnwind<'a> {
    cache: &'a RefCell<ModuleCache>,
    path: &'a Path,
}

impl Drop for AbortOnUnwind<'_> {
    fn drop(&mut self) {
        if let Ok(mut cache) = self.cache.try_borrow_mut() {
            cache.abort(self.path);
        }
    }
}
