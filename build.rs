//! Passes the loom mutants CI asks for (`SKEIN_LOOM_MUTANTS`, names separated by spaces) to this
//! crate alone as `cfg(loom_mutant = "...")`.
//!
//! Through `RUSTFLAGS` every crate of the build would be rebuilt for each wave of mutants, Luau
//! included; from here only `skein` is (loom-tests/README.md). Unset, as in every build but
//! CI's mutant waves, it emits nothing.

use std::env;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=SKEIN_LOOM_MUTANTS");
    let Ok(mutants) = env::var("SKEIN_LOOM_MUTANTS") else {
        return;
    };
    for name in mutants.split_whitespace() {
        println!("cargo:rustc-cfg=loom_mutant=\"{name}\"");
    }
}
