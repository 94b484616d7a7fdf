//! Embedding Skein in a host that owns a world of entities.
//!
//! The host keeps its entities in a plain `Vec` on its own thread and gives the script domain
//! engine services over it: the queries `world.count()` and `world.get(id)` and the command
//! `world.set(id, pos)`. The script `examples/world/sim.luau` moves every entity a number of
//! steps, one job per slice of entities on the worker pool; the host just runs frames until the
//! script is done, then checks its world against what the script computed.
//!
//! ```text
//! cargo run --release --example world [-- ENTITIES JOBS STEPS]
//! ```

use std::cell::{Cell, RefCell};
use std::error::Error;
use std::path::PathBuf;
use std::rc::Rc;
use std::time::Duration;

use skein::{DomainSpec, Message, Plan, Pool, ScriptDomain};

/// The side of the square world: positions wrap around at this size.
pub const SIZE: u32 = 64;

/// One entity of the host's world. Positions and velocities are whole numbers, so the script's
/// arithmetic (Luau vectors hold f32) is exact and the host can check it to the bit.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Entity {
    pub pos: [f32; 3],
    pub vel: [f32; 3],
}

/// What a run did, as the host saw it.
#[derive(Clone, Debug, PartialEq)]
pub struct Summary {
    /// Frames the host ran until the script was done.
    pub frames: u64,
    /// Entities moved, as the script counted them (entities x steps).
    pub moved: u64,
    /// Queries forwarded from workers (every `world.get` a job made), from the frame reports.
    pub forwarded_calls: u64,
    /// Commands recorded on workers and applied by frames (every `world.set` a job made).
    pub commands_applied: u64,
    /// The sum of every entity's x + y after the last step.
    pub checksum: f64,
    /// Every entity's final position, in id order.
    pub positions: Vec<[f32; 3]>,
}

/// The world the host starts from: `count` entities spread over the square, each with its own
/// small velocity.
pub fn initial_world(count: usize) -> Vec<Entity> {
    (0..count as u32)
        .map(|i| Entity {
            pos: [(i * 7 % SIZE) as f32, (i * 13 % SIZE) as f32, 0.0],
            vel: [(i % 5) as f32 - 2.0, (i % 3) as f32 - 1.0, 0.0],
        })
        .collect()
}

/// Runs the script over a world of `entities`, cut into `jobs` slices a step, for `steps` steps.
///
/// # Errors
/// A script that fails, a command a frame could not apply, or a world that ends up other than
/// the script computed.
pub fn run(entities: usize, jobs: usize, steps: usize) -> Result<Summary, Box<dyn Error>> {
    let folder = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/world");
    let pool = Pool::new(2);
    let plan = Plan::new().root(&folder);
    let domain = ScriptDomain::new(&pool, DomainSpec::new("world").plan(plan))?;

    // The host's state: owned by this (the engine) thread, shared with the service closures.
    let world = Rc::new(RefCell::new(initial_world(entities)));
    let finished: Rc<Cell<Option<(u64, f64)>>> = Rc::default();
    register_services(&domain, &world, &finished)?;

    domain.run_file(
        folder.join("sim.luau"),
        &[jobs.to_string(), steps.to_string(), SIZE.to_string()],
    )?;

    // The frame loop. A game would simulate and render between frames and sleep to its frame
    // rate; this host has nothing else to do, so it only lets other threads run.
    let (mut frames, mut forwarded_calls, mut commands_applied) = (0, 0, 0);
    while domain.tasks() > 0 {
        let report = domain.frame(Duration::from_millis(16));
        frames += 1;
        forwarded_calls += report.forwarded_calls;
        commands_applied += report.commands_applied;
        std::thread::yield_now();
    }
    // Raises the script's error, if it failed; otherwise there is nothing left to run.
    domain.run_until_idle()?;
    if let Some(report) = domain.take_reports().into_iter().next() {
        return Err(format!("{}: {}", report.source, report.message).into());
    }

    let Some((moved, checksum)) = finished.get() else {
        return Err("the script ended without calling sim.finished".into());
    };
    let positions: Vec<[f32; 3]> = world.borrow().iter().map(|e| e.pos).collect();
    let ours: f64 = positions.iter().map(|p| f64::from(p[0] + p[1])).sum();
    if ours != checksum {
        return Err(
            format!("the script computed {checksum}, the host's world holds {ours}").into(),
        );
    }
    Ok(Summary {
        frames,
        moved,
        forwarded_calls,
        commands_applied,
        checksum,
        positions,
    })
}

/// `world.count()`, `world.get(id)`, `world.set(id, pos)` and `sim.finished(moved, checksum)`.
/// Each takes its arguments typed: a call with the wrong kind of argument is raised to the
/// script naming it (`args[2]: expected a vector, got a string`), before the closure runs.
fn register_services(
    domain: &ScriptDomain,
    world: &Rc<RefCell<Vec<Entity>>>,
    finished: &Rc<Cell<Option<(u64, f64)>>>,
) -> skein::Result<()> {
    let w = world.clone();
    // A Rust count becomes a Luau number, which the script can compute with.
    domain.register_query("world.count", move |()| Ok(w.borrow().len()))?;

    let w = world.clone();
    domain.register_query("world.get", move |id: i64| {
        let world = w.borrow();
        let entity = world[slot(id, world.len())?];
        Ok(Message::map([("pos", entity.pos), ("vel", entity.vel)]))
    })?;

    let w = world.clone();
    domain.register_command("world.set", move |(id, pos): (i64, [f32; 3])| {
        let mut world = w.borrow_mut();
        let i = slot(id, world.len())?;
        world[i].pos = pos;
        Ok(())
    })?;

    let done = finished.clone();
    domain.register_command("sim.finished", move |(moved, checksum): (u64, f64)| {
        done.set(Some((moved, checksum)));
        Ok(())
    })
}

/// The 0-based slot of the 1-based entity `id`, checked against `len`.
fn slot(id: i64, len: usize) -> Result<usize, String> {
    usize::try_from(id)
        .ok()
        .filter(|&id| (1..=len).contains(&id))
        .map(|id| id - 1)
        .ok_or_else(|| format!("no entity {id} (ids are 1 to {len})"))
}

fn main() -> Result<(), Box<dyn Error>> {
    let arg = |i: usize, default: usize| -> Result<usize, Box<dyn Error>> {
        match std::env::args().nth(i) {
            Some(a) => Ok(a.parse()?),
            None => Ok(default),
        }
    };
    let (entities, jobs, steps) = (arg(1, 1_000)?, arg(2, 4)?, arg(3, 10)?);
    let started = std::time::Instant::now();
    let summary = run(entities, jobs, steps)?;
    println!(
        "{entities} entities, {jobs} jobs a step, {steps} steps: {} entity moves in {} frames ({:.1?})",
        summary.moved,
        summary.frames,
        started.elapsed()
    );
    println!(
        "forwarded queries answered: {}; recorded commands applied: {}",
        summary.forwarded_calls, summary.commands_applied
    );
    println!(
        "the host's world matches the script (checksum {}); entity 1 ended at ({}, {})",
        summary.checksum, summary.positions[0][0], summary.positions[0][1]
    );
    Ok(())
}
