#!/usr/bin/env bash
# The light-client verifiers in Go (verifiers/go) and TypeScript (verifiers/ts), and the
# differential test that holds them and the Rust verifier to one another.
#
# Usage:
#   scripts/verifiers.sh [all]   go, ts and diff below (CI)
#   scripts/verifiers.sh go      gofmt, go vet, go test (vectors, every-byte mutants; the
#                                bavl-query module's offline tests), then each native fuzz
#                                target for GO_FUZZTIME (default 50000x: inputs, not time)
#   scripts/verifiers.sh ts      tsc (strict) and node --test: vectors, mutants, the light
#                                client on captured CometBFT headers, and the package in
#                                headless Chromium
#   scripts/verifiers.sh diff    writes the differential corpus (valid proofs and chunks of
#                                six trees, every-byte mutants, forged proofs from the fuzz
#                                crate's prover) with bavl_core's verdicts, runs the Go and
#                                TypeScript verifiers on it, and fails unless all three give
#                                the same verdict (accept with the same result, or the same
#                                error kind) on every case
#
# Needs: go, node, npm and cargo on PATH; chromium and the npm packages from
# scripts/install-verifier-tools.sh (run it first; it is idempotent).
# Env: GO_FUZZTIME (default 50000x), DIFF_DIR (default target/verifiers-diff).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
say() { printf 'verifiers: %s\n' "$*"; }

run_go() {
    cd "$ROOT/verifiers/go"
    local unformatted
    unformatted="$(gofmt -l .)"
    [[ -z "$unformatted" ]] || { say "gofmt needed: $unformatted"; exit 1; }
    go vet ./...
    go test -count=1 ./...
    # bavl-query, its own module (it needs CometBFT; the verifier module stays
    # standard-library-only): vet with and without the localnet tests, the offline tests.
    # The end-to-end tests against a localnet: scripts/trustless-query.sh.
    (cd cmd/bavl-query && go vet ./... && go vet -tags localnet ./... && go test -count=1 ./...)
    # A count, not a duration: with a duration Go's fuzzer can fail a target with "context
    # deadline exceeded" when the clock runs out while a starved worker is mid-input
    # (golang/go#51484; it failed CI once on a loaded machine, with no failing input).
    # A count has no deadline. A real finding writes its input under testdata/fuzz/.
    local fuzztime="${GO_FUZZTIME:-50000x}" log
    log="$(mktemp)"
    for target in $(go test -list '^Fuzz' . | grep '^Fuzz'); do
        say "go fuzz $target for $fuzztime"
        go test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" . >"$log" 2>&1 ||
            { tail -40 "$log"; rm -f "$log"; exit 1; }
    done
    rm -f "$log"
}

run_ts() {
    cd "$ROOT/verifiers/ts"
    [[ -d node_modules ]] || { say "npm packages missing: bash scripts/install-verifier-tools.sh"; exit 1; }
    npx --no-install tsc -p tsconfig.json
    npx --no-install tsc -p tsconfig.test.json
    node --test dist/test/*.test.js
}

run_diff() {
    local dir="${DIFF_DIR:-$ROOT/target/verifiers-diff}"
    mkdir -p "$dir"
    # In the test profile, into the main target directory: fuzz/Cargo.toml repeats the main
    # workspace's profiles, so the generator reuses most of what the product's tests compiled
    # (a release build in fuzz/target compiled every dependency again).
    local target="${CARGO_TARGET_DIR:-$ROOT/target}"
    say "building the corpus generator (fuzz/examples/diff_corpus.rs, test profile)"
    cargo build --profile test -q --target-dir "$target" --manifest-path "$ROOT/fuzz/Cargo.toml" \
        --no-default-features --example diff_corpus
    "$target/debug/examples/diff_corpus" "$dir/corpus.json" "$dir/rust.txt"
    (cd "$ROOT/verifiers/go" && go run ./cmd/bavl-corpus "$dir/corpus.json") >"$dir/go.txt"
    (cd "$ROOT/verifiers/ts" && npx --no-install tsc -p tsconfig.test.json &&
        node dist/tools/corpus.js "$dir/corpus.json") >"$dir/ts.txt"
    local cases failed=0
    cases=$(wc -l <"$dir/rust.txt")
    for lang in go ts; do
        if cmp -s "$dir/rust.txt" "$dir/$lang.txt"; then
            say "$lang agrees with rust on all $cases cases"
        else
            failed=1
            say "$lang DISAGREES with rust (first differences; bases and cases in $dir/corpus.json):"
            diff "$dir/rust.txt" "$dir/$lang.txt" | cut -c1-200 | head -20
        fi
    done
    local kinds
    kinds=$(cut -d' ' -f2,3 "$dir/rust.txt" | sed 's/^ok .*/ok/' | sort | uniq -c | tr -s ' ' | tr '\n' ';')
    say "verdicts:$kinds"
    if [[ $failed -eq 0 ]]; then
        echo "verifiers: $((2 * cases)) passed, 0 failed"
    else
        exit 1
    fi
}

case "${1:-all}" in
all) (run_go) && (run_ts) && (run_diff) ;;
go) run_go ;;
ts) run_ts ;;
diff) run_diff ;;
*) sed -n '/^# Usage:/,/^# Env:/p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
