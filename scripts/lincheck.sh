#!/usr/bin/env bash
# The linearizability checker's own checks (lab/lincheck; CI runs this):
#   1. gofmt (no file may need formatting) and go vet;
#   2. go test: hand-made linearizable and non-linearizable histories, the input
#      validation, the command's exit codes, and generated histories of concurrent clients
#      on an in-memory store (a correct one must pass; one serving reads from a lagging
#      replica and one dropping acknowledged puts must be caught);
#   3. the native fuzz target of the line parser for LINCHECK_FUZZTIME (default 5s; 0 skips);
#   4. the installed binary (scripts/install-lincheck.sh) on a good and a bad history:
#      exit 0 and exit 1, or this script fails.
#
# Usage: bash scripts/lincheck.sh
# Env:   LINCHECK_FUZZTIME (default 5s)
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
say() { printf 'lincheck: %s\n' "$*"; }
export GOFLAGS="-mod=readonly -buildvcs=false" GOPROXY="https://proxy.golang.org"

cd "$repo/lab/lincheck"
unformatted="$(gofmt -l .)"
[[ -z "$unformatted" ]] || { say "gofmt needed: $unformatted"; exit 1; }
go vet ./...
go test -count=1 ./...

fuzztime="${LINCHECK_FUZZTIME:-5s}"
if [[ "$fuzztime" != 0 ]]; then
    say "go fuzz FuzzParseLine for $fuzztime"
    go test -run '^$' -fuzz '^FuzzParseLine$' -fuzztime "$fuzztime" . >/dev/null ||
        { go test -run '^$' -fuzz '^FuzzParseLine$' -fuzztime "$fuzztime" . | tail -30; exit 1; }
fi

bin="$(bash "$repo/scripts/install-lincheck.sh" | tail -1)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
put='{"client":0,"op":"put","key":"6b","value":"01","call":0,"return":10}'
printf '%s\n%s\n' "$put" '{"client":1,"op":"get","key":"6b","value":"01","call":20,"return":30}' >"$tmp/good.jsonl"
printf '%s\n%s\n' "$put" '{"client":1,"op":"get","key":"6b","value":null,"call":20,"return":30}' >"$tmp/bad.jsonl"
"$bin" "$tmp/good.jsonl" >/dev/null || { say "the binary rejected a linearizable history"; exit 1; }
rc=0
"$bin" "$tmp/bad.jsonl" >/dev/null || rc=$?
[[ $rc -eq 1 ]] || { say "the binary exited $rc on a lost write, want 1"; exit 1; }
say "ok"
