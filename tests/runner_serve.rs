//! `skein serve DIR` end to end: the real runner as a child process, its operator console
//! driven through standard input, each answer read back from its stdout and stderr. Covers
//! `list`, `start`, `stop`, `reload`, `help`, bad commands, a failing command (the console
//! goes on), `quit`, an abrupt end of input and `SIGINT` (each shuts down, dependents first,
//! and exits 0), and the example `examples/server`.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use skein::NativeMode;

use crate::support::{assert_contains, exit_within, mkfifo, skein, Tree};

/// How long the runner may take to answer (a debug build on a loaded machine).
const ANSWER: Duration = Duration::from_secs(30);

/// A `skein serve` child: its stdin to type into, its stdout and stderr line by line.
struct Served {
    child: Child,
    stdin: Option<ChildStdin>,
    out: mpsc::Receiver<String>,
    err: mpsc::Receiver<String>,
}

/// Reads `from` line by line into a channel until it closes.
pub(crate) fn lines(from: impl std::io::Read + Send + 'static) -> mpsc::Receiver<String> {
    let (to, received) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(from).lines().map_while(Result::ok) {
            if to.send(line).is_err() {
                break;
            }
        }
    });
    received
}

impl Served {
    /// Starts `skein serve DIR --workers 2 ARGS...` in this test process's current directory.
    fn start(dir: &Path, args: &[&str]) -> Served {
        Served::start_in(Path::new("."), dir, args)
    }

    /// Starts `skein serve DIR --workers 2 ARGS...` in the directory `cwd`.
    fn start_in(cwd: &Path, dir: &Path, args: &[&str]) -> Served {
        let mut child = Command::new(env!("CARGO_BIN_EXE_skein"))
            .current_dir(cwd)
            .arg("serve")
            .arg(dir)
            .args(["--workers", "2"])
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run skein serve");
        let out = lines(child.stdout.take().expect("piped stdout"));
        let err = lines(child.stderr.take().expect("piped stderr"));
        Served {
            stdin: child.stdin.take(),
            child,
            out,
            err,
        }
    }

    /// Types `line` and its line end.
    fn send(&mut self, line: &str) {
        self.type_raw(&format!("{line}\n"));
    }

    /// Types `text` as it is.
    fn type_raw(&mut self, text: &str) {
        let stdin = self.stdin.as_mut().expect("stdin still open");
        stdin
            .write_all(text.as_bytes())
            .expect("write to the console");
        stdin.flush().expect("flush the console");
    }

    /// The next line on stdout.
    #[track_caller]
    fn out(&self) -> String {
        next(&self.out, "stdout")
    }

    /// The next line on stderr.
    #[track_caller]
    fn err(&self) -> String {
        next(&self.err, "stderr")
    }

    /// The next `n` lines on stdout.
    #[track_caller]
    fn outs(&self, n: usize) -> Vec<String> {
        (0..n).map(|_| self.out()).collect()
    }

    /// Takes stdout lines until `line` comes; answers those before it.
    #[track_caller]
    fn out_until(&self, line: &str) -> Vec<String> {
        let mut before = Vec::new();
        loop {
            let got = self.out();
            if got == line {
                return before;
            }
            before.push(got);
        }
    }

    /// Ends standard input without a `quit`.
    fn close(&mut self) {
        self.stdin = None;
    }

    /// Waits for the exit (standard input left as it is); answers the status and what stdout
    /// and stderr still held.
    #[track_caller]
    fn exit(mut self) -> (ExitStatus, Vec<String>, Vec<String>) {
        let status = exit_within(&mut self.child, ANSWER).expect("skein serve exits");
        // The pipes close with the runner: what is left in them comes now.
        (status, self.out.iter().collect(), self.err.iter().collect())
    }

    fn signal(&self, signal: i32) {
        let pid = i32::try_from(self.child.id()).unwrap();
        // SAFETY: `pid` is our own child, not yet waited for, so the id is still its.
        unsafe { libc::kill(pid, signal) };
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[track_caller]
fn next(from: &mpsc::Receiver<String>, stream: &str) -> String {
    let end = Instant::now() + ANSWER;
    match from.recv_timeout(end.saturating_duration_since(Instant::now())) {
        Ok(line) => line,
        Err(e) => panic!("no line on {stream} ({e})"),
    }
}

/// Two resources: `store` (get/set) and `user`, which depends on it, sets a key at start and
/// reads it from its `stop` handler. The host file lists them dependents first; the start
/// sorts them.
fn pair() -> Tree {
    Tree::new(&[
        (
            "res/store/skein.toml",
            "[resource]\nscripts = ['main.luau']\nexports = ['get', 'set']\n",
        ),
        (
            "res/store/main.luau",
            "local data = {}\n\
             function get(k) return data[k] end\n\
             function set(k, v) data[k] = v end\n\
             require('@skein/events').on('stop', function() print('store: stop') end)\n\
             print('store: start')\n",
        ),
        (
            "res/user/skein.toml",
            "[resource]\nscripts = ['main.luau']\nexports = ['hello']\ndependencies = ['store']\n",
        ),
        (
            "res/user/main.luau",
            "local store = require('@skein/resources').import('store')\n\
             store.set('user', 'here')\n\
             function hello() return store.get('user') end\n\
             require('@skein/events').on('stop', function()\n\
               local ok, v = pcall(store.get, 'user')\n\
               print(`user: stop, store says {if ok then v else 'nothing'}`)\n\
             end)\n\
             print('user: start')\n",
        ),
        ("res/skein-host.toml", "[host]\nstart = ['user', 'store']\n"),
    ])
}

/// The banner once `store` and `user` run.
const BOTH: &str =
    "serving 2 resources from {DIR}/res, 2 running: store, user; help lists the commands";

fn banner(tree: &Tree, text: &str) -> String {
    text.replace("{DIR}", &tree.path().display().to_string())
}

/// Starts `skein serve` on `pair()` and waits for the banner.
fn served_pair(tree: &Tree) -> Served {
    let served = Served::start(&tree.path().join("res"), &[]);
    assert_eq!(served.outs(2), ["store: start", "user: start"]);
    assert_eq!(served.out(), banner(tree, BOTH));
    served
}

#[test]
fn list_start_stop_reload_and_quit_through_the_console() {
    let tree = pair();
    let mut served = served_pair(&tree);
    served.send("list");
    assert_eq!(
        served.outs(2),
        [
            "store running (generation 1; no dependencies; exports get, set)",
            "user running (generation 1; depends on store; exports hello)",
        ]
    );
    // A dependency may stop: with a warning, and the dependent's calls fail meanwhile.
    served.send("stop store");
    assert_eq!(
        served.outs(2),
        ["store: stop", "stopped store (generation 1)"]
    );
    assert_eq!(
        served.err(),
        "warning: resource 'user' depends on 'store', which stopped: its calls into 'store' fail until 'store' starts again"
    );
    served.send("list");
    assert_eq!(
        served.out(),
        "store stopped (generation 1; no dependencies; exports get, set)"
    );
    assert_eq!(
        served.out(),
        "user running (generation 1; depends on store; exports hello)"
    );
    served.send("start store");
    assert_eq!(
        served.outs(2),
        ["store: start", "started store (generation 2)"]
    );
    // A reload is a stop then a start from disk: the new generation's text runs.
    std::fs::write(
        tree.path().join("res/user/main.luau"),
        "function hello() return 'again' end\nprint('user: start again')\n",
    )
    .unwrap();
    served.send("reload user");
    assert_eq!(
        served.outs(3),
        [
            // The store restarted empty, and the stop handler says so.
            "user: stop, store says nil",
            "user: start again",
            "reloaded user (generation 2)",
        ]
    );
    served.send("help");
    assert_eq!(served.out(), "commands:");
    assert_eq!(
        served.out_until("  quit           stop every resource, dependents first, and exit (so do end of input and Ctrl-C)").len(),
        5
    );
    served.send("quit");
    let (status, out, err) = served.exit();
    assert_eq!(status.code(), Some(0), "{status:?}");
    // The new `user` has no stop handler; `store` stops after it.
    assert_eq!(out, ["shutting down: quit", "store: stop"]);
    assert_eq!(err, Vec::<String>::new());
}

#[test]
fn bad_and_failing_commands_say_their_error_and_the_console_goes_on() {
    let tree = pair();
    let mut served = served_pair(&tree);
    let refused = [
        (
            "frobnicate",
            "error: unknown command 'frobnicate' (help lists the commands)",
        ),
        ("start", "error: start needs a resource name: start NAME"),
        (
            "stop store user",
            "error: stop takes one resource name, not 2: stop NAME",
        ),
        ("list all", "error: list takes no argument, got 1: all"),
        (
            "stop nope",
            "error: stop: no resource named 'nope' is loaded",
        ),
        (
            "reload nope",
            "error: reload: no resource named 'nope' is loaded",
        ),
        (
            "start store",
            "error: start: resource 'store' is running already",
        ),
    ];
    for (line, error) in refused {
        served.send(line);
        assert_eq!(served.err(), error, "{line}");
    }
    // A start whose dependency is not running fails, and leaves things as they were.
    served.send("stop user");
    assert_eq!(
        served.outs(2),
        ["user: stop, store says here", "stopped user (generation 1)"]
    );
    served.send("stop store");
    assert_eq!(
        served.outs(2),
        ["store: stop", "stopped store (generation 1)"]
    );
    served.send("start user");
    assert_eq!(
        served.err(),
        "error: start: resource 'user' depends on 'store', which is not running"
    );
    served.send("stop user");
    assert_eq!(served.err(), "error: stop: resource 'user' is not running");
    // A line past the bound is refused whole, and the next is read as usual.
    served.send(&"x".repeat(5000));
    assert_eq!(
        served.err(),
        "error: a command line is at most 4096 bytes; that one was dropped"
    );
    served.send("list");
    assert_eq!(
        served.outs(2),
        [
            "store stopped (generation 1; no dependencies; exports get, set)",
            "user stopped (generation 1; depends on store; exports hello)",
        ]
    );
    served.send("quit");
    let (status, out, err) = served.exit();
    assert_eq!(status.code(), Some(0), "{status:?}");
    assert_eq!(out, ["shutting down: quit"]);
    assert_eq!(err, Vec::<String>::new());
}

#[test]
fn a_reload_that_fails_leaves_the_resource_failed_and_list_shows_why() {
    let tree = pair();
    let mut served = served_pair(&tree);
    let main = tree.path().join("res/user/main.luau");
    let good = std::fs::read_to_string(&main).unwrap();
    std::fs::write(&main, "error('broken on purpose')\n").unwrap();
    served.send("reload user");
    assert_eq!(served.out(), "user: stop, store says here");
    let error = served.err();
    assert!(
        error.starts_with("error: reload: resource 'user': main.luau: script ")
            && error.ends_with("main.luau:1: broken on purpose"),
        "{error}"
    );
    assert_eq!(served.err(), "stack traceback:");
    served.send("list");
    std::fs::write(&main, good).unwrap();
    served.send("start user");
    let listed = served.out_until("user: start");
    assert_eq!(
        listed[..2],
        [
            "store running (generation 1; no dependencies; exports get, set)",
            "user failed (generation 1; depends on store; exports hello)",
        ]
    );
    // The error under its resource, as the reload reported it, its stack indented below it.
    assert!(
        listed[2].starts_with("  last error: reload: resource 'user': main.luau: script ")
            && listed[2].ends_with("broken on purpose"),
        "{listed:?}"
    );
    assert_eq!(listed[3], "    stack traceback:");
    assert_eq!(served.out(), "started user (generation 2)");
    served.send("quit");
    let (status, out, _) = served.exit();
    assert_eq!(status.code(), Some(0), "{status:?}");
    assert_eq!(
        out,
        [
            "shutting down: quit",
            "user: stop, store says here",
            "store: stop"
        ]
    );
}

#[test]
fn an_abrupt_end_of_input_shuts_down_dependents_first_and_exits_zero() {
    let tree = pair();
    let mut served = served_pair(&tree);
    served.send("list");
    served.outs(2);
    // Cut off in the middle of a command: what came is a line, and runs.
    served.type_raw("sto");
    served.close();
    let (status, out, err) = served.exit();
    assert_eq!(status.code(), Some(0), "{status:?}");
    // `user`'s stop handler still reached `store`, which stopped after it.
    assert_eq!(
        out,
        [
            "shutting down: end of input",
            "user: stop, store says here",
            "store: stop"
        ]
    );
    assert_eq!(
        err,
        ["error: unknown command 'sto' (help lists the commands)"]
    );
}

#[test]
fn sigint_shuts_down_dependents_first_and_exits_zero() {
    let tree = pair();
    let served = served_pair(&tree);
    served.signal(libc::SIGINT);
    // Standard input is still open: the signal alone ends the console.
    let (status, out, _) = served.exit();
    assert_eq!(status.code(), Some(0), "{status:?}");
    assert_eq!(
        out,
        [
            "shutting down: signal",
            "user: stop, store says here",
            "store: stop"
        ]
    );
}

#[test]
fn the_startup_set_comes_from_start_before_the_host_file() {
    let tree = pair();
    // Only `store`: `user` is loaded and waits for an operator.
    let mut served = Served::start(&tree.path().join("res"), &["--start", "store"]);
    assert_eq!(served.out(), "store: start");
    assert_eq!(
        served.out(),
        banner(
            &tree,
            "serving 2 resources from {DIR}/res, 1 running: store; help lists the commands"
        )
    );
    served.send("list");
    assert_eq!(
        served.outs(2)[1],
        "user stopped (never started; depends on store; exports hello)"
    );
    served.close();
    assert_eq!(served.exit().0.code(), Some(0));
    // A startup set that can't start is said, and the console comes up all the same.
    let mut served = Served::start(&tree.path().join("res"), &["--start", "user,nope"]);
    let error = served.err();
    assert!(
        error.starts_with("error: ") && error.contains("'nope'"),
        "{error}"
    );
    assert_eq!(
        served.out(),
        banner(
            &tree,
            "serving 2 resources from {DIR}/res, none running; help lists the commands"
        )
    );
    served.send("start store");
    assert_eq!(
        served.outs(2),
        ["store: start", "started store (generation 1)"]
    );
    served.close();
    assert_eq!(served.exit().0.code(), Some(0));
}

#[test]
fn a_folder_that_cannot_load_exits_one_naming_it() {
    let tree = Tree::new(&[("res/bad/skein.toml", "[resource]\nexport = ['x']\n")]);
    let mut served = Served::start(&tree.path().join("res"), &[]);
    served.close();
    let (status, out, err) = served.exit();
    assert_eq!(status.code(), Some(1), "{status:?}");
    assert_eq!(out, Vec::<String>::new());
    let bad = tree.path().join("res/bad/skein.toml");
    assert_eq!(
        err,
        [format!(
            "skein: {}:2: resource.export: unknown field `export`, expected one of `scripts`, `exports`, `dependencies`, `deadline_ms`, `memory`",
            bad.display()
        )]
    );
}

#[test]
fn a_manifest_or_host_file_that_is_a_fifo_is_refused_naming_it_without_blocking() {
    // A FIFO opened for reading waits for a writer that never comes: each is refused from its
    // metadata, and the server exits at once naming it.
    let tree = Tree::new(&[("res/good/skein.toml", "[resource]\n")]);
    let res = tree.path().join("res");
    std::fs::create_dir(res.join("piped")).unwrap();
    mkfifo(&res.join("piped/skein.toml"));
    let mut served = Served::start(&res, &[]);
    served.close();
    let (status, out, err) = served.exit();
    assert_eq!(status.code(), Some(1), "{status:?}");
    assert_eq!(out, Vec::<String>::new());
    assert_eq!(
        err,
        [format!(
            "skein: {}: it is a FIFO, not a regular file",
            res.join("piped/skein.toml").display()
        )]
    );
    // A folder named skein.toml is refused the same way.
    std::fs::remove_file(res.join("piped/skein.toml")).unwrap();
    std::fs::create_dir(res.join("piped/skein.toml")).unwrap();
    let mut served = Served::start(&res, &[]);
    served.close();
    let (status, _, err) = served.exit();
    assert_eq!(status.code(), Some(1), "{status:?}");
    assert_eq!(
        err,
        [format!(
            "skein: {}: it is a directory, not a regular file",
            res.join("piped/skein.toml").display()
        )]
    );
    // The served folder's host file too.
    std::fs::remove_dir(res.join("piped/skein.toml")).unwrap();
    std::fs::write(res.join("piped/skein.toml"), "[resource]\n").unwrap();
    mkfifo(&res.join("skein-host.toml"));
    let mut served = Served::start(&res, &[]);
    served.close();
    let (status, _, err) = served.exit();
    assert_eq!(status.code(), Some(1), "{status:?}");
    assert_eq!(
        err,
        [format!(
            "skein: {}: it is a FIFO, not a regular file",
            res.join("skein-host.toml").display()
        )]
    );
    // With the host file a regular file, both resources load and the server serves.
    std::fs::remove_file(res.join("skein-host.toml")).unwrap();
    let mut served = Served::start(&res, &[]);
    served.close();
    assert_eq!(served.exit().0.code(), Some(0));
}

#[test]
fn the_allow_flags_bound_what_a_manifest_may_ask() {
    let tree = Tree::new(&[
        (
            "res/spawner/skein.toml",
            "[resource]\nscripts = ['main.luau']\n[capabilities]\nallow = ['worker.spawn']\n",
        ),
        (
            "res/spawner/main.luau",
            "local w = require('@skein/worker').spawn { name = 'w', source = 'return function(m) return m end' }\n\
             w:send(7) print(`spawner: {w:receive(10)}`)\n",
        ),
        ("res/skein-host.toml", "[host]\nstart = ['spawner']\n"),
    ]);
    let res = tree.path().join("res");
    let mut served = Served::start(&res, &[]);
    served.close();
    let (status, out, err) = served.exit();
    assert_eq!(status.code(), Some(1), "{status:?}");
    assert_eq!(out, Vec::<String>::new());
    assert_eq!(
        err,
        ["skein: resource 'spawner' asks for capabilities the host does not hold: worker.spawn"]
    );
    let mut served = Served::start(&res, &["--allow", "worker.spawn"]);
    // The worker's answer comes in a frame, after the start.
    assert_eq!(
        served.out_until("spawner: 7"),
        [banner(
            &tree,
            "serving 1 resource from {DIR}/res, 1 running: spawner; help lists the commands"
        )]
    );
    served.close();
    assert_eq!(served.exit().0.code(), Some(0));
}

/// Served from another folder, a resource reads its files by paths relative to its own folder,
/// as its manifest's `read` roots are; a `..` out of its root is refused, naming where it led.
#[test]
fn a_resource_reads_by_paths_relative_to_its_folder_wherever_serve_runs() {
    let tree = Tree::new(&[
        (
            "res/notes/skein.toml",
            "[resource]\nscripts = ['main.luau']\n[capabilities]\nread = ['data']\n",
        ),
        (
            "res/notes/main.luau",
            "local fs = require('@skein/fs')\n\
             print(`notes: {fs.readFile('data/note.txt')}`)\n\
             local ok, err = pcall(fs.readFile, 'data/../../secret.txt')\n\
             print(`notes: {err}`)\n",
        ),
        ("res/notes/data/note.txt", "read from its folder"),
        ("res/secret.txt", "beside the resource"),
        ("res/skein-host.toml", "[host]\nstart = ['notes']\n"),
        ("elsewhere/.keep", ""),
    ]);
    let res = tree.path().join("res");
    let ceiling = res.display().to_string();
    let mut served = Served::start_in(
        &tree.path().join("elsewhere"),
        &res,
        &["--allow-read", &ceiling],
    );
    let real = res.canonicalize().unwrap();
    assert_eq!(
        served.outs(2),
        [
            "notes: read from its folder".to_string(),
            format!(
                "notes: fs.readFile: 'data/../../secret.txt': permission denied: '{}' is outside \
                 every root granted for 'filesystem.read' to domain 'notes' (domain#1, \
                 generation 1); its roots: '{}'",
                real.join("secret.txt").display(),
                real.join("notes/data").display()
            ),
        ]
    );
    served.close();
    assert_eq!(served.exit().0.code(), Some(0));
}

#[test]
fn the_example_server_runs_its_rounds_and_reports_then_shuts_down_in_order() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/server");
    let mut served = Served::start(&dir, &[]);
    // Frames run while nobody types: `scores` plays its first round on the workers and
    // `report` prints it.
    let first = served.out_until("report: round 1, 2 keys in store");
    assert_eq!(
        first[..3],
        [
            "store: ready".to_string(),
            "scores: a round every 5 s, from round 1".to_string(),
            format!(
                "serving 3 resources from {}, 3 running: report, scores, store; help lists the commands",
                dir.display()
            ),
        ]
    );
    let podium = served.outs(3);
    for (place, line) in podium.iter().enumerate() {
        assert!(
            line.starts_with(&format!("report: {}. ", place + 1)),
            "{podium:?}"
        );
    }
    served.send("list");
    assert_eq!(
        served.outs(3),
        [
            "report running (generation 1; depends on store, scores; exports summary)",
            "scores running (generation 1; depends on store; exports round, top)",
            "store running (generation 1; no dependencies; exports get, set, count)",
        ]
    );
    served.send("quit");
    let (status, out, err) = served.exit();
    assert_eq!(status.code(), Some(0), "{status:?} {err:?}");
    assert_eq!(out[0], "shutting down: quit");
    assert!(
        out[1].starts_with("scores: stopped after round "),
        "{out:?}"
    );
    assert_eq!(out[2], "store: stopped, holding 2 keys");
    assert_eq!(out.len(), 3, "{out:?}");
    assert_eq!(err, Vec::<String>::new());
}

#[test]
fn serve_help_says_the_startup_set_the_ceiling_and_the_exits() {
    let (code, stdout, _) = skein(&["serve", "--help"]);
    assert_eq!(code, 0);
    assert_contains(&stdout, "Usage: skein serve [OPTIONS] <DIR>");
    assert_contains(&stdout, "--start <NAME,...>");
    assert_contains(&stdout, "--allow-read <PATH>");
    assert_contains(&stdout, "--deadline <MS>");
    assert_contains(
        &stdout,
        "A skein.toml's `deadline_ms` wins over it for its resource",
    );
    assert_contains(
        &stdout,
        "The --allow* flags are the most any resource may be granted",
    );
    assert_contains(
        &stdout,
        "SIGTERM stop every resource, each after those that depend\non it, and exit 0",
    );
    assert_contains(
        &stdout,
        "A signal that comes while a resource's code\nruns (a start script or an export in a loop) interrupts every resource's code within 100 ms",
    );
    // A missing DIR is a usage error.
    let (code, _, stderr) = skein(&["serve"]);
    assert_eq!(code, 2);
    assert_contains(&stderr, "<DIR>");
}

#[test]
fn native_and_no_native_choose_every_resources_code_mode_and_conflict() {
    let tree = Tree::new(&[
        (
            "res/probe/skein.toml",
            "[resource]\nscripts = ['main.luau']\n",
        ),
        ("res/probe/main.luau", "print(jobs.stats()[1].native)\n"),
    ]);
    let dir = tree.path().join("res");
    for (flag, mode) in [
        (None, NativeMode::Annotated),
        (Some("--native"), NativeMode::All),
        (Some("--no-native"), NativeMode::Off),
    ] {
        let mut args = vec!["--start", "probe"];
        args.extend(flag);
        let mut served = Served::start(&dir, &args);
        assert_eq!(served.out(), mode.in_use(), "{flag:?}");
        served.close();
        let (status, _, err) = served.exit();
        assert_eq!(
            (status.code(), err),
            (Some(0), Vec::<String>::new()),
            "{flag:?}"
        );
    }
    let dir = dir.to_str().expect("utf-8 path");
    let (code, _, stderr) = skein(&["serve", dir, "--native", "--no-native"]);
    assert_eq!(code, 2);
    assert_contains(
        &stderr,
        "error: the argument '--native' cannot be used with '--no-native'",
    );
}

/// Signals `served` with `signal` once its resource's code spins, and answers how long the
/// runner took to exit after it, with the exit status and what stdout and stderr still held.
fn signal_to_exit(served: Served, signal: i32) -> (Duration, ExitStatus, Vec<String>, Vec<String>) {
    // Inside the loop by now, give or take the few instructions after the print.
    std::thread::sleep(Duration::from_millis(100));
    let sent = Instant::now();
    served.signal(signal);
    let mut served = served;
    let status = exit_within(&mut served.child, ANSWER).expect("skein serve exits");
    let took = sent.elapsed();
    let out = served.out.try_iter().collect();
    let err = served.err.try_iter().collect();
    (took, status, out, err)
}

/// Where the issue wants a signal honoured; the assertion allows a loaded debug build more.
const SIGNAL_GOAL: Duration = Duration::from_millis(100);
const SIGNAL_BOUND: Duration = Duration::from_secs(2);

#[test]
fn a_signal_interrupts_a_start_script_that_spins_and_the_server_exits() {
    let tree = Tree::new(&[
        (
            "res/spin/skein.toml",
            "[resource]\nscripts = ['main.luau']\n",
        ),
        (
            "res/spin/main.luau",
            "print('spinning')\nwhile true do end\n",
        ),
    ]);
    let served = Served::start(&tree.path().join("res"), &["--start", "spin"]);
    assert_eq!(served.out(), "spinning");
    let (took, status, out, err) = signal_to_exit(served, libc::SIGTERM);
    println!("SIGTERM to exit, a start script spinning: {took:?} (goal {SIGNAL_GOAL:?})");
    assert!(took < SIGNAL_BOUND, "took {took:?}");
    assert_eq!(status.code(), Some(0), "{status:?}");
    // The start failed, naming the interrupt; the console came up and shut down at once.
    assert_eq!(
        err,
        [format!(
            "error: start: resource 'spin': main.luau: script {}/res/spin/main.luau failed: cancelled",
            tree.path().display()
        )]
    );
    assert_eq!(
        out,
        [
            banner(
                &tree,
                "serving 1 resource from {DIR}/res, none running; help lists the commands"
            ),
            "shutting down: signal".to_owned()
        ]
    );
}

#[test]
fn a_signal_interrupts_an_export_that_spins_and_the_server_exits() {
    let tree = Tree::new(&[
        (
            "res/spinner/skein.toml",
            "[resource]\nscripts = ['main.luau']\nexports = ['spin']\n",
        ),
        (
            "res/spinner/main.luau",
            "function spin() print('spinning') while true do end end\n",
        ),
        (
            "res/caller/skein.toml",
            "[resource]\nscripts = ['main.luau']\ndependencies = ['spinner']\n",
        ),
        (
            "res/caller/main.luau",
            "local spinner = require('@skein/resources').import('spinner')\n\
             task.delay(0.05, function() spinner.spin() end)\n",
        ),
    ]);
    for signal in [libc::SIGINT, libc::SIGTERM] {
        let served = Served::start(&tree.path().join("res"), &["--start", "caller,spinner"]);
        assert_eq!(
            served.out(),
            banner(
                &tree,
                "serving 2 resources from {DIR}/res, 2 running: caller, spinner; help lists the commands"
            )
        );
        assert_eq!(served.out(), "spinning");
        let (took, status, out, _) = signal_to_exit(served, signal);
        println!("signal {signal} to exit, an export spinning: {took:?} (goal {SIGNAL_GOAL:?})");
        assert!(took < SIGNAL_BOUND, "signal {signal}: took {took:?}");
        assert_eq!(status.code(), Some(0), "{status:?}");
        assert_eq!(out, ["shutting down: signal"]);
    }
}

#[test]
fn deadline_sets_every_resources_run_deadline_unless_its_manifest_gives_one() {
    let tree = Tree::new(&[
        (
            "res/hosted/skein.toml",
            "[resource]\nscripts = ['main.luau']\n",
        ),
        ("res/hosted/main.luau", "while true do end\n"),
        (
            "res/own/skein.toml",
            "[resource]\nscripts = ['main.luau']\ndeadline_ms = 150\n",
        ),
        ("res/own/main.luau", "while true do end\n"),
        (
            "res/fine/skein.toml",
            "[resource]\nscripts = ['main.luau']\n",
        ),
        ("res/fine/main.luau", "print('fine: start')\n"),
    ]);
    let dir = tree.path().join("res");
    let mut served = Served::start(&dir, &["--deadline", "100", "--start", "hosted,own,fine"]);
    // The set stops at its first failure: the server's deadline stopped `hosted`.
    let first = served.err();
    assert_eq!(
        first,
        format!(
            "error: start: resource 'hosted': main.luau: script {}/hosted/main.luau failed: deadline exceeded: one run took longer than 0.1 s",
            dir.display()
        )
    );
    served.out();
    // Its own deadline stops `own`; the console and `fine` go on.
    served.send("start own");
    assert_eq!(
        served.err(),
        format!(
            "error: start: resource 'own': main.luau: script {}/own/main.luau failed: deadline exceeded: one run took longer than 0.15 s",
            dir.display()
        )
    );
    served.send("start fine");
    assert_eq!(served.out(), "fine: start");
    served.send("quit");
    let (status, _, _) = served.exit();
    assert_eq!(status.code(), Some(0), "{status:?}");

    // Bounded: 1 and 60000 are taken, 0 and 60001 refused as usage errors.
    let empty = Tree::new(&[]);
    for ms in ["1", "60000"] {
        let mut served = Served::start(empty.path().as_path(), &["--deadline", ms]);
        served.close();
        let (status, _, err) = served.exit();
        assert_eq!(
            (status.code(), err),
            (Some(0), Vec::<String>::new()),
            "--deadline {ms}"
        );
    }
    let dir = dir.to_str().expect("utf-8 path");
    for ms in ["0", "60001"] {
        let (code, _, stderr) = skein(&["serve", dir, "--deadline", ms]);
        assert_eq!(code, 2, "--deadline {ms}");
        assert_contains(
            &stderr,
            &format!("error: invalid value '{ms}' for '--deadline <MS>': {ms} is not in 1..=60000"),
        );
    }
}

/// A resource's frames are full frames: an event its main script, a task or a job emits reaches
/// its own `events.on` handler, and `events.wait` gets it, while the server runs (not only at
/// shutdown).
#[test]
fn a_resource_s_own_events_reach_its_handlers_while_the_server_runs() {
    let tree = Tree::new(&[
        ("res/ev/skein.toml", "[resource]\nscripts = ['main.luau']\n"),
        (
            "res/ev/job.luau",
            "return { emit = function() require('@skein/events').emit('ping', 'job') end }\n",
        ),
        (
            "res/ev/main.luau",
            "local events = require('@skein/events')\n\
             events.on('ping', function(from) print('got ' .. from) end)\n\
             task.spawn(function()\n\
               local from = events.wait('ping', 5)\n\
               print('waited ' .. tostring(from))\n\
             end)\n\
             events.emit('ping', 'main')\n\
             task.spawn(function() task.wait(0.05) events.emit('ping', 'task') end)\n\
             jobs.dispatch('./job', 'emit')\n",
        ),
        ("res/skein-host.toml", "[host]\nstart = ['ev']\n"),
    ]);
    let mut served = Served::start(&tree.path().join("res"), &[]);
    let mut seen = served.out_until(&banner(
        &tree,
        "serving 1 resource from {DIR}/res, 1 running: ev; help lists the commands",
    ));
    // Four lines come while it runs: the wait's and the three handler calls, the job's and the
    // task's in whichever order the frames bring them.
    while seen.len() < 4 {
        seen.push(served.out());
    }
    seen.sort();
    assert_eq!(seen, ["got job", "got main", "got task", "waited main"]);
    served.send("quit");
    let (status, _, _) = served.exit();
    assert_eq!(status.code(), Some(0));
}
