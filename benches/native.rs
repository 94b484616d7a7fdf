//! Native code against the interpreter: the Mandelbrot kernel of `examples/mandelbrot/rows.luau`
//! (which starts with `--!native`), 800x600 pixels at 200 iterations at most, as one job on a
//! 1-worker pool, in a domain whose plan is `NativeMode::Annotated` (the default: the kernel runs
//! as native code) and in one whose plan is `NativeMode::Off` (interpreted). The sides alternate
//! (`util::alternate`), seven rounds; each round's ratio and the median are printed, and both
//! images are checked to be the same bytes. Goal: native at least 2.5x the interpreter.
//!
//! A third, diagnostic side runs the same kernel without its `--!native` line in a domain whose
//! plan is `NativeMode::All`: native code again, but from bytecode compiled at Skein's usual
//! optimisation level (1), where the hot comment has Luau's compiler use level 2 and type
//! information (`setCompileOptionsForNativeCompilation`).
//!
//! Run: `cargo bench --bench native`. The whole-process comparison with LuaJIT + luv is
//! `benches/peers/mandelbrot.sh` (see `docs/performance.md`).

mod util;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use bytes::Bytes;
use skein::{DomainSpec, MapKey, Message, NativeMode, Plan, Pool, ScriptDomain};

const WIDTH: f64 = 800.0;
const HEIGHT: f64 = 600.0;
const MAX_ITER: f64 = 200.0;
const ROUNDS: usize = 7;
/// The goal: native at least this many times the interpreter's speed.
const GOAL: f64 = 2.5;

fn key(name: &str) -> MapKey {
    MapKey::String(Bytes::copy_from_slice(name.as_bytes()))
}

/// The `parallelFor` chunk the kernel's entry takes: every row, with the view as its args.
fn whole_image() -> Message {
    let view = Message::Map(vec![
        (key("width"), Message::Number(WIDTH)),
        (key("height"), Message::Number(HEIGHT)),
        (key("maxIter"), Message::Number(MAX_ITER)),
        (key("centerX"), Message::Number(-0.75)),
        (key("centerY"), Message::Number(0.0)),
        (key("span"), Message::Number(3.5)),
    ]);
    Message::Map(vec![
        (key("first"), Message::Number(1.0)),
        (key("last"), Message::Number(HEIGHT)),
        (key("args"), view),
    ])
}

fn domain(pool: &Pool, root: PathBuf, mode: NativeMode) -> ScriptDomain {
    let plan = Plan::new().root(root).native(mode);
    ScriptDomain::new(pool, DomainSpec::new(mode.to_string()).plan(plan)).expect("domain")
}

/// Renders the image once in `domain`, answering the time and the pixels.
fn render(domain: &ScriptDomain) -> (Duration, Bytes) {
    let t0 = Instant::now();
    let image = domain
        .dispatch("./mandelbrot/rows", "rows", whole_image())
        .expect("dispatch")
        .wait()
        .expect("job");
    let took = t0.elapsed();
    match image {
        Message::Buffer(pixels) => (took, pixels),
        other => panic!("expected a buffer of pixels, got {other:?}"),
    }
}

fn main() {
    let examples = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples");
    let kernel = std::fs::read_to_string(examples.join("mandelbrot/rows.luau")).expect("kernel");
    let unmarked = kernel
        .strip_prefix("--!native\n")
        .expect("the kernel starts with --!native");
    let plain = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir(plain.path().join("mandelbrot")).expect("mkdir");
    std::fs::write(plain.path().join("mandelbrot/rows.luau"), unmarked).expect("write");

    let pool = Pool::new(1);
    let native = domain(&pool, examples.clone(), NativeMode::Annotated);
    let interpreted = domain(&pool, examples, NativeMode::Off);
    let all = domain(&pool, plain.path().to_owned(), NativeMode::All);
    // Warm each: each builds its worker VM and loads (and compiles) the kernel on its first job.
    let (_, a) = render(&native);
    let (_, b) = render(&interpreted);
    let (_, c) = render(&all);
    assert_eq!(a, b, "native and interpreted images differ");
    assert_eq!(
        a, c,
        "the kernel without its hot comment draws another image"
    );
    assert_eq!(a.len(), (WIDTH * HEIGHT) as usize);

    let [n, i, u] = util::alternate(
        ROUNDS,
        [
            &mut || render(&native).0,
            &mut || render(&interpreted).0,
            &mut || render(&all).0,
        ],
    );
    for (round, ((n, i), u)) in n.iter().zip(&i).zip(&u).enumerate() {
        println!(
            "round {round}: native {n:>10.3?}   interpreted {i:>10.3?}   all, no hot comment {u:>10.3?}"
        );
    }
    let ratios = util::ratio_per_round(&n, &i);
    let median = util::median_ratio(&ratios);
    util::print_rounds(
        "native: Mandelbrot 800x600x200 on 1 worker, native/interpreted speed",
        &ratios,
        &format!(
            "goal >= {GOAL}x: {}; {}",
            if median >= GOAL { "met" } else { "MISSED" },
            NativeMode::Annotated.in_use()
        ),
    );
    let mid = |mut v: Vec<Duration>| {
        v.sort();
        v[v.len() / 2]
    };
    let unmarked = util::median_ratio(&util::ratio_per_round(&n, &u));
    println!(
        "native: median native {:.3?}, interpreted {:.3?}, all without the hot comment {:.3?} \
         (--!native is {unmarked:.2}x that: the hot comment's optimisation level 2 and types)",
        mid(n),
        mid(i),
        mid(u)
    );
}
