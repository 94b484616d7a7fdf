//! `@skein/fs` never leaves its roots: every path is resolved beneath the root's directory
//! handle, so links out of a root (followed, dangling, or swapped in while a read runs) and `..`
//! across them are refused, and reads and listings are bounded.

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use skein::capability::{CapabilitySet, RootAuthority};
use skein::{DomainSpec, Message, Pool, ScriptDomain};

use crate::support::{assert_contains, number};

/// `top/d` is the granted root (read and write); `top/other` is outside it.
/// Inside: `d/in.txt`, `d/sub/inner.txt`, `d/inlink -> sub`, `d/link -> ../other`.
/// Outside: `other/secret.txt`.
struct Setup {
    _top: tempfile::TempDir,
    top: PathBuf,
    d: PathBuf,
    other: PathBuf,
}

impl Setup {
    fn new() -> Setup {
        let top_dir = tempfile::tempdir().unwrap();
        let top = top_dir.path().canonicalize().unwrap();
        let d = top.join("d");
        let other = top.join("other");
        std::fs::create_dir_all(d.join("sub")).unwrap();
        std::fs::create_dir_all(&other).unwrap();
        std::fs::write(d.join("in.txt"), "inside").unwrap();
        std::fs::write(d.join("sub/inner.txt"), "inner").unwrap();
        std::fs::write(other.join("secret.txt"), "secret").unwrap();
        symlink("sub", d.join("inlink")).unwrap();
        symlink("../other", d.join("link")).unwrap();
        Setup {
            _top: top_dir,
            top,
            d,
            other,
        }
    }

    fn domain(&self, pool: &Pool) -> ScriptDomain {
        let grant = RootAuthority::new()
            .grant(CapabilitySet::new())
            .read_root(&self.d)
            .unwrap()
            .write_root(&self.d)
            .unwrap();
        ScriptDomain::new(pool, DomainSpec::new("fs").grant(grant)).unwrap()
    }
}

fn err(domain: &ScriptDomain, script: &str) -> String {
    domain.eval(script).unwrap_err().to_string()
}

fn who(domain: &ScriptDomain) -> String {
    format!("domain 'fs' (domain#{}, generation 1)", domain.id().get())
}

/// The text of a call refused because `path` (as the script gave it; `absolute` as checked)
/// leads out of the root `d` through a link.
fn escape_text(
    func: &str,
    path: &str,
    absolute: &Path,
    d: &Path,
    cap: &str,
    domain: &ScriptDomain,
) -> String {
    format!(
        "fs.{func}: '{path}': permission denied: '{}' leads out of the root '{}' granted for \
         '{cap}' to {}: a symbolic link on its way points outside",
        absolute.display(),
        d.display(),
        who(domain)
    )
}

fn text(domain: &ScriptDomain, script: &str) -> String {
    match domain.eval(script).unwrap() {
        Message::String(s) => String::from_utf8_lossy(&s).into_owned(),
        other => panic!("not a string: {other:?}"),
    }
}

#[test]
fn a_link_inside_a_root_pointing_inside_it_reads_lists_and_writes() {
    let s = Setup::new();
    let pool = Pool::new(1);
    let domain = s.domain(&pool);
    let d = s.d.display();
    let script = format!(
        r#"
        local fs = require("@skein/fs")
        fs.writeFile("{d}/inlink/new.txt", "made")
        return fs.readFile("{d}/inlink/inner.txt") .. ":" .. table.concat(fs.list("{d}/inlink"), ",")
        "#
    );
    assert_eq!(text(&domain, &script), "inner:inner.txt,new.txt");
    assert_eq!(
        std::fs::read_to_string(s.d.join("sub/new.txt")).unwrap(),
        "made"
    );
    // The root itself lists, by its own path.
    assert_eq!(
        text(
            &domain,
            &format!("return table.concat(require('@skein/fs').list('{d}'), ',')")
        ),
        "in.txt,inlink,link,sub"
    );
    assert_eq!(domain.denials(), 0);
}

#[test]
fn a_link_out_of_a_root_is_refused_for_read_list_and_write() {
    let s = Setup::new();
    let pool = Pool::new(1);
    let domain = s.domain(&pool);
    let secret = s.d.join("link/secret.txt");
    let p = secret.display().to_string();

    let got = err(
        &domain,
        &format!("return require('@skein/fs').readFile('{p}')"),
    );
    assert_contains(
        &got,
        &escape_text("readFile", &p, &secret, &s.d, "filesystem.read", &domain),
    );

    let dir = s.d.join("link");
    let dir_text = dir.display().to_string();
    let got = err(
        &domain,
        &format!("return require('@skein/fs').list('{dir_text}')"),
    );
    assert_contains(
        &got,
        &escape_text("list", &dir_text, &dir, &s.d, "filesystem.read", &domain),
    );

    // Overwriting a file out there, and creating one, are both refused.
    let got = err(
        &domain,
        &format!("require('@skein/fs').writeFile('{p}', 'overwritten')"),
    );
    assert_contains(
        &got,
        &escape_text("writeFile", &p, &secret, &s.d, "filesystem.write", &domain),
    );
    let fresh = s.d.join("link/fresh.txt");
    let got = err(
        &domain,
        &format!("require('@skein/fs').writeFile('{}', 'x')", fresh.display()),
    );
    assert_contains(&got, "leads out of the root");

    // Nothing outside changed, and each refusal was a counted, reported denial.
    assert_eq!(
        std::fs::read_to_string(s.other.join("secret.txt")).unwrap(),
        "secret"
    );
    assert!(!s.other.join("fresh.txt").exists());
    assert_eq!(domain.denials(), 4);
    let reports = domain.take_reports();
    assert_eq!(reports.len(), 4, "{reports:?}");
    assert_eq!(
        reports[0].message,
        escape_text("readFile", &p, &secret, &s.d, "filesystem.read", &domain)
            .split_once(": permission denied")
            .map(|(_, rest)| format!("permission denied{rest}"))
            .unwrap()
    );
}

#[test]
fn dot_dot_across_a_missing_component_does_not_follow_a_link_out() {
    // The old check canonicalised by name and fell back to resolving `..` as text when a
    // component was missing, then opened the path by name: the OS followed `link` out.
    let s = Setup::new();
    let pool = Pool::new(1);
    let domain = s.domain(&pool);
    let p = format!("{}/link/nope/../secret.txt", s.d.display());
    let checked = s.d.join("link/secret.txt");

    let got = err(
        &domain,
        &format!("return require('@skein/fs').readFile('{p}')"),
    );
    assert_contains(
        &got,
        &escape_text("readFile", &p, &checked, &s.d, "filesystem.read", &domain),
    );
    let listed = format!("{}/link/nope/..", s.d.display());
    let got = err(
        &domain,
        &format!("return require('@skein/fs').list('{listed}')"),
    );
    assert_contains(
        &got,
        &escape_text(
            "list",
            &listed,
            &s.d.join("link"),
            &s.d,
            "filesystem.read",
            &domain,
        ),
    );
    let got = err(
        &domain,
        &format!("require('@skein/fs').writeFile('{p}', 'overwritten')"),
    );
    assert_contains(
        &got,
        &escape_text("writeFile", &p, &checked, &s.d, "filesystem.write", &domain),
    );
    assert_eq!(
        std::fs::read_to_string(s.other.join("secret.txt")).unwrap(),
        "secret"
    );
    assert_eq!(domain.denials(), 3);
}

#[test]
fn write_through_a_dangling_link_out_is_refused_and_a_new_file_inside_is_made() {
    let s = Setup::new();
    let pool = Pool::new(1);
    let domain = s.domain(&pool);
    // A dangling link out of the root, and a link to an existing file out of it.
    symlink("../other/created.txt", s.d.join("dangling")).unwrap();
    symlink("../other/secret.txt", s.d.join("points")).unwrap();
    // A dangling link that stays inside.
    symlink("sub/later.txt", s.d.join("pending")).unwrap();

    for name in ["dangling", "points"] {
        let p = s.d.join(name);
        let text = p.display().to_string();
        let got = err(
            &domain,
            &format!("require('@skein/fs').writeFile('{text}', 'out')"),
        );
        assert_contains(
            &got,
            &escape_text("writeFile", &text, &p, &s.d, "filesystem.write", &domain),
        );
    }
    assert!(!s.other.join("created.txt").exists());
    assert_eq!(
        std::fs::read_to_string(s.other.join("secret.txt")).unwrap(),
        "secret"
    );
    let p = s.d.join("points").display().to_string();
    let got = err(
        &domain,
        &format!("return require('@skein/fs').readFile('{p}')"),
    );
    assert_contains(&got, "leads out of the root");
    assert_eq!(domain.denials(), 3);

    let d = s.d.display();
    domain
        .exec(&format!(
            r#"
            local fs = require("@skein/fs")
            fs.writeFile("{d}/fresh.txt", "new")
            fs.writeFile("{d}/pending", "through")
            "#
        ))
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(s.d.join("fresh.txt")).unwrap(),
        "new"
    );
    assert_eq!(
        std::fs::read_to_string(s.d.join("sub/later.txt")).unwrap(),
        "through"
    );
}

#[test]
fn a_path_past_path_max_is_refused_by_its_length_before_any_text_quotes_it() {
    // A refusal quotes the path twice (as given and made absolute): a 64 MiB path made a text
    // the process could not hold, and the runner aborted on the allocation.
    let s = Setup::new();
    let pool = Pool::new(1);
    let domain = s.domain(&pool);
    for (func, call) in [
        ("readFile", "readFile(p)"),
        ("writeFile", "writeFile(p, 'x')"),
        ("list", "list(p)"),
    ] {
        let param = if func == "list" { "dir" } else { "path" };
        let script = format!(
            "local p = string.rep('x', 64 * 1024 * 1024) return require('@skein/fs').{call}"
        );
        let refused = err(&domain, &script);
        assert_contains(
            &refused,
            &format!(
                "fs.{func}: {param} must be at most 4096 bytes, got a string of 67108864 bytes"
            ),
        );
        assert!(refused.len() < 1024, "{}", refused.len());
    }
    // At the bound the path is checked as any other: outside every root.
    let script = "return require('@skein/fs').readFile(string.rep('x', 4096))";
    assert_contains(&err(&domain, script), "is outside every root granted");
}

#[test]
fn absolute_paths_inside_a_root_work_and_outside_are_denied_naming_the_roots() {
    let s = Setup::new();
    let pool = Pool::new(1);
    let domain = s.domain(&pool);
    let d = s.d.display();
    // `..` is taken off by name before the root is chosen: out and back in is inside.
    assert_eq!(
        text(
            &domain,
            &format!("return require('@skein/fs').readFile('{d}/../d/./in.txt')")
        ),
        "inside"
    );

    let secret = s.other.join("secret.txt");
    let p = secret.display().to_string();
    let got = err(
        &domain,
        &format!("return require('@skein/fs').readFile('{p}')"),
    );
    assert_contains(
        &got,
        &format!(
            "fs.readFile: '{p}': permission denied: '{p}' is outside every root granted for \
             'filesystem.read' to {}; its roots: '{d}'",
            who(&domain)
        ),
    );
    let up = format!("{d}/..");
    let got = err(
        &domain,
        &format!("return require('@skein/fs').list('{up}')"),
    );
    assert_contains(
        &got,
        &format!(
            "fs.list: '{up}': permission denied: '{}' is outside every root granted for \
             'filesystem.read' to {}; its roots: '{d}'",
            s.top.display(),
            who(&domain)
        ),
    );
    let escape = format!("{d}/../escape.txt");
    let got = err(
        &domain,
        &format!("require('@skein/fs').writeFile('{escape}', 'x')"),
    );
    assert_contains(
        &got,
        &format!(
            "fs.writeFile: '{escape}': permission denied: '{}' is outside every root granted \
             for 'filesystem.write' to {}; its roots: '{d}'",
            s.top.join("escape.txt").display(),
            who(&domain)
        ),
    );
    assert!(!s.top.join("escape.txt").exists());

    // An absolute link is refused even when it points inside: beneath a handle, `/` is out.
    symlink(s.d.join("sub"), s.d.join("abs")).unwrap();
    let p = s.d.join("abs/inner.txt");
    let text_p = p.display().to_string();
    let got = err(
        &domain,
        &format!("return require('@skein/fs').readFile('{text_p}')"),
    );
    assert_contains(
        &got,
        &escape_text("readFile", &text_p, &p, &s.d, "filesystem.read", &domain),
    );
    assert_eq!(domain.denials(), 4);
}

#[test]
fn a_root_granted_through_a_link_is_reached_by_either_name() {
    let s = Setup::new();
    symlink("d", s.top.join("alias")).unwrap();
    let pool = Pool::new(1);
    let grant = RootAuthority::new()
        .grant(CapabilitySet::new())
        .read_root(s.top.join("alias"))
        .unwrap();
    assert_eq!(grant.read_roots(), std::slice::from_ref(&s.d));
    let domain = ScriptDomain::new(&pool, DomainSpec::new("fs").grant(grant)).unwrap();
    for root in [s.top.join("alias"), s.d.clone()] {
        assert_eq!(
            text(
                &domain,
                &format!(
                    "return require('@skein/fs').readFile('{}/in.txt')",
                    root.display()
                )
            ),
            "inside"
        );
    }
    // A root must be a directory.
    let file = s.d.join("in.txt");
    let refused = RootAuthority::new()
        .grant(CapabilitySet::new())
        .read_root(&file)
        .unwrap_err();
    assert_eq!(
        refused.to_string(),
        format!("{}: Not a directory (os error 20)", file.display())
    );
}

#[test]
fn read_file_is_bounded_at_64_mib_and_list_at_65536_entries() {
    let s = Setup::new();
    let pool = Pool::new(1);
    let domain = s.domain(&pool);
    let bound = 64 * 1024 * 1024;
    let at = s.d.join("at.bin");
    let past = s.d.join("past.bin");
    std::fs::File::create(&at).unwrap().set_len(bound).unwrap();
    std::fs::File::create(&past)
        .unwrap()
        .set_len(bound + 1)
        .unwrap();
    let read = domain.eval(&format!(
        "return #require('@skein/fs').readFile('{}')",
        at.display()
    ));
    assert_eq!(number(&read.unwrap()), bound as f64);
    let p = past.display().to_string();
    let got = err(
        &domain,
        &format!("return require('@skein/fs').readFile('{p}')"),
    );
    assert_contains(
        &got,
        &format!(
            "fs.readFile: '{p}': the file is 67108865 bytes, more than the 67108864 bytes \
             (64 MiB) readFile returns"
        ),
    );
    let many = s.d.join("many");
    std::fs::create_dir(&many).unwrap();
    for i in 0..65_536 {
        std::fs::File::create(many.join(i.to_string())).unwrap();
    }
    let count = format!("return #require('@skein/fs').list('{}')", many.display());
    assert_eq!(number(&domain.eval(&count).unwrap()), 65_536.0);
    std::fs::File::create(many.join("one-more")).unwrap();
    let got = err(&domain, &count);
    assert_contains(
        &got,
        &format!(
            "fs.list: '{}': the directory has more than 65536 entries, the most list returns",
            many.display()
        ),
    );
    assert_eq!(domain.denials(), 0);
}

#[test]
fn a_directory_swapped_for_a_link_out_while_reading_never_yields_the_outside_file() {
    let s = Setup::new();
    // `d/sub/file.txt` inside, `other/file.txt` outside; `d/swap -> ../other` waits to be
    // renamed over `d/sub`.
    std::fs::write(s.d.join("sub/file.txt"), "inside").unwrap();
    std::fs::write(s.other.join("file.txt"), "OUTSIDE").unwrap();
    symlink("../other", s.d.join("swap")).unwrap();
    let pool = Pool::new(1);
    let domain = s.domain(&pool);

    let stop = Arc::new(AtomicBool::new(false));
    let swaps = Arc::new(AtomicU64::new(0));
    let swapper = {
        let (stop, swaps, d) = (stop.clone(), swaps.clone(), s.d.clone());
        std::thread::spawn(move || {
            let (sub, held, swap) = (d.join("sub"), d.join("held"), d.join("swap"));
            while !stop.load(Ordering::Relaxed) {
                // `sub` is the directory, then the link out, then the directory again.
                std::fs::rename(&sub, &held).unwrap();
                std::fs::rename(&swap, &sub).unwrap();
                std::fs::rename(&sub, &swap).unwrap();
                std::fs::rename(&held, &sub).unwrap();
                swaps.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    let got = domain.eval(&format!(
        r#"
        local fs = require("@skein/fs")
        local inside, refused, outside = 0, 0, 0
        for i = 1, 10000 do
            local ok, v = pcall(fs.readFile, "{}/sub/file.txt")
            if not ok then refused += 1
            elseif v == "inside" then inside += 1
            else outside += 1 end
        end
        return {{ inside, refused, outside }}
        "#,
        s.d.display()
    ));
    stop.store(true, Ordering::Relaxed);
    swapper.join().unwrap();
    let Message::List(counts) = got.unwrap() else {
        panic!("not a list")
    };
    assert_eq!(counts.len(), 3);
    let [inside, refused, outside] = [0, 1, 2].map(|i| number(&counts[i]));
    assert_eq!(
        outside, 0.0,
        "reads that returned the outside file: {counts:?}"
    );
    assert_eq!(inside + refused, 10_000.0, "{counts:?}");
    assert!(inside > 0.0, "no read succeeded: {counts:?}");
    assert!(swaps.load(Ordering::Relaxed) > 0, "the swapper never ran");
}

#[test]
fn a_path_below_nested_roots_is_opened_beneath_the_deepest_one_that_holds_it() {
    // Roots `d` and `d/sub`: `d/sub/up -> ..` leads out of `d/sub` but stays inside `d`, so the
    // read goes through `d`; a link out of both is refused naming both.
    let s = Setup::new();
    symlink("..", s.d.join("sub/up")).unwrap();
    symlink("../../other", s.d.join("sub/out")).unwrap();
    let pool = Pool::new(1);
    let grant = RootAuthority::new()
        .grant(CapabilitySet::new())
        .read_root(&s.d)
        .unwrap()
        .read_root(s.d.join("sub"))
        .unwrap();
    let domain = ScriptDomain::new(&pool, DomainSpec::new("fs").grant(grant)).unwrap();
    assert_eq!(
        text(
            &domain,
            &format!(
                "return require('@skein/fs').readFile('{}/sub/up/in.txt')",
                s.d.display()
            )
        ),
        "inside"
    );
    let p = s.d.join("sub/out/secret.txt");
    let got = err(
        &domain,
        &format!("return require('@skein/fs').readFile('{}')", p.display()),
    );
    assert_contains(
        &got,
        &format!(
            "permission denied: '{}' leads out of the roots '{}', '{}' granted for \
             'filesystem.read' to {}: a symbolic link on its way points outside",
            p.display(),
            s.d.join("sub").display(),
            s.d.display(),
            who(&domain)
        ),
    );
    assert_eq!(domain.denials(), 1);
}

#[test]
fn the_runner_keeps_relative_paths_inside_its_allow_flags_roots() {
    // `skein run --allow-read d --allow-write d` from `top`: relative paths resolve from the
    // current directory, and the link `d/link -> ../other` leads nowhere.
    let s = Setup::new();
    std::fs::write(
        s.top.join("main.luau"),
        r#"
        local fs = require("@skein/fs")
        local function try(f, ...)
            local ok, err = pcall(f, ...)
            print(ok, string.match(tostring(err), "^[^\n]*"))
        end
        print(fs.readFile("d/in.txt"), fs.readFile("./d/inlink/inner.txt"))
        for _, p in { "d/link/nope/../secret.txt", "d/link/secret.txt" } do
            try(fs.readFile, p)
            try(fs.writeFile, p, "overwritten")
        end
        try(fs.list, "d/link")
        "#,
    )
    .unwrap();
    let args = [
        "run",
        "--allow-read",
        "d",
        "--allow-write",
        "d",
        "main.luau",
    ];
    let (code, stdout, stderr) = crate::support::skein_in(&s.top, &args);
    assert_eq!(code, 0, "stderr: {stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 6, "stdout:\n{stdout}");
    assert_eq!(lines[0], "inside\tinner");
    let escape = |func: &str, given: &str, checked: &str, cap: &str| {
        format!(
            "false\tfs.{func}: '{given}': permission denied: '{}' leads out of the root '{}' \
             granted for '{cap}' to domain 'main' (domain#1, generation 1): a symbolic link on \
             its way points outside",
            s.top.join(checked).display(),
            s.d.display()
        )
    };
    let cases = [
        ("d/link/nope/../secret.txt", "d/link/secret.txt"),
        ("d/link/secret.txt", "d/link/secret.txt"),
    ];
    for (i, (given, checked)) in cases.iter().enumerate() {
        assert_eq!(
            lines[1 + 2 * i],
            escape("readFile", given, checked, "filesystem.read")
        );
        assert_eq!(
            lines[2 + 2 * i],
            escape("writeFile", given, checked, "filesystem.write")
        );
    }
    assert_eq!(
        lines[5],
        escape("list", "d/link", "d/link", "filesystem.read")
    );
    assert_eq!(
        std::fs::read_to_string(s.other.join("secret.txt")).unwrap(),
        "secret"
    );
}

#[test]
fn read_and_write_refuse_what_is_not_a_regular_file_without_opening_it() {
    let s = Setup::new();
    let fifo = s.d.join("fifo");
    let c_path = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: `c_path` is a valid NUL-terminated path that outlives the call.
    assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
    let pool = Pool::new(1);
    let domain = s.domain(&pool);
    // A FIFO with no writer would block an open for reading (and one with no reader an open for
    // writing): both are refused from their metadata, so the calls return.
    let sub = s.d.join("sub").display().to_string();
    let fifo = fifo.display().to_string();
    for (call, path) in [
        ("readFile", &sub),
        ("readFile", &fifo),
        ("writeFile", &sub),
        ("writeFile", &fifo),
    ] {
        let got = err(
            &domain,
            &format!("return require('@skein/fs').{call}('{path}', 'x')"),
        );
        assert_contains(&got, &format!("fs.{call}: '{path}': not a regular file"));
    }
    assert!(s.d.join("sub").is_dir());
    assert_eq!(domain.denials(), 0);
}

#[test]
fn a_path_out_of_a_root_is_refused_alike_whether_anything_is_there() {
    let s = Setup::new();
    let pool = Pool::new(1);
    let domain = s.domain(&pool);
    // The refusal as the script reads it, the path as given written `<path>`.
    let refused = |call: &str, path: &Path| {
        let p = path.display().to_string();
        let got = crate::support::refusal(&domain, &format!("require('@skein/fs').{call}"));
        assert!(
            !got.contains('\n'),
            "a caught error is its text alone: {got:?}"
        );
        got.replace(&p, "<path>")
    };
    let by_name = [
        (s.other.join("secret.txt"), s.other.join("nothing.txt")),
        (s.other.clone(), s.other.join("nowhere")),
    ];
    let through_link = [
        (s.d.join("link/secret.txt"), s.d.join("link/nothing.txt")),
        (s.d.join("link"), s.d.join("link/nowhere")),
    ];
    for (there, nothing) in by_name.iter().chain(&through_link) {
        for call in ["readFile('{}')", "list('{}')", "writeFile('{}', 'x')"] {
            let at = |p: &Path| call.replace("{}", &p.display().to_string());
            assert_eq!(
                refused(&at(there), there),
                refused(&at(nothing), nothing),
                "{call} of {there:?} and {nothing:?}"
            );
        }
    }
    // Each says what it is, whole.
    let nothing = s.other.join("nothing.txt");
    assert_eq!(
        refused(&format!("readFile('{}')", nothing.display()), &nothing),
        format!(
            "fs.readFile: '<path>': permission denied: '<path>' is outside every root granted for \
             'filesystem.read' to {}; its roots: '{}'",
            who(&domain),
            s.d.display()
        )
    );
    let nothing = s.d.join("link/nothing.txt");
    assert_eq!(
        refused(&format!("readFile('{}')", nothing.display()), &nothing),
        format!(
            "fs.readFile: '<path>': permission denied: '<path>' leads out of the root '{}' granted \
             for 'filesystem.read' to {}: a symbolic link on its way points outside",
            s.d.display(),
            who(&domain)
        )
    );
    // Nothing out there was written or made.
    assert_eq!(
        std::fs::read_to_string(s.other.join("secret.txt")).unwrap(),
        "secret"
    );
    assert!(!s.other.join("nothing.txt").exists());
    assert!(!s.other.join("nowhere").exists());
}
