//! [`ResourceHost`]: the resources of one folder on one engine thread, sharing one pool, each
//! its own domain (and so its own principal); started in dependency order, stopped, reloaded
//! and listed by the host, driven by the same frame loop as a domain.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use cap_std::ambient_authority;
use cap_std::fs::Dir;
use mlua::Value;

use super::interrupt::HostInterrupt;
use super::manifest::{check_name, Manifest};
use super::module::{serve, EngineLink, ResourceName, BUILTINS, SERVICE};
use super::order::{refused, start_order};
use super::registry::{ExportRegistry, ResourceStage};
use crate::domain::{DomainSpec, Report, ReportKind, ScriptDomain, ScriptStatus};
use crate::error::{Error, ResourceRefusal, Result};
use crate::jobs::Pool;
use crate::ledger::format_bytes;
use crate::principal::capability::{
    CapabilitySet, Grant, RootAuthority, FILESYSTEM_READ, FILESYSTEM_WRITE,
};
use crate::value::Message;
use crate::vm::{a_type, error_message, NativeMode, Plan};

/// Where a resource is in its life, as [`ResourceHost::list`] shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ResourceState {
    /// Loaded and not running (never started, or stopped).
    Stopped,
    /// Running: its exports answer calls.
    Running,
    /// Its last start failed (see [`ResourceInfo::last_error`]); nothing of it runs.
    Failed,
}

impl ResourceState {
    /// The state's name: `stopped`, `running`, `failed`.
    pub fn name(self) -> &'static str {
        match self {
            ResourceState::Stopped => "stopped",
            ResourceState::Running => "running",
            ResourceState::Failed => "failed",
        }
    }
}

impl fmt::Display for ResourceState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One resource, as [`ResourceHost::list`] answers it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ResourceInfo {
    /// Its name: its folder's name.
    pub name: String,
    /// Where it is in its life.
    pub state: ResourceState,
    /// How many times it has started (a reload is a new generation): 0 before its first start.
    pub generation: u64,
    /// The resources it depends on, as its manifest lists them.
    pub dependencies: Vec<String>,
    /// The functions it exports, as its manifest lists them.
    pub exports: Vec<String>,
    /// Why its last start or stop failed, if one did.
    pub last_error: Option<String>,
}

/// What a stop did: the warnings (running resources that depend on the stopped one) and the
/// reports its `stop` handlers and its domain's end made.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct StopOutcome {
    /// `resource 'scores' depends on 'store', which stopped: its calls into 'store' fail until
    /// 'store' starts again`, one per running dependent; and the `stop` event refused by the
    /// resource's full event queue, when it was (its handlers did not run).
    pub warnings: Vec<String>,
    /// Failures of its `stop` handlers and of its domain's shutdown, oldest first.
    pub reports: Vec<Report>,
}

/// A report a resource's domain made during [`ResourceHost::advance`], with the resource's
/// name.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ResourceReport {
    /// The resource whose code failed.
    pub resource: String,
    /// What failed.
    pub report: Report,
}

/// What [`ResourceHost::spec_with`] set.
type SpecShape = Box<dyn Fn(&str, DomainSpec) -> DomainSpec>;

struct Resource {
    name: Arc<str>,
    folder: PathBuf,
    manifest: Manifest,
    domain: Option<ScriptDomain>,
    generation: u64,
    last_error: Option<String>,
    failed: bool,
}

/// The resources of one folder, on the engine thread that made it.
///
/// Every sub-folder holding a `skein.toml` ([`Manifest`]) is a resource named after the
/// folder. A started resource is a [`ScriptDomain`] on the host's one [`Pool`] (its own
/// principal), granted what its manifest asks within the host's `ceiling`, whose scripts ran
/// in its engine VM and whose declared exports are global functions; other resources call
/// them through `require("@skein/resources").import(name)`. Like a domain, the host is `!Send`
/// and is driven by the host's frame loop ([`advance`](Self::advance)).
///
/// ```
/// use skein::capability::Grant;
/// use skein::resource::ResourceHost;
/// use skein::{Message, Pool};
///
/// let dir = tempfile::tempdir()?;
/// let folder = |name: &str, manifest: &str, main: &str| -> std::io::Result<()> {
///     std::fs::create_dir(dir.path().join(name))?;
///     std::fs::write(dir.path().join(name).join("skein.toml"), manifest)?;
///     std::fs::write(dir.path().join(name).join("main.luau"), main)
/// };
/// folder("store", "[resource]\nscripts = ['main.luau']\nexports = ['get', 'set']\n",
///     "local data = {} function get(k) return data[k] end function set(k, v) data[k] = v end")?;
/// folder("scores", "[resource]\nscripts = ['main.luau']\ndependencies = ['store']\n",
///     "local store = require('@skein/resources').import('store') store.set('best', 42)")?;
///
/// let pool = Pool::new(1);
/// let mut host = ResourceHost::load(&pool, dir.path(), Grant::default())?;
/// host.start_set(&["scores", "store"])?; // store first: scores depends on it
/// let best = host.domain("scores").unwrap()
///     .eval("return require('@skein/resources').import('store').get('best')")?;
/// assert_eq!(best, Message::Number(42.0));
/// host.shutdown(); // scores first, then store
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct ResourceHost {
    pool: Pool,
    /// What the host adds to each resource's spec before its plan and grant are set.
    shape: SpecShape,
    /// The code mode of every resource's VMs ([`native`](Self::native)).
    native: NativeMode,
    /// The memory limit of each VM of a resource started from now on.
    memory_limit: usize,
    ceiling: Grant,
    /// By name.
    resources: Vec<Resource>,
    registry: Rc<ExportRegistry>,
    /// The domains of the resources running or starting, for [`HostInterrupt`].
    interrupts: HostInterrupt,
}

impl ResourceHost {
    /// The file each resource's folder holds: `skein.toml`.
    pub const MANIFEST: &'static str = "skein.toml";

    /// Loads every sub-folder of `dir` that holds a `skein.toml`; starts nothing. `ceiling`
    /// is what the host holds: no manifest is granted more.
    ///
    /// # Errors
    /// [`Error::Resource`]: [`ResourceRefusal::Manifest`] for a folder that can't be read, a
    /// folder name that is not a resource name, a `skein.toml` that is not a regular file (a
    /// FIFO is refused without being opened), or a manifest refused (naming its file, line and
    /// key); [`ResourceRefusal::Grant`] for a manifest asking a capability `ceiling`
    /// lacks.
    pub fn load(pool: &Pool, dir: impl AsRef<Path>, ceiling: Grant) -> Result<ResourceHost> {
        let dir = dir.as_ref();
        let unreadable = |e: std::io::Error| {
            refused(ResourceRefusal::Manifest, format!("{}: {e}", dir.display()))
        };
        let mut folders = Vec::new();
        for entry in std::fs::read_dir(dir).map_err(unreadable)? {
            let entry = entry.map_err(unreadable)?;
            let folder = entry.path();
            if !folder.is_dir() {
                continue;
            }
            // Anything named skein.toml makes the folder a resource: a manifest that is not a
            // regular file (a FIFO, a folder) is refused when it is read, not passed over.
            let manifest = folder.join(Self::MANIFEST);
            match std::fs::metadata(&manifest) {
                Ok(_) => folders.push(folder),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    return Err(refused(
                        ResourceRefusal::Manifest,
                        format!("{}: {e}", manifest.display()),
                    ))
                }
            }
        }
        folders.sort();
        let registry = Rc::new(ExportRegistry::default());
        let mut resources = Vec::with_capacity(folders.len());
        for folder in folders {
            let name = folder
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            check_name(&name).map_err(|why| {
                refused(
                    ResourceRefusal::Manifest,
                    format!("{}: {why}", folder.display()),
                )
            })?;
            let manifest = Manifest::read(folder.join(Self::MANIFEST))?;
            within_ceiling(&name, &manifest, &ceiling)?;
            let name: Arc<str> = Arc::from(name);
            registry.add(&name);
            resources.push(Resource {
                name,
                folder,
                manifest,
                domain: None,
                generation: 0,
                last_error: None,
                failed: false,
            });
        }
        Ok(ResourceHost {
            pool: pool.clone(),
            shape: Box::new(|_, spec| spec),
            native: NativeMode::Annotated,
            memory_limit: Plan::DEFAULT_MEMORY_LIMIT,
            ceiling,
            resources,
            registry,
            interrupts: HostInterrupt::default(),
        })
    }

    /// Sets what the host adds to the [`DomainSpec`] of each resource started from now on:
    /// `f` gets the resource's name and its spec, and answers it with the host's settings
    /// (a run deadline, event limits, sinks, contexts...). The plan (rooted at the resource's
    /// folder) and the grant (what its manifest asks, within the ceiling) are set after `f`,
    /// so `f` can't widen them; so is the run deadline of a manifest that gives one
    /// ([`Manifest::deadline`]): the resource's own deadline wins over the host's.
    ///
    /// ```
    /// use std::time::Duration;
    /// use skein::capability::Grant;
    /// use skein::resource::ResourceHost;
    /// use skein::Pool;
    ///
    /// let dir = tempfile::tempdir()?;
    /// let mut host = ResourceHost::load(&Pool::new(1), dir.path(), Grant::default())?;
    /// host.spec_with(|name, spec| {
    ///     let deadline = if name == "untrusted" { 50 } else { 1000 };
    ///     spec.run_deadline(Duration::from_millis(deadline))
    /// });
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn spec_with(&mut self, f: impl Fn(&str, DomainSpec) -> DomainSpec + 'static) {
        self.shape = Box::new(f);
    }

    /// Sets the code mode of every resource started from now on, its worker VMs included
    /// ([`Plan::native`]): [`NativeMode::Annotated`] (the default) compiles to native code only
    /// what asks for it, [`NativeMode::All`] everything, [`NativeMode::Off`] nothing. The plan
    /// is the host's to set ([`spec_with`](Self::spec_with) can't), so this is how the code
    /// mode reaches it.
    ///
    /// ```
    /// use skein::capability::Grant;
    /// use skein::resource::ResourceHost;
    /// use skein::{NativeMode, Pool};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let mut host = ResourceHost::load(&Pool::new(1), dir.path(), Grant::default())?;
    /// host.native(NativeMode::Off); // everything interpreted
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn native(&mut self, mode: NativeMode) {
        self.native = mode;
    }

    /// Sets the memory limit of each VM of every resource started from now on
    /// ([`Plan::memory_limit`]); by default [`Plan::DEFAULT_MEMORY_LIMIT`] (512 MiB). A
    /// resource's domain holds its engine VM's limit and one per worker on the pool's memory
    /// budget ([`Pool::with_memory_budget`](crate::Pool::with_memory_budget)) while it runs:
    /// a start that does not fit fails with [`Error::Memory`], and the resources already
    /// running go on.
    ///
    /// ```
    /// use skein::capability::Grant;
    /// use skein::resource::ResourceHost;
    /// use skein::Pool;
    ///
    /// let dir = tempfile::tempdir()?;
    /// let mut host = ResourceHost::load(&Pool::new(1), dir.path(), Grant::default())?;
    /// host.memory_limit(64 << 20);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn memory_limit(&mut self, bytes: usize) {
        self.memory_limit = bytes;
    }

    /// Starts `names` and whatever of them is not running, dependencies first, keeping the
    /// listed order between resources that do not depend on each other. A dependency outside
    /// `names` must be running already. Those already running are left alone.
    ///
    /// # Errors
    /// As [`start`](Self::start), plus [`ResourceRefusal::DependencyCycle`] naming the cycle in
    /// order (`a -> b -> a`), found before anything starts. When one start fails, the ones
    /// this call started are stopped again, last first: nothing of the set runs that did not
    /// run before.
    pub fn start_set(&mut self, names: &[&str]) -> Result<()> {
        let order: Vec<String> = {
            let by_name = |n: &str| self.find(n).map(|r| r.manifest.dependencies.as_slice());
            start_order(names, by_name)?
                .into_iter()
                .map(str::to_owned)
                .collect()
        };
        let mut started: Vec<String> = Vec::new();
        for name in order {
            if self.registry.stage(&name) == Some(ResourceStage::Running) {
                continue;
            }
            if let Err(e) = self.start(&name) {
                for done in started.iter().rev() {
                    let _ = self.stop(done);
                }
                return Err(e);
            }
            started.push(name);
        }
        Ok(())
    }

    /// Starts the resource `name`, whose dependencies must be running: builds its domain,
    /// runs its scripts in order in its engine VM, and resolves its exports.
    ///
    /// # Errors
    /// [`Error::Resource`] naming the resource: [`ResourceRefusal::Unknown`],
    /// [`State`](ResourceRefusal::State) (it runs already),
    /// [`SelfDependency`](ResourceRefusal::SelfDependency),
    /// [`DependencyCycle`](ResourceRefusal::DependencyCycle),
    /// [`MissingDependency`](ResourceRefusal::MissingDependency) (not loaded, or not running),
    /// [`Grant`](ResourceRefusal::Grant) (a root outside the host's), [`Script`](ResourceRefusal::Script)
    /// (a script failed to load or raised), [`MissingExport`](ResourceRefusal::MissingExport).
    /// A failed start leaves nothing of the resource running.
    pub fn start(&mut self, name: &str) -> Result<()> {
        self.start_as(name, false)
    }

    fn start_as(&mut self, name: &str, reloading: bool) -> Result<()> {
        let Some(index) = self.index(name) else {
            return Err(refused(
                ResourceRefusal::Unknown,
                format!("start: no resource named '{name}' is loaded"),
            ));
        };
        if self.resources[index].domain.is_some() {
            return Err(refused(
                ResourceRefusal::State,
                format!("start: resource '{name}' is running already"),
            ));
        }
        {
            let by_name = |n: &str| self.find(n).map(|r| r.manifest.dependencies.as_slice());
            start_order(&[name], by_name).map_err(|e| prefixed("start", e))?;
        }
        for dep in &self.resources[index].manifest.dependencies {
            if self.registry.stage(dep) != Some(ResourceStage::Running) {
                return Err(refused(
                    ResourceRefusal::MissingDependency,
                    format!("start: resource '{name}' depends on '{dep}', which is not running"),
                ));
            }
        }
        let started = self.launch(index, reloading);
        let resource = &mut self.resources[index];
        match started {
            Ok(domain) => {
                resource.domain = Some(domain);
                resource.generation += 1;
                resource.failed = false;
                resource.last_error = None;
                Ok(())
            }
            Err(e) => {
                self.registry.set_stage(name, ResourceStage::Stopped, false);
                resource.failed = true;
                resource.last_error = Some(e.to_string());
                Err(e)
            }
        }
    }

    /// Builds the domain of `resources[index]`, runs its scripts and publishes its exports.
    /// On failure the domain is stopped and dropped before this returns.
    fn launch(&self, index: usize, reloading: bool) -> Result<ScriptDomain> {
        let resource = &self.resources[index];
        let name = resource.name.clone();
        let grant = self.grant_for(resource)?;
        let tag = name.clone();
        let memory_limit = match resource.manifest.memory {
            Some(asked) if asked > self.memory_limit => {
                return Err(Error::Memory(format!(
                    "resource '{name}' asks for VMs of {}, more than the host's VM limit of {}",
                    format_bytes(asked),
                    format_bytes(self.memory_limit)
                )))
            }
            Some(asked) => asked,
            None => self.memory_limit,
        };
        let plan = Plan::new()
            .root(&resource.folder)
            .project_at_root()
            .native(self.native)
            .memory_limit(memory_limit)
            .builtins(BUILTINS)
            .setup(move |lua| {
                lua.set_app_data(ResourceName(tag.clone()));
                Ok(())
            });
        let mut spec = (self.shape)(&name, DomainSpec::new(&*name));
        // The resource's own deadline wins over the host's.
        if let Some(deadline) = resource.manifest.deadline {
            spec = spec.run_deadline(deadline);
        }
        let spec = spec.plan(plan).grant(grant);
        let mut domain = ScriptDomain::new(&self.pool, spec)?;
        self.interrupts.add(&name, domain.interrupt_handle());
        domain.lua().set_app_data(EngineLink {
            registry: self.registry.clone(),
            name: name.clone(),
        });
        let registry = self.registry.clone();
        let caller = name.clone();
        domain.serve_query(SERVICE, move |call| Ok(serve(&registry, &caller, call)));
        self.registry
            .set_stage(&name, ResourceStage::Starting, reloading);
        let published = self.run_scripts(resource, &domain).and_then(|exports| {
            let authority = domain.engine_authority().clone();
            let deadline = domain.run_deadline();
            let halt = domain.engine_halt();
            self.registry
                .publish(&name, domain.lua(), exports, authority, halt, deadline)
                .map_err(|e| {
                    refused(
                        ResourceRefusal::Script,
                        format!("start: resource '{name}': {}", error_message(&e)),
                    )
                })
        });
        match published {
            Ok(()) => Ok(domain),
            Err(e) => {
                self.registry
                    .set_stage(&name, ResourceStage::Stopped, false);
                domain.stop();
                self.interrupts.remove(&name);
                Err(e)
            }
        }
    }

    fn run_scripts(
        &self,
        resource: &Resource,
        domain: &ScriptDomain,
    ) -> Result<HashMap<Arc<str>, mlua::Function>> {
        let name = &resource.name;
        // Every script is opened beneath the folder's handle, as `require` confines modules
        // below the project root: a script that is a link out of the folder is refused.
        let dir = Dir::open_ambient_dir(&resource.folder, ambient_authority()).map_err(|e| {
            refused(
                ResourceRefusal::Script,
                format!(
                    "start: resource '{name}': cannot open its folder {}: {e}",
                    resource.folder.display()
                ),
            )
        })?;
        for script in &resource.manifest.scripts {
            let failed = |why: String| {
                refused(
                    ResourceRefusal::Script,
                    format!("start: resource '{name}': {script}: {why}"),
                )
            };
            let handle = domain
                .run_file_beneath(&dir, &resource.folder, script)
                .map_err(|e| failed(e.to_string()))?;
            if let ScriptStatus::Failed(why) = handle.status() {
                return Err(failed(why));
            }
        }
        let globals = domain.lua().globals();
        let mut exports = HashMap::with_capacity(resource.manifest.exports.len());
        for export in &resource.manifest.exports {
            match globals.raw_get::<Value>(export.as_str()) {
                Ok(Value::Function(f)) => {
                    exports.insert(Arc::from(export.as_str()), f);
                }
                found => {
                    let found = match found {
                        Ok(v) => a_type(&v),
                        Err(e) => e.to_string(),
                    };
                    return Err(refused(
                        ResourceRefusal::MissingExport,
                        format!(
                            "start: resource '{name}' declares the export '{export}', but after its scripts ran the global '{export}' is {found}, not a function"
                        ),
                    ));
                }
            }
        }
        Ok(exports)
    }

    /// What the manifest asks, within the ceiling: the capabilities it lists and its roots
    /// below its folder, each of which must lie below a root the ceiling holds. Its relative
    /// `@skein/fs` paths resolve from its folder, as its roots do, wherever the host runs.
    fn grant_for(&self, resource: &Resource) -> Result<Grant> {
        within_ceiling(&resource.name, &resource.manifest, &self.ceiling)?;
        let name = &resource.name;
        let asked = CapabilitySet::from_iter(resource.manifest.allow.iter().cloned());
        // Canonical, as the roots are, so a relative path names a root by the same path.
        let folder = resource.folder.canonicalize().map_err(|e| {
            refused(
                ResourceRefusal::Script,
                format!(
                    "start: resource '{name}': cannot open its folder {}: {e}",
                    resource.folder.display()
                ),
            )
        })?;
        let mut grant = RootAuthority::new().grant(asked).with_working_dir(folder);
        let roots = [
            (&resource.manifest.read, self.ceiling.read_roots(), "read"),
            (
                &resource.manifest.write,
                self.ceiling.write_roots(),
                "write",
            ),
        ];
        for (asked, held, key) in roots {
            for root in asked {
                let dir = resource.folder.join(root);
                let bad = |why: String| {
                    refused(
                        ResourceRefusal::Grant,
                        format!("start: resource '{name}': capabilities.{key} '{root}': {why}"),
                    )
                };
                let canonical = dir.canonicalize().map_err(|e| bad(e.to_string()))?;
                if !held.iter().any(|h| canonical.starts_with(h)) {
                    return Err(bad(format!(
                        "{} is not below a directory the host may {key}",
                        canonical.display()
                    )));
                }
                grant = if key == "read" {
                    grant.read_root(&canonical)
                } else {
                    grant.write_root(&canonical)
                }
                .map_err(|e| bad(e.to_string()))?;
            }
        }
        Ok(grant)
    }

    /// Stops the running resource `name`: raises its `stop` event to its handlers (which may
    /// still call their dependencies; calls into it are refused from here on), then stops its
    /// domain, which ends its registered jobs, timers, handlers, actors, owned resources, keys
    /// and pool work, and drops its VM and export records. Stopping a resource others depend on
    /// is allowed: each running dependent is a warning, and its calls fail until this one
    /// starts again.
    ///
    /// # Errors
    /// [`ResourceRefusal::Unknown`], or [`State`](ResourceRefusal::State) when it is not
    /// running.
    pub fn stop(&mut self, name: &str) -> Result<StopOutcome> {
        self.stop_as(name, false)
    }

    fn stop_as(&mut self, name: &str, reloading: bool) -> Result<StopOutcome> {
        let Some(index) = self.index(name) else {
            return Err(refused(
                ResourceRefusal::Unknown,
                format!("stop: no resource named '{name}' is loaded"),
            ));
        };
        if self.resources[index].domain.is_none() {
            return Err(refused(
                ResourceRefusal::State,
                format!("stop: resource '{name}' is not running"),
            ));
        }
        let mut outcome = StopOutcome::default();
        if !reloading {
            for other in &self.resources {
                if other.domain.is_some() && other.manifest.dependencies.iter().any(|d| d == name) {
                    outcome.warnings.push(format!(
                        "resource '{}' depends on '{name}', which stopped: its calls into '{name}' fail until '{name}' starts again",
                        other.name
                    ));
                }
            }
        }
        self.registry
            .set_stage(name, ResourceStage::Stopping, reloading);
        let Some(mut domain) = self.resources[index].domain.take() else {
            return Ok(outcome);
        };
        match domain.mailbox().post_named("stop", Message::Nil) {
            Ok(()) => {
                let report = domain.drain_events();
                for error in report.errors {
                    outcome.reports.push(Report::new(
                        ReportKind::Handler,
                        format!("resource '{name}' stop"),
                        error.message,
                    ));
                }
            }
            Err(refused) => outcome.warnings.push(format!(
                "resource '{name}': its stop handlers did not run: {refused}"
            )),
        }
        self.registry
            .set_stage(name, ResourceStage::Stopped, reloading);
        domain.stop();
        outcome.reports.extend(domain.take_reports());
        drop(domain);
        self.interrupts.remove(name);
        Ok(outcome)
    }

    /// Stops `name` (when it runs) and starts it again from disk, its manifest read again, as
    /// a new generation. Calls into it during the reload are refused naming the reload; the
    /// same proxies reach the new generation once it has started.
    ///
    /// # Errors
    /// [`ResourceRefusal::Unknown`]; the manifest's refusal (the resource is left as it was);
    /// then as [`start`](Self::start), the resource stopped.
    pub fn reload(&mut self, name: &str) -> Result<StopOutcome> {
        let Some(index) = self.index(name) else {
            return Err(refused(
                ResourceRefusal::Unknown,
                format!("reload: no resource named '{name}' is loaded"),
            ));
        };
        let manifest = Manifest::read(self.resources[index].folder.join(Self::MANIFEST))?;
        within_ceiling(name, &manifest, &self.ceiling)?;
        let running = self.resources[index].domain.is_some();
        let outcome = if running {
            self.stop_as(name, true)?
        } else {
            StopOutcome::default()
        };
        self.resources[index].manifest = manifest;
        if let Err(e) = self.start_as(name, running) {
            // Listed as reported: the failure is the reload's.
            let e = prefixed("reload", e);
            self.resources[index].last_error = Some(e.to_string());
            return Err(e);
        }
        Ok(outcome)
    }

    /// A `Send` handle that stops every resource's running Luau from any thread: a start
    /// script or an export spinning in a loop ([`HostInterrupt`]). A runner's signal thread
    /// uses it to end a host whose engine thread is busy in a resource's code.
    pub fn interrupt_handle(&self) -> HostInterrupt {
        self.interrupts.clone()
    }

    /// Every loaded resource, by name.
    pub fn list(&self) -> Vec<ResourceInfo> {
        self.resources
            .iter()
            .map(|r| ResourceInfo {
                name: r.name.to_string(),
                state: if r.domain.is_some() {
                    ResourceState::Running
                } else if r.failed {
                    ResourceState::Failed
                } else {
                    ResourceState::Stopped
                },
                generation: r.generation,
                dependencies: r.manifest.dependencies.clone(),
                exports: r.manifest.exports.clone(),
                last_error: r.last_error.clone(),
            })
            .collect()
    }

    /// The domain of the running resource `name`, for host code that evaluates in it or
    /// registers services on it.
    pub fn domain(&self, name: &str) -> Option<&ScriptDomain> {
        self.find(name).and_then(|r| r.domain.as_ref())
    }

    /// Runs one full frame of `dt` in every running resource, by name
    /// ([`ScriptDomain::advance`], as [`ScriptDomain::run_frames`] makes them): the event drain
    /// (a resource's own events reach its handlers and waiters), the phases, registered jobs,
    /// ready tasks and timers. Answers the reports the frames made, each with its resource's
    /// name.
    pub fn advance(&mut self, dt: Duration) -> Vec<ResourceReport> {
        let mut out = Vec::new();
        for resource in &self.resources {
            if let Some(domain) = &resource.domain {
                // A full frame, as `run_frames` makes: the event drain (a resource's own
                // events reach its handlers), the phases, registered jobs and tasks.
                match domain.advance(dt) {
                    Ok(frame) => domain.keep_handler_failures(&frame),
                    Err(e) => {
                        domain.keep_report(Report::new(ReportKind::Service, "frame", e.to_string()))
                    }
                }
                out.extend(
                    domain
                        .take_reports()
                        .into_iter()
                        .map(|report| ResourceReport {
                            resource: resource.name.to_string(),
                            report,
                        }),
                );
            }
        }
        out
    }

    /// Whether any resource runs.
    pub fn is_live(&self) -> bool {
        self.resources.iter().any(|r| r.domain.is_some())
    }

    /// Stops every running resource after the resources that depend on it, so its `stop`
    /// handlers can still call its dependencies. Answers each stop's name and outcome, in the
    /// order they stopped.
    pub fn shutdown(&mut self) -> Vec<(String, StopOutcome)> {
        let running: Vec<Arc<str>> = self
            .resources
            .iter()
            .filter(|r| r.domain.is_some())
            .map(|r| r.name.clone())
            .collect();
        let names: Vec<&str> = running.iter().map(|n| &**n).collect();
        let order: Vec<String> = {
            let by_name = |n: &str| self.find(n).map(|r| r.manifest.dependencies.as_slice());
            match start_order(&names, by_name) {
                Ok(order) => order.into_iter().map(str::to_owned).collect(),
                // The manifests read at the starts formed no cycle; keep the names' order.
                Err(_) => names.iter().map(|n| (*n).to_owned()).collect(),
            }
        };
        let mut out = Vec::with_capacity(order.len());
        for name in order.iter().rev() {
            let mut outcome = self.stop_as(name, false).unwrap_or_default();
            // Everything stops: a dependent stopping after its dependency is no news.
            outcome.warnings.clear();
            out.push((name.clone(), outcome));
        }
        out
    }

    fn index(&self, name: &str) -> Option<usize> {
        self.resources
            .binary_search_by(|r| (*r.name).cmp(name))
            .ok()
    }

    fn find(&self, name: &str) -> Option<&Resource> {
        self.index(name).map(|i| &self.resources[i])
    }
}

impl Drop for ResourceHost {
    fn drop(&mut self) {
        self.shutdown();
        self.registry.clear();
    }
}

impl fmt::Debug for ResourceHost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResourceHost")
            .field("resources", &self.list())
            .finish_non_exhaustive()
    }
}

/// Refuses a manifest asking for a capability the host does not hold.
fn within_ceiling(name: &str, manifest: &Manifest, ceiling: &Grant) -> Result<()> {
    let held = ceiling.capabilities();
    let mut lacking: Vec<&str> = manifest
        .allow
        .iter()
        .filter(|id| !held.contains(id))
        .map(|id| id.as_str())
        .collect();
    if !manifest.read.is_empty() && !held.contains_name(FILESYSTEM_READ) {
        lacking.push(FILESYSTEM_READ);
    }
    if !manifest.write.is_empty() && !held.contains_name(FILESYSTEM_WRITE) {
        lacking.push(FILESYSTEM_WRITE);
    }
    if lacking.is_empty() {
        Ok(())
    } else {
        Err(refused(
            ResourceRefusal::Grant,
            format!(
                "resource '{name}' asks for capabilities the host does not hold: {}",
                lacking.join(", ")
            ),
        ))
    }
}

/// `e` with `entry: ` before its text, unless it names an entry already.
fn prefixed(entry: &str, e: Error) -> Error {
    match e {
        Error::Resource { refusal, message } if !message.starts_with(&format!("{entry}:")) => {
            let message = match message.split_once(": ") {
                Some(("start" | "stop" | "reload", rest)) => {
                    format!("{entry}: {rest}")
                }
                _ => format!("{entry}: {message}"),
            };
            Error::Resource { refusal, message }
        }
        other => other,
    }
}
