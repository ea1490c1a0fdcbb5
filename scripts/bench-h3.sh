#!/usr/bin/env bash
# HTTP/3 against HTTP/2 through the same edgewarm `http` route and the same nginx HTTP/2 origin,
# in one run, alternating rounds, medians. Each client connection fetches a page and then PAGE
# sub-resources at once (`edgewarm-lab load --page`), as a browser does.
#  - Edge CPU per request at the same offered load for both: RATE new connections a second,
#    open loop. On a saturated machine the edge's cost per request depends on how much each
#    wake-up finds to do, so the protocol whose client is slower (QUIC's, here on the same two
#    cores) would be measured at a lighter load; the same rate takes that out.
#  - Requests/s: closed loop, CONCURRENCY connections at once, as fast as they go. On two cores
#    the load generator shares them with the edge and the origin, and its QUIC client costs
#    about twice its HTTP/2 client per request: the load generator's CPU per request (user +
#    system, from bash's `time`) is printed beside it, so a reader sees what bounds the loop.
# Needs: nginx, openssl (scripts/deps.sh).
#
#   scripts/bench-h3.sh [ROUNDS] [CONNECTIONS] [PAGE] [RATE] [CONCURRENCY]   # 7 3000 30 600 10
# (CPU is read in clock ticks: fewer connections make a round too short to measure.)
set -euo pipefail
rounds=${1:-7} conns=${2:-3000} page=${3:-30} rate=${4:-600} concurrency=${5:-10}
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=scripts/bench-lib.sh
. "$root/scripts/bench-lib.sh"
bench_http_setup
bench_h3_start
declare -A port=([h2]=$edge [h3]=$edge) edge_pid=([h2]=$pid [h3]=$pid) protocol=([h2]=h2 [h3]=h3)
columns="h2 h3"
hz=$(getconf CLK_TCK)
declare -A rps cpu gen
# load COLUMN ARGS...: one run; sets $n (requests answered), $secs and $us (edge CPU µs a request).
# $client: the load generator's CPU µs a request (user + system).
load() {
  local alpn=${protocol[$1]} p=${edge_pid[$1]} to=${port[$1]} c0 c1 t0 t1 out ok cpu
  shift
  c0=$(ticks $p) t0=$(date +%s.%N)
  out=$(TIMEFORMAT='%U %S'; { time "$lab" load https://b.test/ --connect-to "127.0.0.1:$to" --cacert "$dir/ca.pem" \
    --alpn "$alpn" --page "$page" --requests "$conns" "$@" --json 2>"$dir/load.err"; } 2>"$dir/load.time")
  t1=$(date +%s.%N) c1=$(ticks $p)
  cpu=$(awk '{print $1 + $2}' "$dir/load.time")
  if [ -s "$dir/load.err" ]; then cat "$dir/load.err" >&2; fi
  ok=$(printf '%s' "$out" | python3 -c "import json,sys; print(json.load(sys.stdin)['ok'])")
  [ "$ok" = "$conns" ] || echo "$alpn $*: $ok of $conns connections succeeded" >&2
  n=$((ok * (page + 1)))
  secs=$(awk "BEGIN {print $t1 - $t0}")
  us=$(awk "BEGIN {printf \"%.1f\", ($c1 - $c0) * 1e6 / $hz / $n}")
  client=$(awk "BEGIN {printf \"%.1f\", $cpu * 1e6 / $n}")
}
for round in $(seq "$rounds"); do
  # Alternating which goes first, so neither always runs on a warmer machine.
  order=$columns; [ $((round % 2)) -eq 0 ] && order=$(echo "$columns" | tr ' ' '\n' | tac | xargs)
  for alpn in $order; do
    load "$alpn" --rate "$rate"
    c=$us
    load "$alpn" --concurrency "$concurrency"
    r=$(awk "BEGIN {printf \"%.0f\", $n / $secs}")
    cpu[$alpn]="${cpu[$alpn]:-} $c" rps[$alpn]="${rps[$alpn]:-} $r" gen[$alpn]="${gen[$alpn]:-} $client"
    echo "round $round $alpn: $c µs edge CPU per request at $rate connections/s; $r req/s closed loop (edge $us, load generator $client µs a request)"
  done
done
echo
echo "| client protocol ($conns connections x $((page + 1)) requests; median of $rounds) | edge CPU µs per request, $rate connections/s | req/s, $concurrency connections at once | load generator CPU µs per request, closed loop |"
echo "|---|---|---|---|"
for alpn in $columns; do
  echo "| $alpn | $(echo "${cpu[$alpn]}" | median) | $(echo "${rps[$alpn]}" | median) | $(echo "${gen[$alpn]}" | median) |"
done
h3_ratio "${cpu[h3]}" "${cpu[h2]}"
