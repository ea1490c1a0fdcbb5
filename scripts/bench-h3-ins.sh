#!/usr/bin/env bash
# User-space instructions per request over HTTP/2 and HTTP/3: the same `http` route and nginx
# HTTP/2 origin as bench-h3.sh, each edge run alone under callgrind. bench-h3.sh's CPU times move by ±20 %
# between rounds on the shared machine; instruction counts repeat to 0.5 %, so this is where a
# change to the HTTP/3 path shows. The kernel's share (UDP against TCP) is not counted.
# Per request is the slope between two windows of C1 and C2 connections in one process
# (callgrind_control --zero/--dump), so start-up and warm-up cancel; each connection is a page
# and PAGE sub-resources (`edgewarm-lab load --page`), two connections at a time, so a
# connection's handshake is part of its requests' cost, as in bench-h3.sh.
# Needs: valgrind, nginx, openssl (scripts/deps.sh).
#
#   scripts/bench-h3-ins.sh [C1] [C2] [PAGE]   # 20 60 30
set -euo pipefail
c1=${1:-20} c2=${2:-60} page=${3:-30}
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=scripts/bench-lib.sh
. "$root/scripts/bench-lib.sh"
bench_http_setup
bench_h2_origin $origin 2
BENCH_HTTP3=1 bench_http_edge $edge $admin $origin > "$dir/edge.yaml"
nginx -c "$dir/origin.conf" & pids+=($!)
wait_ports $origin

load() { # alpn connections
  local ok
  ok=$("$lab" load https://b.test/ --connect-to "127.0.0.1:$edge" --cacert "$dir/ca.pem" --alpn "$1" \
    --page "$page" --requests "$2" --concurrency 2 --json | python3 -c "import json,sys; print(json.load(sys.stdin)['ok'])")
  [ "$ok" = "$2" ] || { echo "FAILED: $1: $ok of $2 connections" >&2; exit 1; }
}
window() { # pid alpn connections: the instructions they cost
  callgrind_control --zero "$1" >/dev/null 2>&1
  load "$2" "$3"
  callgrind_control --dump "$1" >/dev/null 2>&1
  sleep 0.5
  awk '/^(summary|totals):/ {print $2; exit}' "$(ls -t "$out".* | head -1)"
}
declare -A per
run_one() { # key alpn config
  local key=$1 alpn=$2 a b p
  out="$dir/cg.$key"
  RUST_LOG=warn valgrind --tool=callgrind --callgrind-out-file="$out.%p" --dump-instr=no \
    "$edgewarm" run --config "$dir/$3" >"$dir/$key.log" 2>&1 &
  p=$!; pids+=("$p")
  # Under valgrind the edge takes seconds to start (the `http` route's TCP listener is up
  # with the QUIC one).
  for _ in $(seq 300); do (exec 3<>"/dev/tcp/127.0.0.1/$edge") 2>/dev/null && break; sleep 0.2; done
  load "$alpn" 5 # warm-up: the origin's connections, the workers' caches
  a=$(window "$p" "$alpn" "$c1")
  b=$(window "$p" "$alpn" "$c2")
  per[$key]=$(((b - a) / ((c2 - c1) * (page + 1))))
  kill -KILL "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true
  echo "$key: ${per[$key]} instructions per request" >&2
}
run_one h2 h2 edge.yaml
run_one h3 h3 edge.yaml

echo
echo "| client protocol (callgrind; a page and $page sub-resources a connection; slope $c1 → $c2 connections) | user-space instructions per request | against HTTP/2 |"
echo "|---|---|---|"
for key in h2 h3; do
  awk -v k="$key" -v n="${per[$key]}" -v b="${per[h2]}" 'BEGIN {printf "| %s | %d | %.2f |\n", k, n, n / b}'
done
