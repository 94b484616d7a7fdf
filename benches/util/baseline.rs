//! The hand-rolled pool Skein's throughput is held against: rayon threads, each with its own
//! mlua VM built once (thread-local) with `util::ECHO`'s `run` loaded once, calling it once per
//! item. `spawn_each` is how `benches/dispatch.rs` issues (a spawn and a channel send per item);
//! `par_map` is the same pool written as a rayon parallel map, the best a user would hand-roll
//! for a map over a list (rayon splits the range adaptively; no per-item spawn or channel).

use std::cell::RefCell;

use rayon::prelude::*;
use skein::mlua::{self, Lua};

thread_local! {
    /// The hand-rolled worker VM: built once per rayon thread, with the entry loaded once.
    static VM: RefCell<Option<(Lua, mlua::Function)>> = const { RefCell::new(None) };
}

/// One item on the calling rayon thread: `run(x)` in its VM.
pub fn item(x: i64) -> i64 {
    VM.with(|slot| {
        let mut slot = slot.borrow_mut();
        let (_, run) = slot.get_or_insert_with(|| {
            let lua = Lua::new();
            // Interpreted, as Skein runs a module without `--!native`: Skein builds mlua without
            // `luau-jit`, so this VM has no code generator.
            let module: mlua::Table = lua.load(super::ECHO).eval().expect("load echo");
            let run: mlua::Function = module.get("run").expect("run");
            (lua, run)
        });
        run.call::<i64>(x).expect("call")
    })
}

/// `items` spawns on the rayon pool, each answering through a channel; answers the sum.
pub fn spawn_each(pool: &rayon::ThreadPool, items: usize) -> i64 {
    let (tx, rx) = crossbeam_channel::unbounded::<i64>();
    for i in 1..=items as i64 {
        let tx = tx.clone();
        pool.spawn(move || {
            let _ = tx.send(item(i));
        });
    }
    drop(tx);
    (0..items).map(|_| rx.recv().expect("result")).sum()
}

/// `run(x)` for each of `1..=items` as a rayon parallel map into a list, in order; answers the
/// sum of the list.
pub fn par_map(pool: &rayon::ThreadPool, items: usize) -> i64 {
    let list: Vec<i64> = pool.install(|| (1..=items as i64).into_par_iter().map(item).collect());
    list.iter().sum()
}
