#!/usr/bin/env bash
# netlab: N serving hosts and one syncing host as Linux network namespaces, for the state
# sync experiments (lab/notes/results-history.md, "State sync over a network").
#
#   scripts/netlab.sh up N [--rtt MS|LO-HI] [--rate RATE]   (re)create the lab
#   scripts/netlab.sh down                                  remove everything it made
#   scripts/netlab.sh status                                namespaces, qdiscs, proxies
#   scripts/netlab.sh exec HOST CMD...                      run CMD on host c or p1..pN
#   scripts/netlab.sh verify [--out FILE] [--mb MB]         measure RTT and throughput
#   scripts/netlab.sh install                               build the delay proxy (cargo)
#
# Topology: namespace `blsw` holds a bridge; `blc` (the syncing host, 10.77.0.1) and
# `blp1`..`blpN` (serving hosts, 10.77.0.(10+i)) each hang off it on a veth pair. Peer i:
#   - its server listens on 127.0.0.1:9000 inside blp<i> (the caller starts it there);
#   - a delay proxy (`bavl-synclab delay`, lab/synclab/src/delay.rs) in blp<i> listens on
#     10.77.0.(10+i):8080 and forwards to 127.0.0.1:9000, each direction's bytes delayed by
#     RTT/2 (this kernel has no netem; the proxy was toxiproxy until it was found to use
#     0.85 of the 2 cores' CPU-seconds in a 1.8 s sync, which the experiment needed);
#   - tbf on blp<i>'s veth egress limits what the peer sends to RATE (the kernel's rate
#     limit; the client's uplink is not limited).
# So the client reaches peer i at http://10.77.0.(10+i):8080. `--rtt 25-100` spreads the
# RTTs linearly over the peers (peer 1 the nearest). Idempotent: `up` first removes a lab
# left by an earlier `up`. Needs root and iproute2; the proxy is built with cargo if
# missing (BAVL_SYNCLAB names the bavl-synclab binary to use).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
STATE="$ROOT/target/netlab"
# shellcheck source=scripts/profile.sh
source "$ROOT/scripts/profile.sh"
SYNCLAB="${BAVL_SYNCLAB:-$BAVL_BIN/bavl-synclab}"
SUBNET="10.77.0"
SERVE_PORT=9000
PROXY_PORT=8080

die() { echo "netlab: $*" >&2; exit 2; }
log() { echo "netlab: $*" >&2; }

peer_ip() { echo "$SUBNET.$((10 + $1))"; }
peer_count() { cat "$STATE/peers" 2>/dev/null || echo 0; }

install_proxy() {
    if [ -x "$SYNCLAB" ]; then return 0; fi
    [ -z "${BAVL_SYNCLAB:-}" ] || die "BAVL_SYNCLAB=$SYNCLAB is not an executable"
    command -v cargo >/dev/null || die "cargo is needed to build the delay proxy"
    log "building bavl-synclab (the delay proxy) with cargo, in the lab workspace"
    bavl_lab_build -p bavl-synclab
}

# The RTT in ms of peer i (1-based) of n, from "MS" or "LO-HI".
rtt_of() {
    local spec=$1 i=$2 n=$3
    case "$spec" in
    *-*)
        local lo=${spec%-*} hi=${spec#*-}
        if [ "$n" -le 1 ]; then echo "$lo"; else echo $((lo + (hi - lo) * (i - 1) / (n - 1))); fi
        ;;
    *) echo "$spec" ;;
    esac
}

# tbf: burst must hold a GSO super-packet (64 KiB) and one timer tick of the rate;
# queue limit about 25 ms of the rate (at least 256 KiB) so TCP keeps the link busy.
tbf_params() {
    local rate=$1 bits
    bits=$(rate_bits "$rate")
    local tick=$((bits / 8 / 250)) queue=$((bits / 8 / 40))
    local burst=$((tick > 131072 ? tick : 131072))
    local limit=$((queue > 262144 ? queue : 262144))
    echo "rate $rate burst $burst limit $limit"
}

rate_bits() {
    local r=$1 num unit
    num=${r%%[a-zA-Z]*}
    unit=${r#"$num"}
    case "$unit" in
    kbit) echo $((num * 1000)) ;;
    mbit) echo $((num * 1000000)) ;;
    gbit) echo $((num * 1000000000)) ;;
    bit | "") echo "$num" ;;
    *) die "rate must look like 100mbit (got $r)" ;;
    esac
}

down() {
    local ns pid
    for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E '^bl(c|sw|p[0-9]+)$' || true); do
        # Every process left in a lab namespace was started in it by the lab or its users.
        for pid in $(ip netns pids "$ns" 2>/dev/null || true); do
            kill "$pid" 2>/dev/null || true
        done
    done
    sleep 0.2
    for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E '^bl(c|sw|p[0-9]+)$' || true); do
        for pid in $(ip netns pids "$ns" 2>/dev/null || true); do
            kill -9 "$pid" 2>/dev/null || true
        done
        ip netns delete "$ns"
    done
    rm -rf "$STATE"
}

# (Re)starts peer i's delay proxy with an RTT of ms (half each way) and waits until it
# listens.
set_rtt() { # i ms
    local i=$1 ms=$2 ns="blp$1" half_up half_down pidf="$STATE/delay$1.pid" logf="$STATE/delay$1.log"
    half_up=$((ms / 2))
    half_down=$((ms - half_up))
    if [ -f "$pidf" ]; then
        kill "$(cat "$pidf")" 2>/dev/null || true
        rm -f "$pidf"
        sleep 0.1
    fi
    ip netns exec "$ns" "$SYNCLAB" delay --listen "$(peer_ip "$i"):$PROXY_PORT" \
        --upstream "127.0.0.1:$SERVE_PORT" --up-ms "$half_up" --down-ms "$half_down" \
        >"$logf" 2>&1 &
    echo $! >"$pidf"
    local tries=0
    until grep -q '^delay:' "$logf" 2>/dev/null; do
        tries=$((tries + 1))
        [ $tries -lt 100 ] || die "the delay proxy in $ns did not start (see $logf)"
        sleep 0.05
    done
    echo "$ms" >"$STATE/rtt$i"
}

set_rate() { # i rate
    local i=$1 rate=$2
    # shellcheck disable=SC2046
    ip netns exec "blp$i" tc qdisc replace dev eth0 root tbf $(tbf_params "$rate")
    echo "$rate" >"$STATE/rate$i"
}

up() {
    local n=${1:-}
    shift || true
    [[ "$n" =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] && [ "$n" -le 40 ] || die "up needs N in 1..40"
    local rtt=50 rate=100mbit
    while [ $# -gt 0 ]; do
        case "$1" in
        --rtt) rtt=$2; shift 2 ;;
        --rate) rate=$2; shift 2 ;;
        *) die "unknown option $1" ;;
        esac
    done
    rate_bits "$rate" >/dev/null
    install_proxy
    down
    mkdir -p "$STATE"
    ip netns add blsw
    ip netns exec blsw ip link set lo up
    ip netns exec blsw ip link add br0 type bridge
    ip netns exec blsw ip link set br0 up
    attach() { # ns ip
        local ns=$1 addr=$2 port="v-$1"
        ip netns add "$ns"
        ip link add "$port" type veth peer name eth0 netns "$ns"
        ip link set "$port" netns blsw
        ip netns exec blsw ip link set "$port" master br0 up
        ip netns exec "$ns" ip link set lo up
        ip netns exec "$ns" ip addr add "$addr/24" dev eth0
        ip netns exec "$ns" ip link set eth0 up
    }
    attach blc "$SUBNET.1"
    local i
    for i in $(seq 1 "$n"); do
        attach "blp$i" "$(peer_ip "$i")"
        set_rate "$i" "$rate"
        set_rtt "$i" "$(rtt_of "$rtt" "$i" "$n")"
    done
    echo "$n" >"$STATE/peers"
    log "up: $n peers at http://$SUBNET.11..$(peer_ip "$n"):$PROXY_PORT, client namespace blc ($SUBNET.1), rtt $rtt ms, $rate per peer"
}

status() {
    local n i
    n=$(peer_count)
    [ "$n" -gt 0 ] || { echo "netlab: down"; return 0; }
    echo "netlab: $n peers"
    for i in $(seq 1 "$n"); do
        echo "p$i $(peer_ip "$i"):$PROXY_PORT rtt $(cat "$STATE/rtt$i") ms rate $(cat "$STATE/rate$i")"
        ip netns exec "blp$i" tc -s qdisc show dev eth0 | sed 's/^/    /'
    done
}

host_ns() {
    case "$1" in
    c) echo blc ;;
    p[0-9]*) echo "bl$1" ;;
    *) die "host is c or p1..pN (got $1)" ;;
    esac
}

# Measures, for each peer: the RTT of a tiny HTTP request through the proxy (time to first
# byte minus time to send, on a kept-alive connection), the TCP connect time (no added
# latency: the delay is the proxy's), and the throughput of a large download; then all peers at once.
verify() {
    local out="$ROOT/docs/results/sync/netlab-verify.json" mb=40
    while [ $# -gt 0 ]; do
        case "$1" in
        --out) out=$2; shift 2 ;;
        --mb) mb=$2; shift 2 ;;
        *) die "unknown option $1" ;;
        esac
    done
    local n i
    n=$(peer_count)
    [ "$n" -gt 0 ] || die "the lab is down (run up N first)"
    local dir="$STATE/www"
    mkdir -p "$dir"
    [ -f "$dir/big" ] && [ "$(stat -c %s "$dir/big")" -eq $((mb * 1048576)) ] ||
        head -c $((mb * 1048576)) /dev/urandom >"$dir/big"
    echo ok >"$dir/tiny"
    for i in $(seq 1 "$n"); do
        ip netns exec "blp$i" python3 -m http.server "$SERVE_PORT" --bind 127.0.0.1 \
            --directory "$dir" >/dev/null 2>&1 &
        echo $! >"$STATE/www$i.pid"
    done
    for i in $(seq 1 "$n"); do
        local tries=0
        until ip netns exec "blp$i" curl -sf "http://127.0.0.1:$SERVE_PORT/tiny" >/dev/null; do
            tries=$((tries + 1)); [ $tries -lt 100 ] || die "http.server in blp$i did not start"; sleep 0.05
        done
    done
    local rows=() total_bits=0
    for i in $(seq 1 "$n"); do
        local url="http://$(peer_ip "$i"):$PROXY_PORT" t ping bw
        # Five tiny requests on one connection; the median of (first byte - request sent).
        t=$(ip netns exec blc curl -s -o /dev/null -o /dev/null -o /dev/null -o /dev/null -o /dev/null \
            -w '%{time_starttransfer} %{time_pretransfer}\n' \
            "$url/tiny" "$url/tiny" "$url/tiny" "$url/tiny" "$url/tiny" |
            awk '{print ($1 - $2) * 1000}' | sort -n | sed -n 3p)
        # TCP connect time to the proxy: the handshake is not delayed (the proxy adds delay
        # to the bytes it forwards), so this is the bare veth/bridge path.
        ping=$(ip netns exec blc curl -s -o /dev/null -w '%{time_connect}' "$url/tiny" | awk '{print $1 * 1000}')
        bw=$(ip netns exec blc curl -s -o /dev/null -w '%{speed_download}' "$url/big")
        total_bits=$(awk -v a="$total_bits" -v b="$(rate_bits "$(cat "$STATE/rate$i")")" 'BEGIN{print a+b}')
        rows+=("{\"peer\":$i,\"configured_rtt_ms\":$(cat "$STATE/rtt$i"),\"measured_http_rtt_ms\":$t,\"tcp_connect_ms\":$ping,\"configured_rate_mbit\":$(awk -v b="$(rate_bits "$(cat "$STATE/rate$i")")" 'BEGIN{print b/1e6}'),\"measured_mbit\":$(awk -v s="$bw" 'BEGIN{printf "%.2f", s*8/1e6}')}")
        log "p$i: rtt $(cat "$STATE/rtt$i") ms configured, $t ms measured (tcp connect $ping ms); $(awk -v s="$bw" 'BEGIN{printf "%.1f", s*8/1e6}') Mbit/s of $(cat "$STATE/rate$i")"
    done
    # All peers at once: the aggregate the client sees.
    local start end
    start=$(date +%s.%N)
    local pids=()
    for i in $(seq 1 "$n"); do
        ip netns exec blc curl -s -o /dev/null "http://$(peer_ip "$i"):$PROXY_PORT/big" &
        pids+=($!)
    done
    wait "${pids[@]}" || true
    end=$(date +%s.%N)
    local agg
    agg=$(awk -v s="$start" -v e="$end" -v n="$n" -v mb="$mb" 'BEGIN{printf "%.2f", n*mb*1048576*8/(e-s)/1e6}')
    log "all $n peers at once: $agg Mbit/s aggregate of $(awk -v b="$total_bits" 'BEGIN{print b/1e6}') configured"
    for i in $(seq 1 "$n"); do kill "$(cat "$STATE/www$i.pid")" 2>/dev/null || true; done
    mkdir -p "$(dirname "$out")"
    {
        echo "{"
        echo "  \"what\": \"netlab check: per peer, the RTT of a tiny HTTP request through its delay proxy (median of 5 on one connection) and the throughput of a $mb MiB download through tbf; then all peers at once\","
        echo "  \"command\": \"scripts/netlab.sh verify --mb $mb\","
        echo "  \"date\": \"$(date -u +%Y-%m-%dT%H:%M:%SZ)\","
        echo "  \"machine\": \"$(uname -srm), $(nproc) cores, $(awk '/MemTotal/{printf "%.1f GiB", $2/1048576}' /proc/meminfo)\","
        echo "  \"delay_proxy\": \"bavl-synclab delay (lab/synclab/src/delay.rs)\","
        echo "  \"aggregate_configured_mbit\": $(awk -v b="$total_bits" 'BEGIN{print b/1e6}'),"
        echo "  \"aggregate_measured_mbit\": $agg,"
        echo "  \"peers\": ["
        local sep=""
        for r in "${rows[@]}"; do echo "    $sep$r"; sep=","; done
        echo "  ]"
        echo "}"
    } >"$out"
    log "wrote $out"
}

[ "$(id -u)" -eq 0 ] || die "needs root (network namespaces, tc)"
cmd=${1:-}
shift || true
case "$cmd" in
up) up "$@" ;;
down) down; log "down" ;;
status) status ;;
install) install_proxy ;;
set-rtt) # i ms
    set_rtt "$1" "$2" ;;
set-rate) # i rate
    set_rate "$1" "$2" ;;
exec)
    ns=$(host_ns "${1:-}")
    shift
    exec ip netns exec "$ns" "$@"
    ;;
verify) verify "$@" ;;
*)
    sed -n '2,9p' "$0" >&2
    exit 2
    ;;
esac
