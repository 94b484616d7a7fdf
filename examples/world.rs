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

use skein::{DomainSpec, MapKey, Message, Plan, Pool, ScriptDomain};

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
fn register_services(
    domain: &ScriptDomain,
    world: &Rc<RefCell<Vec<Entity>>>,
    finished: &Rc<Cell<Option<(u64, f64)>>>,
) -> skein::Result<()> {
    let w = world.clone();
    // Luau numbers are f64: answer a number, not a Luau integer.
    domain.register_query("world.count", move |_| {
        Ok(Message::Number(w.borrow().len() as f64))
    })?;

    let w = world.clone();
    domain.register_query("world.get", move |args| {
        let args = list(args)?;
        let world = w.borrow();
        let entity = world[index(&args, 0, world.len())?];
        Ok(Message::Map(vec![
            (key("pos"), Message::Vector(entity.pos)),
            (key("vel"), Message::Vector(entity.vel)),
        ]))
    })?;

    let w = world.clone();
    domain.register_command("world.set", move |args| {
        let args = list(args)?;
        let mut world = w.borrow_mut();
        let i = index(&args, 0, world.len())?;
        match args.get(1) {
            Some(Message::Vector(pos)) => world[i].pos = *pos,
            other => return Err(format!("a position is a vector, got {other:?}")),
        }
        Ok(())
    })?;

    let done = finished.clone();
    domain.register_command("sim.finished", move |args| {
        let args = list(args)?;
        let (moved, checksum) = (number(args.first())?, number(args.get(1))?);
        done.set(Some((moved as u64, checksum)));
        Ok(())
    })
}

/// A service's arguments: always one list of the call's arguments.
fn list(args: Message) -> Result<Vec<Message>, String> {
    match args {
        Message::List(args) => Ok(args),
        other => Err(format!("expected the arguments as a list, got {other:?}")),
    }
}

fn number(m: Option<&Message>) -> Result<f64, String> {
    match m {
        Some(Message::Number(n)) => Ok(*n),
        Some(Message::Integer(i)) => Ok(*i as f64),
        other => Err(format!("expected a number, got {other:?}")),
    }
}

/// The 0-based index of the 1-based entity id at `args[at]`, checked against `len`.
fn index(args: &[Message], at: usize, len: usize) -> Result<usize, String> {
    let id = number(args.get(at))?;
    if id.fract() != 0.0 || id < 1.0 || id > len as f64 {
        return Err(format!("no entity {id} (ids are 1 to {len})"));
    }
    Ok(id as usize - 1)
}

fn key(name: &str) -> MapKey {
    MapKey::String(name.as_bytes().to_vec().into())
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
