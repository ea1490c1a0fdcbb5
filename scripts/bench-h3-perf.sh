#!/usr/bin/env bash
# Where HTTP/3's time goes against HTTP/2's: `perf record -e cpu-clock` of one edge under
# bench-h3.sh's open-loop load (a page and PAGE sub-resources a connection, RATE connections a
# second), RUNS loads of CONNECTIONS connections for each protocol, and the samples turned into
# µs a request by where they fell (quinn-proto, quinn and the listener, the HTTP/3 layer, the h2
# crate, crypto, the allocator, the kernel, the rest). Requests are counted from the edge's own
# metrics, so the two columns compare directly. Set the figures beside bench-h3-ins.sh's
# instructions to see which code is slow per instruction (memory stalls), which callgrind cannot.
# perf counts the kernel's packet work done while the edge runs (softirq included), which the
# /proc ticks bench-h3.sh reads leave out, so its ratio differs from that bench's.
# Needs: perf, nginx, openssl (scripts/deps.sh).
#
#   scripts/bench-h3-perf.sh [RUNS] [CONNECTIONS] [PAGE] [RATE]   # 6 800 30 600
set -euo pipefail
runs=${1:-6} conns=${2:-800} page=${3:-30} rate=${4:-600}
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=scripts/bench-lib.sh
. "$root/scripts/bench-lib.sh"
bench_http_setup
bench_h3_start
served() { # protocol: requests the edge has answered over it
  curl -s "http://127.0.0.1:$admin/metrics" |
    awk -v p="protocol=\"$1\"" 'index($0, "edgewarm_http_requests_total{") && index($0, p) {s += $NF} END {print s + 0}'
}
load() { # protocol connections
  "$lab" load https://b.test/ --connect-to "127.0.0.1:$edge" --cacert "$dir/ca.pem" --alpn "$1" \
    --page "$page" --requests "$2" --rate "$rate" --json >/dev/null
}
for alpn in h2 h3; do load $alpn 200; done # warm-up: the origin's connections, the workers' caches
for alpn in h2 h3; do
  before=$(served $alpn)
  perf record -q -e cpu-clock -F 4000 -p "$pid" -o "$dir/perf.$alpn" 2>/dev/null &
  rec=$!
  sleep 0.3
  for _ in $(seq "$runs"); do load $alpn "$conns"; done
  kill -INT "$rec"; wait "$rec" || true
  n=$(($(served $alpn) - before))
  # cpu-clock's event count is in ns.
  total=$(perf report -i "$dir/perf.$alpn" --stdio 2>/dev/null | awk '/Event count/ && !t {t = $NF} END {print t}')
  perf report -i "$dir/perf.$alpn" --no-children --sort sym -q --stdio -g none 2>/dev/null |
    awk -v total="$total" -v n="$n" -v alpn="$alpn" '
      { pct = $1; sub(/%/, "", pct); kind = $2; $1 = ""; $2 = ""; s = $0
        g = "other"
        if (kind == "[k]") g = "kernel"
        else if (s ~ /quinn_proto/) g = "quinn-proto"
        else if (s ~ /quinn::|listener::quic/) g = "quinn and the QUIC listener"
        else if (s ~ /http::client::h3/) g = "the edge'"'"'s HTTP/3 layer"
        else if (s ~ /(^| |<)h2::/) g = "the h2 crate"
        else if (s ~ /aws_lc|curve25519|nistz|sha256|keccak|aes|gcm/) g = "crypto"
        else if (s ~ /(^| )(_?mi_|malloc|free$)/) g = "allocator"
        us[g] += pct / 100 * total / 1000 / n }
      END { for (g in us) printf "%s\t%s\t%.2f\n", alpn, g, us[g] }' >> "$dir/groups"
  echo "$alpn: $n requests" >&2
done
echo "| where | h2 µs a request | h3 µs a request |"
echo "|---|---|---|"
awk -F'\t' '{v[$2 "\t" $1] = $3; g[$2] = 1; t[$1] += $3}
  END { for (k in g) printf "| %s | %s | %s |\n", k, v[k "\th2"] + 0, v[k "\th3"] + 0
        printf "| all | %.2f | %.2f |\n", t["h2"], t["h3"] }' "$dir/groups" | sort
