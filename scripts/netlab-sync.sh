#!/usr/bin/env bash
# State sync over the netlab namespaces: builds bavl, bavl-harness (whose `serve-liar` runs
# bavl's lying peers) and bavl-synclab (in $BAVL_PROFILE, release by default) and runs the
# experiments (the runs: lab/notes/results-history.md, "State sync over a network").
# Needs root.
#
#   scripts/netlab-sync.sh --quick                 # smoke: 20k keys, 3 peers, ~1-2 min
#   scripts/netlab-sync.sh --exp s7 --reps 3       # the headline figures -> docs/results/sync.json
#   scripts/netlab-sync.sh --exp size,chunk,peers,byz,cpu --reps 2
#
# CARGO_TARGET_DIR is honoured (default target/). Exit status 1 if any sync failed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/profile.sh
source scripts/profile.sh
# Separate builds: built together, cargo would unify bavl-sync's features and link the
# lying server (feature `liars`, the harness's) into the `bavl` being measured.
bavl_build -p bavl-cli
bavl_build -p bavl-harness
bavl_lab_build -p bavl-synclab
exec "$BAVL_BIN/bavl-synclab" run "$@"
