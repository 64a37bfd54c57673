#!/usr/bin/env bash
# Fuzzes every bavl-core decoder of untrusted bytes with cargo-fuzz (libFuzzer) on the
# stable toolchain (RUSTC_BOOTSTRAP=1 lets stable rustc accept the -Z flags cargo-fuzz
# passes). Targets live in fuzz/ (its own cargo workspace); tools: scripts/install-fuzz-tools.sh.
#
# Usage:
#   scripts/fuzz.sh smoke             build, seed, run each target FUZZ_SMOKE_SECONDS (10) s (CI)
#   scripts/fuzz.sh long [SECONDS]    build, seed, run each target SECONDS (default 600) s
#   scripts/fuzz.sh seed              rewrite the seed corpora fuzz/corpus/<target>/
#   scripts/fuzz.sh build             build the targets only
#   scripts/fuzz.sh repro TARGET FILE run one input (e.g. a crash artifact) and show the panic
#
# Env:
#   FUZZ_SANITIZER   none (default) or address. bavl-core is #![forbid(unsafe_code)], so
#                    the fuzzers hunt panics, overflows (debug assertions are on), aborts,
#                    stack overflows, timeouts and runaway memory, none of which needs ASan;
#                    ASan costs 4-8x in executions here. `address` also enables a 256 MB
#                    per-allocation limit (nothing may allocate in proportion to a claim).
#   FUZZ_TARGETS     the targets to run (default: all), space-separated
#   FUZZ_SMOKE_SECONDS  seconds per target for smoke (default 10)
#   FUZZ_UNIT_TIMEOUT   seconds one input may take before it counts as a hang (default 20)
#
# Each run regenerates the seed corpus (valid chunks, proofs, restore sequences, operation
# sequences from fuzz/examples/make_seeds.rs, plus the past failures kept in
# fuzz/regressions/<target>/), fuzzes into fuzz/corpus/<target>/, writes
# crashing inputs to fuzz/artifacts/<target>/ and the full log to fuzz/target/logs/.
# Exit status: non-zero if a build failed or any target crashed.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
FUZZ="$ROOT/fuzz"
ALL_TARGETS=(verify_chunk verify_proofs restore roundtrip forge store_files syncer cluster_wire)
read -r -a TARGETS <<<"${FUZZ_TARGETS:-${ALL_TARGETS[*]}}"
SAN="${FUZZ_SANITIZER:-none}"
UNIT_TIMEOUT="${FUZZ_UNIT_TIMEOUT:-20}"
TARGET_DIR="$FUZZ/target/libfuzzer-$SAN"
BIN_DIR="$TARGET_DIR/x86_64-unknown-linux-gnu/release"
LOGS="$FUZZ/target/logs"
# Release build with debug assertions (and so overflow checks) on.
BUILD_FLAGS=(--fuzz-dir "$FUZZ" --release --debug-assertions --sanitizer "$SAN" --target-dir "$TARGET_DIR")

case "$SAN" in
none | address) ;;
*) echo "fuzz.sh: FUZZ_SANITIZER must be none or address (got $SAN)" >&2; exit 2 ;;
esac

say() { printf 'fuzz: %s\n' "$*"; }

usage() {
    sed -n '/^# Usage:/,/^# Exit status/p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

need_cargo_fuzz() {
    if ! cargo fuzz --version >/dev/null 2>&1; then
        echo "fuzz.sh: cargo-fuzz is not installed; run: bash scripts/install-fuzz-tools.sh" >&2
        exit 1
    fi
}

cargo_fuzz() {
    (cd "$ROOT" && RUSTC_BOOTSTRAP=1 cargo fuzz "$@")
}

build() {
    need_cargo_fuzz
    say "building ${#ALL_TARGETS[@]} targets (sanitizer: $SAN, debug assertions on) into ${TARGET_DIR#"$ROOT"/}"
    local t0=$SECONDS
    cargo_fuzz build "${BUILD_FLAGS[@]}"
    say "build done in $((SECONDS - t0)) s"
}

seed() {
    local t0=$SECONDS
    say "generating seed corpora (fuzz/examples/make_seeds.rs)"
    # Built without libFuzzer (no C++ compile) and without instrumentation, in the test
    # profile into the main target directory (as scripts/verifiers.sh builds diff_corpus),
    # where it reuses what the product's tests compiled.
    local target="${CARGO_TARGET_DIR:-$ROOT/target}"
    cargo build --quiet --profile test --target-dir "$target" --no-default-features \
        --example make_seeds --manifest-path "$FUZZ/Cargo.toml"
    local t
    for t in "${ALL_TARGETS[@]}"; do
        rm -rf "${FUZZ:?}/corpus/$t"
    done
    "$target/debug/examples/make_seeds" "$FUZZ/corpus" | sed 's/^/fuzz: /'
    # Inputs that once failed stay in every corpus (fuzz/regressions/<target>/).
    local n=0 f
    for t in "${ALL_TARGETS[@]}"; do
        if [[ -d "$FUZZ/regressions/$t" ]]; then
            for f in "$FUZZ/regressions/$t"/*; do
                [[ -f "$f" ]] || continue
                cp "$f" "$FUZZ/corpus/$t/regression-$(basename "$f")"
                n=$((n + 1))
            done
        fi
    done
    say "added $n regression inputs from fuzz/regressions/"
    say "seeds done in $((SECONDS - t0)) s"
}

hex() { od -An -tx1 -v "$1" | tr -d ' \n'; }

FAILED=()
SUMMARY=()

run_target() {
    local t=$1 secs=$2
    local log="$LOGS/$t.log" art="$FUZZ/artifacts/$t" corpus="$FUZZ/corpus/$t"
    mkdir -p "$art" "$LOGS"
    local seeds
    seeds=$(find "$corpus" -type f | wc -l)
    local marker
    marker="$(mktemp)"
    local extra=()
    [[ "$SAN" == address ]] && extra+=(-malloc_limit_mb=256)
    say "running $t for $secs s (log: ${log#"$ROOT"/})"
    local rc=0 t0=$SECONDS
    # GNU timeout signals the whole process group (cargo-fuzz and the fuzzer) if a run
    # overstays its time by far.
    (cd "$ROOT" && timeout -k 10 $((secs * 2 + 300)) env RUSTC_BOOTSTRAP=1 \
        cargo fuzz run "${BUILD_FLAGS[@]}" "$t" "$corpus" -- \
        -max_total_time="$secs" -print_final_stats=1 -timeout="$UNIT_TIMEOUT" \
        -rss_limit_mb=2048 "${extra[@]}") >"$log" 2>&1 || rc=$?
    local runs rate cov corp crashes took=$((SECONDS - t0 > 0 ? SECONDS - t0 : 1))
    runs=$(sed -n 's/^stat::number_of_executed_units: *\([0-9]*\).*/\1/p' "$log" | tail -n1)
    rate=$(grep -o 'exec/s: [0-9]*' "$log" | tail -n1 | cut -d' ' -f2 || true)
    [[ -z "$rate" && -n "$runs" ]] && rate=$((runs / took))
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -n1 | cut -d' ' -f2 || true)
    corp=$(find "$corpus" -type f | wc -l)
    mapfile -t crashes < <(find "$art" -type f -newer "$marker" \
        \( -name 'crash-*' -o -name 'timeout-*' -o -name 'oom-*' -o -name 'leak-*' \) | sort)
    rm -f "$marker"
    local line
    line=$(printf '%-14s runs %10s  (%6s/s)  cov %5s  corpus %4s -> %-5s  crashes %d' \
        "$t" "${runs:-?}" "${rate:-?}" "${cov:-?}" \
        "$seeds" "$corp" "${#crashes[@]}")
    if ((rc != 0)) || ((${#crashes[@]} > 0)); then
        line+="  FAILED (exit $rc)"
        FAILED+=("$t")
        say "$t FAILED (exit $rc); from its log:"
        grep -E -m8 -A3 "panicked at|ERROR: libFuzzer|ERROR: AddressSanitizer|==ERROR|SUMMARY:|stack overflow|out-of-memory|deadly signal|timeout after" "$log" |
            sed 's/^/    /' || tail -n 30 "$log" | sed 's/^/    /'
        local c
        for c in "${crashes[@]}"; do
            say "reproducer ${c#"$ROOT"/} ($(wc -c <"$c") bytes): $(hex "$c" | cut -c1-4000)"
            say "  replay: scripts/fuzz.sh repro $t ${c#"$ROOT"/}"
        done
    fi
    SUMMARY+=("$line")
    say "$line"
}

fuzz_all() {
    local secs=$1 t0=$SECONDS
    build
    seed
    local t
    for t in "${TARGETS[@]}"; do
        run_target "$t" "$secs"
    done
    echo
    say "summary (sanitizer $SAN, $secs s per target, total wall $((SECONDS - t0)) s):"
    local l
    for l in "${SUMMARY[@]}"; do
        say "  $l"
    done
    if ((${#FAILED[@]} > 0)); then
        say "FAILED: ${FAILED[*]} (inputs in fuzz/artifacts/<target>/, logs in fuzz/target/logs/)"
        exit 1
    fi
    say "OK: no crashes"
}

for t in "${TARGETS[@]}"; do
    [[ " ${ALL_TARGETS[*]} " == *" $t "* ]] || { echo "fuzz.sh: unknown target $t (known: ${ALL_TARGETS[*]})" >&2; exit 2; }
done

case "${1:-}" in
smoke)
    fuzz_all "${FUZZ_SMOKE_SECONDS:-10}"
    ;;
long)
    secs="${2:-600}"
    if ! [[ "$secs" =~ ^[1-9][0-9]*$ ]]; then usage; fi
    fuzz_all "$secs"
    ;;
seed)
    seed
    ;;
build)
    build
    ;;
repro)
    [[ $# -eq 3 ]] || usage
    [[ " ${ALL_TARGETS[*]} " == *" $2 "* ]] || usage
    build >/dev/null
    say "replaying $3 on $2 ($(wc -c <"$3") bytes): $(hex "$3" | cut -c1-4000)"
    RUST_BACKTRACE=1 "$BIN_DIR/$2" "$3"
    ;;
*)
    usage
    ;;
esac
