#!/usr/bin/env bash
# State sync over the netlab namespaces: builds bavl and bavl-synclab (release) and runs
# the experiments (docs/results/README.md, "State sync over a network"). Needs root.
#
#   scripts/netlab-sync.sh --quick                 # smoke: 20k keys, 3 peers, ~1-2 min
#   scripts/netlab-sync.sh --exp s7 --reps 3       # issue 4 §7 figures -> docs/results/sync.json
#   scripts/netlab-sync.sh --exp size,chunk,peers,byz,cpu --reps 2
#
# CARGO_TARGET_DIR is honoured (default target/). Exit status 1 if any sync failed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
target="${CARGO_TARGET_DIR:-target}"
cargo build --release -q -p bavl-cli -p bavl-synclab
exec "$target/release/bavl-synclab" run "$@"
