//! The `skein` runner as a user runs it: exit codes, output, and errors with their Luau stack.

use std::process::Command;

use crate::support::{assert_contains, Tree};

fn skein(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_skein"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
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
