#!/usr/bin/env bash
# Kernel TLS against user-space TLS on a `prewarm` route, in one run: three routes to the same
# origin (nginx, https, files of 1 KB to 100 MB), one per policy: ktls off (u.test), on
# (k.test), auto (a.test, hand-off after 128 KiB). Client: edgewarm-lab load, a new TLS
# connection per request, 8 at a time. Edge: 2 worker threads.
#
#   scripts/bench-ktls.sh [ROUNDS]      # timing: req/s, MB/s, edge CPU s/GB, p99 per size and
#                                       # policy, median of ROUNDS (3) alternating rounds.
#                                       # Needs a kernel with TLS; prints "kTLS unavailable"
#                                       # and exits 0 elsewhere.
#   scripts/bench-ktls.sh --count       # system calls and bytes through user space per GB
#                                       # (strace -c, /proc/PID/io) for a 64 MiB download per
#                                       # policy: what emulation does not distort, so it runs
#                                       # in the VM: scripts/vm.sh -- scripts/bench-ktls.sh --count
# Needs: nginx, python3, openssl, strace (--count) (scripts/deps.sh).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
count=false rounds=3
case "${1:-}" in
  --count) count=true ;;
  '') ;;
  *) rounds=$1 ;;
esac

if ! why=$(python3 - 2>&1 <<'PY'
import socket
l = socket.socket(); l.bind(("127.0.0.1", 0)); l.listen(1)
c = socket.create_connection(l.getsockname()); s, _ = l.accept()
c.setsockopt(socket.SOL_TCP, 31, b"tls")  # TCP_ULP
PY
); then
  echo "kTLS unavailable: TCP_ULP tls refused (${why##*$'\n'}); nothing to measure here (scripts/vm.sh runs --count in a VM)"
  exit 0
fi

# Inside the VM the shared root is read-only: build before (scripts/test-ktls.sh does).
if [ -z "${EDGEWARM_PREBUILT:-}" ]; then
  cargo build --release -q -p edgewarm -p edgewarm-lab --manifest-path "$root/Cargo.toml"
fi
edgewarm="$root/target/release/edgewarm" lab="$root/target/release/edgewarm-lab"
# shellcheck source=scripts/bench-lib.sh
. "$root/scripts/bench-lib.sh"
bench_workdir

bench_ca
bench_cert origin "DNS:origin.test"
bench_cert edge "DNS:u.test,DNS:k.test,DNS:a.test"
mkdir -p "$dir/tmp" "$dir/www"
sizes=(1K 16K 64K 128K 1M 100M)
for s in "${sizes[@]}" 64M; do head -c "$(numfmt --from=iec "$s")" /dev/urandom > "$dir/www/$s"; done
chmod 755 "$dir" "$dir/www"; chmod 644 "$dir"/www/*
temp="client_body_temp_path $dir/tmp; proxy_temp_path $dir/tmp; fastcgi_temp_path $dir/tmp; uwsgi_temp_path $dir/tmp; scgi_temp_path $dir/tmp;"
origin=18543 ew=19543 admin=19901
cat > "$dir/origin.conf" <<CONF
daemon off; worker_processes 2; pid $dir/origin.pid; error_log $dir/origin.err; user root;
events { worker_connections 20000; }
http { access_log off; $temp keepalive_requests 100000; sendfile on;
  server { listen 127.0.0.1:$origin ssl; ssl_certificate $dir/origin.pem; ssl_certificate_key $dir/origin.key;
    ssl_protocols TLSv1.3; root $dir/www; } }
CONF
route() { # sni policy
  printf '  - sni: %s\n    action: prewarm\n    origin: "127.0.0.1:%s"\n    cert: %s\n    key: %s\n    origin_tls: {sni: origin.test, ca: %s}\n    pool: {min: 16}\n%s\n' \
    "$1" "$origin" "$dir/edge.pem" "$dir/edge.key" "$dir/ca.pem" "$2"
}
{
  printf 'admin: {listen: "127.0.0.1:%s"}\nupgrade: {socket: %s/upgrade.sock}\nlisteners: [{listen: "127.0.0.1:%s"}]\ntimeouts: {idle: 300s}\nroutes:\n' "$admin" "$dir" "$ew"
  route u.test "    ktls: off"
  route k.test "    ktls: on"
  route a.test "    ktls: auto"
} > "$dir/edge.yaml"

nginx -c "$dir/origin.conf" & pids+=($!)
TOKIO_WORKER_THREADS=2 RUST_LOG=warn "$edgewarm" run --config "$dir/edge.yaml" 2>"$dir/edge.log" & pids+=($!)
edge=$!
wait_ports $origin $ew
sleep 2

ticks() { awk '{print $14 + $15}' "/proc/$edge/stat"; }
hz=$(getconf CLK_TCK)
now() { date +%s.%N; }
load() { # sni size requests -> JSON report
  "$lab" load "https://$1/$2" --connect-to "127.0.0.1:$ew" --cacert "$dir/ca.pem" --requests "$3" \
    --concurrency 8 --timeout 600s --duration 1200s --json
}
declare -A policy=([u.test]=off [k.test]=on [a.test]=auto)

if $count; then
  # Every system call of the edge, logged (strace -f): counted, and the bytes that data calls
  # moved through user space summed from their return values (/proc/PID/io would miss
  # recvfrom). Emulation slows them all alike; the counts are what they would be on hardware.
  echo "edgewarm process, per GB delivered to the client (2 x 64 MiB per policy):"
  printf '%-6s %12s %20s %16s  %s\n' policy syscalls/GB user-space-bytes/GB spliced-bytes/GB "busiest calls (count/GB)"
  for sni in u.test k.test a.test; do
    strace -f -qq -o "$dir/trace.$sni" -p "$edge" & st=$!
    sleep 1
    load "$sni" 64M 2 > "$dir/count.$sni.json"
    sleep 0.5
    kill -INT "$st"; wait "$st" 2>/dev/null || true
    python3 - "$dir/trace.$sni" "${policy[$sni]}" <<'PY'
import collections, re, sys
gb = 2 * 64 * 2**20 / 2**30
data = {"read", "readv", "recvfrom", "recvmsg", "write", "writev", "sendto", "sendmsg"}
calls, user, spliced = collections.Counter(), 0, 0
for line in open(sys.argv[1]):
    m = re.match(r"\d+\s+(?:<\.\.\. (\w+) resumed>|(\w+)\()", line)
    if not m:
        continue
    name = m.group(1) or m.group(2)
    if m.group(2):
        calls[name] += 1  # a call, finished here or "<unfinished ...>"
    r = re.search(r"\) += (-?\d+)", line)
    if r and int(r.group(1)) > 0:
        if name in data:
            user += int(r.group(1))
        elif name == "splice":
            spliced += int(r.group(1))
busy = ", ".join(f"{n} {c / gb:,.0f}" for n, c in calls.most_common(4))
print(f"{sys.argv[2]:<6} {sum(calls.values()) / gb:>12,.0f} {user / gb:>20,.0f} {spliced / gb:>16,.0f}  {busy}")
PY
  done
  exit 0
fi

declare -A reqs=([1K]=2000 [16K]=2000 [64K]=1500 [128K]=1000 [1M]=300 [100M]=6)
echo "prewarm route, new TLS 1.3 connection per request, 8 concurrent; median of $rounds rounds"
printf '%-5s %-5s %9s %9s %11s %9s\n' size ktls req/s MB/s cpu_s/GB p99_ms
for size in "${sizes[@]}"; do
  : > "$dir/rows"
  for round in $(seq "$rounds"); do
    # Alternate the order between rounds so no policy always runs first.
    order=(u.test k.test a.test); [ $((round % 2)) -eq 0 ] && order=(a.test k.test u.test)
    for sni in "${order[@]}"; do
      c0=$(ticks) t0=$(now)
      load "$sni" "$size" "${reqs[$size]}" > "$dir/r.json"
      t1=$(now) c1=$(ticks)
      python3 - "$dir/r.json" "${policy[$sni]}" "$size" "$t0" "$t1" "$c0" "$c1" "$hz" >> "$dir/rows" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
pol, size, t0, t1, c0, c1, hz = sys.argv[2], sys.argv[3], *map(float, sys.argv[4:])
units = {"K": 2**10, "M": 2**20}
b = int(size[:-1]) * units[size[-1]] * r["ok"]
secs = t1 - t0
print(pol, r["ok"] / secs, b / secs / 1e6, (c1 - c0) / hz / (b / 2**30), r["total_ms"]["p99"], r["ok"], r["requests"])
PY
    done
  done
  python3 - "$dir/rows" "$size" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
med = {}
for pol in ("off", "on", "auto"):
    rs = [r for r in rows if r[0] == pol]
    med[pol] = [statistics.median(float(r[i]) for r in rs) for i in (1, 2, 3, 4)]
    bad = sum(int(r[6]) - int(r[5]) for r in rs)
    note = f"  ({bad} failed)" if bad else ""
    rps, mbs, cpu, p99 = med[pol]
    print(f"{sys.argv[2]:<5} {pol:<5} {rps:>9.0f} {mbs:>9.1f} {cpu:>11.2f} {p99:>9.2f}{note}")
u = med["off"]
for pol in ("on", "auto"):
    m = med[pol]
    print(f"{'':<5} {pol}/off  req/s x{m[0] / u[0]:.2f}  cpu/GB x{m[2] / u[2]:.2f}  p99 x{m[3] / u[3]:.2f}")
PY
done
