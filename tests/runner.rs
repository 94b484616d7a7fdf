//! The `skein` runner as a user runs it: exit codes, output, and errors with their Luau stack.

use std::path::Path;

use crate::support::{assert_contains, skein, skein_in, Tree};
use skein::NativeMode;

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
    assert_contains(&stdout, "Usage: skein [COMMAND]");
    assert_contains(
        &stdout,
        "  run    Run the Luau script FILE on the engine thread, with a pool of worker threads \
         behind jobs.dispatch",
    );
    assert_contains(
        &stdout,
        "  serve  Host the resources under DIR (each sub-folder holding a skein.toml) on one pool, \
         with an operator console on standard input",
    );
    assert_contains(&stdout, "EXIT CODES:");
    let (code, stdout, _) = skein(&["run", "--help"]);
    assert_eq!(code, 0);
    assert_contains(&stdout, "Usage: skein run [OPTIONS] <FILE> [-- <ARGS>...]");
    assert_contains(
        &stdout,
        "Number of worker threads, 1 to 1024 [default: the number of available cores]",
    );
    assert_contains(&stdout, "FILE must be a regular file of at most 16 MiB;");
    assert_eq!(
        skein::Plan::MAX_SOURCE_BYTES,
        16 * 1024 * 1024,
        "the help says 16 MiB"
    );
    assert_contains(
        &stdout,
        "runner.args    The script arguments, a list of strings.",
    );
    // No command at all is a question, not a mistake.
    let (code, stdout, _) = skein(&[]);
    assert_eq!(code, 0);
    assert_contains(&stdout, "Usage: skein [COMMAND]");
    let (code, stdout, _) = skein(&["--version"]);
    assert_eq!(code, 0);
    assert_eq!(
        stdout,
        format!(
            "skein {}, {}\n",
            env!("CARGO_PKG_VERSION"),
            NativeMode::Annotated.in_use()
        )
    );
}

#[test]
fn bad_arguments_exit_two_with_a_reason() {
    let (code, _, stderr) = skein(&["run"]);
    assert_eq!(code, 2);
    assert_contains(
        &stderr,
        "error: the following required arguments were not provided:\n  <FILE>",
    );
    let (code, _, stderr) = skein(&["frobnicate"]);
    assert_eq!(code, 2);
    assert_contains(&stderr, "error: unrecognized subcommand 'frobnicate'");
    let (code, _, stderr) = skein(&["run", "x.luau", "--frob"]);
    assert_eq!(code, 2);
    assert_contains(&stderr, "error: unexpected argument '--frob' found");
    // A second FILE is a script argument that forgot its `--`.
    let (code, _, stderr) = skein(&["run", "x.luau", "extra"]);
    assert_eq!(code, 2);
    assert_contains(&stderr, "error: unexpected argument 'extra' found");
    let (code, _, stderr) = skein(&["run", "x.luau", "--workers"]);
    assert_eq!(code, 2);
    assert_contains(
        &stderr,
        "error: a value is required for '--workers <N>' but none was supplied",
    );
    let (code, _, stderr) = skein(&["run", "x.luau", "--allow", "Not A Name"]);
    assert_eq!(code, 2);
    assert_contains(
        &stderr,
        "error: invalid value 'Not A Name' for '--allow <NAME>': invalid capability name \
         'Not A Name': each dotted segment must be a lowercase letter followed by lowercase \
         letters, digits or '_'",
    );
}

#[test]
fn native_and_no_native_choose_the_mode_jobs_stats_reports_and_conflict() {
    let tree = Tree::new(&[("stats.luau", "print(jobs.stats()[1].native)")]);
    let script = tree.path().join("stats.luau");
    let script = script.to_str().expect("utf-8 path");
    for (flag, mode) in [
        (None, NativeMode::Annotated),
        (Some("--native"), NativeMode::All),
        (Some("--no-native"), NativeMode::Off),
    ] {
        let mut args = vec!["run", "--workers", "1", script];
        args.extend(flag);
        let (code, stdout, stderr) = skein(&args);
        assert_eq!((code, stderr.as_str()), (0, ""), "{flag:?}");
        assert_eq!(stdout, format!("{}\n", mode.in_use()), "{flag:?}");
    }
    let (code, _, stderr) = skein(&["run", script, "--native", "--no-native"]);
    assert_eq!(code, 2);
    assert_contains(
        &stderr,
        "error: the argument '--native' cannot be used with '--no-native'",
    );
}

#[test]
fn a_missing_file_exits_one_naming_it() {
    let (code, _, stderr) = skein(&["run", "no/such/script.luau"]);
    assert_eq!(code, 1);
    assert_eq!(
        stderr,
        "skein: cannot read the script no/such/script.luau: No such file or directory (os error 2)\n"
    );
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
            "print(jobs.dispatch('./m', 'v'):await())\n\
             -- The test edits m.luau once it has read the line above. The runner looks for\n\
             -- edited sources every 250 ms while a script runs: dispatch until a dispatch\n\
             -- sees the edit, under a deadline, and retry only on the old answer.\n\
             local t = os.clock()\n\
             local v = jobs.dispatch('./m', 'v'):await()\n\
             while v ~= 'new' do\n\
             \tassert(v == 'old', `unexpected answer {v}`)\n\
             \tassert(os.clock() - t < 30, 'no dispatch saw the edit in 30 s')\n\
             \ttask.wait(0.01) -- a poll interval under the deadline above\n\
             \tv = jobs.dispatch('./m', 'v'):await()\n\
             end\n\
             print(v)\n",
        ),
        ("m.luau", "return { v = function() return 'old' end }\n"),
    ]);
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_skein"))
        .args(["run", "main.luau"])
        .current_dir(tree.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, lines) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in std::io::BufRead::lines(std::io::BufReader::new(stdout)) {
            let _ = tx.send(line.unwrap());
        }
    });
    // A hang guard, not a performance claim: the first dispatch answers at once.
    let first = lines.recv_timeout(std::time::Duration::from_secs(60));
    if first.is_err() {
        let _ = child.kill();
    }
    // The script has dispatched its first item; it dispatches again until one sees the edit.
    assert_eq!(first.expect("the script's first line"), "old");
    tree.write(
        "m.luau",
        "return { v = function() return 'new' end } -- edited\n",
    );
    let out = child.wait_with_output().unwrap();
    reader.join().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rest: Vec<String> = lines.try_iter().collect();
    assert_eq!(rest, ["new"]);
}

#[test]
fn the_runner_global_holds_the_arguments_and_no_way_around_capabilities() {
    let tree = Tree::new(&[
        (
            "main.luau",
            "print(#runner.args, runner.args[1], runner.writeFile == nil)\n\
         print(jobs.dispatch('./w', 'seesRunner'):await())\n\
         print(pcall(require('@skein/fs').writeFile, 'out.txt', 'x'))\n",
        ),
        (
            "w.luau",
            "return { seesRunner = function() return runner ~= nil end }\n",
        ),
    ]);
    let (code, stdout, stderr) = skein_in(&tree.path(), &["run", "main.luau", "--", "there", "2"]);
    assert_eq!(code, 0, "{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    // The script sees its arguments, and writing a file takes the capability like anywhere else.
    assert_eq!(lines[0], "2\tthere\ttrue");
    // A job on a worker has no `runner`.
    assert_eq!(lines[1], "false");
    assert!(lines[2].starts_with("false\t"), "{}", lines[2]);
    assert_contains(lines[2], "capability 'filesystem.write' denied");
    assert!(!tree.path().join("out.txt").exists());
}

/// CRC-32 (the PNG and zlib polynomial), bit by bit: the test's own, so it checks the script's.
fn crc32(bytes: &[u8]) -> u32 {
    let mut c = 0xFFFF_FFFFu32;
    for &b in bytes {
        c ^= u32::from(b);
        for _ in 0..8 {
            c = if c & 1 != 0 {
                0xEDB8_8320 ^ (c >> 1)
            } else {
                c >> 1
            };
        }
    }
    !c
}

fn be32(bytes: &[u8], at: usize) -> u32 {
    u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap())
}

/// The chunks of a PNG file as (type, data), each chunk's CRC checked.
fn png_chunks(file: &[u8]) -> Vec<([u8; 4], Vec<u8>)> {
    assert_eq!(file[..8], *b"\x89PNG\r\n\x1a\n", "PNG signature");
    let mut chunks = Vec::new();
    let mut at = 8;
    while at < file.len() {
        let len = be32(file, at) as usize;
        let kind: [u8; 4] = file[at + 4..at + 8].try_into().unwrap();
        let data = &file[at + 8..at + 8 + len];
        let crc = be32(file, at + 8 + len);
        assert_eq!(
            crc,
            crc32(&file[at + 4..at + 8 + len]),
            "CRC of {}",
            String::from_utf8_lossy(&kind)
        );
        chunks.push((kind, data.to_vec()));
        at += 12 + len;
    }
    assert_eq!(at, file.len(), "the last chunk ends the file");
    chunks
}

/// Undoes zlib with stored deflate blocks only (what the example writes), checking Adler-32.
fn unstore(zlib: &[u8]) -> Vec<u8> {
    assert_eq!(zlib[..2], [0x78, 0x01], "zlib header");
    let mut out = Vec::new();
    let mut at = 2;
    loop {
        let header = zlib[at];
        assert_eq!(header & 0b110, 0, "a stored block");
        let len = u16::from_le_bytes([zlib[at + 1], zlib[at + 2]]) as usize;
        let nlen = u16::from_le_bytes([zlib[at + 3], zlib[at + 4]]);
        assert_eq!(nlen, !(len as u16));
        out.extend_from_slice(&zlib[at + 5..at + 5 + len]);
        at += 5 + len;
        if header & 1 == 1 {
            break;
        }
    }
    let (mut a, mut b) = (1u32, 0u32);
    for &byte in &out {
        a = (a + u32::from(byte)) % 65521;
        b = (b + a) % 65521;
    }
    assert_eq!(be32(zlib, at), (b << 16) | a, "Adler-32");
    assert_eq!(at + 4, zlib.len());
    out
}

/// Granted a folder other than the current one, the example fails before it draws anything (no
/// worker ran an item), saying the denial once and how to name a file below the grant; named
/// one, it writes there.
#[test]
fn the_mandelbrot_example_fails_before_drawing_when_it_may_not_write_its_image() {
    let tree = Tree::new(&[("out/.keep", "")]);
    let dir = tree.path();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/mandelbrot.luau");
    let script = script.to_str().unwrap();
    let args = [
        "run",
        "--stats",
        "--allow-write",
        "out",
        script,
        "--workers",
        "2",
        "--",
        "160",
        "100",
    ];
    let (code, stdout, stderr) = skein_in(&dir, &args);
    assert_eq!(code, 1, "stderr: {stderr}");
    assert_eq!(stdout, "");
    let denial = format!(
        "permission denied: '{}' is outside every root granted for 'filesystem.write' to domain \
         'main' (domain#1, generation 1); its roots: '{}'",
        dir.join("mandelbrot.png").display(),
        dir.join("out").display()
    );
    assert!(
        stderr.starts_with(&format!(
            "skein: script {script} failed: cannot write the image: fs.writeFile: \
             'mandelbrot.png': {denial}\ngrant its folder with --allow-write, or name a file \
             below the folder granted: -- 160 100 DIR/mandelbrot.png\nstack traceback:\n"
        )),
        "{stderr}"
    );
    assert_eq!(stderr.matches(&denial).count(), 1, "{stderr}");
    let workers: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("skein: stats: worker "))
        .collect();
    assert_eq!(workers.len(), 2, "{stderr}");
    for line in workers {
        assert_contains(line, ": 0 items (0 keyed)");
    }
    assert!(!dir.join("mandelbrot.png").exists());

    let args = [
        "run",
        "--allow-write",
        "out",
        script,
        "--",
        "16",
        "10",
        "out/m.png",
    ];
    let (code, stdout, stderr) = skein_in(&dir, &args);
    assert_eq!(code, 0, "stderr: {stderr}");
    let written = std::fs::read(dir.join("out/m.png")).unwrap();
    assert_contains(
        &stdout,
        &format!(
            "images identical; wrote out/m.png ({} bytes)\n",
            written.len()
        ),
    );
}

#[test]
fn the_mandelbrot_example_writes_a_valid_png_and_agrees_with_one_thread() {
    let cwd = tempfile::tempdir().unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/mandelbrot.luau");
    let (code, stdout, stderr) = skein_in(
        cwd.path(),
        &[
            "run",
            "--allow-write",
            ".",
            script.to_str().unwrap(),
            "--workers",
            "2",
            "--",
            "160",
            "100",
        ],
    );
    assert_eq!(code, 0, "stderr: {stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines[0],
        "mandelbrot 160x100, 256 iterations at most: 64 chunks on 2 workers"
    );
    assert!(
        lines[1].starts_with("one thread: ") && lines[1].contains(" s, speedup "),
        "{stdout}"
    );
    let file = std::fs::read(cwd.path().join("mandelbrot.png")).expect("mandelbrot.png");
    assert_eq!(
        lines[2],
        format!(
            "images identical; wrote mandelbrot.png ({} bytes)",
            file.len()
        )
    );

    let chunks = png_chunks(&file);
    let kinds: Vec<&[u8]> = chunks.iter().map(|(k, _)| &k[..]).collect();
    assert_eq!(kinds, [&b"IHDR"[..], b"PLTE", b"IDAT", b"IEND"]);
    let ihdr = &chunks[0].1;
    assert_eq!((be32(ihdr, 0), be32(ihdr, 4)), (160, 100));
    assert_eq!(ihdr[8..], [8, 3, 0, 0, 0], "8-bit indexed, no interlace");
    assert_eq!(chunks[1].1.len(), 256 * 3);
    assert_eq!(chunks[1].1[..3], [0, 0, 0], "the set is black");

    let raw = unstore(&chunks[2].1);
    assert_eq!(raw.len(), 161 * 100);
    let rows: Vec<&[u8]> = raw.chunks(161).collect();
    assert!(rows.iter().all(|r| r[0] == 0), "every scanline unfiltered");
    let inside = rows
        .iter()
        .flat_map(|r| &r[1..])
        .filter(|&&p| p == 0)
        .count();
    // The set covers a fair part of the picture, not none of it and not all of it.
    assert!((1000..8000).contains(&inside), "{inside} pixels inside");
    // The picture is symmetric about the real axis: row r mirrors row 99 - r.
    for r in 0..50 {
        assert_eq!(rows[r], rows[99 - r], "row {r}");
    }
}

#[test]
fn the_keyed_example_keeps_state_per_key_and_starts_fresh_after_release() {
    let (code, stdout, stderr) = skein(&["run", "examples/keyed.luau", "--workers", "2"]);
    assert_eq!(code, 0, "stderr: {stderr}");
    // Worker numbers depend on where keys bind, so compare each line without them.
    let trace: Vec<String> = stdout
        .lines()
        .map(|l| match l.find("(worker ") {
            Some(at) => {
                let rest = &l[at..];
                format!("{}({}", &l[..at], &rest[rest.find(", ").unwrap() + 2..])
            }
            None => l.to_owned(),
        })
        .collect();
    assert_eq!(
        trace,
        [
            "round 1",
            "  ana  hit 1, score  10   (fresh: a new session)",
            "  bo   hit 1, score   5   (fresh: a new session)",
            "  ana  hit 2, score  17   (session kept)",
            "  bo   hit 2, score   6   (session kept)",
            "  ana  hit 3, score  20   (session kept)",
            "released ana",
            "  onRelease: ana's session ended after 3 hits with a score of 20",
            "round 2",
            "  ana  hit 1, score   4   (fresh: a new session)",
            "  bo   hit 3, score   8   (session kept)",
            "all keys released; every check passed",
        ]
    );
}

/// Prime factors of `n` by trial division, smallest first: the test's own, to check the script's.
fn prime_factors(mut n: u64) -> Vec<u64> {
    let mut factors = Vec::new();
    let mut d = 2;
    while d * d <= n {
        while n.is_multiple_of(d) {
            factors.push(d);
            n /= d;
        }
        d += 1;
    }
    if n > 1 {
        factors.push(n);
    }
    factors
}

#[test]
fn the_pipeline_example_factors_every_number_exactly_once() {
    const COUNT: u64 = 300;
    const FIRST: u64 = 999_999_900;
    let (code, stdout, stderr) = skein(&[
        "run",
        "examples/pipeline.luau",
        "--workers",
        "2",
        "--",
        &COUNT.to_string(),
        &FIRST.to_string(),
    ]);
    assert_eq!(code, 0, "stderr: {stderr}");

    // What the script must find, worked out here: the primes, and the number with the most
    // prime factors (the smallest of them on a tie), written as the script writes it.
    let numbers = FIRST..FIRST + COUNT;
    let primes = numbers
        .clone()
        .filter(|&n| prime_factors(n).len() == 1)
        .count();
    let (most, factors) =
        numbers
            .map(|n| (n, prime_factors(n)))
            .fold((0, Vec::new()), |best, (n, f)| {
                if f.len() > best.1.len() {
                    (n, f)
                } else {
                    best
                }
            });
    let mut powers: Vec<(u64, u32)> = Vec::new();
    for p in &factors {
        match powers.last_mut() {
            Some((q, k)) if q == p => *k += 1,
            _ => powers.push((*p, 1)),
        }
    }
    let written: Vec<String> = powers
        .iter()
        .map(|&(p, k)| {
            if k == 1 {
                p.to_string()
            } else {
                format!("{p}^{k}")
            }
        })
        .collect();

    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines[..5],
        [
            "pipeline: 300 numbers from 999999900, 2 consumers, queues of 64",
            "  25% factored",
            "  50% factored",
            "  75% factored",
            "  100% factored",
        ],
        "{stdout}"
    );
    // How the items split between the consumers depends on timing; their sum does not.
    let split = lines[5]
        .strip_prefix("consumers took ")
        .and_then(|rest| rest.strip_suffix(" = 300 items"))
        .unwrap_or_else(|| panic!("{stdout}"));
    let parts: Vec<u64> = split.split(" + ").map(|n| n.parse().unwrap()).collect();
    assert_eq!(parts.len(), 2, "{stdout}");
    assert_eq!(parts.iter().sum::<u64>(), COUNT);
    assert_eq!(
        lines[6],
        format!(
            "primes: {primes}; most prime factors: {most} = {} ({} factors)",
            written.join(" * "),
            factors.len()
        )
    );
    assert_eq!(
        lines[7],
        "every number factored exactly once: 300 in, 300 out, sums agree"
    );
    assert!(
        lines[8].starts_with("time: ") && lines[8].ends_with(" s"),
        "{stdout}"
    );
    assert_eq!(lines.len(), 9, "{stdout}");
}

#[test]
fn the_registered_example_runs_its_job_for_the_frames_asked_then_ends() {
    let (code, stdout, stderr) = skein(&["run", "examples/registered.luau", "--", "3"]);
    assert_eq!(code, 0, "stderr: {stderr}");
    // The script's own line and the job's first call print from two threads, in either order;
    // the job's calls are in order among themselves, and there are exactly three.
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 4, "{stdout}");
    assert!(
        lines.contains(&"registered a job that runs for 3 frames"),
        "{stdout}"
    );
    let calls: Vec<&str> = lines
        .iter()
        .copied()
        .filter(|l| l.starts_with("counter:"))
        .collect();
    assert_eq!(
        calls,
        [
            "counter: frame 1 of 3",
            "counter: frame 2 of 3",
            "counter: frame 3 of 3",
        ]
    );
}

#[test]
fn a_spawn_without_its_flag_is_denied_naming_the_capability_and_the_domain() {
    let tree = Tree::new(&[(
        "main.luau",
        "local ok, err = pcall(require('@skein/worker').spawn, { source = 'return print' })\n\
         print(ok, err)\n",
    )]);
    let (code, stdout, stderr) = skein_in(&tree.path(), &["run", "main.luau"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        stdout.lines().next(),
        Some(
            "false\tcapability 'worker.spawn' denied to domain 'main' (domain#1, \
             generation 1)"
        )
    );
    // With the flag the same spawn runs.
    let (code, _, stderr) = skein_in(
        &tree.path(),
        &["run", "--allow", "worker.spawn", "main.luau"],
    );
    assert_eq!(code, 0, "{stderr}");
}
