#!/usr/bin/env bash
# Installs what scripts/verifiers.sh needs beyond the stock toolchains, idempotently:
#   - Debian's chromium (the TypeScript verifier's browser test runs it headless);
#   - the TypeScript verifier's npm packages, exactly as pinned in
#     verifiers/ts/package-lock.json (`npm ci`; skipped when node_modules already
#     matches the lock file).
# Go (standard library only) and Node.js are stock on the project's machines.
#
# Usage: bash scripts/install-verifier-tools.sh [--no-browser]
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
say() { printf 'install-verifier-tools: %s\n' "$*"; }

browser=1
[[ "${1:-}" == "--no-browser" ]] && browser=0

for tool in go node npm; do
    command -v "$tool" >/dev/null || { say "$tool not found on PATH"; exit 1; }
done
say "go: $(go version | awk '{print $3}'), node: $(node --version), npm: $(npm --version)"

# 1. Chromium, from Debian's packages.
if [[ $browser -eq 1 ]]; then
    if command -v chromium >/dev/null; then
        say "chromium present: $(chromium --version 2>/dev/null | head -1)"
    elif [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
        say "installing Debian's chromium"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null
        say "installed: $(chromium --version 2>/dev/null | head -1)"
    else
        say "chromium is missing and apt-get is not usable here (need root): install Debian's chromium"
        exit 1
    fi
fi

# 2. The TypeScript verifier's pinned npm packages (`npm ci` installs exactly the lock
#    file's versions; a stamp of the lock file's hash skips it when nothing changed).
ts="$ROOT/verifiers/ts"
stamp="$ts/node_modules/.bavl-lock-sha256"
want="$(sha256sum "$ts/package-lock.json" | cut -d' ' -f1)"
if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
    say "npm packages of verifiers/ts already match package-lock.json"
else
    say "npm ci in verifiers/ts"
    (cd "$ts" && npm ci --no-audit --no-fund --loglevel=error)
    echo "$want" >"$stamp"
fi
say "ready"
