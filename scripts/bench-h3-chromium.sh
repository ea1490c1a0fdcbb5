#!/usr/bin/env bash
# HTTP/3 against HTTP/2 with a real browser as the client: headless Chromium (`edgewarm-lab
# browse`, DevTools) loads one of the browser lab's pages through the edge's `http` route on
# loopback, LOADS first and returning visits a round, over HTTP/2 and then over HTTP/3
# (`--origin-to-force-quic-on`), alternating which goes first. Printed per round and as medians:
# the edge's CPU time per request (the run time of its threads, from /proc/PID/task/*/schedstat,
# in nanoseconds: clock ticks are too coarse for a few thousand requests) and the datagrams or
# segments on loopback per request. Unlike `scripts/bench-h3.sh` (short answers), the responses
# here are the sizes of a real page's, so the cost of moving bytes counts.
# Needs chromium and openssl (scripts/deps.sh).
#
#   scripts/bench-h3-chromium.sh [ROUNDS] [LOADS] [PAGE]   # 7 3 news (or login, app)
set -euo pipefail
rounds=${1:-7} loads=${2:-3} page=${3:-news}
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=scripts/bench-lib.sh
. "$root/scripts/bench-lib.sh"
bench_http_setup
"$lab" origin --listen 127.0.0.1:$origin --cert "$dir/origin.test.pem" --key "$dir/origin.test.key" 2>/dev/null & pids+=($!)
BENCH_HTTP3=1 bench_http_edge $edge $admin $origin > "$dir/edge.yaml"
RUST_LOG=warn "$edgewarm" run --config "$dir/edge.yaml" 2>"$dir/edge.log" & pids+=($!); pid=$!
wait_ports $origin $edge
spki=$(openssl x509 -pubkey -noout -in "$dir/b.test.pem" | openssl pkey -pubin -outform der | openssl dgst -sha256 -binary | base64)
# requests PROTOCOL: requests the edge has answered over it so far.
requests() {
  curl -s "http://127.0.0.1:$admin/metrics" \
    | awk -v p="protocol=\"$1\"" '/^edgewarm_http_requests_total\{/ && index($0, p) {s += $NF} END {print s + 0}'
}
# run_ns: the edge's threads' time on a CPU so far, in nanoseconds.
run_ns() { cat /proc/"$pid"/task/*/schedstat | awk '{s += $1} END {printf "%d\n", s}'; }
# packets: UDP datagrams received and TCP segments received on this host so far.
packets() { awk '/^Udp:/ && $2 ~ /^[0-9]/ {u = $2} /^Tcp:/ && $2 ~ /^[0-9]/ {t = $11} END {print u, t}' /proc/net/snmp; }
declare -A cpu pkts
for round in $(seq "$rounds"); do
  order="h2 h3"; [ $((round % 2)) -eq 0 ] && order="h3 h2"
  for alpn in $order; do
    quic=(); [ "$alpn" = h3 ] && quic=(--quic "b.test:$edge")
    r0=$(requests "$alpn") c0=$(run_ns); read -r u0 t0 < <(packets)
    "$lab" browse "https://b.test:$edge/$page/" --resolve b.test=127.0.0.1 "${quic[@]}" --spki "$spki" \
      --loads "$loads" > "$dir/browse.json"
    c1=$(run_ns) r1=$(requests "$alpn"); read -r u1 t1 < <(packets)
    n=$((r1 - r0))
    us=$(awk "BEGIN {printf \"%.1f\", ($c1 - $c0) / 1000 / $n}")
    # Over HTTP/3 the client's packets are datagrams; the origin's are TCP segments either way.
    p=$(awk "BEGIN {printf \"%.1f UDP + %.1f TCP\", ($u1 - $u0) / $n, ($t1 - $t0) / $n}")
    cpu[$alpn]="${cpu[$alpn]:-} $us" pkts[$alpn]="$p"
    echo "round $round $alpn: $n requests, $us µs edge CPU per request; packets received per request: $p"
  done
done
echo
echo "| client protocol (Chromium, $page page, $loads first + $loads returning visits a round; median of $rounds) | edge CPU µs per request | packets received per request (last round) |"
echo "|---|---|---|"
for alpn in h2 h3; do echo "| $alpn | $(echo "${cpu[$alpn]}" | median) | ${pkts[$alpn]} |"; done
h3_ratio "${cpu[h3]}" "${cpu[h2]}"
