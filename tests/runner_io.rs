//! The runner's inputs and outputs under misuse: arguments that are not UTF-8, `--workers` at
//! its bound, script files that are not scripts, output when the run is killed, and the exit
//! code of failures nobody handled.

use std::ffi::{OsStr, OsString};
use std::io::{BufRead, BufReader};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::support::{assert_contains, exit_within, runner_lines, skein_in, Tree};

/// How long a refusal may take: each is answered before any script runs, so a run that
/// takes this long is stuck (on a FIFO, say).
const QUICK: Duration = Duration::from_secs(20);

/// Runs the runner with `args` in `cwd`; answers its exit code, stdout and stderr. Fails the
/// test (killing the runner) when it takes longer than `limit` or dies of a signal.
fn run_os(cwd: &Path, args: &[OsString], limit: Duration) -> (i32, Vec<u8>, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_skein"))
        .args(args)
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run skein");
    let (mut stdout, mut stderr) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let out = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut stdout, &mut bytes).map(|_| bytes)
    });
    let err = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut stderr, &mut bytes).map(|_| bytes)
    });
    let Some(status) = exit_within(&mut child, limit) else {
        panic!("skein {args:?} still running after {limit:?}");
    };
    let code = status
        .code()
        .unwrap_or_else(|| panic!("skein {args:?} died of signal {:?}", status.signal()));
    let stdout = out.join().unwrap().unwrap();
    let stderr = String::from_utf8_lossy(&err.join().unwrap().unwrap()).into_owned();
    (code, stdout, stderr)
}

fn os(args: &[&str]) -> Vec<OsString> {
    args.iter().map(OsString::from).collect()
}

#[test]
fn workers_are_accepted_up_to_the_bound_and_refused_past_it() {
    let tree = Tree::new(&[
        (
            "main.luau",
            "print(jobs.dispatch('./m', 'twice', 21):await())\n",
        ),
        (
            "m.luau",
            "return { twice = function(x) return x * 2 end }\n",
        ),
    ]);
    // At the bound the pool really starts 1024 threads (about half a second) and serves.
    let (code, stdout, stderr) = skein_in(&tree.path(), &["run", "main.luau", "--workers", "1024"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout, "42\n");
    for (n, error) in [
        (
            "1025",
            "error: invalid value '1025' for '--workers <N>': 1025 is not in 1..=1024",
        ),
        (
            "0",
            "error: invalid value '0' for '--workers <N>': 0 is not in 1..=1024",
        ),
        (
            "100000",
            "error: invalid value '100000' for '--workers <N>': 100000 is not in 1..=1024",
        ),
        ("-3", "error: unexpected argument '-3' found"),
    ] {
        let (code, stdout, stderr) = skein_in(&tree.path(), &["run", "main.luau", "--workers", n]);
        assert_eq!(code, 2, "--workers {n}: {stderr}");
        assert_contains(&stderr, error);
        // Refused at parse time: the script never ran.
        assert_eq!(stdout, "", "--workers {n}");
    }
}

#[test]
fn arguments_that_are_not_utf8_never_panic() {
    let tree = Tree::new(&[(
        "main.luau",
        "local a = ...\nprint(#runner.args, #a, string.byte(a, 1, -1))\n",
    )]);
    let dir = tree.path();
    let bad = OsStr::from_bytes(b"caf\xe9").to_owned();
    // A script argument reaches the script as its bytes.
    let args = [os(&["run", "main.luau", "--"]), vec![bad.clone()]].concat();
    let (code, stdout, stderr) = run_os(&dir, &args, QUICK);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout, b"1\t4\t99\t97\t102\t233\n");

    // A script path that is not UTF-8 is a path like any other.
    let mut name = b"caf\xe9".to_vec();
    name.extend_from_slice(b".luau");
    let name = OsStr::from_bytes(&name);
    std::fs::write(dir.join(name), "print('ran')\n").unwrap();
    let args = [os(&["run"]), vec![name.to_owned()]].concat();
    let (code, stdout, stderr) = run_os(&dir, &args, QUICK);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout, b"ran\n");

    // Where text is needed, clap refuses it naming the option, and the script never runs.
    for flag in ["--workers", "--allow"] {
        let args = [os(&["run", "main.luau", flag]), vec![bad.clone()]].concat();
        let (code, stdout, stderr) = run_os(&dir, &args, QUICK);
        assert_eq!(code, 2, "{flag}: {stderr}");
        assert_contains(
            &stderr,
            "error: invalid UTF-8 was detected in one or more arguments",
        );
        assert_eq!(stdout, b"", "{flag}");
    }
    // As a command, it is one clap does not know, shown with a replacement character.
    let (code, _, stderr) = run_os(&dir, std::slice::from_ref(&bad), QUICK);
    assert_eq!(code, 2, "{stderr}");
    assert_contains(&stderr, "error: unrecognized subcommand 'caf\u{FFFD}'");
}

#[test]
fn a_script_that_is_not_a_regular_file_is_refused_quickly_naming_it() {
    let tree = Tree::new(&[]);
    let dir = tree.path();
    let fifo = dir.join("fifo.luau");
    let c_path = std::ffi::CString::new(fifo.as_os_str().as_bytes()).unwrap();
    // SAFETY: `c_path` is a valid NUL-terminated path that outlives the call.
    assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0, "mkfifo");
    let device = "it is not a regular file (a device, FIFO or socket is never read as a script)";
    for (path, why) in [
        (dir.display().to_string(), "it is a directory, not a file"),
        ("/dev/zero".to_owned(), device),
        (fifo.display().to_string(), device),
    ] {
        let (code, stdout, stderr) = run_os(&dir, &os(&["run", &path]), QUICK);
        assert_eq!(code, 1, "{path}: {stderr}");
        assert_eq!(
            stderr,
            format!("skein: cannot read the script {path}: {why}\n")
        );
        assert_eq!(stdout, b"");
    }
}

#[test]
fn a_script_at_the_size_bound_runs_and_one_byte_past_is_refused() {
    let bound = skein::Plan::MAX_SOURCE_BYTES;
    let tree = Tree::new(&[]);
    let dir = tree.path();
    // A line that prints, then a comment that fills the file to exactly the bound.
    let mut source = b"print('at the bound')\n--".to_vec();
    source.resize(bound, b'x');
    std::fs::write(dir.join("big.luau"), &source).unwrap();
    let (code, stdout, stderr) = run_os(&dir, &os(&["run", "big.luau"]), QUICK);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout, b"at the bound\n");

    source.push(b'x');
    std::fs::write(dir.join("big.luau"), &source).unwrap();
    let (code, stdout, stderr) = run_os(&dir, &os(&["run", "big.luau"]), QUICK);
    assert_eq!(code, 1, "{stderr}");
    assert_eq!(
        stderr,
        "skein: cannot read the script big.luau: it is longer than the limit of 16777216 bytes\n"
    );
    assert_eq!(stdout, b"");
}

#[test]
fn script_text_that_is_not_utf8_runs_as_the_bytes_it_is() {
    let tree = Tree::new(&[]);
    let dir = tree.path();
    // Luau source is bytes: a string literal holds whatever bytes the file holds.
    std::fs::write(dir.join("latin1.luau"), b"print('caf\xe9', #'caf\xe9')\n").unwrap();
    let (code, stdout, stderr) = run_os(&dir, &os(&["run", "latin1.luau"]), QUICK);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout, b"caf\xe9\t4\n");
}

#[test]
fn file_errors_name_the_path() {
    let tree = Tree::new(&[("main.luau", "print('ran')\n")]);
    let (code, stdout, stderr) = skein_in(
        &tree.path(),
        &["run", "--trace", "no/such/dir/out.json", "main.luau"],
    );
    assert_eq!(code, 1, "{stderr}");
    assert_eq!(stdout, "ran\n");
    assert_eq!(
        stderr,
        "skein: could not write the trace no/such/dir/out.json: No such file or directory \
         (os error 2)\n"
    );
    let (code, stdout, stderr) = skein_in(
        &tree.path(),
        &["run", "--allow-read", "no/such/dir", "main.luau"],
    );
    assert_eq!(code, 1, "{stderr}");
    assert_eq!(stdout, "");
    assert_contains(&stderr, "skein: --allow-read: ");
    assert_contains(&stderr, "no/such/dir");
}

/// Starts `main.luau` of `tree` with stdout on a pipe, waits until `line` comes through it,
/// then sends `signal`: the line must have come out while the runner still ran, and the
/// runner must end by that signal: die of `SIGKILL`, or cancel the run on `SIGTERM` and exit
/// 143 (it was still running, not ended by itself).
fn line_survives_signal(tree: &Tree, line: &str, signal: i32) {
    let (mut child, received) = runner_lines(tree);
    let got = received.recv_timeout(QUICK);
    let pid = i32::try_from(child.id()).unwrap();
    // SAFETY: `pid` is our own child, not yet waited for, so the id is still its.
    unsafe { libc::kill(pid, signal) };
    let status = child.wait().unwrap();
    match got {
        Ok(got) => assert_eq!(got, line),
        other => panic!("the line printed never came through the pipe: {other:?}"),
    }
    if signal == libc::SIGKILL {
        assert_eq!(status.signal(), Some(signal), "{status:?}");
    } else {
        assert_eq!(status.code(), Some(128 + signal), "{status:?}");
    }
}

#[test]
fn a_line_printed_by_the_script_survives_sigkill_and_sigterm() {
    let tree = Tree::new(&[("main.luau", "print('first line')\nwhile true do end\n")]);
    line_survives_signal(&tree, "first line", libc::SIGKILL);
    line_survives_signal(&tree, "first line", libc::SIGTERM);
}

#[test]
fn a_line_printed_by_a_job_survives_sigkill() {
    let tree = Tree::new(&[
        ("main.luau", "jobs.dispatch('./spin', 'go'):await()\n"),
        (
            "spin.luau",
            "return { go = function() print('from the job') while true do end end }\n",
        ),
    ]);
    line_survives_signal(&tree, "from the job", libc::SIGKILL);
}

/// How many times `needle` occurs in `haystack`.
fn count(haystack: &str, needle: &str) -> usize {
    haystack.matches(needle).count()
}

#[test]
fn failures_nobody_handles_exit_one_each_reported_once() {
    for (what, source, message) in [
        (
            "task.spawn",
            "task.spawn(function() error('spawned broke') end)\nprint('main done')\n",
            "main.luau:1: spawned broke",
        ),
        // The behaviour under test in the next two: a failure after a yield (a timer).
        (
            "task.spawn after a wait",
            "task.spawn(function() task.wait(0.01) error('later broke') end)\nprint('main done')\n",
            "main.luau:1: later broke",
        ),
        (
            "task.delay",
            "task.delay(0.01, function() error('delayed broke') end)\nprint('main done')\n",
            "main.luau:1: delayed broke",
        ),
        // The behaviour under test: a failure after a yield (a timer) in a coroutine.
        (
            "a coroutine the scheduler resumes",
            "coroutine.resume(coroutine.create(function()\n  task.wait(0.01)\n  error('co broke')\nend))\nprint('main done')\n",
            "main.luau:3: co broke",
        ),
    ] {
        let tree = Tree::new(&[("main.luau", source)]);
        let (code, stdout, stderr) = skein_in(&tree.path(), &["run", "main.luau"]);
        assert_eq!(code, 1, "{what}: {stderr}");
        // The script ran to its end; the failure came after.
        assert_eq!(stdout, "main done\n", "{what}");
        let said = format!("skein: script main.luau: {}/{message}", tree.path().display());
        assert_contains(&stderr, &said);
        assert_eq!(count(&stderr, message), 1, "{what}: {stderr}");
    }
}

#[test]
fn a_failure_the_script_handles_leaves_the_exit_code_zero() {
    let tree = Tree::new(&[(
        "main.luau",
        "print(pcall(error, 'caught'))\n\
         print((pcall(require('@skein/fs').readFile, 'x.txt')))\n\
         task.spawn(function() pcall(error, 'caught in a task') end)\n",
    )]);
    let (code, stdout, stderr) = skein_in(&tree.path(), &["run", "main.luau"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout, "false\tcaught\nfalse\n");
    // The denial is still said, as a report, once.
    assert_eq!(
        count(
            &stderr,
            "skein: capability: capability 'filesystem.read' denied to domain 'main' (domain#1, generation 1)"
        ),
        1,
        "{stderr}"
    );
}

#[test]
fn a_main_script_error_is_reported_once() {
    let tree = Tree::new(&[("main.luau", "print('before')\nerror('main broke')\n")]);
    let (code, stdout, stderr) = skein_in(&tree.path(), &["run", "main.luau"]);
    assert_eq!(code, 1, "{stderr}");
    assert_eq!(stdout, "before\n");
    assert_eq!(count(&stderr, "main broke"), 1, "{stderr}");
    assert_contains(&stderr, "main.luau:2: main broke");
}

/// A module whose `boom` always fails, and a main script `main` beside it.
fn with_failing_job(main: &str) -> Tree {
    Tree::new(&[
        ("main.luau", main),
        (
            "m.luau",
            "return { boom = function() error('job boom') end }\n",
        ),
    ])
}

#[test]
fn a_failing_job_nobody_awaits_exits_one_reported_once() {
    let tree = with_failing_job(
        "jobs.dispatch('./m', 'boom', nil, { name = 'lonely' })\nprint('main done')\n",
    );
    let (code, stdout, stderr) = skein_in(&tree.path(), &["run", "main.luau"]);
    assert_eq!(code, 1, "{stderr}");
    assert_eq!(stdout, "main done\n");
    let said = format!(
        "skein: jobs.dispatch promise nobody awaited: job 'lonely' failed: {}/m.luau:1: job boom\n",
        tree.path().display()
    );
    assert_contains(&stderr, &said);
    assert_eq!(count(&stderr, "job boom"), 1, "{stderr}");
}

#[test]
fn a_failing_job_the_script_awaits_or_inspects_is_handled() {
    let tree = with_failing_job(
        "local now = jobs.dispatch('./m', 'boom')\n\
         print((pcall(now.await, now)))\n\
         local later = jobs.dispatch('./m', 'boom')\n\
         local looked = jobs.dispatch('./m', 'boom')\n\
         -- One worker runs them in order, and the engine learns in order: once 'looked' has\n\
         -- failed, so has 'later', which is awaited only after it failed.\n\
         local t = os.clock()\n\
         while looked:status() == 'pending' do\n\
           assert(os.clock() - t < 30, 'the job never failed')\n\
           task.wait(0.01) -- a poll interval under the deadline above\n\
         end\n\
         print((pcall(later.await, later)), looked:status())\n",
    );
    let (code, stdout, stderr) = skein_in(&tree.path(), &["run", "main.luau", "--workers", "1"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout, "false\nfalse\trejected\n");
    assert_eq!(stderr, "");
}

#[test]
fn unhandled_rejections_are_reported_in_full_up_to_the_bound_then_counted() {
    let kept = skein::Report::UNAWAITED_KEPT;
    for (n, more) in [(kept, None), (kept + 1, Some(1))] {
        let tree = with_failing_job(&format!(
            "for i = 1, {n} do jobs.dispatch('./m', 'boom', nil, {{ name = `j{{i}}` }}) end\n"
        ));
        let (code, _, stderr) = skein_in(&tree.path(), &["run", "main.luau", "--workers", "2"]);
        assert_eq!(code, 1, "{stderr}");
        assert_eq!(
            count(
                &stderr,
                "skein: jobs.dispatch promise nobody awaited: job 'j"
            ),
            kept,
            "{n} rejections"
        );
        let summary = "skein: promises nobody awaited: 1 more rejected promises nobody awaited \
                       (the first 64 are reported in full)\n";
        assert_eq!(stderr.contains(summary), more.is_some(), "{n}: {stderr}");
    }
}

#[test]
fn lines_printed_by_jobs_at_once_never_interleave() {
    // Several arguments per line: Luau's own print wrote each piece on its own, so two threads
    // could mix pieces of their lines.
    let tree = Tree::new(&[
        (
            "main.luau",
            "local a = jobs.dispatch('./p', 'lines', 'a')\n\
             local b = jobs.dispatch('./p', 'lines', 'b')\n\
             a:await() b:await()\n",
        ),
        (
            "p.luau",
            "return { lines = function(who)\n\
               for i = 1, 2000 do print(who, i, string.rep(who, 200)) end\n\
             end }\n",
        ),
    ]);
    let (code, stdout, stderr) = skein_in(&tree.path(), &["run", "main.luau", "--workers", "2"]);
    assert_eq!(code, 0, "{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 4000);
    for who in ["a", "b"] {
        let mine: Vec<&str> = lines
            .iter()
            .copied()
            .filter(|l| l.starts_with(&format!("{who}\t")))
            .collect();
        let want: Vec<String> = (1..=2000)
            .map(|i| format!("{who}\t{i}\t{}", who.repeat(200)))
            .collect();
        assert_eq!(mine, want, "{who}'s lines, whole and in order");
    }
}

#[test]
fn print_log_records_and_the_runner_s_own_report_keep_their_order_in_one_pipe() {
    let tree = Tree::new(&[
        (
            "main.luau",
            "local log = require('@skein/log')\n\
             print('one')\n\
             log.warn('two')\n\
             jobs.dispatch('./p', 'say', 'three'):await()\n\
             print('four')\n\
             error('five')\n",
        ),
        ("p.luau", "return { say = function(s) print(s) end }\n"),
    ]);
    // stdout and stderr into one pipe, as a host capturing both (or a terminal) sees them.
    let (reader, writer) = std::io::pipe().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_skein"))
        .args(["run", "main.luau"])
        .current_dir(tree.path())
        .stdin(Stdio::null())
        .stdout(writer.try_clone().unwrap())
        .stderr(writer)
        .spawn()
        .expect("run skein");
    let lines = std::thread::spawn(move || {
        BufReader::new(reader)
            .lines()
            .map_while(Result::ok)
            .collect::<Vec<_>>()
    });
    let status = exit_within(&mut child, Duration::from_secs(60)).expect("skein still running");
    assert_eq!(status.code(), Some(1));
    let lines = lines.join().unwrap();
    assert_eq!(lines[..2], ["one".to_owned(), lines[1].clone()]);
    assert!(lines[1].starts_with("warn "), "{lines:?}");
    assert!(lines[1].contains("main.luau domain 'main'"), "{lines:?}");
    assert!(lines[1].ends_with(": two"), "{lines:?}");
    assert_eq!(lines[2..4], ["three", "four"], "{lines:?}");
    assert!(lines[4].starts_with("skein: "), "{lines:?}");
    assert!(lines[4].contains("main.luau:6: five"), "{lines:?}");
}

/// Starts `skein run SCRIPT` in `tree` with its stdout and stderr going where given.
fn run_with(tree: &Tree, script: &str, stdout: Stdio, stderr: Stdio) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_skein"))
        .args(["run", script])
        .current_dir(tree.path())
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(stderr)
        .spawn()
        .expect("run skein")
}

/// `/dev/full`, where every write fails for want of space.
fn dev_full() -> Stdio {
    std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .expect("/dev/full")
        .into()
}

/// A script printing ten million lines into a pipe whose reader takes two and goes away: the
/// run ends at the closed pipe, as Unix tools do, quietly and with exit code 0.
#[test]
fn a_closed_pipe_ends_the_run_quietly_with_exit_code_zero() {
    let tree = Tree::new(&[("many.luau", "for i = 1, 1e7 do print(i) end\n")]);
    let mut child = run_with(&tree, "many.luau", Stdio::piped(), Stdio::piped());
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    assert_eq!(lines.next().unwrap().unwrap(), "1");
    assert_eq!(lines.next().unwrap().unwrap(), "2");
    drop(lines);
    let mut stderr = child.stderr.take().unwrap();
    let status = exit_within(&mut child, QUICK).expect("the run ended at the closed pipe");
    let mut said = String::new();
    std::io::Read::read_to_string(&mut stderr, &mut said).unwrap();
    assert_eq!(status.code(), Some(0), "{said}");
    assert_eq!(said, "");
}

/// Output that can't be written for another reason (a full device) fails the run, naming the
/// stream and the error, and ends it at once rather than after the whole computation.
#[test]
fn a_full_device_fails_the_run_naming_the_stream() {
    let tree = Tree::new(&[("many.luau", "for i = 1, 1e9 do print(i) end\n")]);
    let mut child = run_with(&tree, "many.luau", dev_full(), Stdio::piped());
    let mut stderr = child.stderr.take().unwrap();
    let status = exit_within(&mut child, QUICK).expect("the run ended at the first write");
    let mut said = String::new();
    std::io::Read::read_to_string(&mut stderr, &mut said).unwrap();
    assert_eq!(status.code(), Some(1), "{said}");
    assert_eq!(
        said,
        "skein: could not write to stdout: No space left on device (os error 28)\n"
    );
}

/// A failure the runner must say, with stderr on a full device: it exits 1, never panicking
/// as a plain `eprintln!` would.
#[test]
fn a_failure_with_stderr_on_a_full_device_exits_one_without_a_panic() {
    let tree = Tree::new(&[("boom.luau", "error('boom')\n")]);
    let mut child = run_with(&tree, "boom.luau", Stdio::null(), dev_full());
    let status = exit_within(&mut child, QUICK).expect("the run ended");
    assert_eq!(status.code(), Some(1));
}

/// A `--!native` module whose compile takes longer than the stall check's half second of
/// quiet (about a second here, for 15,000 functions): compiling counts as running, so the run
/// ends with the job's result, not as a run that can never end.
#[test]
fn a_module_that_compiles_for_a_second_is_not_a_stall() {
    let mut module = String::from("--!native\nlocal M = {}\n");
    for i in 0..15_000 {
        module.push_str(&format!(
            "function M.f{i}(x) local a = x * {i} for j = 1, 10 do a = a + math.sin(j) * {i} \
             + (x % 7) * j end if a > 5 then a = a - 1 else a = a + 1 end return a end\n"
        ));
    }
    module.push_str("function M.go(x) return x * 2 end\nreturn M\n");
    let tree = Tree::new(&[
        ("slow.luau", module.as_str()),
        (
            "main.luau",
            "print(require('@skein/jobs').dispatch('./slow', 'go', 21):await())\n",
        ),
    ]);
    let (code, out, err) = skein_in(&tree.path(), &["run", "main.luau"]);
    assert_eq!((code, out.as_str(), err.as_str()), (0, "42\n", ""));
}
