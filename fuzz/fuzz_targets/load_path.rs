//! Arbitrary bytes through Skein's real load paths: as a main script (`run_file`), as a module a
//! script requires, and as a `@skein/worker` source. Whatever the bytes, nothing may crash: each
//! input either runs (within a short run deadline and a small memory limit) or is refused with
//! an error. Bytecode-looking input must be refused before Luau's loader sees it.
#![no_main]

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use libfuzzer_sys::fuzz_target;
use skein::capability::{CapabilityId, CapabilitySet, RootAuthority};
use skein::{DomainSpec, Plan, Pool, ScriptDomain};

/// One pool for every input: building threads per input would drown the fuzzer.
fn pool() -> &'static Pool {
    static POOL: OnceLock<Pool> = OnceLock::new();
    POOL.get_or_init(|| Pool::new(2))
}

/// How long one input may keep the domain busy before it is dropped (a drop ends its tasks).
const PUMP_FOR: Duration = Duration::from_millis(100);

fuzz_target!(|data: &[u8]| {
    let Some((&mode, source)) = data.split_first() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let grant = RootAuthority::new().grant(CapabilitySet::from_iter([CapabilityId::new(
        "worker.spawn",
    )
    .expect("a valid name")]));
    let spec = DomainSpec::new("fuzz")
        .plan(
            Plan::new()
                .memory_limit(16 << 20)
                .root(dir.path().to_path_buf()),
        )
        .grant(grant)
        .run_deadline(Duration::from_millis(20))
        .actor_budget(Duration::from_millis(20));
    let domain = ScriptDomain::new(pool(), spec).expect("a domain");
    let main = dir.path().join("main.luau");
    match mode % 3 {
        // The bytes are the main script.
        0 => std::fs::write(&main, source).expect("write main"),
        // The bytes are a module the main script requires (and a job's module).
        1 => {
            std::fs::write(dir.path().join("m.luau"), source).expect("write module");
            std::fs::write(
                &main,
                "pcall(require, './m')\npcall(function() return jobs.dispatch('./m', 'f'):await() end)\n",
            )
            .expect("write main");
        }
        // The bytes are a worker's source, handed over as a Luau string.
        _ => {
            domain
                .lua()
                .globals()
                .set(
                    "SOURCE",
                    domain.lua().create_string(source).expect("a string"),
                )
                .expect("a global");
            std::fs::write(
                &main,
                "local w = require('@skein/worker').spawn { source = SOURCE }\nw:send(1)\npcall(function() return w:receive(0.05) end)\npcall(function() return w:join(0.05) end)\n",
            )
            .expect("write main");
        }
    }
    // Refused (compile, bytecode, size) or started: both are fine; a crash is not.
    if domain.run_file(&main, &[]).is_ok() {
        let started = Instant::now();
        while started.elapsed() < PUMP_FOR && domain.pump().did_anything() {}
    }
    let _ = domain.take_reports();
});
