//! Skein's integration tests: one binary, one module per area, because each test binary relinks Luau.

mod support;

mod actors;
mod capabilities;
mod context_caps;
mod contexts;
mod diagnostic_sink;
mod dispatch;
mod docs;
mod domain_events;
mod domain_stats;
mod engine_events;
mod fixture;
mod generations;
mod handler_calls;
mod host_keys;
mod interfaces;
mod keys;
mod logs;
mod parallel_for;
mod profile;
mod registered;
mod reload;
mod runner;
mod services;
mod shared_queues;
mod shared_stress;
mod shared_tables;
mod shared_trie;
mod stress;
mod tasks;
mod value;
mod warm;
mod worker_events;
mod worker_registered;
mod world_example;
