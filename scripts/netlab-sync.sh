#!/usr/bin/env bash
# State sync over the netlab namespaces: builds bavl, bavl-harness (whose `serve-liar` runs
# bavl's lying peers) and bavl-synclab (release) and runs the experiments (docs/results/README.md, "State sync over a network"). Needs root.
#
#   scripts/netlab-sync.sh --quick                 # smoke: 20k keys, 3 peers, ~1-2 min
#   scripts/netlab-sync.sh --exp s7 --reps 3       # issue 4 §7 figures -> docs/results/sync.json
#   scripts/netlab-sync.sh --exp size,chunk,peers,byz,cpu --reps 2
#
# CARGO_TARGET_DIR is honoured (default target/). Exit status 1 if any sync failed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [ -n "${CARGO_TARGET_DIR:-}" ]; then
    CARGO_TARGET_DIR="$(realpath -m "$CARGO_TARGET_DIR")"
    export CARGO_TARGET_DIR
fi
target="${CARGO_TARGET_DIR:-target}"
# Two builds: built together, cargo would unify bavl-sync's features and link the lying
# server (feature `liars`, the harness's) into the `bavl` being measured.
cargo build --release -q -p bavl-cli
cargo build --release -q -p bavl-harness
(cd lab && cargo build --release -q -p bavl-synclab)
exec "$target/release/bavl-synclab" run "$@"
