//! Builds `src/vm/native_shim.cpp`, Skein's two calls into Luau's C++ code generator API, when
//! the `native` feature builds Luau with its code generator (mlua-sys's `luau-codegen`).

fn main() {
    println!("cargo:rerun-if-changed=src/vm/native_shim.cpp");
    if std::env::var_os("CARGO_FEATURE_NATIVE").is_some() {
        cc::Build::new()
            .cpp(true)
            .std("c++17")
            .file("src/vm/native_shim.cpp")
            .compile("skein_native_shim");
    }
}
