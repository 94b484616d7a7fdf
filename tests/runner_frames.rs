//! The runner as a host: `skein run` declares the context `main`, runs `startup`, drives frames
//! at `--fps` (events drained, `update` handlers, registered jobs, timers on frame time), ends
//! when nothing can run any more, and prints its counters with `--stats`.

use std::time::Duration;

use crate::support::{assert_contains, exit_within, runner_lines, skein_in, Tree};

/// Runs `main.luau` of a tree holding `source`, with `flags` before the file.
fn run(source: &str, flags: &[&str]) -> (i32, String, String) {
    let tree = Tree::new(&[("main.luau", source)]);
    let mut args = vec!["run"];
    args.extend_from_slice(flags);
    args.push("main.luau");
    skein_in(&tree.path(), &args)
}

#[test]
fn a_handler_fires_and_the_context_binds_under_the_runner() {
    let (code, stdout, stderr) = run(
        r#"
        local context = require("@skein/context")
        local events = require("@skein/events")
        local updates = 0
        context.bind("main", {
            startup = function() print("startup") end,
            update = function(dt) updates += 1 end,
        })
        events.on("scored", function(points) print(`scored {points} after {updates} updates`) end, "main")
        task.spawn(function()
            print("waited", events.wait("ready").level)
        end)
        task.delay(0.05, function()
            events.emit("ready", { level = 2 })
            events.emit("scored", 10)
        end)
        "#,
        &[],
    );
    assert_eq!((code, stderr.as_str()), (0, ""), "{stdout}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines[0], "startup");
    // task.delay(0.05) on frame time at 60 frames a second: due in the third frame (the second
    // on a machine that took a frame's time to start the loop), whose emits the next frame's
    // drain delivers before its update. The handler runs in the drain, the released waiter at
    // the frame's step, after it.
    let updates = lines[1]
        .strip_prefix("scored 10 after ")
        .and_then(|rest| rest.strip_suffix(" updates"))
        .unwrap_or_else(|| panic!("{stdout}"));
    assert!(["2", "3"].contains(&updates), "{stdout}");
    assert_eq!(lines[2], "waited\t2");
    assert_eq!(lines.len(), 3);
}

#[test]
fn a_run_ends_when_nothing_is_live_and_stats_print_at_exit() {
    let (code, stdout, stderr) = run(
        r#"
        local n = 0
        local job
        job = jobs.register({ phase = "main", executor = { kind = "luau", run = function()
            n += 1
            if n == 3 then job:cancel() print("cancelled after", n) end
        end } })
        "#,
        &["--stats", "--workers", "1"],
    );
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout, "cancelled after\t3\n");
    assert_contains(
        &stderr,
        "skein: stats: domain 'main': generation 1, Running, 3 frames, 0 tasks",
    );
    assert_contains(&stderr, "0 registered jobs, 0 live @skein/worker threads, ");
    assert_contains(&stderr, "skein: stats: worker 0: 0 items (0 keyed), ");
    assert!(!stderr.contains("worker 1:"), "{stderr}");
}

#[test]
fn fps_sets_the_step_of_frame_time_within_1_to_1000() {
    // 10 frames a second: after the first frame (the first wait puts the task on frame time),
    // a 0.25 s wait is due in the third frame after it, which answers 0.3 s of frame time.
    let (code, stdout, stderr) = run("task.wait() print(task.wait(0.25))", &["--fps", "10"]);
    assert_eq!((code, stderr.as_str()), (0, ""));
    assert_eq!(stdout.trim(), "0.3");
    let (code, _, _) = run("print(task.wait(0))", &["--fps", "1000"]);
    assert_eq!(code, 0);
    for bad in ["0", "1001"] {
        let (code, _, stderr) = run("", &["--fps", bad]);
        assert_eq!(code, 2, "{stderr}");
        assert_contains(&stderr, &format!("invalid value '{bad}' for '--fps <FPS>'"));
        assert_contains(&stderr, "1..=1000");
    }
}

#[test]
fn a_wait_nothing_can_raise_is_a_stall_naming_it() {
    let (code, _, stderr) = run(
        r#"
        local events = require("@skein/events")
        local v = events.wait("go")
        "#,
        &[],
    );
    assert_eq!(code, 1, "{stderr}");
    assert_contains(
        &stderr,
        "waits on events.wait of event 'go' (nothing can raise it)",
    );
}

#[cfg(unix)]
#[test]
fn a_task_kept_alive_keeps_update_running_until_sigint() {
    let tree = Tree::new(&[(
        "main.luau",
        r#"
        local frames = 0
        require("@skein/context").bind("main", { update = function()
            frames += 1
            if frames == 3 then print("three frames") end
        end })
        while true do task.wait(1) end
        "#,
    )]);
    let (mut child, lines) = runner_lines(&tree);
    let first = lines.recv_timeout(Duration::from_secs(30)).unwrap();
    assert_eq!(first, "three frames");
    let pid = i32::try_from(child.id()).unwrap();
    // SAFETY: `kill` sends a signal to the child we started; it touches no memory of ours.
    unsafe { libc::kill(pid, libc::SIGINT) };
    let status = exit_within(&mut child, Duration::from_secs(10)).expect("exits");
    assert_eq!(status.code(), Some(130));
}

#[test]
fn the_runner_declares_main_and_only_main() {
    let (code, stdout, stderr) = run(
        r#"
        local ok, err = pcall(require("@skein/context").bind, "game", { update = function() end })
        print(err)
        "#,
        &[],
    );
    assert_eq!((code, stderr.as_str()), (0, ""));
    assert_contains(
        &stdout,
        "context.bind: no context named 'game' is declared (declared: main)",
    );
}
