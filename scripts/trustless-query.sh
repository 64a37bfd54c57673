#!/usr/bin/env bash
# A trustless query, end to end, against a real CometBFT localnet of bavl-abci apps:
#   1. builds the Go command (verifiers/go/cmd/bavl-query, CometBFT's light client) and the
#      TypeScript one (verifiers/ts, dist/tools/query.js);
#   2. starts scripts/localnet.sh (4 validators and a joiner on loopback, its own checks and
#      load) with --port PORT --dir DIR --hold, and waits until it holds the network;
#   3. takes the trust root out of band: header 1's hash as validator 0 serves it; the
#      queries ask validator 1 (the primary) and cross-check with validator 2 (the witness);
#   4. reads the load generator's marker key (load-done-1 = the number of transactions)
#      with both commands and checks both print the value and "verified"; reads a key never
#      written (both: absent, verified); refuses a wrong trust hash (both: exit 1);
#   5. runs the Go and TypeScript end-to-end tests (go test -tags localnet,
#      node --test dist/test/localnet.js): keys they write, and a tampering primary (value,
#      proof byte, absence claimed, op for another key, app hash in a header) refused.
# The localnet runs in its own process group, stopped (SIGTERM, SIGKILL after 10 s) on
# every way out. Exit 0 only if every check passed. Logs: DIR.log and DIR/logs.
#
# Usage: bash scripts/trustless-query.sh [--port BASE] [--dir DIR] [--timeout SECONDS]
#   --port BASE  the localnet's base port (default 29000: 27000 is localnet.sh's default,
#                run by CI and by hand; the two must not collide)
#   --dir DIR    the localnet's directory (default target/localnet-lc)
#   --timeout S  for the localnet to come up and hold (default 400)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PORT=29000
DIR="$ROOT/target/localnet-lc"
TIMEOUT=400
TXS=600   # localnet.sh's default load: its marker load-done-1 holds this number
while [[ $# -gt 0 ]]; do
    case "$1" in
        --port) PORT="$2"; shift 2 ;;
        --dir) DIR="$2"; shift 2 ;;
        --timeout) TIMEOUT="$2"; shift 2 ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "trustless-query: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
done
[[ "$DIR" = /* ]] || DIR="$ROOT/$DIR"
say() { printf 'trustless-query: %s\n' "$*" >&2; }
fail() { say "FAILED: $*"; exit 1; }

NET_PID=""
stop_net() {
    [[ -n "$NET_PID" ]] || return 0
    # The localnet's process group (setsid below): the script, its nodes and apps.
    kill -TERM -- "-$NET_PID" 2>/dev/null || true
    local n
    for n in $(seq 100); do
        kill -0 -- "-$NET_PID" 2>/dev/null || break
        sleep 0.1
    done
    kill -KILL -- "-$NET_PID" 2>/dev/null || true
    wait "$NET_PID" 2>/dev/null || true
    NET_PID=""
}
trap stop_net EXIT
trap 'say "interrupted"; exit 130' INT TERM

say "building the Go and TypeScript commands"
bash "$ROOT/scripts/install-verifier-tools.sh" --no-browser >&2
mkdir -p "$ROOT/target/verifiers"
go_query="$ROOT/target/verifiers/bavl-query"
(cd "$ROOT/verifiers/go/cmd/bavl-query" && go build -o "$go_query" .)
(cd "$ROOT/verifiers/ts" && npx --no-install tsc -p tsconfig.test.json)
ts_query=(node "$ROOT/verifiers/ts/dist/tools/query.js")

log="$DIR.log"
say "starting the localnet (--port $PORT --dir $DIR), log $log"
mkdir -p "$(dirname "$DIR")"
setsid bash "$ROOT/scripts/localnet.sh" --port "$PORT" --dir "$DIR" --txs "$TXS" \
    --hold 900 --timeout "$TIMEOUT" >"$log" 2>&1 &
NET_PID=$!
deadline=$(( $(date +%s) + TIMEOUT + 300 ))   # + the localnet's build
until grep -q "holding the network" "$log"; do
    kill -0 "$NET_PID" 2>/dev/null || { tail -20 "$log" >&2; fail "the localnet exited"; }
    [[ $(date +%s) -lt $deadline ]] || { tail -20 "$log" >&2; fail "the localnet did not come up"; }
    sleep 1
done
rpc() { echo "http://127.0.0.1:$(( PORT + 10 * $1 + 7 ))"; }
# shellcheck source=scripts/profile.sh
source "$ROOT/scripts/profile.sh"   # the profile localnet.sh built bavl-abci in
trust_hash=$("$BAVL_BIN/bavl-abci" status --rpc "$(rpc 0)" --height 1 | sed -n 's/^block_hash=//p')
[[ ${#trust_hash} -eq 64 ]] || fail "no hash of header 1 from $(rpc 0)"
say "trust root: header 1 = $trust_hash (from validator 0); primary $(rpc 1), witness $(rpc 2)"
common=(--rpc "$(rpc 1)" --witness "$(rpc 2)" --trust-height 1)
hexof() { printf '%s' "$1" | od -An -tx1 | tr -d ' \n'; }

query() {  # query LANG KEY_HEX WANT_VALUE (hex or "absent")
    local lang="$1" key="$2" want="$3" out cmd
    if [[ $lang == go ]]; then cmd=("$go_query"); else cmd=("${ts_query[@]}"); fi
    out=$("${cmd[@]}" "${common[@]}" --trust-hash "$trust_hash" --key "$key") ||
        fail "$lang: the query of $key was not verified"
    [[ "$(tail -1 <<<"$out")" == verified ]] || fail "$lang: no 'verified' in: $out"
    [[ "$(sed -n 's/^value=//p' <<<"$out")" == "$want" ]] || fail "$lang: $key: want value $want, got: $out"
    say "$lang: $(tr '\n' ' ' <<<"$out")"
}
marker=$(hexof "load-done-1")
for lang in go ts; do
    query "$lang" "$marker" "$(hexof "$TXS")"
    query "$lang" "$(hexof "never-written-key")" absent
    bad="${trust_hash:0:63}$( [[ ${trust_hash:63} == 0 ]] && echo 1 || echo 0 )"
    if [[ $lang == go ]]; then cmd=("$go_query"); else cmd=("${ts_query[@]}"); fi
    set +e
    "${cmd[@]}" "${common[@]}" --trust-hash "$bad" --key "$marker" >/dev/null 2>"$DIR.refused"
    code=$?
    set -e
    [[ $code -eq 1 ]] || fail "$lang: a wrong trust hash gave exit $code, want 1"
    say "$lang: wrong trust hash refused: $(head -c 200 "$DIR.refused")"
done

export BAVL_LOCALNET_RPC="$(rpc 0),$(rpc 1),$(rpc 2)"
say "go test -tags localnet (verifiers/go/cmd/bavl-query)"
(cd "$ROOT/verifiers/go/cmd/bavl-query" && go test -count=1 -timeout 180s -tags localnet .) >&2
say "node --test dist/test/localnet.js (verifiers/ts)"
(cd "$ROOT/verifiers/ts" && node --test --test-timeout=180000 dist/test/localnet.js) >"$DIR.ts-test.log" 2>&1 ||
    { tail -40 "$DIR.ts-test.log" >&2; fail "the TypeScript end-to-end tests"; }
grep -E "^# (pass|fail)" "$DIR.ts-test.log" | tr '\n' ' ' >&2; echo >&2
say "all checks passed"
