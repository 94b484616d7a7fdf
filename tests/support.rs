//! Shared helpers: a module tree on disk and a domain rooted in it.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use skein::message::Args;
use skein::{
    mlua, ContextSpec, DomainSpec, Message, Phase, Plan, Pool, ScriptDomain, ServiceError,
};

/// Runs each named test body in both code modes, as a test matrix: `in_both_modes!(name)` over
/// `fn name(mode: NativeMode)` makes the tests `name::interpreted` (`NativeMode::Off`) and
/// `name::native` (`NativeMode::All`: every module compiled to native code, where the platform
/// has a code generator). Deadlines, cancel and the memory limit must hold the same in both.
macro_rules! in_both_modes {
    ($($body:ident),* $(,)?) => {
        $(
            mod $body {
                #[test]
                fn interpreted() {
                    super::$body(skein::NativeMode::Off)
                }

                #[test]
                fn native() {
                    super::$body(skein::NativeMode::All)
                }
            }
        )*
    };
}

/// The runner's flag for `mode`: `--native` or `--no-native`.
pub fn mode_flag(mode: skein::NativeMode) -> &'static str {
    if mode == skein::NativeMode::Off {
        "--no-native"
    } else {
        "--native"
    }
}

/// A temporary folder of Luau modules.
pub struct Tree {
    pub dir: tempfile::TempDir,
}

impl Tree {
    pub fn new(files: &[(&str, &str)]) -> Tree {
        let dir = tempfile::tempdir().expect("tempdir");
        let tree = Tree { dir };
        for (name, source) in files {
            tree.write(name, source);
        }
        tree
    }

    pub fn path(&self) -> PathBuf {
        self.dir.path().canonicalize().expect("canonical tempdir")
    }

    pub fn write(&self, name: &str, source: &str) {
        let path = self.dir.path().join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).expect("mkdir");
        }
        std::fs::write(path, source).expect("write module");
    }

    pub fn domain(&self, pool: &Pool) -> ScriptDomain {
        self.domain_with(pool, Plan::new())
    }

    pub fn domain_with(&self, pool: &Pool, plan: Plan) -> ScriptDomain {
        ScriptDomain::new(pool, DomainSpec::new("test").plan(plan.root(self.path())))
            .expect("domain")
    }
}

/// Makes a FIFO at `path`: opening it for reading would wait for a writer that never comes.
pub fn mkfifo(path: &Path) {
    let c_path = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).expect("a path");
    // SAFETY: `c_path` is a valid NUL-terminated path that outlives the call.
    let made = unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) };
    assert_eq!(made, 0, "mkfifo {path:?}");
}

/// Asserts that `haystack` contains `needle`, printing both when it does not.
#[track_caller]
pub fn assert_contains(haystack: &str, needle: &str) {
    assert!(
        haystack.contains(needle),
        "expected to find\n  {needle}\nin\n  {haystack}"
    );
}

#[allow(dead_code)]
pub fn exists(p: &Path) -> bool {
    p.exists()
}

/// The field `name` of a table message.
#[track_caller]
pub fn field<'a>(m: &'a Message, name: &str) -> &'a Message {
    match m {
        Message::Map(map) => map
            .iter()
            .find(|(k, _)| matches!(k, skein::MapKey::String(s) if &s[..] == name.as_bytes()))
            .map(|(_, v)| v)
            .unwrap_or_else(|| panic!("no field {name} in {m:?}")),
        other => panic!("expected a table, got {other:?}"),
    }
}

/// The items of a list message.
#[track_caller]
pub fn list(m: &Message) -> &[Message] {
    match m {
        Message::List(items) => items,
        other => panic!("expected a list, got {other:?}"),
    }
}

/// Polls `done` every 2 ms until it holds or `limit` passes; answers its last answer. `done`
/// may keep what it saw (a status, a report) in the caller's variables.
pub fn wait_until(limit: std::time::Duration, mut done: impl FnMut() -> bool) -> bool {
    let end = std::time::Instant::now() + limit;
    while std::time::Instant::now() < end {
        if done() {
            return true;
        }
        // The poll interval, not a wait for a state: `done` is the state.
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    done()
}

/// Starts the runner on `main.luau` of `tree` with two workers, stdout on a pipe read line by
/// line into the receiver (which ends when the runner closes it), stderr dropped.
pub fn runner_lines(tree: &Tree) -> (std::process::Child, std::sync::mpsc::Receiver<String>) {
    use std::io::BufRead;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_skein"))
        .args(["run", "main.luau", "--workers", "2"])
        .current_dir(tree.path())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("run skein");
    let stdout = child.stdout.take().expect("piped stdout");
    let (lines, received) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    (child, received)
}

/// Waits up to `limit` for `child` to exit and answers its status; a child still running then
/// is killed and reaped, and the answer is `None`.
pub fn exit_within(
    child: &mut std::process::Child,
    limit: std::time::Duration,
) -> Option<std::process::ExitStatus> {
    let mut status = None;
    let exited = wait_until(limit, || {
        status = child.try_wait().expect("wait for the child");
        status.is_some()
    });
    if !exited {
        let _ = child.kill();
        let _ = child.wait();
    }
    status
}

/// The text of a string message.
#[track_caller]
pub fn text(m: &Message) -> String {
    match m {
        Message::String(b) => String::from_utf8_lossy(b).into_owned(),
        other => panic!("expected a string, got {other:?}"),
    }
}

/// The value of a number or integer message.
#[track_caller]
pub fn number(m: &Message) -> f64 {
    match m {
        Message::Number(n) => *n,
        Message::Integer(i) => *i as f64,
        other => panic!("expected a number, got {other:?}"),
    }
}

/// Counts calls of `hostMark()` from any VM of the domain: proof of what ran, across workers.
#[derive(Clone, Default)]
pub struct Marks(Arc<AtomicUsize>);

impl Marks {
    /// A plan whose VMs have `hostMark()`, counting into these marks.
    pub fn plan(&self) -> Plan {
        let counter = self.0.clone();
        Plan::new().function("hostMark", move |_, _| {
            counter.fetch_add(1, Ordering::SeqCst);
            Ok(mlua::MultiValue::new())
        })
    }

    pub fn count(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

/// Runs `body` inside `pcall` in the domain's engine VM and answers the text of the error it
/// raised; fails the test if it raised nothing.
#[track_caller]
pub fn refusal(domain: &ScriptDomain, body: &str) -> String {
    error_of(domain, body).unwrap_or_else(|| panic!("expected an error from\n  {body}"))
}

/// Runs `body` inside `pcall` in the domain's engine VM and answers the text of the error it
/// raised, or `None` when it raised nothing (so a table's walk can name the row).
#[track_caller]
pub fn error_of(domain: &ScriptDomain, body: &str) -> Option<String> {
    let source = format!(
        "local ok, err = pcall(function() {body} end)\n\
         if ok then return nil end\n\
         return tostring(err)"
    );
    match domain.eval(&source).expect("eval") {
        Message::Nil => None,
        raised => Some(text(&raised)),
    }
}

/// A string message.
pub fn string(s: &str) -> Message {
    Message::String(s.as_bytes().to_vec().into())
}

/// A map message with string keys.
pub fn map(pairs: &[(&str, Message)]) -> Message {
    let entries = pairs.iter().map(|(k, v)| {
        (
            skein::MapKey::String(k.as_bytes().to_vec().into()),
            v.clone(),
        )
    });
    Message::Map(entries.collect())
}

/// The first argument of an engine-service call (they arrive as a list), as an integer.
pub fn first_int(args: &[Message]) -> i64 {
    match args.first() {
        Some(Message::Integer(i)) => *i,
        Some(Message::Number(n)) => *n as i64,
        other => panic!("expected a number first, got {other:?}"),
    }
}

/// Host state behind the `world.*` test services: id to value.
pub type World = std::rc::Rc<std::cell::RefCell<std::collections::HashMap<i64, Message>>>;

/// The `world.get(id)` query over `world`.
pub fn world_get(world: &World) -> impl Fn(Args) -> Result<Message, ServiceError> {
    let world = world.clone();
    move |args| {
        Ok(world
            .borrow()
            .get(&first_int(&args))
            .cloned()
            .unwrap_or(Message::Nil))
    }
}

/// The `world.set(id, value)` command over `world`.
pub fn world_set(world: &World) -> impl FnMut(Args) -> Result<(), ServiceError> {
    let world = world.clone();
    move |Args(mut args)| {
        let v = args.pop().unwrap_or(Message::Nil);
        let id = first_int(&args);
        world.borrow_mut().insert(id, v);
        Ok(())
    }
}

/// Registers `world.get` and `world.set` over `world` on `domain`.
pub fn serve_world(domain: &skein::ScriptDomain, world: &World) {
    domain
        .register_query("world.get", world_get(world))
        .unwrap();
    domain
        .register_command("world.set", world_set(world))
        .unwrap();
}

/// Runs the `skein` runner in the crate's folder; answers its exit code, stdout and stderr.
pub fn skein(args: &[&str]) -> (i32, String, String) {
    skein_in(Path::new(env!("CARGO_MANIFEST_DIR")), args)
}

/// Runs the `skein` runner with `cwd` as its current directory.
pub fn skein_in(cwd: &Path, args: &[&str]) -> (i32, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_skein"))
        .args(args)
        .current_dir(cwd)
        .output()
        .expect("run skein");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A gate the host opens: `gate()` in Luau marks the caller as arrived, then blocks its thread
/// (at most 10 s, so a broken test fails instead of hanging) until the host opens it; it answers
/// whether the gate was open. `arrived()` in Luau answers how many callers arrived so far.
#[derive(Clone, Default)]
pub struct Gate {
    open: Arc<(std::sync::Mutex<bool>, std::sync::Condvar)>,
    arrived: Arc<AtomicUsize>,
}

impl Gate {
    /// `plan` with `gate()` and `arrived()`.
    pub fn plan(&self, plan: Plan) -> Plan {
        let gate = self.clone();
        let arrived = self.arrived.clone();
        plan.function("gate", move |lua, _| {
            gate.arrived.fetch_add(1, Ordering::AcqRel);
            let (lock, cv) = &*gate.open;
            let open = lock.lock().unwrap();
            let (open, _) = cv
                .wait_timeout_while(open, std::time::Duration::from_secs(10), |o| !*o)
                .unwrap();
            lua.pack_multi(*open)
        })
        .function("arrived", move |lua, _| {
            lua.pack_multi(arrived.load(Ordering::Acquire) as f64)
        })
    }

    /// How many calls of `gate()` arrived.
    pub fn arrived(&self) -> usize {
        self.arrived.load(Ordering::Acquire)
    }

    pub fn open(&self) {
        let (lock, cv) = &*self.open;
        *lock.lock().unwrap() = true;
        cv.notify_all();
    }
}

/// `threadMark()` in Luau: a host mark that remembers the thread that called it, so the test
/// can tell when that thread sleeps in the kernel (state `S`: blocked on a lock, a condvar or a
/// park, not running code). Called right before a blocking call, it proves that the thread is
/// parked in that call, not on its way to it. Linux only (it reads `/proc/thread-self`);
/// elsewhere `asleep` answers `true` once marked, and the tests that use it prove less.
#[derive(Clone, Default)]
pub struct ThreadMark(Arc<std::sync::Mutex<Option<PathBuf>>>);

#[allow(dead_code)]
impl ThreadMark {
    /// `plan` with `threadMark()`.
    pub fn plan(&self, plan: Plan) -> Plan {
        let last = self.0.clone();
        plan.function("threadMark", move |_, _| {
            let here = if cfg!(target_os = "linux") {
                Path::new("/proc").join(std::fs::read_link("/proc/thread-self")?)
            } else {
                PathBuf::new()
            };
            *last.lock().unwrap() = Some(here);
            Ok(mlua::MultiValue::new())
        })
    }

    /// Whether `threadMark()` was called and the thread that called it last sleeps now.
    pub fn asleep(&self) -> bool {
        let Some(thread) = self.0.lock().unwrap().clone() else {
            return false;
        };
        if !cfg!(target_os = "linux") {
            return true;
        }
        // `pid (comm) state ...`: the state follows the last ')'.
        let stat = std::fs::read_to_string(thread.join("stat")).unwrap_or_default();
        stat.rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('S'))
    }
}

/// A module file for a test tree, `push_retrying.luau`: a function that pushes `v` to a shared
/// queue, retrying while the queue is full and only then, for at most 10 s. Any other refusal,
/// or a queue that stays full, raises instead of spinning.
pub const PUSH_RETRYING: (&str, &str) = (
    "push_retrying.luau",
    r#"return function(q, v)
    local start = os.clock()
    while true do
        local ok, err = pcall(q.push, q, v)
        if ok then return end
        local full = `SharedQueue:push: queue '{q.name}' is full (capacity {q.capacity})`
        assert(string.find(tostring(err), full, 1, true), tostring(err))
        assert(os.clock() - start < 10, `{full} for 10 s`)
        task.wait() -- a yield of one batch: a consumer catches up
    end
end
"#,
);

/// Pushes `n` values to `hold`, a shared queue where stopped work (cancelled chunks, elements of
/// a failed map) was parked, and asserts that all `n` stay there: nothing is left to pop them. A
/// push may reach a pop still parked in a VM whose stop has not landed yet; that VM gives the
/// value back when the stop sweeps the pop, so the count is waited for.
#[track_caller]
pub fn assert_nothing_pops(hold: &skein::shared::SharedQueueRef, n: usize) {
    for i in 0..n {
        hold.push(Message::Integer(i as i64)).unwrap();
    }
    assert!(
        wait_until(std::time::Duration::from_secs(10), || hold.len() == n),
        "stopped work took a value: {} of {n} left",
        hold.len()
    );
}

/// The strings of the list in the engine VM's global `name`, joined by spaces: read straight
/// from the VM, without running a round (which would count a frame and resume tasks).
pub fn global_strings(domain: &ScriptDomain, name: &str) -> String {
    let list: mlua::Table = domain.lua().globals().get(name).expect("a global list");
    list.sequence_values::<String>()
        .map(|s| s.expect("a string"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The process's resident memory, in pages (`/proc/self/statm`; 0 where there is none).
pub fn rss_pages() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    statm
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// Runs the ignored test `name` (`module::test`) of this binary alone in a child process, for a
/// test that measures the process (its memory, its threads), which other tests beside it would
/// move; fails with the child's output unless it passed.
#[track_caller]
pub fn run_alone(name: &str) {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            name,
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .output()
        .expect("run the child");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert_contains(&stdout, "1 passed");
}

/// A domain `game` with one context, `sim`, that schedules `update` and `lateUpdate`: what the
/// tests of a frame's order bind their handlers to.
pub fn sim_domain(pool: &Pool) -> ScriptDomain {
    let spec = DomainSpec::new("game")
        .context(ContextSpec::new("sim").phases([Phase::Update, Phase::LateUpdate]))
        .unwrap();
    ScriptDomain::new(pool, spec).unwrap()
}

/// Puts `command`'s child under an address-space limit of `bytes` (`RLIMIT_AS`), set between
/// fork and exec: how the hostile tests run the real runner.
pub fn limit_address_space(command: &mut std::process::Command, bytes: u64) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs in the child between fork and exec and calls only setrlimit,
    // which is async-signal-safe; it allocates nothing and touches no lock.
    unsafe {
        command.pre_exec(move || {
            let limit = libc::rlimit {
                rlim_cur: bytes,
                rlim_max: bytes,
            };
            if libc::setrlimit(libc::RLIMIT_AS, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}
