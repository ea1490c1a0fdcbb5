#!/usr/bin/env bash
# User-space instructions per request through edgewarm's `http` route and HAProxy (plain, and
# adding the forwarding headers edgewarm always adds), each run alone under callgrind with one
# thread, in front of one nginx HTTP/2 origin. Wall-clock requests/s on this 2-core machine move
# by ±10 % between rounds; instruction counts do not, so this shows where edgewarm stands on
# CPU work alone (the kernel's share is not counted: see bench-http.sh for CPU time).
# Per request is the slope between two windows of N1 and N2 requests in one process
# (callgrind_control --zero/--dump), so start-up, handshakes and idle timers cancel.
# Load: h2load -c 10 -m 10 (HTTP/2, ten streams in flight per connection).
# Needs: valgrind, nginx, haproxy, h2load, openssl (scripts/deps.sh).
#
#   scripts/bench-http-ins.sh [N1] [N2]
#   BASELINE=/path/to/older/edgewarm scripts/bench-http-ins.sh ...   # also count another build
set -euo pipefail
n1=${1:-1000}
n2=${2:-3000}
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=scripts/bench-lib.sh
. "$root/scripts/bench-lib.sh"
bench_edgewarm
bench_workdir
bench_http_pki
origin=18643 port=19643 port_fwd=19644 admin=19960
bench_h2_origin $origin 1
bench_edge_cert b.test
# One thread, as edgewarm's one worker below.
bench_peer haproxy-http.cfg "127.0.0.1:$port" "127.0.0.1:$origin" 's/nbthread 2/nbthread 1/'
bench_peer haproxy-http-fwd.cfg "127.0.0.1:$port_fwd" "127.0.0.1:$origin" 's/nbthread 2/nbthread 1/'
# One worker thread (callgrind runs one thread at a time anyway).
{ bench_http_edge $port $admin $origin; echo "workers: 1"; } > "$dir/edge.yaml"
# Builds from before the `workers` key (one runtime: TOKIO_WORKER_THREADS=1 below).
bench_http_edge $port $admin $origin > "$dir/baseline.yaml"
# The same route adding no forwarding headers: the same header work as plain HAProxy.
{ bench_http_edge $port $admin $origin "    forward_headers: []"; echo "workers: 1"; } > "$dir/bare.yaml"

nginx -c "$dir/origin.conf" & pids+=($!)
wait_ports $origin

load() { # requests (to $target)
  h2load -c 10 -m 10 -n "$1" --connect-to="127.0.0.1:$target" "https://b.test:$target/" 2>/dev/null \
    | awk '/succeeded,/ {if ($8 + 0 != '"$1"') {print "FAILED: " $0 > "/dev/stderr"; exit 1}}'
}
dumped() { # out-prefix
  local f; f=$(ls -t "$1".* | head -1)
  awk '/^(summary|totals):/ {print $2; exit}' "$f"
}
window() { # pid requests
  callgrind_control --zero "$1" >/dev/null 2>&1
  load "$2"
  callgrind_control --dump "$1" >/dev/null 2>&1
  sleep 0.5
}
declare -A per
run_one() { # key port command...
  local key=$1; target=$2; shift 2
  local out="$dir/cg.$key" a b
  valgrind --tool=callgrind --callgrind-out-file="$out.%p" --dump-instr=no "$@" >"$dir/$key.log" 2>&1 &
  local p=$!; pids+=("$p")
  wait_ports "$target"
  sleep 2
  load 200 # warm-up: connections, caches, pools
  window "$p" "$n1"; a=$(dumped "$out")
  window "$p" "$n2"; b=$(dumped "$out")
  per[$key]=$(((b - a) / (n2 - n1)))
  kill -KILL "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true
  echo "$key: ${per[$key]} instructions per request" >&2
}

RUST_LOG=warn TOKIO_WORKER_THREADS=1 run_one edgewarm $port "$edgewarm" run --config "$dir/edge.yaml"
RUST_LOG=warn TOKIO_WORKER_THREADS=1 run_one bare $port "$edgewarm" run --config "$dir/bare.yaml"
if [ -n "${BASELINE:-}" ]; then
  RUST_LOG=warn TOKIO_WORKER_THREADS=1 run_one baseline $port "$BASELINE" run --config "$dir/baseline.yaml"
fi
run_one haproxy $port haproxy -db -f "$dir/haproxy-http.cfg"
run_one haproxy-fwd $port_fwd haproxy -db -f "$dir/haproxy-http-fwd.cfg"

e=${per[edgewarm]}
echo
echo "| proxy (callgrind, one thread; h2load -c 10 -m 10; slope $n1 → $n2 requests) | user-space instructions per request | edgewarm's / its |"
echo "|---|---|---|"
row() { awk -v n="$2" -v k="$1" -v e="$e" 'BEGIN {printf "| %s | %d | %.2f |\n", n, k, e / k}'; }
row "$e" "edgewarm http route"
row "${per[bare]}" "edgewarm http route, forward_headers: []"
if [ -n "${BASELINE:-}" ]; then row "${per[baseline]}" "edgewarm baseline ($BASELINE)"; fi
row "${per[haproxy]}" "HAProxy 2.6 (h2 upstream, http-reuse always)"
row "${per[haproxy-fwd]}" "HAProxy 2.6, adding edgewarm's forwarding headers"
echo
awk -v a="${per[bare]}" -v b="${per[haproxy]}" 'BEGIN {printf "Same header work, none added: edgewarm (forward_headers: []) / HAProxy = %.2f\n", a / b}'
awk -v a="$e" -v b="${per[haproxy-fwd]}" 'BEGIN {printf "Same header work, all four added: edgewarm / HAProxy adding them = %.2f\n", a / b}'
