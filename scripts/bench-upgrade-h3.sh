#!/usr/bin/env bash
# HTTP/3 clients through upgrades, on loopback: an open-loop stream of HTTP/3 page loads (a page
# and PAGE sub-resources on each new connection) while the edge is upgraded three times, each
# upgrade's old process kept draining by a slow HTTP/2 download over TCP, as real drains are.
# Printed per build: TTFB p50 / p99 / max, the failed page loads, and the requests refused
# unprocessed (after a GOAWAY) that the load generator sent again on a new connection, as a
# browser does (a page load whose retry succeeded is not failed). BASELINE: other
# edgewarm binaries to run the same way first, e.g. a build from before a change.
#
#   BASELINE="/tmp/edgewarm-before" scripts/bench-upgrade-h3.sh [ROUNDS] [RATE] [PAGE]   # 3 100 10
set -euo pipefail
rounds=${1:-3} rate=${2:-100} page=${3:-10}
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=scripts/bench-lib.sh
. "$root/scripts/bench-lib.sh"
bench_http_setup
bench_h2_origin $origin 2
head -c 20000000 /dev/urandom > "$dir/big"
sed -i "s#location / {#location /big { alias $dir/big; } location / {#" "$dir/origin.conf"
BENCH_HTTP3=1 bench_http_edge $edge $admin $origin > "$dir/edge.yaml"
nginx -c "$dir/origin.conf" & pids+=($!)
# one BINARY: the edge from BINARY, 15 s of page loads with three upgrades in them; prints a row.
one() {
  local bin=$1 load out
  RUST_LOG=warn "$bin" run --config "$dir/edge.yaml" 2>>"$dir/edge.log" & pids+=($!)
  wait_ports $edge
  "$lab" load https://b.test/ --connect-to "127.0.0.1:$edge" --cacert "$dir/ca.pem" --alpn h3 --page "$page" \
    --rate "$rate" --requests $((rate * 15)) --timeout 10s --json > "$dir/load.json" & load=$!
  for _ in 1 2 3; do
    sleep 3
    curl -s -o /dev/null --limit-rate 2M --http2 --cacert "$dir/ca.pem" \
      --connect-to "b.test:443:127.0.0.1:$edge" https://b.test/big & pids+=($!)
    sleep 0.5
    RUST_LOG=warn "$bin" run --config "$dir/edge.yaml" --upgrade 2>>"$dir/edge.log" & pids+=($!)
  done
  wait $load
  out=$(python3 -c "import json,sys; d=json.load(open(sys.argv[1])); t=d['ttfb_ms']; print(t['p50'], t['p99'], t['max'], d['requests'] - d['ok'], d.get('retried', 0))" "$dir/load.json")
  echo "$bin $out"
  # The last process (and any still draining) go before the next build's run.
  for p in "${pids[@]:1}"; do kill "$p" 2>/dev/null || true; done
  pkill -f "$dir/edge.yaml" 2>/dev/null || true
  sleep 1
}
echo "| build | round | TTFB p50 ms | p99 | max | failed page loads of $((rate * 15)) | requests sent again |"
echo "|---|---|---|---|---|---|---|"
for round in $(seq "$rounds"); do
  for bin in ${BASELINE:-} "$edgewarm"; do
    read -r b p50 p99 max failed retried <<< "$(one "$bin")"
    echo "| $b | $round | $p50 | $p99 | $max | $failed | $retried |"
  done
done
