#!/usr/bin/env bash
# A real CometBFT localnet of bavl-abci applications on loopback, and the checks CI runs:
#   1. installs CometBFT (scripts/install-cometbft.sh, pinned) and builds bavl-abci (with
#      its feature test-rigs: --byzantine, --snapshot-format baseline) and bavl;
#   2. generates 4 validators and 1 joiner (`cometbft testnet`), each node and its app a
#      separate process on its own 127.0.0.1 ports;
#   3. starts the 4 validators, checks blocks commit, runs the load generator
#      (`bavl-abci load`, broadcast_tx_sync over RPC) and checks the transactions commit;
#   4. (--kill) kill -9 of one validator's app (its node stops with it) and of another
#      validator's node alone, restarts both, and checks both catch up with the same app
#      hash as the others;
#   5. starts the joiner with state sync (rpc_servers, trust_height and trust_hash taken
#      from the running chain), checks it restored a snapshot, verifying every bundle, and
#      then follows the chain with the validators' app hashes (its own app's hash at height
#      h equals the app hash in the validators' header h+1), and serves `bavl query`
#      reads whose header (genesis validators' signatures) and bavl proofs verify;
#   With --byzantine KIND[,KIND...], validator 3's app (then 2's, 1's) serves lying
#   snapshots (see bavl-abci serve --help); the joiner must refuse every lie (a forged
#   snapshot at the offer, a lying chunk at its arrival) and still finish.
#   --demo: --byzantine wrong-bytes,forged, and a summary at the end:
#   the network, blocks per second, the snapshot heights, the joiner's sync (bundles,
#   bytes, time, which peers were refused and why) and its app hash beside the validators'.
# Every process is stopped on every way out (EXIT/INT/TERM trap, by PID). Exit 0 only if
# every check passed; the logs stay in DIR/logs.
#
# Usage: bash scripts/localnet.sh [--dir DIR] [--interval N] [--txs N] [--rate R]
#            [--keys N] [--ops N] [--bundle-bytes B] [--byzantine KIND] [--kill] [--timeout SECONDS]
#            [--hold SECONDS] [--demo] [--snapshot-format bavl|baseline]
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
DIR="$repo/target/localnet"
INTERVAL=20          # snapshot interval (heights)
TXS=600              # load: transactions (10 operations each)
RATE=60              # load: transactions per second
KEYS=20000           # load: distinct keys
OPS=10               # load: operations per transaction
BUNDLE_BYTES=65536   # small bundles, so a small state makes many ABCI chunks
BYZANTINE=""
FORMAT=bavl          # snapshot format: bavl (1) or baseline (2, Cosmos-SDK-style)
KILL=0
TIMEOUT=240          # seconds for the whole run after the build
HOLD=0               # seconds to keep the network up at the end (for a look)
DEMO=0
BASE_PORT=27000      # node i: p2p BASE+10i+6, rpc +7, app +8 (below the ephemeral range)

while [[ $# -gt 0 ]]; do
    case "$1" in
        --dir) DIR="$2"; shift 2 ;;
        --interval) INTERVAL="$2"; shift 2 ;;
        --txs) TXS="$2"; shift 2 ;;
        --rate) RATE="$2"; shift 2 ;;
        --keys) KEYS="$2"; shift 2 ;;
        --ops) OPS="$2"; shift 2 ;;
        --bundle-bytes) BUNDLE_BYTES="$2"; shift 2 ;;
        --byzantine) BYZANTINE="$2"; shift 2 ;;
        --snapshot-format) FORMAT="$2"; shift 2 ;;
        --kill) KILL=1; shift ;;
        --timeout) TIMEOUT="$2"; shift 2 ;;
        --hold) HOLD="$2"; shift 2 ;;
        --port) BASE_PORT="$2"; shift 2 ;;
        --demo) DEMO=1; BYZANTINE="wrong-bytes,forged"; shift ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "localnet: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
done

say() { printf 'localnet: %s\n' "$*" >&2; }
fail() { say "FAILED: $*"; exit 1; }

cometbft="$(bash "$repo/scripts/install-cometbft.sh" | tail -1)"
# shellcheck source=scripts/profile.sh
source "$repo/scripts/profile.sh"
say "building bavl-abci --features test-rigs and bavl ($BAVL_PROFILE profile)"
# Two builds: the rigs (--byzantine, --snapshot-format) must not reach the bavl binary.
bavl_build -p bavl-abci --features test-rigs
bavl_build -p bavl-cli
app_bin="$BAVL_BIN/bavl-abci"
bavl_bin="$BAVL_BIN/bavl"

declare -A PIDS=()   # name -> pid
declare -a NODE_ID=()
declare -A LIAR=()   # validator index -> kind
IFS=, read -r -a kinds <<<"$BYZANTINE"
[[ ${#kinds[@]} -le 3 ]] || { say "at most 3 liars"; exit 2; }
for j in "${!kinds[@]}"; do LIAR[$(( 3 - j ))]="${kinds[$j]}"; done
# SIGTERM, then SIGKILL after 5 s: a CometBFT node's shutdown sometimes never ends.
stop_all() {
    local name n alive
    for name in "${!PIDS[@]}"; do kill "${PIDS[$name]}" 2>/dev/null || true; done
    for n in $(seq 50); do
        alive=0
        for name in "${!PIDS[@]}"; do kill -0 "${PIDS[$name]}" 2>/dev/null && alive=1; done
        [[ $alive -eq 0 ]] && break
        sleep 0.1
    done
    for name in "${!PIDS[@]}"; do kill -9 "${PIDS[$name]}" 2>/dev/null || true; done
    for name in "${!PIDS[@]}"; do wait "${PIDS[$name]}" 2>/dev/null || true; done
    PIDS=()
}
trap 'stop_all' EXIT
trap 'say "interrupted"; exit 130' INT TERM

deadline=$(( $(date +%s) + TIMEOUT ))
check_time() { [[ $(date +%s) -lt $deadline ]] || fail "out of time (--timeout $TIMEOUT) $*"; }

port() { echo $(( BASE_PORT + 10 * $1 + $2 )); }
rpc() { echo "http://127.0.0.1:$(port "$1" 7)"; }

# set_toml FILE SECTION KEY VALUE: sets KEY in [SECTION] (SECTION "" = the top).
set_toml() {
    local file="$1" section="$2" key="$3" value="$4"
    awk -v sec="[$2]" -v key="$key" -v val="$value" '
        BEGIN { cur = "[]" }
        /^\[/ { cur = $0 }
        cur == sec && $0 ~ "^" key " *=" { print key " = " val; found = 1; next }
        { print }
        END { if (!found) exit 3 }' "$file" >"$file.new" || { say "no $key in [$section] of $file"; exit 1; }
    mv "$file.new" "$file"
}

generate() {
    rm -rf "$DIR"
    mkdir -p "$DIR/logs"
    "$cometbft" testnet --v 4 --n 1 --o "$DIR" \
        --starting-ip-address 127.0.0.1 >/dev/null
    local i peers=""
    for i in 0 1 2 3 4; do NODE_ID[$i]="$("$cometbft" show-node-id --home "$DIR/node$i")"; done
    for i in 0 1 2 3; do
        peers+="${peers:+,}${NODE_ID[$i]}@127.0.0.1:$(port "$i" 6)"
    done
    for i in 0 1 2 3 4; do
        local cfg="$DIR/node$i/config/config.toml"
        set_toml "$cfg" "" proxy_app "\"tcp://127.0.0.1:$(port "$i" 8)\""
        set_toml "$cfg" rpc laddr "\"tcp://127.0.0.1:$(port "$i" 7)\""
        set_toml "$cfg" p2p laddr "\"tcp://127.0.0.1:$(port "$i" 6)\""
        set_toml "$cfg" p2p persistent_peers "\"$peers\""
        set_toml "$cfg" p2p addr_book_strict false
        set_toml "$cfg" p2p allow_duplicate_ip true
        set_toml "$cfg" consensus timeout_commit "\"300ms\""
        set_toml "$cfg" consensus timeout_propose "\"1s\""
    done
}

start_app() {  # start_app I [extra args]
    local i="$1"; shift
    "$app_bin" serve --home "$DIR/app$i" --listen "127.0.0.1:$(port "$i" 8)" \
        --snapshot-interval "$INTERVAL" --bundle-bytes "$BUNDLE_BYTES" \
        --snapshot-format "$FORMAT" "$@" \
        >>"$DIR/logs/app$i.log" 2>&1 &
    PIDS[app$i]=$!
    local n
    for n in $(seq 100); do
        (exec 3<>"/dev/tcp/127.0.0.1/$(port "$i" 8)") 2>/dev/null && return 0
        kill -0 "${PIDS[app$i]}" 2>/dev/null || fail "app$i exited (logs/app$i.log)"
        sleep 0.1
    done
    fail "app$i does not listen"
}

start_node() {
    local i="$1"
    "$cometbft" start --home "$DIR/node$i" >>"$DIR/logs/node$i.log" 2>&1 &
    PIDS[node$i]=$!
}

kill9() {  # kill9 NAME: SIGKILL and reap one of our processes
    kill -9 "${PIDS[$1]}" 2>/dev/null || true
    wait "${PIDS[$1]}" 2>/dev/null || true
    unset "PIDS[$1]"
}

height() { "$app_bin" status --rpc "$(rpc "$1")" 2>/dev/null | sed -n 's/^latest_height=//p'; }

wait_height() {  # wait_height NODE H
    until [[ "$(height "$1")" -ge "$2" ]] 2>/dev/null; do
        check_time "waiting for node$1 to reach height $2"
        sleep 0.5
    done
}

# The height and app hash (hex) a node's own application reports (abci_info).
abci_info() {
    local out
    out="$("$app_bin" status --rpc "$(rpc "$1")")" || return 1
    printf '%s %s\n' "$(sed -n 's/^app_height=//p' <<<"$out")" "$(sed -n 's/^app_hash_own=//p' <<<"$out")"
}

app_hash_in_header() {  # app_hash_in_header NODE H: the app hash header H carries
    "$app_bin" status --rpc "$(rpc "$1")" --height "$2" | sed -n 's/^app_hash=//p'
}

# Checks node N's application against node REF's headers: its app hash at its height h
# must be the one header h+1 carries (the state after block h, as the validators agreed).
check_app_hash() {
    local n="$1" ref="$2" h hash want
    read -r h hash < <(abci_info "$n") || fail "no abci_info from node$n"
    [[ -n "$h" && -n "$hash" ]] || fail "no abci_info from node$n"
    wait_height "$ref" $(( h + 1 ))
    want="$(app_hash_in_header "$ref" $(( h + 1 )) | tr 'A-F' 'a-f')"
    [[ "$hash" == "$want" ]] || fail "node$n's app hash at height $h is $hash, the chain's is $want"
    say "node$n: app hash at height $h = ${hash:0:16}... matches node$ref's header $(( h + 1 ))"
}


name_of() {  # name_of PEER_ID: node<i>
    local i
    for i in "${!NODE_ID[@]}"; do [[ "${NODE_ID[$i]}" == "$1" ]] && { echo "node$i"; return; }; done
    echo "$1"
}

summary() {
    local i h4 hash4 v line
    printf '\n== network: 4 validators + 1 joiner, CometBFT %s, bavl-abci, one process each\n' \
        "$("$cometbft" version)"
    for i in 0 1 2 3 4; do
        printf '   node%s  p2p %s  rpc %s  app %s  %s\n' "$i" "$(port "$i" 6)" "$(port "$i" 7)" \
            "$(port "$i" 8)" "$([[ $i -eq 4 ]] && echo joiner || echo "validator${LIAR[$i]:+, lies: ${LIAR[$i]}}")"
    done
    printf '== blocks: heights %s..%s during the load: %.1f blocks/s\n' "$load_h0" "$load_h1" \
        "$(awk -v a="$load_h0" -v b="$load_h1" -v s="$load_t0" -v e="$load_t1" 'BEGIN { print (b - a) / (e - s) }')"
    printf '== time in bavl (FinalizeBlock + Commit) on node0, last window: %s\n' \
        "$(grep "block window" "$DIR/logs/app0.log" | tail -1 | sed 's/.*INFO bavl_abci::metrics: block window //')"
    printf '== snapshots (every %s heights): %s\n' "$INTERVAL" \
        "$(grep "snapshot taken" "$DIR/logs/app0.log" |
            sed -n 's/.*height=\([0-9]*\) format=\([0-9]*\) bundles=\([0-9]*\) micros=\([0-9]*\).*/\1 (format \2, \3 chunks, taken in \4 us)/p' |
            paste -sd, -)"
    printf '== joiner: %s\n' "$(sed -n 's/.*INFO bavl_abci::statesync: //p' <<<"$restored")"
    printf '   %s bundles kept in %s s (from its start, discovery_time 5 s included)\n' "$kept" "$restore_s"
    grep -E "bundle rejected|snapshot rejected" "$DIR/logs/app4.log" | while read -r line; do
        v=$(sed -n 's/.*sender=\([0-9a-f]*\).*/\1/p' <<<"$line")
        printf '   refused%s: %s\n' "${v:+ from $(name_of "$v")}" \
            "$(sed -E 's/.*WARN bavl_abci::statesync: //; s/ sender=[0-9a-f]+//' <<<"$line")"
    done
    read -r h4 hash4 < <(abci_info 4)
    printf '== app hash after height %s\n   node4 (joiner) %s\n' "$h4" "$hash4"
    for v in 0 1 2 3; do
        wait_height "$v" $(( h4 + 1 ))
        printf '   node%s header %s  %s\n' "$v" $(( h4 + 1 )) \
            "$(app_hash_in_header "$v" $(( h4 + 1 )) | tr 'A-F' 'a-f')"
    done
}

generate
say "network in $DIR: 4 validators + 1 joiner, ports from $BASE_PORT"
for i in 0 1 2 3; do
    extra=()
    [[ -n "${LIAR[$i]:-}" ]] && extra=(--byzantine "${LIAR[$i]}")
    start_app "$i" "${extra[@]}"
    start_node "$i"
done
wait_height 0 3
say "blocks commit: height $(height 0)"

say "load: $TXS transactions at $RATE/s"
load_h0=$(height 0); load_t0=$(date +%s.%N)
"$app_bin" load --rpc "$(rpc 0)" "$(rpc 1)" "$(rpc 2)" "$(rpc 3)" --txs "$TXS" \
    --rate "$RATE" --keys "$KEYS" --ops "$OPS" >"$DIR/logs/load.log" 2>&1 &
PIDS[load]=$!
if [[ $KILL -eq 1 ]]; then
    # While blocks full of transactions commit: the app of validator 1 (its node stops
    # with it), then the node of validator 2 alone (its app lives on and sees the replay).
    sleep 4
    say "kill -9 of app1 at height $(height 0) (node1 stops with it)"
    kill9 app1
    sleep 2
    say "kill -9 of node2 at height $(height 0) (app2 lives on)"
    kill9 node2
    kill9 node1   # if it has not stopped by itself yet
    sleep 1
    start_app 1
    start_node 1
    start_node 2
fi
wait "${PIDS[load]}" || fail "load generator (logs/load.log)"
unset "PIDS[load]"
grep -v "^tx " "$DIR/logs/load.log" >&2
load_h1=$(height 0); load_t1=$(date +%s.%N)
if [[ $KILL -eq 1 ]]; then
    grep -q "Completed ABCI Handshake" "$DIR/logs/node1.log" || fail "node1 handshake"
    wait_height 1 $(( $(height 0) + 1 ))
    wait_height 2 $(( $(height 0) + 1 ))
fi
check_app_hash 1 0
check_app_hash 2 0

# State sync: a snapshot height with two headers after it, and a trusted hash.
h=$(height 0)
wait_height 0 $(( INTERVAL + 3 ))
h=$(height 0)
snap=$(( (h - 2) / INTERVAL * INTERVAL ))
wait_height 0 $(( snap + 4 ))   # headers after a forgery one height later exist too
trust_hash=$("$app_bin" status --rpc "$(rpc 0)" --height "$snap" | sed -n 's/^block_hash=//p')
say "joiner: state sync with trust_height=$snap trust_hash=$trust_hash (chain at $h)"
cfg="$DIR/node4/config/config.toml"
set_toml "$cfg" statesync enable true
set_toml "$cfg" statesync rpc_servers "\"$(rpc 0),$(rpc 1)\""
set_toml "$cfg" statesync trust_height "$snap"
set_toml "$cfg" statesync trust_hash "\"$trust_hash\""
set_toml "$cfg" statesync discovery_time "\"5s\""
start_app 4
t0=$(date +%s)
start_node 4
until grep -q "snapshot restored and written durably" "$DIR/logs/app4.log"; do
    check_time "waiting for the joiner's restore (logs/node4.log, logs/app4.log)"
    kill -0 "${PIDS[node4]}" 2>/dev/null || fail "node4 exited (logs/node4.log)"
    sleep 0.5
done
restored=$(grep "snapshot restored" "$DIR/logs/app4.log" | tail -1)
restored_h=$(sed -n 's/.* height=\([0-9]*\) .*/\1/p' <<<"$restored")
# Every bundle of the restored snapshot but the last logs "kept"; the last one completes it.
kept=$(( $(grep "bundle verified and kept" "$DIR/logs/app4.log" | grep -c " height=$restored_h " || true) + 1 ))
rejected=$(grep -c "bundle rejected" "$DIR/logs/app4.log" || true)
say "joiner restored in $(( $(date +%s) - t0 )) s: $kept bundles kept, $rejected refused"
say "  $restored"
restore_s=$(( $(date +%s) - t0 ))
for v in "${!LIAR[@]}"; do
    kind="${LIAR[$v]}"
    if [[ "$kind" == forged* ]]; then
        # bavl refuses a forgery at the offer; the baseline only after its last chunk.
        grep -Eq "snapshot rejected: (its root|after the last chunk)" "$DIR/logs/app4.log" ||
            fail "the joiner was never offered node$v's forged snapshot"
        continue
    fi
    lies=$(grep -c "serving a lying chunk" "$DIR/logs/app$v.log" || true)
    refused=$(grep "bundle rejected" "$DIR/logs/app4.log" | grep -c "sender=${NODE_ID[$v]}" || true)
    say "the liar node$v ($kind) served $lies lying chunks, $refused refused"
    # With small bundles (--bundle-bytes) there are enough for the liar to be asked; the
    # baseline's 10 MiB chunks are too few for that to be sure.
    if [[ $lies -eq 0 && "$FORMAT" == baseline ]]; then
        say "node$v was not asked for any of the baseline's $kept chunks"
        continue
    fi
    [[ $lies -ge 1 ]] || fail "node$v was never asked for a chunk: use smaller --bundle-bytes"
    [[ $refused -ge 1 ]] || fail "node$v served $lies lying chunks and none was refused"
done
# It follows the chain: blocks after the snapshot, with the validators' app hashes.
"$app_bin" load --rpc "$(rpc 0)" --txs 50 --rate 50 --seed 2 >>"$DIR/logs/load.log" 2>&1 ||
    fail "second load"
wait_height 4 $(( $(height 0) + 3 ))
check_app_hash 4 0
wait_height 4 $(( $(height 0) + 3 ))
check_app_hash 4 1
# Trustless reads through the joiner (`bavl query`): the header verified against the
# genesis validators' signatures, then the bavl proofs (membership of the load's marker,
# absence of a key).
genesis="$DIR/node4/config/genesis.json"
"$bavl_bin" query --rpc "$(rpc 4)" --key "$(printf 'load-done-1' | od -An -tx1 | tr -d ' \n')" \
    --genesis "$genesis" >"$DIR/logs/query.log" 2>&1 || fail "bavl query of the marker (logs/query.log)"
grep -q "^value=$(printf '%s' "$TXS" | od -An -tx1 | tr -d ' \n')$" "$DIR/logs/query.log" ||
    fail "the marker's value (logs/query.log)"
"$bavl_bin" query --rpc "$(rpc 4)" --key 00ff00 --genesis "$genesis" \
    >>"$DIR/logs/query.log" 2>&1 || fail "bavl query of an absent key (logs/query.log)"
grep -q "^absent=true$" "$DIR/logs/query.log" || fail "bavl query: the key is not proved absent"
grep "^verified" "$DIR/logs/query.log" | sed 's/^/localnet: query: /' >&2
say "all checks passed"
[[ $DEMO -eq 1 ]] && summary
if [[ $HOLD -gt 0 ]]; then
    say "holding the network for $HOLD s"
    sleep "$HOLD" &
    PIDS[hold]=$!
    wait "${PIDS[hold]}" || true   # a wait, unlike a foreground sleep, lets a TERM stop us at once
fi
exit 0
