#!/usr/bin/env bash
# Builds lincheck, the linearizability checker of cluster histories (lab/lincheck, on
# porcupine pinned in its go.mod/go.sum), into the project's tools directory, idempotently:
#   cd lab/lincheck && go build -trimpath -o $TOOLS_BIN/lincheck ./cmd/lincheck
# with GOFLAGS=-mod=readonly (go.mod and go.sum are never rewritten; every module is
# checked against go.sum) and GOPROXY=https://proxy.golang.org only (no direct VCS
# fetches). A stamp beside the binary holds a hash of the module's sources, go.mod, go.sum
# and `go version`; when it matches and the binary runs, the build is skipped. Needs the
# machine's `go` (1.22 or newer). Prints the binary's path last, so scripts may
# `bin=$(bash scripts/install-lincheck.sh | tail -1)`.
#
# Usage: bash scripts/install-lincheck.sh
# Env:   TOOLS_BIN (default <repo>/target/tools/bin)
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
src="$repo/lab/lincheck"
TOOLS_BIN="${TOOLS_BIN:-$repo/target/tools/bin}"
bin="$TOOLS_BIN/lincheck"
stamp="$TOOLS_BIN/.lincheck.stamp"

say() { printf 'install-lincheck: %s\n' "$*" >&2; }

command -v go >/dev/null || { say "go not found on PATH (install Go 1.22+ first)"; exit 1; }

want="$(cd "$src" && { go version; find . -name '*.go' -o -name go.mod -o -name go.sum |
    LC_ALL=C sort | xargs sha256sum; } | sha256sum | cut -d' ' -f1)"
if [[ -x "$bin" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]] && "$bin" --version >/dev/null 2>&1; then
    say "lincheck up to date at $bin, skipping ($("$bin" --version))"
else
    say "building lincheck into $TOOLS_BIN ($(go version))"
    mkdir -p "$TOOLS_BIN"
    (cd "$src" && GOFLAGS="-mod=readonly -buildvcs=false" GOPROXY="https://proxy.golang.org" \
        go build -trimpath -o "$bin.tmp" ./cmd/lincheck)
    mv -f "$bin.tmp" "$bin"
    echo "$want" >"$stamp"
    say "installed: $("$bin" --version)"
fi
echo "$bin"
