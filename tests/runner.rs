//! The `skein` runner as a user runs it: exit codes, output, and errors with their Luau stack.

use std::path::Path;
use std::process::Command;

use crate::support::{assert_contains, Tree};

fn skein(args: &[&str]) -> (i32, String, String) {
    skein_in(Path::new(env!("CARGO_MANIFEST_DIR")), args)
}

/// Runs the runner with `cwd` as its current directory: where `runner.writeFile` writes.
fn skein_in(cwd: &Path, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_skein"))
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

#[test]
fn the_primes_example_runs_and_agrees_with_one_thread() {
    let (code, stdout, stderr) = skein(&[
        "run",
        "examples/primes.luau",
        "--workers",
        "2",
        "--",
        "20000",
    ]);
    assert_eq!(code, 0, "stderr: {stderr}");
    assert_contains(&stdout, "primes below 20000: 2262");
    assert_contains(&stdout, "speedup");
}

#[test]
fn help_is_clear_and_exits_zero() {
    let (code, stdout, _) = skein(&["--help"]);
    assert_eq!(code, 0);
    assert_contains(&stdout, "skein run FILE [--workers N] [-- ARGS...]");
    let (code, stdout, _) = skein(&[]);
    assert_eq!(code, 0);
    assert_contains(&stdout, "USAGE");
}

#[test]
fn bad_arguments_exit_two_with_a_reason() {
    let (code, _, stderr) = skein(&["run"]);
    assert_eq!(code, 2);
    assert_contains(&stderr, "run needs a FILE");
    let (code, _, stderr) = skein(&["run", "x.luau", "--workers", "0"]);
    assert_eq!(code, 2);
    assert_contains(&stderr, "--workers needs a whole number of at least 1");
    let (code, _, stderr) = skein(&["frobnicate"]);
    assert_eq!(code, 2);
    assert_contains(&stderr, "unknown command 'frobnicate'");
}

#[test]
fn a_missing_file_exits_one_naming_it() {
    let (code, _, stderr) = skein(&["run", "no/such/script.luau"]);
    assert_eq!(code, 1);
    assert_contains(&stderr, "no/such/script.luau");
}

#[test]
fn a_script_error_exits_one_with_the_error_and_stack() {
    let tree = Tree::new(&[
        ("main.luau", "local m = require('./m')\nm.go()\n"),
        (
            "m.luau",
            "local M = {}\nfunction M.go()\n  error('it broke')\nend\nreturn M\n",
        ),
    ]);
    let main = tree.path().join("main.luau");
    let (code, _, stderr) = skein(&["run", main.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert_contains(&stderr, "it broke");
    assert_contains(&stderr, "m.luau:3");
    assert_contains(&stderr, "main.luau:2");
}

#[test]
fn a_failing_job_awaited_by_the_script_exits_one() {
    let tree = Tree::new(&[
        (
            "main.luau",
            "jobs.dispatch('./w', 'run', nil, { name = 'worker job' }):await()\n",
        ),
        (
            "w.luau",
            "return { run = function() error('job broke') end }\n",
        ),
    ]);
    let main = tree.path().join("main.luau");
    let (code, _, stderr) = skein(&["run", main.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert_contains(&stderr, "job 'worker job' failed:");
    assert_contains(&stderr, "job broke");
}

#[test]
fn script_arguments_arrive_as_varargs() {
    let tree = Tree::new(&[("main.luau", "local a, b = ...\nprint(a .. '+' .. b)\n")]);
    let main = tree.path().join("main.luau");
    let (code, stdout, stderr) = skein(&["run", main.to_str().unwrap(), "--", "x", "y"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout.trim(), "x+y");
}

#[test]
fn an_edit_reaches_a_long_running_script_s_next_dispatch() {
    let tree = Tree::new(&[
        (
            "main.luau",
            "local first = jobs.dispatch('./m', 'v'):await()\n\
             local t = os.clock()\n\
             repeat task.wait(0.05) until os.clock() - t > 3\n\
             print(first, jobs.dispatch('./m', 'v'):await())\n",
        ),
        ("m.luau", "return { v = function() return 'old' end }\n"),
    ]);
    let main = tree.path().join("main.luau");
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_skein"))
        .args(["run", main.to_str().unwrap()])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The script has long dispatched its first item by now, and waits two more seconds.
    std::thread::sleep(std::time::Duration::from_millis(1000));
    tree.write(
        "m.luau",
        "return { v = function() return 'new' end } -- edited\n",
    );
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "old\tnew");
}

#[test]
fn runner_write_file_writes_strings_and_buffers_below_the_current_directory() {
    let tree = Tree::new(&[
        (
            "main.luau",
            "runner.writeFile('out.txt', 'hello ' .. runner.args[1])\n\
         runner.writeFile('./sub/raw.bin', buffer.fromstring('\\0\\255'))\n\
         print(#runner.args, jobs.dispatch('./w', 'seesRunner'):await())\n",
        ),
        (
            "w.luau",
            "return { seesRunner = function() return runner ~= nil end }\n",
        ),
        ("sub/keep", ""),
    ]);
    let (code, stdout, stderr) = skein_in(&tree.path(), &["run", "main.luau", "--", "there", "2"]);
    assert_eq!(code, 0, "{stderr}");
    // The script sees its arguments; a job on a worker has no `runner`.
    assert_eq!(stdout.trim(), "2\tfalse");
    assert_eq!(
        std::fs::read(tree.path().join("out.txt")).unwrap(),
        b"hello there"
    );
    assert_eq!(
        std::fs::read(tree.path().join("sub/raw.bin")).unwrap(),
        [0u8, 255]
    );
}

#[test]
fn runner_write_file_refuses_escaping_paths_and_names_the_path_in_os_errors() {
    let tree = Tree::new(&[(
        "main.luau",
        "for _, case in { { '/tmp/skein-abs.txt', 'x' }, { 'a/../../up.txt', 'x' }, { 'no/such/dir/f.txt', 'x' }, { 'n.txt', 5 }, { '', 'x' } } do\n\
           local ok, err = pcall(runner.writeFile, case[1], case[2])\n\
           assert(not ok)\n\
           print((string.match(tostring(err), 'runner%.writeFile: [^\\n]*')))\n\
         end\n",
    )]);
    let (code, stdout, stderr) = skein_in(&tree.path(), &["run", "main.luau"]);
    assert_eq!(code, 0, "{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines[..2],
        [
            "runner.writeFile: '/tmp/skein-abs.txt' is absolute: a script writes only below the current directory",
            "runner.writeFile: 'a/../../up.txt' has a '..' component: a script writes only below the current directory",
        ]
    );
    assert_contains(lines[2], "runner.writeFile: 'no/such/dir/f.txt': ");
    assert_contains(lines[2], "os error");
    assert_eq!(
        lines[3],
        "runner.writeFile: data for 'n.txt' must be a string or a buffer, got integer"
    );
    assert_eq!(lines[4], "runner.writeFile: the path is empty");
    assert_eq!(lines.len(), 5);
    assert!(!Path::new("/tmp/skein-abs.txt").exists());
    assert!(!tree.path().parent().unwrap().join("up.txt").exists());
}
