#!/usr/bin/env bash
# Installs what scripts/fuzz.sh needs, idempotently:
#   - cargo-fuzz (pinned version; skipped when that version is already installed);
#   - a C++ compiler (libfuzzer-sys compiles libFuzzer from source; apt-get if missing).
# Fuzzing runs on the stable toolchain: cargo-fuzz passes -Z flags (-Zsanitizer=...), which
# stable rustc accepts with RUSTC_BOOTSTRAP=1 (set by scripts/fuzz.sh, never globally).
#
# Usage: bash scripts/install-fuzz-tools.sh
# Env:   CARGO_FUZZ_VERSION (default 0.13.2)
set -euo pipefail

CARGO_FUZZ_VERSION="${CARGO_FUZZ_VERSION:-0.13.2}"

say() { printf 'install-fuzz-tools: %s\n' "$*"; }

command -v cargo >/dev/null || { say "cargo not found on PATH"; exit 1; }
say "toolchain: $(rustc --version)"

# 1. cargo-fuzz
have="$(cargo fuzz --version 2>/dev/null || true)"
if [[ "$have" == "cargo-fuzz $CARGO_FUZZ_VERSION" ]]; then
    say "cargo-fuzz $CARGO_FUZZ_VERSION already installed, skipping"
else
    say "installing cargo-fuzz $CARGO_FUZZ_VERSION (found: ${have:-none})"
    cargo install cargo-fuzz --locked --version "$CARGO_FUZZ_VERSION"
fi

# 2. A C++ compiler for libFuzzer's sources.
if command -v c++ >/dev/null || command -v g++ >/dev/null || command -v clang++ >/dev/null; then
    say "C++ compiler present: $(command -v c++ || command -v g++ || command -v clang++)"
elif [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
    say "no C++ compiler: apt-get install g++"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq g++
else
    say "no C++ compiler found; install g++ or clang++ (libfuzzer-sys builds libFuzzer from source)"
    exit 1
fi

# 3. Check that stable rustc accepts the flags cargo-fuzz passes.
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
echo 'fn main() {}' >"$tmp/probe.rs"
if ! RUSTC_BOOTSTRAP=1 rustc -Zsanitizer=address --out-dir "$tmp" "$tmp/probe.rs" >/dev/null 2>&1; then
    say "warning: rustc refuses -Zsanitizer=address even with RUSTC_BOOTSTRAP=1;"
    say "         scripts/fuzz.sh defaults to FUZZ_SANITIZER=none, which does not need it"
fi
if ! rustc -Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
    -Cllvm-args=-sanitizer-coverage-inline-8bit-counters --emit=obj --out-dir "$tmp" "$tmp/probe.rs" >/dev/null 2>&1; then
    say "error: rustc does not accept the SanitizerCoverage flags cargo-fuzz needs"
    exit 1
fi
say "ready: $(cargo fuzz --version)"
