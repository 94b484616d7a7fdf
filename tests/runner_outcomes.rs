//! The runner's exit-code rule, case by case as `docs/luau-api.md` "The runner" tables it: a
//! failure fails the run only if no code observed it. Each case runs the real runner and
//! asserts its exit code and its whole stdout and stderr (`{dir}` stands for the script's
//! folder).

use crate::support::{skein_in, Tree};

/// `w.luau`, the module the job cases dispatch: `broke` raises.
const JOB_MODULE: &str = "return { broke = function() error('job broke', 0) end }\n";

/// `bad.luau`, the module the warm cases warm: its top level raises.
const WARM_MODULE: &str = "error('warm broke', 0)\n";

/// The note a failed warm run prints, its failure carried by the call's promise.
const WARM_NOTE: &str =
    "skein: jobs.warm \"./bad\".build on worker 0: module {dir}/bad.luau could \
                         not be loaded: warm broke\nstack traceback:\n\t[C]: in ?\n\t[C]: in \
                         function 'error'\n\t{dir}/bad.luau:1: in function <{dir}/bad.luau:1>\n";

/// One case: its name, the main script, the runner's flags, and what the run must answer.
struct Case {
    name: &'static str,
    main: &'static str,
    flags: &'static [&'static str],
    code: i32,
    stdout: &'static str,
    stderr: &'static str,
}

const CASES: &[Case] = &[
    Case {
        name: "an error caught with pcall",
        main: "local ok, err = pcall(jobs.dispatch, './w', 'broke', nil, { bogus = 1 })\n\
               print(ok, err)\n",
        flags: &[],
        code: 0,
        stdout: "false\tjobs.dispatch: unknown option 'bogus' in opts: expected deadline, name, \
                 key or supersede\n",
        stderr: "",
    },
    Case {
        name: "an error the main script raised",
        main: "error('main broke', 0)\n",
        flags: &[],
        code: 1,
        stdout: "",
        stderr: "skein: script main.luau failed: main broke\nstack traceback:\n\t[C]: in \
                 function 'error'\n\t{dir}/main.luau:1: in function <{dir}/main.luau:1>\n",
    },
    Case {
        name: "an error a task raised that nobody awaited",
        main: "task.spawn(function() error('task broke', 0) end)\n",
        flags: &[],
        code: 1,
        stdout: "",
        stderr: "skein: script main.luau: task broke\nstack traceback:\n\t[C]: in function \
                 'error'\n\t{dir}/main.luau:1: in function <{dir}/main.luau:1>\n",
    },
    Case {
        name: "a job awaited inside pcall",
        main: "local ok, err = pcall(function()\n\
               \treturn jobs.dispatch('./w', 'broke', nil, { name = 'j' }):await()\n\
               end)\nprint(ok, err)\n",
        flags: &[],
        code: 0,
        stdout: "false\tjob 'j' failed: job broke\n",
        stderr: "",
    },
    Case {
        name: "a job whose status the script read",
        main: "local p = jobs.dispatch('./w', 'broke', nil, { name = 'j' })\n\
               task.wait(0.5)\nprint(p:status())\n",
        flags: &[],
        code: 0,
        stdout: "rejected\n",
        stderr: "",
    },
    Case {
        name: "a job whose promise nobody awaited",
        main: "jobs.dispatch('./w', 'broke', nil, { name = 'j' })\n",
        flags: &[],
        code: 1,
        stdout: "",
        stderr: "skein: jobs.dispatch promise nobody awaited: job 'j' failed: job broke\n\
                 stack traceback:\n\t[C]: in function 'error'\n\t{dir}/w.luau:1: in function \
                 'broke'\n",
    },
    Case {
        name: "a warm awaited inside pcall",
        main: "local ok, err = pcall(function() return jobs.warm('./bad', 'build'):await() end)\n\
               print(ok, err)\n",
        flags: &["--workers", "1"],
        code: 0,
        stdout: "false\tjob 'jobs.warm \"./bad\".build' failed: worker 0: module {dir}/bad.luau \
                 could not be loaded: warm broke\n",
        stderr: WARM_NOTE,
    },
    Case {
        name: "a warm whose promise nobody awaited",
        main: "jobs.warm('./bad', 'build')\ntask.wait(0.5)\n",
        flags: &["--workers", "1"],
        code: 1,
        stdout: "",
        stderr: concat!(
            "skein: jobs.warm \"./bad\".build on worker 0: module {dir}/bad.luau could not be \
             loaded: warm broke\nstack traceback:\n\t[C]: in ?\n\t[C]: in function 'error'\n\t\
             {dir}/bad.luau:1: in function <{dir}/bad.luau:1>\n",
            "skein: jobs.warm promise nobody awaited: job 'jobs.warm \"./bad\".build' failed: \
             worker 0: module {dir}/bad.luau could not be loaded: warm broke\n"
        ),
    },
    Case {
        name: "a worker's failure received inside pcall, then joined",
        main: "local w = require('@skein/worker').spawn { name = 'w', source = \
               \"return function(m) error('worker broke', 0) end\" }\n\
               w:send(1)\nlocal ok, err = pcall(w.receive, w, 20)\nprint(ok, err)\n\
               print(w:join())\n",
        flags: &["--allow", "worker.spawn"],
        code: 0,
        stdout: "false\tdomain#1 generation 1 worker 'w' (worker:w) failed at handler: worker \
                 broke\nfailed\n",
        stderr: "",
    },
    Case {
        name: "a worker whose source does not compile, joined",
        main: "local w = require('@skein/worker').spawn { name = 'w', source = 'local x = = 1' }\n\
               print(w:join())\n",
        flags: &["--allow", "worker.spawn"],
        code: 0,
        stdout: "failed\n",
        stderr: "",
    },
    Case {
        name: "a worker's failure nobody received or joined",
        main: "local w = require('@skein/worker').spawn { name = 'w', source = \
               \"return function(m) error('worker broke', 0) end\" }\n\
               w:send(1)\ntask.wait(0.5)\n",
        flags: &["--allow", "worker.spawn"],
        code: 1,
        stdout: "",
        stderr: "skein: worker 'w': domain#1 generation 1 worker 'w' (worker:w) failed at \
                 handler: worker broke\n",
    },
    Case {
        name: "an events.emit refused and caught",
        main: "local events = require('@skein/events')\n\
               for i = 1, 65537 do\n\
               \tlocal ok, err = pcall(events.emit, 'x', i)\n\
               \tif not ok then print(i, err) end\n\
               end\n",
        flags: &[],
        code: 0,
        stdout: "65537\tevents.emit: queue full: the queue holds its limit of 65536 pending \
                 events (EventLimits::pending)\n",
        stderr: "skein: event 'x': events.emit: queue full: the queue holds its limit of 65536 \
                 pending events (EventLimits::pending)\n",
    },
    Case {
        name: "a capability denial caught",
        main: "local ok = pcall(require('@skein/fs').writeFile, 'out.txt', 'x')\nprint(ok)\n",
        flags: &[],
        code: 0,
        stdout: "false\n",
        stderr: "skein: capability: capability 'filesystem.write' denied to domain 'main' \
                 (domain#1, generation 1)\n",
    },
    // A denial that fails the run is said once, in the failure; one the code caught before it,
    // with the same text, is still said as its own report.
    Case {
        name: "a denial the main script raised after a yield",
        main: "task.wait()\nrequire('@skein/fs').writeFile('out.txt', 'x')\n",
        flags: &["--allow-write", "sub"],
        code: 1,
        stdout: "",
        stderr: "skein: script main.luau failed: fs.writeFile: 'out.txt': permission denied: \
                 '{dir}/out.txt' is outside every root granted for 'filesystem.write' to domain \
                 'main' (domain#1, generation 1); its roots: '{dir}/sub'\n{dir}/main.luau:2\n",
    },
    Case {
        name: "a denial a task raised that nobody awaited",
        main: "task.spawn(function()\n\ttask.wait()\n\trequire('@skein/fs').writeFile('out.txt', 'x')\nend)\n",
        flags: &["--allow-write", "sub"],
        code: 1,
        stdout: "",
        stderr: "skein: script main.luau: fs.writeFile: 'out.txt': permission denied: \
                 '{dir}/out.txt' is outside every root granted for 'filesystem.write' to domain \
                 'main' (domain#1, generation 1); its roots: '{dir}/sub'\n{dir}/main.luau:3\n",
    },
    Case {
        name: "a denial caught, then the same denial raised",
        main: "print(pcall(require('@skein/fs').writeFile, 'out.txt', 'x'))\ntask.wait()\n\
               require('@skein/fs').writeFile('sub/../out.txt', 'x')\n",
        flags: &["--allow-write", "sub"],
        code: 1,
        stdout: "false\tfs.writeFile: 'out.txt': permission denied: '{dir}/out.txt' is outside \
                 every root granted for 'filesystem.write' to domain 'main' (domain#1, \
                 generation 1); its roots: '{dir}/sub'\n",
        stderr: "skein: script main.luau failed: fs.writeFile: 'sub/../out.txt': permission \
                 denied: '{dir}/out.txt' is outside every root granted for 'filesystem.write' to \
                 domain 'main' (domain#1, generation 1); its roots: '{dir}/sub'\n\
                 {dir}/main.luau:3\nskein: capability: permission denied: '{dir}/out.txt' is \
                 outside every root granted for 'filesystem.write' to domain 'main' (domain#1, \
                 generation 1); its roots: '{dir}/sub'\n",
    },
];

#[test]
fn a_failure_fails_the_run_only_when_no_code_observed_it() {
    let mut wrong = Vec::new();
    for case in CASES {
        let tree = Tree::new(&[
            ("main.luau", case.main),
            ("w.luau", JOB_MODULE),
            ("bad.luau", WARM_MODULE),
            ("sub/.keep", ""),
        ]);
        let dir = tree.path();
        let dir = dir.to_str().unwrap();
        let mut args = vec!["run"];
        args.extend_from_slice(case.flags);
        args.push("main.luau");
        let (code, stdout, stderr) = skein_in(&tree.path(), &args);
        let want = (
            case.code,
            case.stdout.replace("{dir}", dir),
            case.stderr.replace("{dir}", dir),
        );
        if (code, &stdout, &stderr) != (want.0, &want.1, &want.2) {
            wrong.push(format!(
                "{}:\n  got  {code} {stdout:?} {stderr:?}\n  want {} {:?} {:?}",
                case.name, want.0, want.1, want.2
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
