//! The embedding example `examples/world.rs`, run as a test: exact counts and final positions.

#[path = "../examples/world.rs"]
#[allow(dead_code)]
mod world;

use world::{initial_world, run, SIZE};

/// The script's rule, in Rust: each step adds the velocity and wraps around the square.
fn expected_positions(entities: usize, steps: usize) -> Vec<[f32; 3]> {
    let size = SIZE as f32;
    initial_world(entities)
        .into_iter()
        .map(|e| {
            let mut p = e.pos;
            for _ in 0..steps {
                p[0] = (p[0] + e.vel[0]).rem_euclid(size);
                p[1] = (p[1] + e.vel[1]).rem_euclid(size);
            }
            p
        })
        .collect()
}

#[test]
fn jobs_move_every_entity_through_forwarded_queries_and_recorded_commands() {
    let (entities, jobs, steps) = (150, 4, 5);
    let summary = run(entities, jobs, steps).expect("the example runs");
    let moves = (entities * steps) as u64;
    assert_eq!(summary.moved, moves);
    // One world.get and one world.set per entity per step, all from jobs on workers.
    assert_eq!(summary.forwarded_calls, moves);
    assert_eq!(summary.commands_applied, moves);
    // A step's jobs are dispatched after the previous step's settled, a frame later at least.
    assert!(summary.frames >= steps as u64, "{} frames", summary.frames);
    let expected = expected_positions(entities, steps);
    assert_eq!(summary.positions, expected);
    let sum: f64 = expected.iter().map(|p| f64::from(p[0] + p[1])).sum();
    assert_eq!(summary.checksum, sum);
    // The world did move: not every entity is back where it started.
    let start: Vec<[f32; 3]> = initial_world(entities).iter().map(|e| e.pos).collect();
    assert_ne!(summary.positions, start);
}

#[test]
fn a_job_slice_of_one_entity_and_a_single_step_still_add_up() {
    let summary = run(3, 5, 1).expect("the example runs");
    assert_eq!(summary.moved, 3);
    assert_eq!(summary.forwarded_calls, 3);
    assert_eq!(summary.commands_applied, 3);
    assert_eq!(summary.positions, expected_positions(3, 1));
}

#[test]
fn an_empty_world_fails_the_script_and_run_says_why() {
    let e = run(0, 4, 1).expect_err("nothing to move").to_string();
    assert!(e.contains("sim.luau"), "{e}");
    assert!(e.contains("the world has no entities"), "{e}");
}
