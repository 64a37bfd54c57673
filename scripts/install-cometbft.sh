#!/usr/bin/env bash
# Installs CometBFT (pinned) into the project's own tools directory, idempotently:
#   go install github.com/cometbft/cometbft/cmd/cometbft@$COMETBFT_VERSION
# with GOBIN=$TOOLS_BIN (default target/tools/bin, git-ignored with target/). When a
# cometbft binary is already there, `cometbft version` is compared with the pin and the
# build is skipped if it matches. Needs the machine's `go` (1.22 or newer) and the Go
# module proxy. Prints the binary's path last, so scripts may `bin=$(... | tail -1)`.
#
# Usage: bash scripts/install-cometbft.sh
# Env:   COMETBFT_VERSION (default v0.38.26), TOOLS_BIN (default <repo>/target/tools/bin)
set -euo pipefail

COMETBFT_VERSION="${COMETBFT_VERSION:-v0.38.26}"
repo="$(cd "$(dirname "$0")/.." && pwd)"
TOOLS_BIN="${TOOLS_BIN:-$repo/target/tools/bin}"
bin="$TOOLS_BIN/cometbft"

say() { printf 'install-cometbft: %s\n' "$*" >&2; }

command -v go >/dev/null || { say "go not found on PATH (install Go 1.22+ first)"; exit 1; }

have="$("$bin" version 2>/dev/null || true)"
if [[ "v$have" == "$COMETBFT_VERSION" || "$have" == "$COMETBFT_VERSION" ]]; then
    say "cometbft $COMETBFT_VERSION already at $bin, skipping"
else
    say "installing cometbft $COMETBFT_VERSION into $TOOLS_BIN (found: ${have:-none}; $(go version))"
    mkdir -p "$TOOLS_BIN"
    # A temporary module directory, so no go.mod of the caller's interferes.
    tmp="$(mktemp -d)"
    trap 'rm -rf "$tmp"' EXIT
    (cd "$tmp" && GOBIN="$TOOLS_BIN" GOFLAGS=-buildvcs=false go install \
        "github.com/cometbft/cometbft/cmd/cometbft@$COMETBFT_VERSION")
    have="$("$bin" version)"
    say "installed cometbft $have"
    if [[ "v$have" != "$COMETBFT_VERSION" && "$have" != "$COMETBFT_VERSION" ]]; then
        say "error: $bin reports version '$have', expected $COMETBFT_VERSION"
        exit 1
    fi
fi
echo "$bin"
