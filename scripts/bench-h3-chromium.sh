#!/usr/bin/env bash
# HTTP/3 against HTTP/2 with a real browser as the client: headless Chromium (`edgewarm-lab
# browse`, DevTools) loads one of the browser lab's pages through the edge's `http` route on
# loopback, LOADS first and returning visits a round, over HTTP/2 and then over HTTP/3
# (`--origin-to-force-quic-on`), alternating which goes first. Printed per round and as medians:
# the edge's CPU time per request (the run time of its threads, from /proc/PID/task/*/schedstat,
# in nanoseconds: clock ticks are too coarse for a few thousand requests) and the datagrams or
# segments on loopback per request, and the edge's wake-ups (voluntary context switches) and
# system calls per request (perf, where it can). Unlike `scripts/bench-h3.sh` (short answers), the responses
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
RUST_LOG=warn "$edgewarm" run --config "$dir/edge.yaml" 2>"$dir/edge.log" & pids+=($!)
declare -A pid=([h2]=$! [h3]=$!) port=([h2]=$edge [h3]=$edge) adm=([h2]=$admin [h3]=$admin)
wait_ports $origin $edge
columns="h2 h3"
spki=$(openssl x509 -pubkey -noout -in "$dir/b.test.pem" | openssl pkey -pubin -outform der | openssl dgst -sha256 -binary | base64)
# requests ADMIN PROTOCOL: requests the edge has answered over it so far.
requests() {
  curl -s "http://127.0.0.1:$1/metrics" \
    | awk -v p="protocol=\"$2\"" '/^edgewarm_http_requests_total\{/ && index($0, p) {s += $NF} END {print s + 0}'
}
# run_ns PID: the edge's threads' time on a CPU so far, in nanoseconds.
run_ns() { cat /proc/"$1"/task/*/schedstat | awk '{s += $1} END {printf "%d\n", s}'; }
# wakeups PID: the edge's threads' voluntary context switches so far (each a sleep and a wake-up).
wakeups() { cat /proc/"$1"/task/*/status | awk '/^voluntary_ctxt_switches/ {s += $2} END {print s + 0}'; }
# A round's system calls and send calls by the edge, counted by `perf stat` on its tracepoints
# when perf can (else "-"): perf_start PID, then perf_end prints "CALLS SENDS" (called in this
# shell, not a subshell, so that it can wait for perf to write its counts).
perf_start() {
  rm -f "$dir/perf.csv"
  perf stat -x, -o "$dir/perf.csv" -e raw_syscalls:sys_enter,syscalls:sys_enter_sendmsg,syscalls:sys_enter_sendmmsg \
    -p "$1" 2>/dev/null & perf_pid=$!
  sleep 0.2
}
perf_end() {
  kill -INT "$perf_pid" 2>/dev/null && wait "$perf_pid" 2>/dev/null || true
  awk -F, '$3 == "raw_syscalls:sys_enter" {c = $1} $3 ~ /sys_enter_sendm/ {s += $1} END {if (c == "") print "- -"; else print c, s}' "$dir/perf.csv" 2>/dev/null || echo "- -"
}
# packets: UDP datagrams received and TCP segments received on this host so far.
packets() { awk '/^Udp:/ && $2 ~ /^[0-9]/ {u = $2} /^Tcp:/ && $2 ~ /^[0-9]/ {t = $11} END {print u, t}' /proc/net/snmp; }
declare -A cpu pkts wake calls
for round in $(seq "$rounds"); do
  order=$columns; [ $((round % 2)) -eq 0 ] && order=$(echo "$columns" | tr ' ' '\n' | tac | xargs)
  for alpn in $order; do
    protocol=$alpn to=${port[$alpn]} p=${pid[$alpn]} a=${adm[$alpn]}
    quic=(); [ "$protocol" = h3 ] && quic=(--quic "b.test:$to")
    r0=$(requests "$a" "$protocol") c0=$(run_ns "$p") w0=$(wakeups "$p"); perf_start "$p"; read -r u0 t0 < <(packets)
    "$lab" browse "https://b.test:$to/$page/" --resolve b.test=127.0.0.1 "${quic[@]}" --spki "$spki" \
      --loads "$loads" > "$dir/browse.json"
    c1=$(run_ns "$p") w1=$(wakeups "$p") r1=$(requests "$a" "$protocol"); read -r u1 t1 < <(packets)
    n=$((r1 - r0))
    us=$(awk "BEGIN {printf \"%.1f\", ($c1 - $c0) / 1000 / $n}")
    # Over HTTP/3 the client's packets are datagrams; the origin's are TCP segments either way.
    p=$(awk "BEGIN {printf \"%.1f UDP + %.1f TCP\", ($u1 - $u0) / $n, ($t1 - $t0) / $n}")
    perf_end > "$dir/perf.out"; read -r s1 s2 < "$dir/perf.out"
    w=$(awk "BEGIN {printf \"%.1f\", ($w1 - $w0) / $n}")
    sc=$(awk -v c="$s1" -v s="$s2" "BEGIN {if (c == \"-\") print \"-\"; else printf \"%.1f (%.1f sends)\", c / $n, s / $n}")
    cpu[$alpn]="${cpu[$alpn]:-} $us" pkts[$alpn]="$p" wake[$alpn]="${wake[$alpn]:-} $w" calls[$alpn]="$sc"
    echo "round $round $alpn: $n requests, $us µs edge CPU per request; packets received per request: $p; edge wake-ups $w, system calls $sc per request"
  done
done
echo
echo "| client protocol (Chromium, $page page, $loads first + $loads returning visits a round; median of $rounds) | edge CPU µs per request | edge wake-ups per request | edge system calls per request (last round; sends) | packets received per request (last round) |"
echo "|---|---|---|---|---|"
for alpn in $columns; do
  echo "| $alpn | $(echo "${cpu[$alpn]}" | median) | $(echo "${wake[$alpn]}" | median) | ${calls[$alpn]} | ${pkts[$alpn]} |"
done
h3_ratio "${cpu[h3]}" "${cpu[h2]}"
