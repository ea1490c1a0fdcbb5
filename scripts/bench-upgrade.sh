#!/usr/bin/env bash
# Upgrades on loopback: how long `edgewarm run --upgrade` takes from its start to serving (the
# old process stopped), and the TTFB of the first new client through a prewarm route just after
# an upgrade, just before it, and just after a plain restart (cold pools), alternating.
# Usage: scripts/bench-upgrade.sh [ROUNDS]   (default 7). Prints medians.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/scripts/bench-lib.sh"
rounds=${1:-7}
bench_edgewarm
cargo build --release -q -p edgewarm-lab --manifest-path "$root/Cargo.toml"
lab="$root/target/release/edgewarm-lab"
bench_workdir && bench_ca && bench_cert origin "DNS:origin.test" && bench_cert edge "DNS:b.test"
"$lab" origin --listen 127.0.0.1:19443 --cert "$dir/origin.pem" --key "$dir/origin.key" 2>/dev/null & pids+=($!)
cat >"$dir/edge.yaml" <<YAML
admin: {listen: "127.0.0.1:19900"}
listeners: [{listen: "127.0.0.1:18443"}]
upgrade: {socket: $dir/upgrade.sock}
routes:
  - {sni: b.test, action: prewarm, origin: "127.0.0.1:19443", cert: $dir/edge.pem, key: $dir/edge.key,
     origin_tls: {sni: origin.test, ca: $dir/ca.pem}, pool: {min: 4}}
YAML
ttfb() { "$lab" load https://b.test/ --connect-to 127.0.0.1:18443 --cacert "$dir/ca.pem" --requests 1 --json | sed 's/.*"ttfb_ms":{"p50":\([0-9.]*\).*/\1/'; }
ready() { for _ in $(seq 500); do grep -q "$1" "$2" 2>/dev/null && return; sleep 0.01; done; echo "no '$1' in $2" >&2; exit 1; }
start() { "$edgewarm" run --config "$dir/edge.yaml" "$@" 2>>"$dir/edge.log" & pid=$!; pids+=("$pid"); }
start; ready "listening for upgrades" "$dir/edge.log"; sleep 1
before=() after=() cold=() took=()
for i in $(seq "$rounds"); do
  sleep 1; before+=("$(ttfb)")
  : >"$dir/edge.log"; t0=$(date +%s%N); start --upgrade
  ready "took over" "$dir/edge.log"; took+=("$(( ($(date +%s%N) - t0) / 1000000 ))")
  after+=("$(ttfb)")
  kill "$pid"; wait "$pid" 2>/dev/null || true; sleep 0.5
  : >"$dir/edge.log"; start; ready "listening for upgrades" "$dir/edge.log"
  cold+=("$(ttfb)")
done
echo "rounds: $rounds"
echo "run --upgrade to serving (ms): ${took[*]}  median $(echo "${took[*]}" | median)"
echo "first client TTFB (ms) before an upgrade: ${before[*]}  median $(echo "${before[*]}" | median)"
echo "first client TTFB (ms) after an upgrade:  ${after[*]}  median $(echo "${after[*]}" | median)"
echo "first client TTFB (ms) after a restart:   ${cold[*]}  median $(echo "${cold[*]}" | median)"
