#!/bin/bash
# Bytes one outstanding dispatch holds at the peak, against the hand-rolled pool's outstanding
# task, from benches/promise_memory.rs (see that file's header for what each side holds).
#   benches/promise_memory.sh [runs]
# Builds the release driver, runs each side at N = 1,000 and 101,000 as separate processes
# (peak RSS only grows within one), `runs` times each (default 3), and prints each run's bytes
# per item, (peak at 101,000 - peak at 1,000) / 100,000, with Skein's over the baseline's.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-3}
cargo build --release --bench promise_memory >/dev/null 2>&1
bin=$(ls -t target/release/deps/promise_memory-* | grep -v '\.d$' | head -1)
peak() { "$bin" "$@" | sed -n 's/^peak \([0-9]*\) bytes.*/\1/p'; }
for run in $(seq "$runs"); do
    skein=$(( ($(peak 101000) - $(peak 1000)) / 100000 ))
    rayon=$(( ($(peak 101000 rayon) - $(peak 1000 rayon)) / 100000 ))
    echo "run $run: skein $skein bytes per outstanding dispatch, rayon + channel $rayon bytes per task; ratio $(python3 -c "print(f'{$skein / max($rayon, 1):.2f}')")x"
done
