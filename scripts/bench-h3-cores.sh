#!/usr/bin/env bash
# Exploratory: HTTP/3 against HTTP/2 by the edge's *core*, not its process. On loopback the
# kernel's receive work for a segment is billed to the sender, so the edge's process time leaves
# out what TCP does in the kernel for the edge's inbound segments (QUIC does that work in user
# space, where it is counted). Here the edge runs alone on CPU 0 in a namespace of its own, the
# load generator and the nginx origin on CPU 1 in another, joined by a veth pair whose receive
# queues are steered (RPS) to their own side's core, as a NIC's interrupts would be. Printed:
# CPU 0's busy ticks (/proc/stat) and the edge process's, per request. Caveats: RPS adds
# inter-processor interrupts a NIC would not, tick sampling is coarse, and anything else the
# scheduler puts on CPU 0 is counted. Needs root, nginx, taskset (util-linux).
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
bench_http_edge $edge $admin $origin | sed -e "s/{listen: \"127.0.0.1:$edge\"}/{listen: \"10.77.0.1:$edge\", http3: true}/" \
  -e "s/origin: \"127.0.0.1:$origin\"/origin: \"10.77.0.2:$origin\"/" -e '1i workers: 1' > "$dir/edge.yaml"
taskset -c 1 ip netns exec $B nginx -c "$dir/origin.conf" & pids+=($!)
taskset -c 0 ip netns exec $A env RUST_LOG=warn "$edgewarm" run --config "$dir/edge.yaml" 2>"$dir/edge.log" & pids+=($!); pid=$!
# up_in NS ADDR PORT: wait (10 s at most) until something listens there.
up_in() { ip netns exec "$1" bash -c "for i in {1..100}; do (exec 3<>/dev/tcp/$2/$3) 2>/dev/null && exit 0; sleep 0.1; done; exit 1"; }
up_in $B 10.77.0.2 $origin && up_in $A 10.77.0.1 $edge
hz=$(getconf CLK_TCK)
core0() { awk '/^cpu0 / {print $2 + $3 + $4 + $7 + $8}' /proc/stat; }
declare -A core proc
for round in $(seq "$rounds"); do
  order="h2 h3"; [ $((round % 2)) -eq 0 ] && order="h3 h2"
  for alpn in $order; do
    c0=$(core0) p0=$(ticks $pid)
    out=$(taskset -c 1 ip netns exec $B "$lab" load https://b.test/ --connect-to "10.77.0.1:$edge" --cacert "$dir/ca.pem" \
      --alpn "$alpn" --page "$page" --requests "$conns" --rate "$rate" --json)
    c1=$(core0) p1=$(ticks $pid)
    n=$(( $(printf '%s' "$out" | python3 -c "import json,sys; print(json.load(sys.stdin)['ok'])") * (page + 1) ))
    core[$alpn]="${core[$alpn]:-} $(awk "BEGIN {printf \"%.1f\", ($c1 - $c0) * 1e6 / $hz / $n}")"
    proc[$alpn]="${proc[$alpn]:-} $(awk "BEGIN {printf \"%.1f\", ($p1 - $p0) * 1e6 / $hz / $n}")"
  done
done
for alpn in h2 h3; do echo "$alpn: core µs/request [${core[$alpn]} ] median $(echo "${core[$alpn]}" | median); process [${proc[$alpn]} ] median $(echo "${proc[$alpn]}" | median)"; done
