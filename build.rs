//! Two jobs, both small:
//!
//! - Builds `src/vm/native_shim.cpp`, Skein's two calls into Luau's C++ code generator API, when
//!   the `native` feature builds Luau with its code generator (mlua-sys's `luau-codegen`).
//! - Passes the loom mutants CI asks for (`SKEIN_LOOM_MUTANTS`, names separated by spaces) to
//!   this crate alone as `cfg(loom_mutant = "...")`. Through `RUSTFLAGS` every crate of the build
//!   would be rebuilt for each wave of mutants, Luau included; from here only `skein` is
//!   (loom-tests/README.md). Unset, as in every build but CI's mutant waves, it emits nothing.

use std::env;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=src/vm/native_shim.cpp");
    println!("cargo:rerun-if-env-changed=SKEIN_LOOM_MUTANTS");
    if env::var_os("CARGO_FEATURE_NATIVE").is_some() {
        cc::Build::new()
            .cpp(true)
            .std("c++17")
            .file("src/vm/native_shim.cpp")
            .compile("skein_native_shim");
    }
    if let Ok(mutants) = env::var("SKEIN_LOOM_MUTANTS") {
        for name in mutants.split_whitespace() {
            println!("cargo:rustc-cfg=loom_mutant=\"{name}\"");
        }
    }
}
