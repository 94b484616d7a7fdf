//! Hostile scripts against the real runner: each runs `skein` as a child process under a 3 GiB
//! address-space limit, as a script author who wants to take the host down would, and asserts
//! how the run ended (an exit code of 0, 1 or 2, never a signal), the error's text, and, where
//! the script catches the error, that the pool still serves a later dispatch in the same run.
//! The `skein serve` section does the same for a server: a resource that attacks the host fails
//! alone, and the server and the other resources go on.
//!
//! One section for each class of attack; `docs/embedding.md` ("What a script cannot do") points
//! here for each.

use std::io::{Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::{assert_contains, exit_within, mode_flag, Tree};
use skein::NativeMode;

/// The address space a hostile run gets: far below what uncontained attacks reach (6 GB,
/// 16 GB), far above what a contained run needs.
const ADDRESS_SPACE: u64 = 3 << 30;

/// A hostile run that is still going after this long has hung: it is killed and the test fails.
const HANG: Duration = Duration::from_secs(60);

/// How one hostile run ended.
#[derive(Debug)]
pub struct Ended {
    /// The exit code; `None` when a signal ended the process.
    pub code: Option<i32>,
    /// The signal that ended it, if one did.
    pub signal: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Ended {
    /// Asserts the run exited with `code` (not by a signal) and answers its output for more checks.
    #[track_caller]
    pub fn exited(&self, code: i32) -> &Self {
        assert_eq!(
            (self.code, self.signal),
            (Some(code), None),
            "expected exit {code}\nstdout:\n{}\nstderr:\n{}",
            self.stdout,
            self.stderr
        );
        self
    }

    #[track_caller]
    pub fn stdout_has(&self, text: &str) -> &Self {
        assert_contains(&self.stdout, text);
        self
    }

    #[track_caller]
    pub fn stderr_has(&self, text: &str) -> &Self {
        assert_contains(&self.stderr, text);
        self
    }
}

/// `skein <args>` in `dir` under the address-space limit, its stdout and stderr piped.
fn limited(dir: &Path, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_skein"));
    command
        .args(args)
        .current_dir(dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    crate::support::limit_address_space(&mut command, ADDRESS_SPACE);
    command
}

/// Reads all of `from` on a thread of its own, so a child that fills one pipe never blocks.
fn read_all(mut from: impl Read + Send + 'static) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = from.read_to_end(&mut s);
        String::from_utf8_lossy(&s).into_owned()
    })
}

/// Waits for `child` (whose stdout and stderr are piped and not yet taken), killing it past
/// [`HANG`], and answers how it ended with everything it wrote.
fn ended(mut child: Child) -> Ended {
    let out = read_all(child.stdout.take().expect("piped stdout"));
    let err = read_all(child.stderr.take().expect("piped stderr"));
    let Some(status) = exit_within(&mut child, HANG) else {
        panic!(
            "the hostile run hung past {HANG:?}; stderr:\n{}",
            err.join().unwrap_or_default()
        );
    };
    Ended {
        code: status.code(),
        signal: status.signal(),
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
    }
}

/// Runs `skein run <args>` in `dir` under the address-space limit, killing it past [`HANG`].
pub fn hostile_run(dir: &Path, args: &[&str]) -> Ended {
    let mut command = limited(dir, &["run"]);
    command.args(args).stdin(Stdio::null());
    ended(command.spawn().expect("start skein"))
}

/// Runs `skein serve <dir> --workers 2 <args>` in `dir` under the address-space limit, as
/// [`hostile_run`] runs `skein run`: `console` is typed on its standard input, then the input
/// ends, which shuts the server down (dependents first) once the console has run every line.
/// Two workers, whatever the machine, so the VM limits the texts name are the same everywhere;
/// the runner names a resource's scripts from its current directory, `dir`.
pub fn hostile_serve(dir: &Path, args: &[&str], console: &str) -> Ended {
    let folder = dir.to_str().expect("a UTF-8 folder");
    let mut command = limited(dir, &["serve", folder, "--workers", "2"]);
    command.args(args).stdin(Stdio::piped());
    let mut child = command.spawn().expect("start skein serve");
    let mut stdin = child.stdin.take().expect("piped stdin");
    let console = console.to_owned();
    // On a thread of its own, so a full pipe never holds the test; a server that ended early
    // refuses the write, which is its own answer.
    std::thread::spawn(move || {
        let _ = stdin.write_all(console.as_bytes());
    });
    ended(child)
}

/// A module every section uses to show that the pool still serves work after a refusal.
const ECHO: &str = "local M = {}\nfunction M.echo(x) return x end\nreturn M\n";

// ---------------------------------------------------------------------------------------------
// Class 2: only text compiled by Skein's own compiler is ever loaded.
// ---------------------------------------------------------------------------------------------

/// The ten bytes that ended the process with SIGILL inside Luau's loader.
const HAND_MADE_BYTECODE: &[u8] = &[6, 3, 1, 0, 0, 0, 0, 0, 0, 0];

#[test]
fn a_main_script_of_bytecode_is_refused_not_loaded() {
    let tree = Tree::new(&[]);
    std::fs::write(tree.path().join("evil.luau"), HAND_MADE_BYTECODE).unwrap();
    let path = tree.path().join("evil.luau");
    hostile_run(&tree.path(), &["evil.luau"])
        .exited(1)
        .stderr_has(&format!(
            "'{}' is not Luau source text: it starts with byte 0x06, which marks precompiled \
             bytecode; Skein loads only source it compiles itself",
            path.display()
        ));
}

#[test]
fn a_main_script_that_is_bytecode_by_its_second_byte_is_refused() {
    // Versions 9 to 11 (tab, newline, vertical tab) followed by a types version are bytecode to
    // Luau's loader: a text-looking first byte is not enough.
    let tree = Tree::new(&[]);
    std::fs::write(tree.path().join("evil.luau"), b"\n\x02\x01\x00\x00return 1").unwrap();
    hostile_run(&tree.path(), &["evil.luau"])
        .exited(1)
        .stderr_has("is not Luau source text: it starts with byte 0x0a");
}

#[test]
fn real_bytecode_from_luau_s_compiler_is_refused_as_a_main_script() {
    // Bytecode Luau itself made is refused as well: only Skein's compiler output is loaded, and
    // only from text Skein compiled.
    let bytecode = mlua::chunk::Compiler::new()
        .compile("print('ran')")
        .unwrap();
    let tree = Tree::new(&[]);
    std::fs::write(tree.path().join("compiled.luau"), &bytecode).unwrap();
    let ended = hostile_run(&tree.path(), &["compiled.luau"]);
    ended
        .exited(1)
        .stderr_has("is not Luau source text: it starts with byte");
    assert!(!ended.stdout.contains("ran"), "{}", ended.stdout);
}

#[test]
fn a_worker_source_of_bytecode_is_refused_and_the_pool_serves_the_next_dispatch() {
    let tree = Tree::new(&[
        ("m.luau", ECHO),
        (
            "main.luau",
            r#"
local worker = require("@skein/worker")
local w = worker.spawn { name = "evil", source = "\6\3\1\0\0\0\0\0\0\0" }
local ok, err = pcall(w.receive, w, 5)
print("received", ok, err)
print("joined", w:join(5))
print("after", jobs.dispatch("./m", "echo", 41):await() + 1)
"#,
        ),
    ]);
    // The script received the worker's failure, so the run does not fail on it; the pool
    // served on meanwhile.
    hostile_run(&tree.path(), &["--allow", "worker.spawn", "main.luau"])
        .exited(0)
        .stdout_has(
            "received\tfalse\tdomain#1 generation 1 worker 'evil' (worker:evil) failed at load: \
             'worker:evil' is not Luau source text: it starts with byte 0x06, which marks \
             precompiled bytecode; Skein loads only source it compiles itself\n",
        )
        .stdout_has("joined\tfailed")
        .stdout_has("after\t42");
}

#[test]
fn a_module_file_of_bytecode_is_compiled_as_text_and_refused_by_the_compiler() {
    let tree = Tree::new(&[
        ("m.luau", ECHO),
        (
            "main.luau",
            r#"
local ok, err = pcall(require, "./evil")
print("caught", ok, err)
print("after", jobs.dispatch("./m", "echo", 41):await() + 1)
"#,
        ),
    ]);
    std::fs::write(tree.path().join("evil.luau"), HAND_MADE_BYTECODE).unwrap();
    let ended = hostile_run(&tree.path(), &["main.luau"]);
    ended
        .exited(0)
        .stdout_has("caught\tfalse")
        .stdout_has("after\t42");
    assert_contains(&ended.stdout, "evil.luau");
}

// ---------------------------------------------------------------------------------------------
// Class 1: every copy the host makes for a script is weighed as it is read and refused past its
// bound, before the host holds it.
// ---------------------------------------------------------------------------------------------

/// The refusal of a copy past `Limits::MAX_MESSAGE_BYTES` (64 MiB).
const TOO_HEAVY: &str =
    "a value weighing more than its limit of 67108864 bytes can't cross a worker \
                         or event boundary";

/// A main script that builds `value` (Luau expression, may use the local `bomb`), passes it to
/// `attempt` (a Luau function body taking `value`), prints the caught error, then proves the pool
/// still serves a dispatch.
fn copy_bomb(attempt: &str) -> Tree {
    let main = format!(
        r#"
-- 2^26 leaves when expanded: about 6 GB once copied in full.
local bomb = {{"leaf"}}
for i = 1, 26 do bomb = {{bomb, bomb}} end
local ok, err = pcall(function(value)
{attempt}
end, bomb)
print("caught", ok, err)
print("after", jobs.dispatch("./m", "echo", 41):await() + 1)
"#
    );
    Tree::new(&[("m.luau", ECHO), ("main.luau", &main)])
}

#[track_caller]
fn refused_and_served(tree: &Tree, flags: &[&str], prefix: &str, reason: &str) {
    let mut args = flags.to_vec();
    args.push("main.luau");
    let ended = hostile_run(&tree.path(), &args);
    ended.exited(0).stdout_has("after\t42");
    let line = ended
        .stdout
        .lines()
        .find(|l| l.starts_with("caught"))
        .unwrap_or_else(|| panic!("no caught line in:\n{}", ended.stdout));
    assert!(
        line.starts_with(&format!("caught\tfalse\t{prefix}")),
        "{line}"
    );
    assert!(line.ends_with(reason), "{line}");
}

#[test]
fn a_shared_subtable_bomb_is_refused_by_dispatch() {
    let tree = copy_bomb(r#"return jobs.dispatch("./m", "echo", value):await()"#);
    refused_and_served(&tree, &[], "jobs.dispatch: args[", TOO_HEAVY);
}

#[test]
fn a_shared_subtable_bomb_is_refused_by_parallel_for_args() {
    let tree = copy_bomb(r#"return jobs.parallelFor("./m", "echo", 4, value):await()"#);
    refused_and_served(&tree, &[], "jobs.parallelFor: args[", TOO_HEAVY);
}

#[test]
fn a_shared_subtable_bomb_is_refused_by_a_shared_table_write() {
    let tree = copy_bomb(r#"jobs.shared.table("t").v = value"#);
    refused_and_served(
        &tree,
        &[],
        "'t'.v[1]",
        "a value over 67108864 bytes can't be stored in a shared table",
    );
}

#[test]
fn a_shared_subtable_bomb_is_refused_by_a_queue_push() {
    let tree = copy_bomb(r#"jobs.shared.queue("q"):push(value)"#);
    refused_and_served(&tree, &[], "SharedQueue:push: ", TOO_HEAVY);
}

#[test]
fn a_shared_subtable_bomb_is_refused_by_log_fields() {
    let tree = copy_bomb(r#"require("@skein/log").info("boom", { v = value })"#);
    refused_and_served(&tree, &[], "log.info: ", TOO_HEAVY);
}

#[test]
fn a_shared_subtable_bomb_is_refused_by_worker_send() {
    let tree = copy_bomb(
        r#"local w = require("@skein/worker").spawn { name = "w", source = "return function(m) return m end" }
w:send(value)"#,
    );
    refused_and_served(
        &tree,
        &["--allow", "worker.spawn"],
        "Worker:send: ",
        TOO_HEAVY,
    );
}

#[test]
fn one_big_string_referenced_many_times_is_refused() {
    // 48 uses of one 128 MiB string: 6 GiB if each use were copied.
    let tree = copy_bomb(
        r#"local s = string.rep("x", 128 * 1024 * 1024)
local t = table.create(48, s)
return jobs.dispatch("./m", "echo", t):await()"#,
    );
    refused_and_served(&tree, &[], "jobs.dispatch: args[1]: ", TOO_HEAVY);
}

#[test]
fn a_queue_is_bounded_in_bytes_not_only_in_items() {
    // 60 pushes of a 50 MB string held 3 GB; 200 aborted the process.
    let tree = Tree::new(&[
        ("m.luau", ECHO),
        (
            "main.luau",
            r#"
local s = string.rep("x", 50 * 1000 * 1000)
local q = jobs.shared.queue("big")
local pushed = 0
local ok, err = pcall(function()
    for i = 1, 200 do q:push(s) pushed += 1 end
end)
print("pushed", pushed)
print("caught", ok, err)
-- The refusal changed nothing: the one value is still there, and a pop frees its bytes.
assert(q:len() == 1)
assert(q:pop() == s)
q:push(s)
print("after", jobs.dispatch("./m", "echo", 41):await() + 1)
"#,
        ),
    ]);
    hostile_run(&tree.path(), &["main.luau"])
        .exited(0)
        .stdout_has("pushed\t1\n")
        .stdout_has(
            "caught\tfalse\tSharedQueue:push: queue 'big' would hold 100000032 \
             bytes, past its bound of 67108864 bytes; pop some first",
        )
        .stdout_has("after\t42");
}

#[test]
fn many_queues_together_are_bounded_by_the_store() {
    let tree = Tree::new(&[
        ("m.luau", ECHO),
        (
            "main.luau",
            r#"
local s = string.rep("x", 50 * 1000 * 1000)
local made = 0
local ok, err = pcall(function()
    for i = 1, 100 do jobs.shared.queue("q" .. i):push(s) made += 1 end
end)
print("made", made)
print("caught", ok, err)
jobs.shared.queue("q1"):pop()
jobs.shared.queue("q6"):push(s)
print("after", jobs.dispatch("./m", "echo", 41):await() + 1)
"#,
        ),
    ]);
    hostile_run(&tree.path(), &["main.luau"])
        .exited(0)
        .stdout_has("made\t5\n")
        .stdout_has(
            "caught\tfalse\tSharedQueue:push: the domain's shared tables and queues \
             would hold 300000096 bytes, past the bound of 268435456",
        )
        .stdout_has("after\t42");
}

#[test]
fn parallel_for_chunks_are_bounded_at_the_call() {
    // chunks = 1e9 aborted on a 16 GB allocation; 1e7 took 53 s and 4 GB.
    let tree = Tree::new(&[
        (
            "m.luau",
            "local M = {}\nfunction M.echo(x) return x end\nfunction M.count(c) return c.count end\nreturn M\n",
        ),
        (
            "main.luau",
            r#"
for _, chunks in { 1e9, 1e7, 65537 } do
    local ok, err = pcall(function()
        return jobs.parallelFor("./m", "count", 1e9, nil, { chunks = chunks })
    end)
    print("caught", ok, err)
end
-- At the bound it runs: 65,536 chunks of a loop of 65,536 elements, one each.
local counts = jobs.parallelFor("./m", "count", 65536, nil, { chunks = 65536 }):await()
print("chunks", #counts)
print("after", jobs.dispatch("./m", "echo", 41):await() + 1)
"#,
        ),
    ]);
    let ended = hostile_run(&tree.path(), &["main.luau"]);
    ended.exited(0);
    for chunks in ["1000000000", "10000000", "65537"] {
        ended.stdout_has(&format!(
            "caught\tfalse\tjobs.parallelFor: opts.chunks of {chunks} is past the \
             bound of 65536 chunks; a chunk may hold many elements"
        ));
    }
    ended.stdout_has("chunks\t65536").stdout_has("after\t42");
}

/// A module for the queued-work bombs: a busy entry and a sink.
const BUSY: &str = r#"
local M = {}
function M.echo(x) return x end
function M.sink(x) end
-- Busy without yielding until a value is pushed to the shared queue `name` (it takes one).
function M.spinUntil(name) local q = jobs.shared.queue(name) while q:tryPop() == nil do end end
return M
"#;

/// Two busy workers, then 60,000 dispatches of 100 KB each with `opts`: refused at the job
/// bound, and served again once the queue drains.
fn queued_work_bomb(opts: &str) -> Ended {
    let main = format!(
        r#"
local go = jobs.shared.queue("go")
local busy = {{ jobs.dispatch("./m", "spinUntil", "go"), jobs.dispatch("./m", "spinUntil", "go") }}
local payload = string.rep("x", 100000)
local sent = 0
local ok, err = pcall(function()
    for i = 1, 60000 do jobs.dispatch("./m", "sink", payload, {opts}) sent += 1 end
end)
print("sent", sent)
print("caught", ok, err)
-- The busy workers spin until now.
go:push(true)
go:push(true)
-- A spinner's own result is charged too: with the bound filled to within a few bytes, it can be
-- refused with the same text (seen once in a CI run). Any other failure fails the test.
for _, p in busy do
    local ok, e = pcall(p.await, p)
    assert(ok or string.find(tostring(e), "past the bound of 268435456", 1, true), tostring(e))
end
-- Refused at the job bound until the sinks drain: retry on that refusal only, under a deadline.
local t = os.clock()
while true do
    local accepted, p = pcall(jobs.dispatch, "./m", "echo", 41)
    if accepted then print("after", p:await() + 1) break end
    assert(string.find(tostring(p), "past the bound of 268435456", 1, true), tostring(p))
    assert(os.clock() - t < 60, "the job bound never made room")
    task.wait(0.01) -- a poll interval under the deadline above
end
"#
    );
    let tree = Tree::new(&[("m.luau", BUSY), ("main.luau", &main)]);
    hostile_run(&tree.path(), &["main.luau"])
}

#[track_caller]
fn refused_near_the_job_bound(ended: &Ended) {
    ended
        .exited(0)
        .stdout_has("after\t42")
        .stdout_has("caught\tfalse\tjobs.dispatch: the domain's jobs would hold ");
    ended.stdout_has("bytes of arguments and results, past the bound of 268435456; await some before dispatching more");
    let sent: usize = ended
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("sent\t"))
        .and_then(|n| n.trim().parse().ok())
        .expect("a sent line");
    // 100,016 bytes of argument and 256 of job each: about 2,677 fit in 256 MiB while no
    // worker takes them (a keyed lane's worker may take some meanwhile, freeing their bytes).
    assert!((1_000..60_000).contains(&sent), "sent {sent}");
}

#[test]
fn queued_dispatches_are_bounded_while_the_workers_are_busy() {
    // Two busy workers and 60,000 dispatches of 100 KB aborted the process (rc 134).
    refused_near_the_job_bound(&queued_work_bomb("nil"));
}

#[test]
fn queued_keyed_dispatches_are_bounded_too() {
    refused_near_the_job_bound(&queued_work_bomb(r#"{ key = "one" }"#));
}

// ---------------------------------------------------------------------------------------------
// Class 3: `@skein/fs` never leaves its roots (every path is opened beneath the root's handle).
// Each variant runs `skein run --allow-read d --allow-write d` in a folder holding `d/` (the
// root), `other/secret.txt` outside it and `d/link -> ../other`.
// ---------------------------------------------------------------------------------------------

/// The folder of a class-3 run, its `main.luau` being `script`.
fn fs_tree(script: &str) -> Tree {
    let tree = Tree::new(&[
        ("m.luau", ECHO),
        ("d/in.txt", "inside"),
        ("other/secret.txt", "secret"),
        ("main.luau", script),
    ]);
    std::os::unix::fs::symlink("../other", tree.path().join("d/link")).unwrap();
    tree
}

fn fs_run(tree: &Tree) -> Ended {
    hostile_run(
        &tree.path(),
        &["--allow-read", "d", "--allow-write", "d", "main.luau"],
    )
}

#[test]
fn fs_a_link_out_of_the_root_is_refused_for_read_list_and_write() {
    let tree = fs_tree(
        r#"
local fs = require("@skein/fs")
print("inside", fs.readFile("d/in.txt"))
for _, call in { function() return fs.readFile("d/link/secret.txt") end,
                 function() return fs.list("d/link") end,
                 function() return fs.writeFile("d/link/secret.txt", "pwned") end } do
    local ok, err = pcall(call)
    print("caught", ok, err)
end
print("after", jobs.dispatch("./m", "echo", 41):await() + 1)
"#,
    );
    let ended = fs_run(&tree);
    // Each refusal is a capability denial, which the runner reports and ends the run with 0:
    // nothing failed unhandled.
    ended
        .exited(0)
        .stdout_has("inside\tinside")
        .stdout_has("after\t42");
    assert_eq!(
        ended.stdout.matches("caught\tfalse").count(),
        3,
        "{}",
        ended.stdout
    );
    assert_contains(&ended.stdout, "leads out of the root");
    assert!(!ended.stdout.contains("\tsecret"), "{}", ended.stdout);
    assert_eq!(
        std::fs::read_to_string(tree.path().join("other/secret.txt")).unwrap(),
        "secret",
        "nothing was written outside the root"
    );
}

#[test]
fn fs_dot_dot_across_a_missing_component_does_not_follow_the_link_out() {
    // `d/link/nope/../secret.txt` read, listed and overwrote files outside the root.
    let tree = fs_tree(
        r#"
local fs = require("@skein/fs")
local ok, err = pcall(fs.readFile, "d/link/nope/../secret.txt")
print("caught", ok, err)
ok, err = pcall(fs.writeFile, "d/link/nope/../secret.txt", "pwned")
print("caught", ok, err)
print("after", jobs.dispatch("./m", "echo", 41):await() + 1)
"#,
    );
    let ended = fs_run(&tree);
    ended.exited(0).stdout_has("after\t42");
    assert_eq!(
        ended.stdout.matches("caught\tfalse").count(),
        2,
        "{}",
        ended.stdout
    );
    assert!(!ended.stdout.contains("\tsecret"), "{}", ended.stdout);
    assert_eq!(
        std::fs::read_to_string(tree.path().join("other/secret.txt")).unwrap(),
        "secret"
    );
}

#[test]
fn fs_a_dangling_link_in_the_root_does_not_create_a_file_outside() {
    let tree = fs_tree(
        r#"
local fs = require("@skein/fs")
local ok, err = pcall(fs.writeFile, "d/dangling", "pwned")
print("caught", ok, err)
fs.writeFile("d/new.txt", "made inside")
print("inside", fs.readFile("d/new.txt"))
print("after", jobs.dispatch("./m", "echo", 41):await() + 1)
"#,
    );
    std::os::unix::fs::symlink("../other/made.txt", tree.path().join("d/dangling")).unwrap();
    let ended = fs_run(&tree);
    ended
        .exited(0)
        .stdout_has("caught\tfalse")
        .stdout_has("inside\tmade inside")
        .stdout_has("after\t42");
    assert!(
        !tree.path().join("other/made.txt").exists(),
        "the dangling link made a file outside the root"
    );
}

#[test]
fn fs_absolute_paths_outside_the_roots_are_denied() {
    let tree = fs_tree("");
    let secret = tree.path().join("other/secret.txt");
    std::fs::write(
        tree.path().join("main.luau"),
        format!(
            r#"
local fs = require("@skein/fs")
local ok, err = pcall(fs.readFile, "{}")
print("caught", ok, err)
ok, err = pcall(fs.readFile, "/etc/passwd")
print("caught", ok, err)
print("after", jobs.dispatch("./m", "echo", 41):await() + 1)
"#,
            secret.display()
        ),
    )
    .unwrap();
    let ended = fs_run(&tree);
    ended.exited(0).stdout_has("after\t42");
    assert_eq!(
        ended.stdout.matches("caught\tfalse").count(),
        2,
        "{}",
        ended.stdout
    );
    assert_contains(
        &ended.stdout,
        &format!(
            "fs.readFile: '{0}': permission denied: '{0}' is outside every root granted for \
             'filesystem.read' to domain 'main' (domain#1, generation 1); its roots: '{1}'",
            secret.display(),
            tree.path().join("d").display()
        ),
    );
    assert_contains(
        &ended.stdout,
        "fs.readFile: '/etc/passwd': permission denied",
    );
    assert!(!ended.stdout.contains("\tsecret"), "{}", ended.stdout);
}

// ---------------------------------------------------------------------------------------------
// Class 5: the runner's own inputs.
// ---------------------------------------------------------------------------------------------

/// Runs `skein <args>` (no `run` added) under the address-space limit.
fn hostile_args(dir: &Path, args: &[std::ffi::OsString]) -> Ended {
    let (first, rest) = args.split_first().expect("a subcommand");
    assert_eq!(first, "run", "these runs all start with `run`");
    let rest: Vec<String> = rest
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let rest: Vec<&str> = rest.iter().map(String::as_str).collect();
    hostile_run(dir, &rest)
}

#[test]
fn runner_too_many_workers_is_refused_at_parse_time() {
    // `--workers 100000` hung for minutes or panicked.
    let tree = Tree::new(&[("main.luau", "print('ran')")]);
    for n in ["100000", "1025", "0", "many"] {
        let ended = hostile_run(&tree.path(), &["--workers", n, "main.luau"]);
        ended
            .exited(2)
            .stderr_has(&format!("invalid value '{n}' for '--workers <N>'"));
        assert!(!ended.stdout.contains("ran"), "{}", ended.stdout);
    }
}

#[test]
fn runner_a_directory_or_a_device_as_the_script_is_refused_naming_it() {
    let tree = Tree::new(&[("dir/keep.luau", "")]);
    hostile_run(&tree.path(), &["dir"])
        .exited(1)
        .stderr_has("cannot read the script dir: it is a directory, not a file");
    hostile_run(&tree.path(), &["/dev/zero"])
        .exited(1)
        .stderr_has(
            "cannot read the script /dev/zero: it is not a regular file (a device, FIFO or socket \
             is never read as a script)",
        );
}

#[test]
fn runner_a_huge_script_is_refused_before_it_is_read() {
    let tree = Tree::new(&[]);
    let file = std::fs::File::create(tree.path().join("huge.luau")).unwrap();
    file.set_len(4 << 30).unwrap(); // 4 GiB, sparse: more than the whole address space here
    hostile_run(&tree.path(), &["huge.luau"])
        .exited(1)
        .stderr_has("it is longer than the limit of 16777216 bytes");
}

#[test]
fn runner_arguments_that_are_not_utf8_never_panic() {
    use std::os::unix::ffi::OsStringExt;
    let tree = Tree::new(&[("main.luau", "print('args', #runner.args, #runner.args[1])")]);
    let bad = std::ffi::OsString::from_vec(vec![0xff, 0xfe, b'x']);
    let ended = hostile_args(
        &tree.path(),
        &["run".into(), "main.luau".into(), "--".into(), bad.clone()],
    );
    // The lossy path here replaces the bytes, so check the real bytes through the runner itself.
    ended.exited(0).stdout_has("args\t1\t");
    let mut command = Command::new(env!("CARGO_BIN_EXE_skein"));
    let out = command
        .arg("run")
        .arg("main.luau")
        .arg("--")
        .arg(&bad)
        .current_dir(tree.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_contains(&String::from_utf8_lossy(&out.stdout), "args\t1\t3");
    let out = Command::new(env!("CARGO_BIN_EXE_skein"))
        .arg("run")
        .arg(&bad)
        .current_dir(tree.path())
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "a script path that is not UTF-8 is just missing"
    );
}

// ---------------------------------------------------------------------------------------------
// Class 6: `require` stays in the script's project root.
// ---------------------------------------------------------------------------------------------

#[test]
fn require_of_a_file_outside_the_project_root_is_refused_without_reading_it() {
    let tree = Tree::new(&[
        ("project/m.luau", ECHO),
        (
            "outside/secret.luau",
            "this is not luau, and its text must not leak",
        ),
        ("outside/valid.luau", "return { pwned = true }"),
        (
            "project/main.luau",
            r#"
for _, path in { "../outside/secret", "../outside/valid", "./link/valid" } do
    local ok, err = pcall(function() return require(path) end)
    print("caught", ok, err)
end
print("after", jobs.dispatch("./m", "echo", 41):await() + 1)
"#,
        ),
    ]);
    std::os::unix::fs::symlink("../outside", tree.path().join("project/link")).unwrap();
    let ended = hostile_run(&tree.path(), &["project/main.luau"]);
    ended.exited(0).stdout_has("after\t42");
    assert_eq!(
        ended.stdout.matches("caught\tfalse").count(),
        3,
        "{}",
        ended.stdout
    );
    assert_contains(&ended.stdout, "outside the project root");
    assert!(!ended.stdout.contains("must not leak"), "{}", ended.stdout);
    assert!(!ended.stdout.contains("pwned"), "{}", ended.stdout);
}

#[test]
fn a_sparse_two_gigabyte_luaurc_is_refused_by_size_and_the_run_goes_on() {
    // Read whole, it aborted the process under the address-space limit.
    let tree = Tree::new(&[
        ("m.luau", ECHO),
        ("lib/x.luau", "return 'x'"),
        (
            "main.luau",
            r#"
local ok, err = pcall(function() return require("@lib/x") end)
print("caught", ok, err)
print("relative", require("./m").echo(41) + 1)
print("after", jobs.dispatch("./m", "echo", 41):await() + 1)
"#,
        ),
    ]);
    let rc = std::fs::File::create(tree.path().join(".luaurc")).expect("create .luaurc");
    rc.set_len(2 << 30).expect("a sparse .luaurc");
    let root = std::fs::canonicalize(tree.path()).expect("canonical root");
    hostile_run(&tree.path(), &["main.luau"])
        .exited(0)
        .stdout_has(&format!(
            "caught\tfalse\tinvalid .luaurc at {}/.luaurc: it is longer than the limit of \
             1048576 bytes",
            root.display()
        ))
        .stdout_has("relative\t42")
        .stdout_has("after\t42");
}

// ---------------------------------------------------------------------------------------------
// Class 6: jobs and modules cannot alter what later jobs get.
// ---------------------------------------------------------------------------------------------

#[test]
fn skein_s_own_functions_cannot_be_altered_from_a_script() {
    // `setfenv(task.await, {...})` in one job changed what later jobs on that worker got from
    // rejected promises.
    let tree = Tree::new(&[
        (
            "m.luau",
            r#"
local M = {}
function M.tamper()
    local results = {}
    results[1] = tostring(setfenv)
    results[2] = tostring(getfenv)
    results[3] = tostring(pcall(function() task.await = nil end))
    results[4] = tostring(pcall(function() jobs.dispatch = nil end))
    results[5] = tostring(pcall(function() string.rep = nil end))
    return table.concat(results, " ")
end
function M.fail() error("failed on purpose") end
function M.echo(x) return x end
return M
"#,
        ),
        (
            "main.luau",
            r#"
print("tamper", jobs.dispatch("./m", "tamper"):await())
print("engine", tostring(setfenv), tostring(pcall(function() task.await = nil end)))
local ok, err = pcall(function() return jobs.dispatch("./m", "fail"):await() end)
print("rejected", ok, string.find(tostring(err), "failed on purpose", 1, true) ~= nil)
print("after", jobs.dispatch("./m", "echo", 41):await() + 1)
"#,
        ),
    ]);
    hostile_run(&tree.path(), &["--workers", "1", "main.luau"])
        .exited(0)
        .stdout_has("tamper\tnil nil false false false")
        .stdout_has("engine\tnil\tfalse")
        .stdout_has("rejected\tfalse\ttrue")
        .stdout_has("after\t42");
}

#[test]
fn require_through_pcall_or_a_spawned_task_resolves_from_the_requiring_file() {
    // `pcall(require, "./x")` and `task.spawn(require, "./x")` resolved from the process's
    // current directory, not the requiring file.
    let tree = Tree::new(&[
        ("game/m.luau", ECHO),
        ("game/x.luau", "return 'game x'"),
        ("game/lib/x.luau", "return 'lib x'"),
        (
            "game/lib/user.luau",
            "local M = {}\nfunction M.load() local ok, x = pcall(require, './x') return x end\nreturn M\n",
        ),
        ("x.luau", "return 'the runner folder x'"),
        ("game/y.luau", "print('loaded game y') return 1"),
        ("y.luau", "print('loaded the runner folder y') return 1"),
        (
            "game/main.luau",
            r#"
local ok, x = pcall(require, "./x")
print("pcall", ok, x)
print("module pcall", require("./lib/user").load())
task.spawn(function() print("spawned fn", require("./x")) end)
task.spawn(require, "./y")
print("dispatch", jobs.dispatch("./lib/user", "load"):await())
print("after", jobs.dispatch("./m", "echo", 41):await() + 1)
"#,
        ),
    ]);
    hostile_run(&tree.path(), &["game/main.luau"])
        .exited(0)
        .stdout_has("pcall\ttrue\tgame x")
        .stdout_has("module pcall\tlib x")
        .stdout_has("spawned fn\tgame x")
        .stdout_has("loaded game y")
        .stdout_has("dispatch\tlib x")
        .stdout_has("after\t42");
}

// ---------------------------------------------------------------------------------------------
// Class 7: work and callbacks run with the authority of the code that made them. Under the
// runner, a `@skein/worker` spawned with `capabilities = {}` is code with a narrower grant than
// its domain (which holds `--allow-read d`); what it dispatches, warms or registers must not
// read `d/secret.txt`. (`tests/callback_authority.rs` covers contexts, engine watchers,
// registered jobs and event handlers from the host's side.)
// ---------------------------------------------------------------------------------------------

const PROBE: &str = r#"
local M = {}
function M.read() return require("@skein/fs").readFile("d/secret.txt") end
function M.tryRead()
    local ok, err = pcall(require("@skein/fs").readFile, "d/secret.txt")
    return if ok then "READ " .. err else "denied: " .. tostring(err)
end
function M.watch()
    jobs.onRelease(function(key)
        local ok, err = pcall(require("@skein/fs").readFile, "d/secret.txt")
        print("watcher", key, if ok then "READ " .. err else "denied")
    end)
    return true
end
function M.echo(x) return x end
return M
"#;

/// Runs `handler_body` as the body of a narrowed actor's handler (it gets `message`) and prints
/// what the handler answered; the domain itself reads the secret first to show it could.
fn narrowed_actor(handler_body: &str) -> Ended {
    let main = format!(
        r#"
print("domain reads", require("@skein/fs").readFile("d/secret.txt"))
local w = require("@skein/worker").spawn {{
    name = "narrow",
    capabilities = {{}},
    source = [[
        return function(message)
            {handler_body}
        end
    ]],
}}
w:send(1)
print("worker answered", w:receive(20))
print("joined", w:join(20))
print("after", jobs.dispatch("./m", "echo", 41):await() + 1)
"#
    );
    let tree = Tree::new(&[
        ("m.luau", PROBE),
        ("d/secret.txt", "the secret"),
        ("main.luau", &main),
    ]);
    hostile_run(
        &tree.path(),
        &["--allow-read", "d", "--allow", "worker.spawn", "main.luau"],
    )
}

#[track_caller]
fn never_read(ended: &Ended) {
    ended
        .stdout_has("domain reads\tthe secret")
        .stdout_has("after\t42");
    assert!(!ended.stdout.contains("READ "), "{}", ended.stdout);
    assert_eq!(
        ended.stdout.matches("the secret").count(),
        1,
        "{}",
        ended.stdout
    );
}

#[test]
fn a_job_a_narrowed_worker_dispatches_runs_with_the_worker_s_grant() {
    let ended = narrowed_actor(r#"return jobs.dispatch("./m", "tryRead"):await()"#);
    ended.exited(0);
    never_read(&ended);
    ended.stdout_has("worker answered\tdenied: ");
}

#[test]
fn chunks_a_narrowed_worker_asks_for_run_with_the_worker_s_grant() {
    let ended = narrowed_actor(
        r#"local parts = jobs.parallelFor("./m", "tryRead", 2):await()
            return parts[1] .. " | " .. parts[2]"#,
    );
    ended.exited(0);
    never_read(&ended);
    ended.stdout_has("worker answered\tdenied: ");
}

#[test]
fn a_release_watcher_a_narrowed_worker_s_job_registers_runs_with_the_worker_s_grant() {
    let ended = narrowed_actor(
        r#"jobs.dispatch("./m", "watch", nil, { key = "k" }):await()
            jobs.release("k")
            return "released""#,
    );
    // The watcher runs on the key's worker after the release; the run waits for it to print.
    ended.exited(0);
    never_read(&ended);
    ended.stdout_has("worker answered\treleased");
}

#[test]
fn a_cancelled_timer_does_not_keep_the_run_alive() {
    // A cancelled `task.delay` left its entry at the top of the timer heap, and the runner slept
    // until it came due: 20 s after a `Worker:receive(20)` that was answered at once, forever
    // after a cancelled `task.delay(1e9, f)`.
    let tree = Tree::new(&[
        ("m.luau", ECHO),
        (
            "main.luau",
            r#"
local t = task.delay(1e9, function() print("never") end)
task.cancel(t)
local w = task.delay(20, function() print("never either") end)
task.cancel(w)
print("after", jobs.dispatch("./m", "echo", 41):await() + 1)
"#,
        ),
    ]);
    let started = Instant::now();
    let ended = hostile_run(&tree.path(), &["main.luau"]);
    ended.exited(0).stdout_has("after\t42");
    assert!(!ended.stdout.contains("never"), "{}", ended.stdout);
    // A hang guard, not a performance claim: the run takes milliseconds, and a cancelled timer
    // that still held it would hold it 20 s (or forever).
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "the run waited {:?} for cancelled timers",
        started.elapsed()
    );
}

#[test]
fn a_global_one_job_writes_is_never_seen_by_the_next_job() {
    // A global written by one job was seen by the next job on the same worker VM, so results
    // depended on which worker ran it. A worker VM's globals are closed: module top levels may
    // set them (module state), job code may not.
    let tree = Tree::new(&[
        (
            "m.luau",
            r#"
helperFromTopLevel = function(x) return x * 2 end
local M = {}
function M.write() leaked = "from the first job" return true end
function M.read() return tostring(leaked) end
function M.useHelper(x) return helperFromTopLevel(x) end
function M.echo(x) return x end
return M
"#,
        ),
        (
            "main.luau",
            r#"
local ok, err = pcall(function() return jobs.dispatch("./m", "write"):await() end)
print("write", ok, err)
print("read", jobs.dispatch("./m", "read"):await())
print("helper", jobs.dispatch("./m", "useHelper", 21):await())
mainGlobal = "the engine's own script keeps its globals"
print("engine", mainGlobal)
print("after", jobs.dispatch("./m", "echo", 41):await() + 1)
"#,
        ),
    ]);
    let ended = hostile_run(&tree.path(), &["--workers", "1", "main.luau"]);
    ended
        .exited(0)
        .stdout_has("write\tfalse\t")
        .stdout_has("attempt to modify a readonly table")
        .stdout_has("read\tnil")
        .stdout_has("helper\t42")
        .stdout_has("engine\tthe engine's own script keeps its globals")
        .stdout_has("after\t42");
}

#[test]
fn live_actors_are_bounded_and_a_joined_one_gives_its_place_back() {
    // Every `@skein/worker` is an OS thread with its own VM: a spawn loop made one per call.
    let tree = Tree::new(&[
        ("m.luau", ECHO),
        (
            "main.luau",
            r#"
local worker = require("@skein/worker")
local alive = {}
local ok, err = pcall(function()
    for i = 1, 10000 do
        alive[i] = worker.spawn {
            name = "w" .. i, source = "return function(m) return m end", memory = 8 * 2^20,
        }
    end
end)
print("spawned", #alive)
print("caught", ok, err)
print("joined", alive[1]:join(20))
local again = worker.spawn { name = "again", source = "return function(m) return m * 2 end", memory = 8 * 2^20 }
again:send(21)
print("again", again:receive(20))
print("after", jobs.dispatch("./m", "echo", 41):await() + 1)
"#,
        ),
    ]);
    hostile_run(&tree.path(), &["--allow", "worker.spawn", "main.luau"])
        .exited(0)
        .stdout_has("spawned\t64\n")
        .stdout_has(
            "caught\tfalse\tworker.spawn: the domain has 64 workers alive, the most \
             it may have; join or close one before spawning 'w65'",
        )
        .stdout_has("joined\tstopped")
        .stdout_has("again\t42")
        .stdout_has("after\t42");
}

/// How many spawn/join rounds the actor test makes: an ended actor that kept its thread's 2 MiB
/// stack mapped would need 20 GB for them, far past [`ADDRESS_SPACE`] (such a run stopped
/// spawning near round 1,200).
const ACTOR_ROUNDS: usize = 10_000;

#[test]
fn ten_thousand_spawn_join_rounds_leave_the_address_space_as_it_was() {
    // Each ended actor kept its thread's stack until the domain's teardown: a spawn/join loop
    // ran out of address space after about a thousand rounds.
    let tree = Tree::new(&[
        ("m.luau", ECHO),
        (
            "main.luau",
            r#"
local worker = require("@skein/worker")
local rounds = tonumber((...))
for i = 1, rounds do
    local w = worker.spawn { name = "w" .. i, source = "return function(m) return m + 1 end" }
    if i % 2 == 0 then
        w:send(i)
        assert(w:receive(20) == i + 1, "the reply of round " .. i)
    end
    assert(w:join(20) == "stopped", "the end of round " .. i)
end
print("rounds", rounds)
print("after", jobs.dispatch("./m", "echo", 41):await() + 1)
"#,
        ),
    ]);
    let rounds = ACTOR_ROUNDS.to_string();
    hostile_run(
        &tree.path(),
        &["--allow", "worker.spawn", "main.luau", "--", &rounds],
    )
    .exited(0)
    .stdout_has(&format!("rounds\t{ACTOR_ROUNDS}\n"))
    .stdout_has("after\t42");
}

#[test]
fn messages_waiting_for_a_worker_are_bounded_in_bytes() {
    // `Worker:send` bounded its queue at 1,024 messages, each up to the copy bound: 64 GiB.
    let tree = Tree::new(&[
        ("m.luau", ECHO),
        (
            "main.luau",
            r#"
local worker = require("@skein/worker")
local gate = jobs.shared.queue("gate")
local started = jobs.shared.queue("started")
local w = worker.spawn { name = "slow", source = [[
    local gate = jobs.shared.queue("gate")
    local started = jobs.shared.queue("started")
    return function(m) started:push(true) gate:pop() return #m end
]] }
local s = string.rep("x", 20 * 1000 * 1000)
-- The first message is taken (built in the worker's VM, its bytes freed) before the rest wait.
w:send(s)
started:pop()
local sent = 1
local ok, err = pcall(function() for i = 1, 1024 do w:send(s) sent += 1 end end)
print("sent", sent)
print("caught", ok, err)
-- Let the handler take its messages: their bytes are freed as each is built in its VM.
for i = 1, sent do gate:push(true) end
for i = 1, sent do assert(w:receive(20) == #s) end
w:send(s)
gate:push(true)
print("again", w:receive(20))
print("joined", w:join(20))
print("after", jobs.dispatch("./m", "echo", 41):await() + 1)
"#,
        ),
    ]);
    hostile_run(&tree.path(), &["--allow", "worker.spawn", "main.luau"])
        .exited(0)
        .stdout_has("sent\t4\n")
        .stdout_has(
            "caught\tfalse\tWorker:send: the messages waiting for and from worker \
             'slow' would weigh 80000064 bytes, past the bound of 67108864; receive its replies, \
             or send less",
        )
        .stdout_has("again\t20000000")
        .stdout_has("joined\tstopped")
        .stdout_has("after\t42");
}

// ---------------------------------------------------------------------------------------------
// Class 4: host panics and hangs a script can cause. (`tests/vm_failures.rs` covers each with a
// small memory limit from the host's side.)
// ---------------------------------------------------------------------------------------------

in_both_modes!(a_job_that_runs_out_of_memory_leaves_a_fresh_vm_for_the_next_job);
fn a_job_that_runs_out_of_memory_leaves_a_fresh_vm_for_the_next_job(mode: NativeMode) {
    // After one job ran out of memory, the tasks it spawned stayed alive and every later job on
    // that worker VM failed "out of memory" for as long as they lived.
    let tree = Tree::new(&[
        (
            "m.luau",
            r#"
local M = {}
function M.bomb()
    for i = 1, 1e9 do
        local hold = string.rep("x", 1024 * 1024) .. i
        -- The behaviour under test: tasks that outlive the job, holding its memory.
        task.spawn(function() task.wait(30) return hold end)
    end
end
function M.echo(x) return x end
return M
"#,
        ),
        (
            "main.luau",
            r#"
local ok, err = pcall(function() return jobs.dispatch("./m", "bomb"):await() end)
print("caught", ok, err)
for i = 1, 3 do print("after", i, jobs.dispatch("./m", "echo", 41):await() + 1) end
"#,
        ),
    ]);
    let ended = hostile_run(
        &tree.path(),
        &["--workers", "1", mode_flag(mode), "main.luau"],
    );
    ended
        .exited(0)
        .stdout_has("caught\tfalse\t")
        .stdout_has("out of memory: the VM of worker 0 reached its memory limit of 512 MiB")
        .stdout_has("after\t1\t42")
        .stdout_has("after\t3\t42");
}

/// A job that catches its own out-of-memory error with `pcall`: the caught text names its VM
/// and the limit, what the failed call held is freed before `pcall` returns, so the job goes on
/// allocating without yielding and returns its result, and its VM is kept (the module's call
/// count survives) for the next job. A script that holds what filled the VM, drops it and calls
/// `collectgarbage("collect")` allocates again too.
#[test]
fn a_job_that_catches_out_of_memory_goes_on_allocating_and_keeps_its_vm() {
    let tree = Tree::new(&[
        (
            "m.luau",
            r#"
local M = {}
local calls = 0
local function fill(into)
    while true do into[#into + 1] = string.rep("x", 1024 * 1024) .. #into end
end
function M.catch()
    calls += 1
    local ok, err = pcall(fill, {})
    local again = {}
    for i = 1, 64 do again[i] = string.rep("y", 1024 * 1024) .. i end
    local hold = {}
    local ok2 = pcall(fill, hold)
    hold = nil
    collectgarbage("collect")
    local more = {}
    for i = 1, 64 do more[i] = string.rep("z", 1024 * 1024) .. i end
    return `{ok} {err} | {#again} | {ok2} {#more}`
end
function M.calls() return calls end
return M
"#,
        ),
        (
            "main.luau",
            r#"
print("job", jobs.dispatch("./m", "catch"):await())
print("same vm", jobs.dispatch("./m", "calls"):await())
"#,
        ),
    ]);
    let ended = hostile_run(&tree.path(), &["--workers", "1", "main.luau"]);
    ended
        .exited(0)
        .stdout_has(
            "job\tfalse out of memory: the VM of worker 0 reached its memory limit of 512 MiB \
             | 64 | false 64\n",
        )
        .stdout_has("same vm\t1\n");
}

/// A module whose entry of each kind starts work of the same kind on itself and awaits it.
const OVER_ITSELF: &str = r#"
local M = {}
function M.map() return jobs.map("./m", "map", { 1, 2 }):await() end
function M.dispatch() return jobs.dispatch("./m", "dispatch"):await() end
function M.parallelFor() return jobs.parallelFor("./m", "parallelFor", 4):await() end
function M.warm() return jobs.warm("./m", "warm"):await() end
function M.echo(x) return x end
return M
"#;

/// Starts the work of `kind` (`map`, `dispatch`, `parallelFor` or `warm`) over itself from the
/// main script, awaits it under a pcall and prints what it settled with, then dispatches once
/// more.
fn work_over_itself(kind: &str) -> Ended {
    let tree = Tree::new(&[
        ("m.luau", OVER_ITSELF),
        (
            "main.luau",
            r#"
local kind = ...
local start = {
    map = function() return jobs.map("./m", "map", { 1, 2 }) end,
    dispatch = function() return jobs.dispatch("./m", "dispatch") end,
    parallelFor = function() return jobs.parallelFor("./m", "parallelFor", 4) end,
    warm = function() return jobs.warm("./m", "warm") end,
}
local ok, err = pcall(function() return start[kind]():await() end)
print("caught", ok, err)
print("after", jobs.dispatch("./m", "echo", 41):await() + 1)
"#,
        ),
    ]);
    let ended = hostile_run(&tree.path(), &["--workers", "2", "main.luau", "--", kind]);
    assert!(!ended.stderr.contains("panicked"), "{}", ended.stderr);
    ended
}

/// The end of the nested-wait limit's refusal, as the innermost job raises it.
const NESTED: &str = "already wait on pool work, and 1024 may (Plan::nested_wait_limit); work \
                      that awaits work of its own kind without end stops here";

#[test]
fn a_parallel_for_over_itself_ends_and_every_promise_settles() {
    // It produced repeated worker panics and the top-level promise never settled.
    work_over_itself("parallelFor")
        .exited(0)
        .stdout_has("caught\tfalse\tjob './m:parallelFor' failed: chunk ")
        .stdout_has("task.await: nested waits past the limit: 1024 tasks of the VM of worker ")
        .stdout_has(NESTED)
        .stdout_has("after\t42");
}

#[test]
fn a_map_over_itself_ends_and_every_promise_settles() {
    work_over_itself("map")
        .exited(0)
        .stdout_has("caught\tfalse\tjob './m:map' failed: element ")
        .stdout_has("task.await: nested waits past the limit: 1024 tasks of the VM of worker ")
        .stdout_has(NESTED)
        .stdout_has("after\t42");
}

#[test]
fn a_dispatch_of_itself_ends_and_every_promise_settles() {
    work_over_itself("dispatch")
        .exited(0)
        .stdout_has("caught\tfalse\tjob './m:dispatch' failed: job './m:dispatch' failed: ")
        .stdout_has("task.await: nested waits past the limit: 1024 tasks of the VM of worker ")
        .stdout_has(NESTED)
        .stdout_has("after\t42");
}

#[test]
fn a_warm_of_itself_is_refused_at_its_first_await_and_every_promise_settles() {
    // A warm entry may not await pool work at all, so a warm over itself stops at its first
    // nesting, on every worker, long before the nested-wait limit. The warm's promise names
    // each worker's failure, and the script caught it: the run exits 0 after the pool served on.
    let refusal = "jobs.warm \"./m\".warm: awaiting a jobs.warm promise inside a warm would wait \
                   on the pool it is warming";
    work_over_itself("warm")
        .exited(0)
        .stdout_has(&format!(
            "caught\tfalse\tjob 'jobs.warm \"./m\".warm' failed: worker 0: {refusal}; worker 1: \
             {refusal}"
        ))
        .stdout_has("after\t42")
        .stderr_has(&format!(
            "skein: jobs.warm \"./m\".warm on worker 0: {refusal}\n"
        ));
}

#[test]
fn a_spawn_bomb_in_the_engine_is_caught_by_the_pcall_around_it() {
    // A task.spawn bomb's out-of-memory escaped pcall.
    let tree = Tree::new(&[
        ("m.luau", ECHO),
        (
            "main.luau",
            r#"
-- A global, not an upvalue: the spawned function captures nothing, so making it allocates
-- nothing and the bomb runs out of memory in task.spawn, as the test expects.
alive = 0
local ok, err = pcall(function()
    while true do
        -- The behaviour under test: spawned tasks that live a while, filling the VM.
        task.spawn(function() alive += 1 task.wait(0.5) alive -= 1 end)
    end
end)
-- The spawned tasks hold the VM full until they end and the engine collects them (it does
-- once the VM is above three quarters of its 512 MiB): wait for both before printing.
local t = os.clock()
while alive > 0 or gcinfo() > 384 * 1024 do
    assert(os.clock() - t < 30, `the spawned tasks never went: {alive} alive, {gcinfo()} KiB`)
    task.wait(0.05) -- a poll interval under the deadline above
end
print("caught", ok, err)
print("after", jobs.dispatch("./m", "echo", 41):await() + 1)
"#,
        ),
    ]);
    let ended = hostile_run(&tree.path(), &["main.luau"]);
    ended
        .exited(0)
        .stdout_has(
            "caught\tfalse\tout of memory: the engine VM reached its memory limit \
             of 512 MiB while making a task for task.spawn",
        )
        .stdout_has("after\t42");
}

/// `jobs.shared.atomic`'s function filling the VM: the caller's `pcall` gets the out-of-memory
/// text by the raw path (a number at the key) and by the `mlua` path (a string) alike, the key
/// keeps its value, and the VM goes on once the function's garbage is let go.
#[test]
fn an_atomic_function_that_fills_the_vm_raises_out_of_memory_by_either_path() {
    let tree = Tree::new(&[(
        "main.luau",
        r#"
local t = jobs.shared.table("t")
t.n = 1
t.s = "x"
for _, k in { "n", "s" } do
    local hold = {}
    local ok, err = pcall(jobs.shared.atomic, t, k, function(v)
        while true do hold[#hold + 1] = string.rep("x", 2 ^ 20) .. #hold end
    end)
    hold = nil
    print(k, ok, err)
end
print("after", t.n, t.s, jobs.shared.atomic(t, "n", function(v) return v + 1 end))
"#,
    )]);
    hostile_run(&tree.path(), &["main.luau"])
        .exited(0)
        .stdout_has("n\tfalse\tout of memory: the VM reached its memory limit\n")
        .stdout_has("s\tfalse\tout of memory: the VM reached its memory limit\n")
        .stdout_has("after\t1\tx\t2\n");
}

// ---------------------------------------------------------------------------------------------
// Class 8: errors and exit codes a user relies on.
// ---------------------------------------------------------------------------------------------

#[test]
fn a_raised_table_is_reported_by_its_contents() {
    let tree = Tree::new(&[("main.luau", "error({ code = 7, message = 'bad input' })\n")]);
    let ended = hostile_run(&tree.path(), &["main.luau"]);
    ended
        .exited(1)
        .stderr_has(r#"{code = 7, message = "bad input"}"#);
    assert!(!ended.stderr.contains("table: 0x"), "{}", ended.stderr);
}

#[test]
fn failures_nobody_handles_make_the_run_exit_one_each_reported_once() {
    // A failing job nobody awaits, and errors in task.spawn, task.delay and coroutines, were
    // printed (or not) while the run exited 0.
    let tree = Tree::new(&[
        (
            "m.luau",
            "local M = {}\nfunction M.fail() error('job nobody awaits failed') end\n\
             function M.echo(x) return x end\nreturn M\n",
        ),
        (
            "main.luau",
            r#"
local _ = jobs.dispatch("./m", "fail")
task.spawn(function() error("spawned task failed") end)
local delayed = false
task.delay(0.01, function() delayed = true error("delayed task failed") end)
local t = os.clock()
while not delayed do
    assert(os.clock() - t < 60, "the delayed task never ran")
    task.wait(0.01) -- a poll interval under the deadline above
end
print("after", jobs.dispatch("./m", "echo", 41):await() + 1)
"#,
        ),
    ]);
    let ended = hostile_run(&tree.path(), &["main.luau"]);
    ended.exited(1).stdout_has("after\t42");
    for text in [
        "job nobody awaits failed",
        "spawned task failed",
        "delayed task failed",
    ] {
        assert_eq!(
            ended.stderr.matches(text).count(),
            1,
            "{text} once in:\n{}",
            ended.stderr
        );
    }
}

#[test]
fn a_printed_line_is_kept_when_the_run_is_cut_short_by_a_failure() {
    // stdout is block-buffered on a pipe: lines printed before a failure were lost.
    let tree = Tree::new(&[(
        "main.luau",
        "print('first line')\nprint('second line')\nerror('then it failed')\n",
    )]);
    hostile_run(&tree.path(), &["main.luau"])
        .exited(1)
        .stdout_has("first line\nsecond line\n")
        .stderr_has("then it failed");
}

// ---------------------------------------------------------------------------------------------
// The trace: `--trace` keeps the most recent events within its bound, whatever the run does.
// ---------------------------------------------------------------------------------------------

#[test]
fn a_trace_of_thousands_of_jobs_with_megabyte_names_stays_within_its_bound() {
    // 4,000 jobs named with 1 MiB each: a trace that kept every event held 4 GiB of names,
    // past the 3 GiB the run may map. The ring keeps 64 MiB of the newest and counts the rest.
    let main = r#"
local name = string.rep("n", 1048576)
for i = 1, 4000 do jobs.dispatch("./m", "echo", i, { name = name }):await() end
print("done")
"#;
    let tree = Tree::new(&[
        ("m.luau", "return { echo = function(x) return x end }"),
        ("main.luau", main),
    ]);
    let ended = hostile_run(&tree.path(), &["--trace", "out.json", "main.luau"]);
    ended.exited(0).stdout_has("done");
    let path = tree.path().join("out.json");
    let written = std::fs::metadata(&path)
        .expect("the trace was written")
        .len();
    assert!(written < 96 << 20, "the trace file is {written} bytes");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).expect("read the trace"))
            .expect("the trace is JSON");
    let dropped = json["otherData"]["dropped_events"]
        .as_u64()
        .expect("a dropped count");
    assert!(dropped >= 3_900, "dropped {dropped}");
    assert_eq!(json["otherData"]["max_bytes"], 64 << 20);
    assert_eq!(json["traceEvents"][0]["cat"], "trace.dropped");
}

#[test]
fn held_jobs_with_megabyte_names_meet_the_job_bound_and_the_pool_serves_on() {
    // 3,000 jobs named with 1 MiB each, their promises kept: the names held 3 GiB outside every
    // bound. A job holds its name against the domain's job bytes, so the 257th is refused.
    let main = r#"
local name = string.rep("n", 1048576)
local held = {}
local ok, err = pcall(function()
    for i = 1, 3000 do held[i] = jobs.dispatch("./m", "echo", i, { name = name }) end
end)
print("held", #held)
print("caught", ok, err)
held = nil
print("after", jobs.dispatch("./m", "echo", 41):await() + 1)
"#;
    let tree = Tree::new(&[
        ("m.luau", "return { echo = function(x) return x end }"),
        ("main.luau", main),
    ]);
    let ended = hostile_run(&tree.path(), &["main.luau"]);
    ended
        .exited(0)
        .stdout_has("held\t255\n")
        .stdout_has("caught\tfalse\tjobs.dispatch: the domain's jobs would hold ")
        .stdout_has("past the bound of 268435456; await some before dispatching more")
        .stdout_has("after\t42");
}

/// The pool's memory budget bounds every VM's limit: under the 3 GB address-space limit the
/// default budget is 2304 MiB, three quarters of it, so a domain of 2 workers holds 3 VMs of
/// 512 MiB and one worker actor of 512 MiB more fits; the next is refused at its spawn, naming
/// the budget, and the run goes on.
#[test]
fn a_spawn_past_the_pools_memory_budget_is_refused_and_the_run_goes_on() {
    let tree = Tree::new(&[
        ("m.luau", ECHO),
        (
            "main.luau",
            r#"
local worker = require("@skein/worker")
local a = worker.spawn { name = "a", source = "return function(m) return m end" }
print("b", pcall(worker.spawn, { name = "b", source = "return function(m) return m end" }))
print("c", pcall(worker.spawn, { name = "c", source = "return function(m) return m end", memory = 2^30 }))
print("small", pcall(worker.spawn, { name = "d", source = "return function(m) return m end", memory = 2^20 - 1 }))
local d = worker.spawn { name = "d", source = "return function(m) return m * 2 end", memory = 2^20 }
d:send(21)
print("d", d:receive(20))
print("joined", a:join(20), d:join(20))
local e = worker.spawn { name = "e", source = "return function(m) return m + 1 end" }
e:send(41)
print("e", e:receive(20))
print("after", jobs.dispatch("./m", "echo", 41):await() + 1)
"#,
        ),
    ]);
    hostile_run(
        &tree.path(),
        &["--workers", "2", "--allow", "worker.spawn", "main.luau"],
    )
    .exited(0)
    .stdout_has(
        "b\tfalse\tworker.spawn: not enough memory: worker 'b' needs 1 VM of \
         512 MiB (its own VM), and the pool's memory would hold 2560 MiB, past its budget of \
         2304 MiB",
    )
    .stdout_has(
        "c\tfalse\tworker.spawn: memory must be at most the domain's VM limit \
         of 512 MiB, got 1073741824",
    )
    .stdout_has(
        "small\tfalse\tworker.spawn: memory must be a whole number of bytes, at \
         least 1048576 (1 MiB), got 1048575",
    )
    .stdout_has("d\t42")
    .stdout_has("joined\tstopped\tstopped")
    .stdout_has("e\t42")
    .stdout_has("after\t42");
}

/// `--workers` past what the memory budget gives room for is a usage error naming both
/// flags, never a panic starting threads; `--memory` shares the budget among the VMs.
#[test]
fn workers_past_the_memory_budget_are_a_usage_error_and_memory_sizes_each_vm() {
    let tree = Tree::new(&[(
        "main.luau",
        r#"
local hold = {}
for i = 1, 1e9 do hold[i] = string.rep("x", 65536) .. i end
"#,
    )]);
    hostile_run(&tree.path(), &["--workers", "1024", "main.luau"])
        .exited(2)
        .stderr_has(
            "--workers 1024: a memory budget of 2304 MiB gives each VM 2299 KiB, less than the \
             8 MiB a VM needs; at most 286 workers fit it (set --workers lower or --memory \
             higher)",
        );
    // At the bound: 286 workers and the engine share 2304 MiB in 288 parts of 8 MiB.
    hostile_run(&tree.path(), &["--workers", "287", "main.luau"])
        .exited(2)
        .stderr_has("at most 286 workers fit it");
    // 96 MiB over a worker, the engine and the host's share is 32 MiB a VM.
    hostile_run(
        &tree.path(),
        &["--workers", "1", "--memory", "96M", "main.luau"],
    )
    .exited(1)
    .stderr_has("out of memory: the engine VM reached its memory limit of 32 MiB");
    // At the bound: 32 MiB over 2 workers, the engine and the host's share is 8 MiB a VM;
    // one worker more is past it.
    hostile_run(
        &tree.path(),
        &["--memory", "32M", "--workers", "2", "main.luau"],
    )
    .exited(1)
    .stderr_has("out of memory: the engine VM reached its memory limit of 8 MiB");
    hostile_run(
        &tree.path(),
        &["--memory", "32M", "--workers", "3", "main.luau"],
    )
    .exited(2)
    .stderr_has("--workers 3: a memory budget of 32 MiB gives each VM 6553 KiB");
    hostile_run(&tree.path(), &["--memory", "33554431", "main.luau"])
        .exited(2)
        .stderr_has("invalid value '33554431' for '--memory <SIZE>': must be at least 32 MiB");
    hostile_run(&tree.path(), &["--memory", "lots", "main.luau"])
        .exited(2)
        .stderr_has(
            "'lots' is not a size: give a whole number of bytes, or one ending in K, M or G",
        );
}

/// Sixty jobs failing with 40 MiB messages: each failure keeps 64 KiB of its text, so the host
/// holds a few MiB where it once held 2.4 GB, and the run ends with their reports.
#[test]
fn jobs_failing_with_huge_messages_keep_a_bounded_text_each() {
    let tree = Tree::new(&[
        (
            "boom.luau",
            "return { run = function(n) error(string.rep('e', 40 * 2^20) .. n, 0) end }",
        ),
        (
            "main.luau",
            r#"
-- One at a time: each failure is kept by the host (its promise's text), and the next job's
-- VM lets go of the last one's 40 MiB string.
local kept, failed = {}, 0
for i = 1, 60 do
    local ok, err = pcall(function() return jobs.dispatch("./boom", "run", i):await() end)
    kept[i] = err
    if not ok and tostring(err):find("more bytes cut", 1, true) then failed += 1 end
end
print("failed", failed)
"#,
        ),
    ]);
    hostile_run(&tree.path(), &["--workers", "2", "main.luau"])
        .exited(0)
        .stdout_has("failed\t60\n");
}

/// The engine and two workers each printing a 300 MiB line: each line is charged to the
/// domain's host memory (512 MiB) before it is made, so each is refused at its `print`, and
/// the run goes on.
#[test]
fn huge_printed_lines_are_refused_at_the_print_and_the_run_goes_on() {
    let tree = Tree::new(&[
        (
            "say.luau",
            r#"return { run = function()
                local ok, err = pcall(print, string.rep("w", 300 * 2^20))
                return (tostring(err):match("^([^\n]*)"))
            end }"#,
        ),
        (
            "main.luau",
            r#"
local a, b = jobs.dispatch("./say", "run"), jobs.dispatch("./say", "run")
local ok, err = pcall(print, string.rep("x", 300 * 2^20))
print("engine", (tostring(err):match("^([^\n]*)")))
print("worker", a:await())
print("worker", b:await())
print("after", #string.rep("y", 1000))
"#,
        ),
    ]);
    hostile_run(&tree.path(), &["--workers", "2", "main.luau"])
        .exited(0)
        .stdout_has(
            "engine\tprint: a line of 314572801 bytes would not fit: the host memory of domain 'main' \
             would hold ",
        )
        .stdout_has("past its budget of 512 MiB")
        .stdout_has("worker\tprint: a line of 314572801 bytes would not fit")
        .stdout_has("after\t1000");
}

/// Eight workers each building 420 MiB in a job: each VM's limit is the budget shared by the
/// eight workers, the engine and the host's share (2304 MiB in ten parts: 230 MiB), so each job
/// is refused by its own VM's limit, with every VM together inside the address space, and the
/// pool serves the next dispatch from fresh VMs.
#[test]
fn eight_workers_each_past_its_vm_limit_fail_their_jobs_and_the_pool_serves_on() {
    let tree = Tree::new(&[
        (
            "m.luau",
            r#"
local M = {}
function M.hog()
    local hold = {}
    for i = 1, 420 do hold[i] = string.rep("x", 2^20 - 64) .. i end
    return #hold
end
function M.echo(x) return x end
return M
"#,
        ),
        (
            "main.luau",
            r#"
local hogs = {}
for i = 1, 8 do hogs[i] = jobs.dispatch("./m", "hog") end
for i = 1, 8 do
    local ok, err = pcall(hogs[i].await, hogs[i])
    print("hog", ok, (tostring(err):match("^[^\n]*")))
end
print("after", jobs.dispatch("./m", "echo", 41):await() + 1)
"#,
        ),
    ]);
    let ended = hostile_run(&tree.path(), &["--workers", "8", "main.luau"]);
    ended.exited(0).stdout_has("after\t42");
    let hogs: Vec<&str> = ended
        .stdout
        .lines()
        .filter(|l| l.starts_with("hog\t"))
        .collect();
    assert_eq!(hogs.len(), 8, "{}", ended.stdout);
    for line in hogs {
        let rest = line
            .strip_prefix("hog\tfalse\tjob './m:hog' failed: out of memory: the VM of worker ")
            .unwrap_or_else(|| panic!("{line}"));
        assert!(
            rest.ends_with(" reached its memory limit of 230 MiB"),
            "{line}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Registered jobs: every field is bounded at the call, and what the jobs hold together is
// bounded by the domain's host memory.
// ---------------------------------------------------------------------------------------------

#[test]
fn register_refuses_huge_fields_and_its_jobs_meet_the_host_memory() {
    // Bounded fields alone did not bound the jobs: 4,096 a phase, in as many phases as a script
    // names, each holding 64 KiB of metadata, ran the process out of address space (rc 134).
    let tree = Tree::new(&[
        (
            "m.luau",
            r#"
local M = {}
-- Registers jobs of 60 KiB of metadata from this worker VM until refused, then cancels them.
function M.flood()
    local meta = { blob = string.rep("w", 60 * 1024) }
    local held = {}
    local ok, err = pcall(function()
        for i = 1, 100000 do
            held[i] = jobs.register {
                phase = string.format("w%03d", i // 1000), origin = "loop",
                executor = { kind = "luau", run = function() end }, metadata = meta,
            }
        end
    end)
    for _, job in held do job:cancel() end
    return `{#held}\t{ok}\t{(tostring(err):match("^[^\n]*"))}`
end
function M.echo(x) return x end
return M
"#,
        ),
        (
            "main.luau",
            r#"
local run = function() end
local ok, err = pcall(jobs.register, {
    phase = "update", executor = { kind = "luau", run = run }, origin = string.rep("o", 2^20),
})
print("origin", ok, (tostring(err):match("^[^\n]*")))
ok, err = pcall(jobs.register, {
    phase = "update", executor = { kind = "luau", run = run },
    metadata = { blob = string.rep("m", 64 * 2^20) },
})
print("metadata", ok, (tostring(err):match("^[^\n]*")))
local meta = { blob = string.rep("m", 60 * 1024) }
local held = {}
ok, err = pcall(function()
    for i = 1, 100000 do
        held[i] = jobs.register {
            phase = string.format("p%03d", i // 1000), origin = "loop",
            executor = { kind = "luau", run = run }, metadata = meta,
        }
    end
end)
print("engine", #held, ok, (tostring(err):match("^[^\n]*")))
-- Cancelled jobs give their bytes back: a worker VM's jobs fill the same memory again.
for _, job in held do job:cancel() end
print("worker", jobs.dispatch("./m", "flood"):await())
print("after", jobs.dispatch("./m", "echo", 41):await() + 1)
"#,
        ),
    ]);
    let ended = hostile_run(&tree.path(), &["main.luau"]);
    ended
        .exited(0)
        .stdout_has(
            "origin\tfalse\tjobs.register: origin must be at most 1024 bytes, got \
             1048576",
        )
        .stdout_has(
            "metadata\tfalse\tjobs.register: metadata.blob: a value weighing more \
             than its limit of 65536 bytes can't cross a worker or event boundary",
        )
        .stdout_has("after\t42");
    // A job of the engine holds its 60 KiB of metadata, its phase, its origin and 512 bytes for
    // itself; one of a worker VM holds its metadata twice. Each loop ends where its jobs fill
    // the domain's host memory (what else the domain holds meanwhile takes a few KiB of it).
    for (who, bytes) in [("engine", 62_012), ("worker", 123_504)] {
        let line = ended
            .stdout
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{who}\t")))
            .unwrap_or_else(|| panic!("no {who} line in:\n{}", ended.stdout));
        let (count, refusal) = line.split_once('\t').expect("a count, then the refusal");
        let count: usize = count.parse().expect("a count");
        let fit = (512 << 20) / bytes;
        assert!((fit - 16..=fit).contains(&count), "{who}: {count} of {fit}");
        assert!(
            refusal.starts_with(&format!(
                "false\tjobs.register: a job holding {bytes} bytes would not fit: \
                 the host memory of domain 'main' would hold "
            )) && refusal
                .ends_with("past its budget of 512 MiB; cancel some jobs before registering more"),
            "{line}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// `skein serve`: a resource that attacks the host fails alone, and the server and the other
// resources go on. Each runs `skein serve DIR` with its console typed on standard input, whose
// end shuts the server down.
// ---------------------------------------------------------------------------------------------

/// Writes the resource at `folder` of `tree`: a `skein.toml` running `main.luau` (with `keys`
/// added to its `[resource]` table) and the `main.luau`.
fn resource(tree: &Tree, folder: &str, keys: &str, main: &str) {
    tree.write(
        &format!("{folder}/skein.toml"),
        &format!("[resource]\nscripts = ['main.luau']\n{keys}"),
    );
    tree.write(&format!("{folder}/main.luau"), main);
}

/// The resources `good` (exports `ping`) and `probe`, which depends on it and prints its answer
/// as it starts: `start good` and `start probe` show that resources still start and answer.
fn good_and_probe(tree: &Tree, under: &str) {
    resource(
        tree,
        &format!("{under}good"),
        "exports = ['ping']\n",
        "function ping() return 'pong' end\n",
    );
    resource(
        tree,
        &format!("{under}probe"),
        "dependencies = ['good']\n",
        "print('probe:', require('@skein/resources').import('good').ping())\n",
    );
}

/// What `start good` and `start probe` print.
#[track_caller]
fn good_and_probe_started(ended: &Ended) {
    ended
        .stdout_has("started good (generation 1)\nprobe:\tpong\nstarted probe (generation 1)\n")
        .stdout_has("shutting down: end of input");
}

#[test]
fn serve_a_resource_holding_300_mib_fails_alone_and_eight_others_serve_on() {
    // With 2 workers the host's VM limit is the pool's budget shared as if 8 resources ran:
    // 2304 MiB over 2 workers, the engine and the host's share, 8 times, is 72 MiB a VM.
    let tree = Tree::new(&[]);
    let names: Vec<String> = (1..=8).map(|i| format!("r{i}")).collect();
    for name in &names {
        resource(
            &tree,
            name,
            "exports = ['ping']\n",
            &format!("function ping() return '{name}' end\n"),
        );
    }
    resource(
        &tree,
        "big",
        "",
        r#"
local hold = {}
for i = 1, 300 * 16 do hold[i] = string.rep("x", 65536) .. i end
print("big: held", #hold)
"#,
    );
    resource(
        &tree,
        "probe",
        "dependencies = ['r1', 'r8']\n",
        "local resources = require('@skein/resources')\n\
         print('probe:', resources.import('r1').ping(), resources.import('r8').ping())\n",
    );
    let mut console: String = names.iter().map(|n| format!("start {n}\n")).collect();
    console.push_str("start big\nstart probe\nlist\n");
    let ended = hostile_serve(&tree.path(), &[], &console);
    ended
        .exited(0)
        .stderr_has(&format!(
            "error: start: resource 'big': main.luau: script big/main.luau failed: out of \
             memory: the engine VM reached its memory limit of 72 MiB\n{}/big/main.luau:3",
            tree.path().display()
        ))
        .stdout_has("probe:\tr1\tr8\nstarted probe (generation 1)\n")
        .stdout_has("big failed (never started; no dependencies; no exports)")
        .stdout_has("r8 running (generation 1; no dependencies; exports ping)")
        .stdout_has("shutting down: end of input");
    for name in &names {
        ended.stdout_has(&format!("started {name} (generation 1)\n"));
    }
    assert!(!ended.stdout.contains("big: held"), "{}", ended.stdout);
}

#[test]
fn serve_a_resource_shipping_a_sparse_two_gigabyte_luaurc_is_refused_by_size() {
    let tree = Tree::new(&[("evil/lib/x.luau", "return 'x'\n")]);
    resource(
        &tree,
        "evil",
        "",
        r#"
local ok, err = pcall(require, "@lib/x")
print("evil: caught", ok, (tostring(err):match("^[^\n]*")))
print("evil: relative", require("./lib/x"))
"#,
    );
    good_and_probe(&tree, "");
    let rc = std::fs::File::create(tree.path().join("evil/.luaurc")).expect("create .luaurc");
    rc.set_len(2 << 30).expect("a sparse .luaurc");
    let ended = hostile_serve(&tree.path(), &[], "start evil\nstart good\nstart probe\n");
    ended.exited(0).stdout_has(&format!(
        "evil: caught\tfalse\tinvalid .luaurc at {}/evil/.luaurc: it is longer \
             than the limit of 1048576 bytes\nevil: relative\tx\nstarted evil (generation 1)\n",
        tree.path().display()
    ));
    good_and_probe_started(&ended);
}

/// How many resources the chain test makes. A start over a chain of 100,000 overflowed the
/// engine thread's stack; making and removing that many folders takes minutes on a loaded
/// disk, so the runner test uses a tenth of it, and the library's ordering test
/// (`resource::order`) walks a chain of 100,000 on a small stack.
const CHAIN: usize = 10_000;

#[test]
fn serve_a_chain_of_10_000_resources_starts_in_order_until_the_memory_budget() {
    // Each link asks for VMs of 1 MiB: 3 with 2 workers, so 768 links fit the budget of
    // 2304 MiB, started last link first; the 769th is refused naming the budget, the set's
    // starts are undone, and the console comes up with every link loaded.
    let tree = Tree::new(&[]);
    let root = tree.path();
    for i in 0..CHAIN {
        let dependency = if i + 1 < CHAIN {
            format!("dependencies = ['r{}']\n", i + 1)
        } else {
            String::new()
        };
        let folder = root.join(format!("r{i}"));
        std::fs::create_dir(&folder).expect("a link's folder");
        std::fs::write(
            folder.join("skein.toml"),
            format!("[resource]\nmemory = '1M'\n{dependency}"),
        )
        .expect("a link's manifest");
    }
    let names: Vec<String> = (0..CHAIN).map(|i| format!("'r{i}'")).collect();
    tree.write(
        "skein-host.toml",
        &format!("[host]\nstart = [{}]\n", names.join(",")),
    );
    let began = Instant::now();
    let (last, before_last) = (CHAIN - 1, CHAIN - 2);
    let ended = hostile_serve(
        &root,
        &[],
        &format!("start r{last}\nstart r{before_last}\nstart r0\n"),
    );
    // The load reads the manifests and the startup set starts and stops 768 domains: about a
    // second in a release build. A check of each startup name against those before it made
    // 100,000 of them take 20 s.
    let took = began.elapsed();
    println!("a chain of {CHAIN} resources served and shut down in {took:?}");
    assert!(took < Duration::from_secs(15), "took {took:?}");
    ended
        .exited(0)
        .stderr_has(&format!(
            "error: not enough memory: domain 'r{}' needs 3 VMs of 1 MiB (its engine VM and \
             one per worker), and the pool's memory would hold 2307 MiB, past its budget of \
             2304 MiB",
            CHAIN - 769
        ))
        .stdout_has(&format!(
            "serving {CHAIN} resources from {}, none running; help lists the commands\n",
            root.display()
        ))
        .stdout_has(&format!(
            "started r{last} (generation 2)\nstarted r{before_last} (generation 2)\n"
        ))
        // The start of the head walks the whole chain for a cycle, and refuses on its first
        // link.
        .stderr_has("error: start: resource 'r0' depends on 'r1', which is not running");
    // The tree's own removal unlinks the folders in directory order, which took minutes for
    // 100,000 of them; `rm` sorts them first and takes seconds. The tree removes what is left.
    let _ = Command::new("rm").arg("-rf").arg(&root).status();
}

#[test]
fn serve_a_resource_script_linking_out_of_its_folder_is_refused_and_the_others_start() {
    let tree = Tree::new(&[
        ("outside/main.luau", "print('the secret ran')\n"),
        (
            "res/evil/skein.toml",
            "[resource]\nscripts = ['main.luau']\n",
        ),
        (
            "res/evildir/skein.toml",
            "[resource]\nscripts = ['lib/main.luau']\n",
        ),
    ]);
    good_and_probe(&tree, "res/");
    let res = tree.path().join("res");
    std::os::unix::fs::symlink(
        tree.path().join("outside/main.luau"),
        res.join("evil/main.luau"),
    )
    .expect("a link to a file outside");
    std::os::unix::fs::symlink("../../outside", res.join("evildir/lib"))
        .expect("a link to a folder outside");
    let ended = hostile_serve(
        &res,
        &[],
        "start evil\nstart evildir\nstart good\nstart probe\n",
    );
    ended.exited(0);
    for (name, script) in [("evil", "main.luau"), ("evildir", "lib/main.luau")] {
        ended.stderr_has(&format!(
            "error: start: resource '{name}': {script}: cannot read the script {}: it leads \
             outside the folder {}",
            res.join(name).join(script).display(),
            res.join(name).display()
        ));
    }
    good_and_probe_started(&ended);
    assert!(!ended.stdout.contains("the secret ran"), "{}", ended.stdout);
}

#[test]
fn serve_a_luaurc_in_or_above_the_served_folder_does_not_widen_a_resources_root() {
    let tree = Tree::new(&[
        // Above the served folder, and in it: each would make its folder the project root of
        // every resource below it.
        (".luaurc", r#"{ "aliases": { "up": "./res" } }"#),
        ("res/.luaurc", r#"{ "aliases": { "good": "./good" } }"#),
        (
            "res/good/private.luau",
            "return 'the private module of good'\n",
        ),
        (
            "res/a/main.luau",
            r#"
for _, spec in { "../good/private", "@good/private", "@up/good/private" } do
    local ok, err = pcall(require, spec)
    print("a:", spec, ok, (tostring(err):match("^[^\n]*")))
end
"#,
        ),
        ("res/a/skein.toml", "[resource]\nscripts = ['main.luau']\n"),
    ]);
    good_and_probe(&tree, "res/");
    let res = tree.path().join("res");
    let ended = hostile_serve(&res, &[], "start a\nstart good\nstart probe\n");
    ended.exited(0).stdout_has("started a (generation 1)");
    for spec in ["../good/private", "@good/private", "@up/good/private"] {
        // Refused in the one text a path out of the root gets, whatever is out there.
        ended.stdout_has(&format!(
            "a:\t{spec}\tfalse\tmodule '{spec}' from {} leads outside the project root {}: \
             modules are required only from below it (the main script's folder, or the nearest \
             folder above it with a .luaurc)\n",
            res.join("a/main.luau").display(),
            res.join("a").display()
        ));
    }
    good_and_probe_started(&ended);
    assert!(!ended.stdout.contains("private module"), "{}", ended.stdout);
}

/// Where `skein serve --help` promises a signal is honoured, a spinning resource or not; the
/// assertion leaves room for a loaded machine.
const SIGNAL_GOAL: Duration = Duration::from_millis(100);
const SIGNAL_BOUND: Duration = Duration::from_secs(1);

#[test]
fn serve_sigterm_ends_the_server_while_an_export_spins() {
    let tree = Tree::new(&[]);
    resource(
        &tree,
        "spinner",
        "exports = ['spin']\n",
        "function spin() print('spinning') while true do end end\n",
    );
    resource(
        &tree,
        "caller",
        "dependencies = ['spinner']\n",
        "local spinner = require('@skein/resources').import('spinner')\n\
         task.delay(0.05, function() spinner.spin() end)\n",
    );
    let dir = tree.path();
    let folder = dir.to_str().expect("a UTF-8 folder");
    let mut command = limited(
        &dir,
        &[
            "serve",
            folder,
            "--workers",
            "2",
            "--start",
            "caller,spinner",
        ],
    );
    // Standard input stays open: only the signal ends the console.
    command.stdin(Stdio::piped());
    let mut child = command.spawn().expect("start skein serve");
    let _stdin = child.stdin.take();
    let out = crate::runner_serve::lines(child.stdout.take().expect("piped stdout"));
    let err = read_all(child.stderr.take().expect("piped stderr"));
    let mut before = Vec::new();
    loop {
        match out.recv_timeout(HANG) {
            Ok(line) if line == "spinning" => break,
            Ok(line) => before.push(line),
            Err(e) => panic!("no spinning export ({e}); stdout: {before:?}"),
        }
    }
    // Inside the loop by now, give or take the few instructions after the print.
    std::thread::sleep(Duration::from_millis(100));
    let sent = Instant::now();
    let pid = i32::try_from(child.id()).expect("a pid");
    // SAFETY: `pid` is our own child, not yet waited for, so the id is still its.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    let status = exit_within(&mut child, HANG).expect("skein serve exits");
    let took = sent.elapsed();
    println!("SIGTERM to exit, an export spinning: {took:?} (goal {SIGNAL_GOAL:?})");
    assert!(took < SIGNAL_BOUND, "took {took:?}");
    assert_eq!((status.code(), status.signal()), (Some(0), None));
    let after: Vec<String> = out.iter().collect();
    assert_eq!(
        after,
        ["shutting down: signal"],
        "{}",
        err.join().unwrap_or_default()
    );
}

#[test]
fn serve_deadlines_cut_a_spinning_start_script_and_a_spinning_export() {
    let tree = Tree::new(&[]);
    // No deadline of its own: the server's `--deadline 100` cuts it.
    resource(&tree, "hosted", "", "while true do end\n");
    // Its own deadline, shorter than its caller's, cuts each call of its export.
    resource(
        &tree,
        "spinner",
        "exports = ['spin']\ndeadline_ms = 50\n",
        "function spin() while true do end end\n",
    );
    resource(
        &tree,
        "caller",
        "dependencies = ['spinner']\n",
        "local ok, err = pcall(require('@skein/resources').import('spinner').spin)\n\
         print('caller:', ok, (tostring(err):match('^[^\\n]*')))\n",
    );
    good_and_probe(&tree, "");
    let dir = tree.path();
    let ended = hostile_serve(
        &dir,
        &["--deadline", "100"],
        "start hosted\nstart spinner\nstart caller\nstart good\nstart probe\n",
    );
    ended
        .exited(0)
        .stderr_has(
            "error: start: resource 'hosted': main.luau: script hosted/main.luau failed: \
             deadline exceeded: one run took longer than 0.1 s\n",
        )
        .stdout_has(
            "caller:\tfalse\tspinner.spin: deadline exceeded: one run took longer than 0.05 s",
        )
        .stdout_has("started caller (generation 1)");
    good_and_probe_started(&ended);
}
