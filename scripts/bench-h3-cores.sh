#!/usr/bin/env bash
# HTTP/3 against HTTP/2 by the edge's *core*, not only its process. The edge runs alone on CPU 0
# in a namespace of its own, the load generator and the nginx origin on CPU 1 in another, joined
# by a veth pair whose receive queues are steered (RPS) to their own side's core, as a NIC's
# interrupts would be; so CPU 0 carries the kernel's receive work for the edge's packets, which
# on loopback is billed to the sender. CPU 0's busy time is wall time less its idle time: with
# tickless idle the kernel keeps idle time exactly, while the busy counters (user, system,
# softirq) are sampled at each tick and a core that wakes for a few microseconds at a time is
# mis-sampled (earlier versions of this script read those and were wrong by a third). Printed
# per request: CPU 0 busy, the edge process, and inter-processor interrupts taken by CPU 0 (the
# steering's, which a NIC would replace by its own interrupts). Anything else on CPU 0 is
# counted too: run it on an otherwise idle machine. Needs root, nginx, taskset (util-linux).
#
#   scripts/bench-h3-cores.sh [ROUNDS] [CONNECTIONS] [PAGE] [RATE]   # 7 2000 30 400
set -euo pipefail
rounds=${1:-7} conns=${2:-2000} page=${3:-30} rate=${4:-400}
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=scripts/bench-lib.sh
. "$root/scripts/bench-lib.sh"
bench_edgewarm_and_lab
bench_workdir
bench_http_pki
A=ewbench-edge B=ewbench-client
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; ip netns del $A 2>/dev/null; ip netns del $B 2>/dev/null; rm -rf "$dir"' EXIT
ip netns add $A && ip netns add $B
ip link add ewbench-a type veth peer name ewbench-b
ip link set ewbench-a netns $A && ip link set ewbench-b netns $B
ip -n $A addr add 10.77.0.1/24 dev ewbench-a && ip -n $B addr add 10.77.0.2/24 dev ewbench-b
for ns in $A $B; do ip -n $ns link set lo up; done
ip -n $A link set ewbench-a up && ip -n $B link set ewbench-b up
ip netns exec $A sh -c 'echo 1 > /sys/class/net/ewbench-a/queues/rx-0/rps_cpus'
ip netns exec $B sh -c 'echo 2 > /sys/class/net/ewbench-b/queues/rx-0/rps_cpus'
origin=18743 edge=19743 admin=19990
bench_h2_origin $origin 1
sed -i "s/listen 127.0.0.1:$origin/listen 10.77.0.2:$origin/" "$dir/origin.conf"
BENCH_HTTP3=1 bench_http_edge $edge $admin $origin | sed -e "s/listen: \"127.0.0.1:$edge\"/listen: \"10.77.0.1:$edge\"/" \
  -e "s/origin: \"127.0.0.1:$origin\"/origin: \"10.77.0.2:$origin\"/" -e '1i workers: 1' > "$dir/edge.yaml"
taskset -c 1 ip netns exec $B nginx -c "$dir/origin.conf" & pids+=($!)
taskset -c 0 ip netns exec $A env RUST_LOG=warn "$edgewarm" run --config "$dir/edge.yaml" 2>"$dir/edge.log" & pids+=($!); pid=$!
# up_in NS ADDR PORT: wait (10 s at most) until something listens there.
up_in() { ip netns exec "$1" bash -c "for i in {1..100}; do (exec 3<>/dev/tcp/$2/$3) 2>/dev/null && exit 0; sleep 0.1; done; exit 1"; }
up_in $B 10.77.0.2 $origin && up_in $A 10.77.0.1 $edge
hz=$(getconf CLK_TCK)
# core0: CPU 0's idle time (idle + iowait, in clock ticks, kept exactly) and the wall clock.
core0() { awk -v w="$(date +%s.%N)" '/^cpu0 / {print $5 + $6, w}' /proc/stat; }
# ipis: interrupts between processors taken by CPU 0 so far.
ipis() { awk '$1 == "CAL:" || $1 == "RES:" {s += $2} END {print s}' /proc/interrupts; }
declare -A core proc ipi
for round in $(seq "$rounds"); do
  order="h2 h3"; [ $((round % 2)) -eq 0 ] && order="h3 h2"
  for alpn in $order; do
    read -r i0 w0 < <(core0); q0=$(ipis) p0=$(ticks $pid)
    out=$(taskset -c 1 ip netns exec $B "$lab" load https://b.test/ --connect-to "10.77.0.1:$edge" --cacert "$dir/ca.pem" \
      --alpn "$alpn" --page "$page" --requests "$conns" --rate "$rate" --json)
    read -r i1 w1 < <(core0); q1=$(ipis) p1=$(ticks $pid)
    n=$(( $(printf '%s' "$out" | python3 -c "import json,sys; print(json.load(sys.stdin)['ok'])") * (page + 1) ))
    core[$alpn]="${core[$alpn]:-} $(awk "BEGIN {printf \"%.1f\", (($w1 - $w0) - ($i1 - $i0) / $hz) * 1e6 / $n}")"
    ipi[$alpn]="${ipi[$alpn]:-} $(awk "BEGIN {printf \"%.2f\", ($q1 - $q0) / $n}")"
    proc[$alpn]="${proc[$alpn]:-} $(awk "BEGIN {printf \"%.1f\", ($p1 - $p0) * 1e6 / $hz / $n}")"
  done
done
for alpn in h2 h3; do
  echo "$alpn: CPU 0 µs/request [${core[$alpn]} ] median $(echo "${core[$alpn]}" | median);" \
    "edge process [${proc[$alpn]} ] median $(echo "${proc[$alpn]}" | median); IPIs/request [${ipi[$alpn]} ]"
done
awk -v a="$(echo "${core[h3]}" | median)" -v b="$(echo "${core[h2]}" | median)" \
  'BEGIN {printf "HTTP/3 CPU 0 time per request / HTTP/2 = %.2f\n", a / b}'
