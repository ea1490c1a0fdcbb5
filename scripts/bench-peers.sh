#!/usr/bin/env bash
# edgewarm against nginx 1.22 and HAProxy 2.6 on this machine, in one run, on loopback, each
# proxy with 2 workers/threads. Client (edgewarm-lab load, curl, python) and origin (nginx) in
# their own processes. Reports, per proxy:
#   (a) new blind-tunnel connections/s (SNI peek, then a TLS request to the origin through it)
#       and proxy CPU per 1000 connections;
#   (b) throughput of 1 and of 8 concurrent 1 GiB downloads through the tunnel, and proxy CPU
#       seconds per GiB;
#   (c) TLS 1.3 handshakes/s terminated at the proxy (full, and resumed) with one request each
#       to the origin behind it, and proxy CPU per 1000 handshakes;
#   (d) RSS per idle tunnel (5000 held open after their ClientHello) and per idle terminated
#       connection (2000 held open after their handshake).
# nginx and HAProxy run the peer configs the lab runs (examples/peers/), given room for (d).
# Needs: nginx (+ libnginx-mod-stream), haproxy, curl, python3, openssl (scripts/deps.sh).
#
#   scripts/bench-peers.sh [CONNECTIONS]      # (a) and (c): connections per measurement (3000)
#   PARTS=cd scripts/bench-peers.sh            # only some of the measurements
set -euo pipefail
conns=${1:-3000}
parts=${PARTS:-abcd}
want() { [[ $parts == *$1* ]]; }
root=$(cd "$(dirname "$0")/.." && pwd)
ulimit -n "$(ulimit -Hn)"
# shellcheck source=scripts/bench-lib.sh
. "$root/scripts/bench-lib.sh"
bench_edgewarm_and_lab
bench_workdir

bench_ca
bench_cert origin "DNS:origin.test,DNS:a.test"
bench_cert edge "DNS:h.test,DNS:b.test"
mkdir -p "$dir/tmp" "$dir/www"
truncate -s 1G "$dir/www/big"
echo hello > "$dir/www/small"
# nginx workers run as www-data: the folder mktemp made is private.
chmod 755 "$dir" "$dir/www"; chmod 644 "$dir/www/small" "$dir/www/big"
temp="client_body_temp_path $dir/tmp; proxy_temp_path $dir/tmp; fastcgi_temp_path $dir/tmp; uwsgi_temp_path $dir/tmp; scgi_temp_path $dir/tmp;"
origin=18443 ew=19443 ns=19444 ht=19445 nh=19446 hh=19447 admin=19900 np=19448 hp=19449

cat > "$dir/origin.conf" <<CONF
daemon off; worker_processes 2; pid $dir/origin.pid; error_log $dir/origin.err;
events { worker_connections 20000; }
http { access_log off; $temp keepalive_requests 100000;
  # backlog 4096: with nginx's default (511) the origin drops SYNs while (d) opens 5000 tunnels,
  # and each dropped SYN costs a second, during which every proxy holds the waiting client's state.
  server { listen 127.0.0.1:$origin ssl http2 backlog=4096; ssl_certificate $dir/origin.pem; ssl_certificate_key $dir/origin.key; ssl_protocols TLSv1.2 TLSv1.3;
    ssl_session_tickets on; root $dir/www; } }
CONF
# The shipped peer configs (examples/peers/, as the lab runs them), with room for (d)'s 5000
# held connections: more connections per worker, a deeper accept queue (with the default 511
# SYNs are dropped while 5000 tunnels open) and a client timeout longer than the hold. The plain
# forwarders, each peer's baseline for its own peek cost in (a), are the same configs without
# the peek.
bench_edge_cert edge
room_nginx=('s/worker_connections 4096/worker_connections 20000/' 's/listen {listen}/listen {listen} backlog=4096/')
room_haproxy=('s/maxconn 4000/maxconn 9000/' 's/timeout \(client\|server\) 30s/timeout \1 120s/')
bench_peer nginx-stream.conf "127.0.0.1:$ns" "127.0.0.1:$origin" "${room_nginx[@]}"
bench_peer nginx-stream.conf:nginx-plain.conf "127.0.0.1:$np" "127.0.0.1:$origin" "${room_nginx[@]}" "${bench_no_peek_nginx[@]}"
bench_peer nginx-https.conf "127.0.0.1:$nh" "127.0.0.1:$origin" "${room_nginx[@]}"
bench_peer haproxy-tcp.cfg "127.0.0.1:$ht" "127.0.0.1:$origin" "${room_haproxy[@]}"
bench_peer haproxy-tcp.cfg:haproxy-plain.cfg "127.0.0.1:$hp" "127.0.0.1:$origin" "${room_haproxy[@]}" "${bench_no_peek_haproxy[@]}"
bench_peer haproxy-http.cfg "127.0.0.1:$hh" "127.0.0.1:$origin" "${room_haproxy[@]}"
cat > "$dir/edge.yaml" <<CONF
admin: {listen: "127.0.0.1:$admin"}
upgrade: {socket: $dir/upgrade.sock}
listeners: [{listen: "127.0.0.1:$ew", max_connections: 20000}]
timeouts: {client_hello: 120s, idle: 300s}
routes:
  - {sni: a.test, action: tunnel, origin: "127.0.0.1:$origin"}
  - sni: b.test
    action: prewarm
    origin: "127.0.0.1:$origin"
    cert: $dir/edge.pem
    key: $dir/edge.key
    origin_tls: {sni: origin.test, ca: $dir/ca.pem}
  - sni: h.test
    action: http
    origin: "127.0.0.1:$origin"
    cert: $dir/edge.pem
    key: $dir/edge.key
    origin_tls: {sni: origin.test, ca: $dir/ca.pem}
CONF

declare -A pid
nginx -c "$dir/origin.conf" & pids+=($!)
# start NAME: (re)start one proxy; its pid goes in pid[NAME].
start() {
  case $1 in
    nginx) nginx -c "$dir/nginx-stream.conf" & ;;
    nginx-plain) nginx -c "$dir/nginx-plain.conf" & ;;
    nginx-https) nginx -c "$dir/nginx-https.conf" & ;;
    haproxy) haproxy -db -f "$dir/haproxy-tcp.cfg" & ;;
    haproxy-plain) haproxy -db -f "$dir/haproxy-plain.cfg" & ;;
    haproxy-https) haproxy -db -f "$dir/haproxy-http.cfg" & ;;
    # Two worker threads, like the others.
    edgewarm) TOKIO_WORKER_THREADS=2 RUST_LOG=warn "$edgewarm" run --config "$dir/edge.yaml" 2>>"$dir/edge.log" & ;;
  esac
  pids+=($!); pid[$1]=$!
}
# restart NAME PORT...: a fresh process, so memory one measurement freed into its pools or
# allocator is not reused by the next one (HAProxy's pools did that: its tunnels measured 0).
restart() {
  local name=$1; shift
  kill "${pid[$name]}" 2>/dev/null || true; wait "${pid[$name]}" 2>/dev/null || true
  start "$name"; wait_ports "$@"; sleep 1
}
for name in nginx nginx-plain nginx-https haproxy haproxy-plain haproxy-https edgewarm; do start $name; done
wait_ports $origin $ew $ns $ht $nh $hh $np $hp
sleep 1

fds() { local t=0 p; for p in $1 $(pgrep -P "$1"); do t=$((t + $(ls "/proc/$p/fd" 2>/dev/null | wc -l))); done; echo $t; }
rss_kib() { local t=0 p; for p in $1 $(pgrep -P "$1"); do t=$((t + $(awk '/VmRSS/ {print $2}' /proc/$p/status 2>/dev/null || echo 0))); done; echo $t; }
hz=$(getconf CLK_TCK)
now() { date +%s.%N; }

# (a)/(c): one `load` run: prints "conn/s cpu_ms_per_1000"
connrate() { # proxy-pid name port [load args...]
  local p=$1 name=$2 port=$3; shift 3
  "$lab" load "https://$name/small" --connect-to "127.0.0.1:$port" --cacert "$dir/ca.pem" --requests 200 --concurrency 16 --json "$@" >/dev/null
  local c0 t0 out ok
  c0=$(ticks "$p") t0=$(now)
  out=$("$lab" load "https://$name/small" --connect-to "127.0.0.1:$port" --cacert "$dir/ca.pem" --requests "$conns" --concurrency 16 --json "$@")
  local t1 c1; t1=$(now) c1=$(ticks "$p")
  # On stdin: with every sample in it, the report outgrows an argument list.
  ok=$(printf '%s' "$out" | python3 -c "import json,sys; print(json.load(sys.stdin)['ok'])")
  awk "BEGIN {printf \"%.0f %.1f %d\", $ok/($t1-$t0), ($c1-$c0)*1000/$hz*1000/$ok, $conns-$ok}"
}

if want a; then
echo "## (a) new blind-tunnel connections/s (TLS 1.3 through the tunnel, one request each; $conns connections, 16 at a time)"
echo "| proxy | connections/s | proxy CPU ms per 1000 | failed |"
echo "|---|---|---|---|"
d=$(connrate $$ a.test $origin); echo "| none (client straight to the origin) | ${d%% *} | - | ${d##* } |"
# Each row's rate and CPU are the medians of ROUNDS rounds (3); a peer's peek cost is the median
# of its per-round ratio of SNI-peeking to plain forwarding, the two run back to back in each
# round, in alternating order.
rows=("edgewarm tunnel:edgewarm:$ew::" "nginx stream + ssl_preread:nginx:$ns:nginx-plain:$np" "HAProxy tcp + req_ssl_sni:haproxy:$ht:haproxy-plain:$hp")
: > "$dir/a.rows"
for round in $(seq "${ROUNDS:-3}"); do
  for row in "${rows[@]}"; do
    IFS=: read -r label name port plain_name plain <<<"$row"
    if [ -z "$plain" ]; then
      echo "$label|$(connrate "${pid[$name]}" a.test "$port")|" >> "$dir/a.rows"
    elif [ $((round % 2)) -eq 1 ]; then
      p=$(connrate "${pid[$plain_name]}" a.test "$plain"); k=$(connrate "${pid[$name]}" a.test "$port")
      echo "$label|$k|$p" >> "$dir/a.rows"
    else
      k=$(connrate "${pid[$name]}" a.test "$port"); p=$(connrate "${pid[$plain_name]}" a.test "$plain")
      echo "$label|$k|$p" >> "$dir/a.rows"
    fi
  done
done
python3 - "$dir/a.rows" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    label, peek, plain = line.rstrip("\n").split("|")
    rows.setdefault(label, []).append((peek.split(), plain.split()))
for label, rs in rows.items():
    rate = statistics.median(float(k[0]) for k, _ in rs)
    cpu = statistics.median(float(k[1]) for k, _ in rs)
    failed = sum(int(k[2]) for k, _ in rs)
    cost = ""
    if rs[0][1]:
        ratios = sorted(float(k[1]) / float(p[1]) - 1 for k, p in rs)
        cost = f" (peek vs its plain forwarding: {statistics.median(ratios):+.1%}, rounds {', '.join(f'{r:+.1%}' for r in ratios)})"
    print(f"| {label} | {rate:.0f} | {cpu:.1f}{cost} | {failed} |")
PY
echo "edgewarm has no plain-forwarding mode: its peek cost is cargo bench --bench tunnel (plain forwarder vs peek path)."
fi

echo
if want b; then
echo "## (b) throughput through the tunnel: 1 GiB per download"
echo "| proxy | 1 download MB/s | 8 downloads MB/s (sum) | proxy CPU s per GiB (8 downloads) |"
echo "|---|---|---|---|"
download() { # port count -> MB/s total
  local port=$1 n=$2 t0 t1
  t0=$(now)
  for _ in $(seq "$n"); do
    curl -s -o /dev/null --resolve "a.test:$port:127.0.0.1" --cacert "$dir/ca.pem" "https://a.test:$port/big" &
  done
  wait
  t1=$(now)
  awk "BEGIN {printf \"%.0f\", $n*1024/($t1-$t0)}"
}
d1=$(download $origin 1); d8=$(download $origin 8); echo "| none (straight to the origin) | $d1 | $d8 | - |"
for row in "edgewarm tunnel:edgewarm:$ew" "nginx stream:nginx:$ns" "HAProxy tcp:haproxy:$ht"; do
  IFS=: read -r label name port <<<"$row"
  one=$(download "$port" 1)
  c0=$(ticks "${pid[$name]}"); eight=$(download "$port" 8); c1=$(ticks "${pid[$name]}")
  echo "| $label | $one | $eight | $(awk "BEGIN {printf \"%.2f\", ($c1-$c0)/$hz/8}") |"
done
fi

echo
if want c; then
echo "## (c) TLS 1.3 handshakes/s terminated at the proxy, one request each to the origin ($conns, 16 at a time)"
echo "| proxy | full: handshakes/s | full: CPU ms per 1000 | resumed: handshakes/s | resumed: CPU ms per 1000 | failed |"
echo "|---|---|---|---|---|---|"
for row in "edgewarm http:edgewarm:h.test:$ew" "edgewarm prewarm:edgewarm:b.test:$ew" "nginx https (keepalive upstream):nginx-https:h.test:$nh" "HAProxy mode http (http-reuse always):haproxy-https:h.test:$hh"; do
  IFS=: read -r label name host port <<<"$row"
  read -r fr fc ff <<<"$(connrate "${pid[$name]}" "$host" "$port")"
  read -r rr rc rf <<<"$(connrate "${pid[$name]}" "$host" "$port" --resume)"
  echo "| $label | $fr | $fc | $rr | $rc | $((ff + rf)) |"
done
fi

echo
if want d; then
echo "## (d) memory per idle connection (RSS growth while held open)"
echo "Each cell: KiB per connection, then the proxy's descriptors added per connection (a tunnel"
echo "holds 2, client and origin; a terminated connection 1), so a proxy that did not really hold"
echo "them all (refused, closed, or ran out of descriptors) shows; below 98 % of that it says so."
echo
echo "| proxy | KiB per idle tunnel (5000, after their ClientHello) | KiB per idle terminated connection (2000, after their handshake) |"
echo "|---|---|---|"
cat > "$dir/hold.py" <<'PY'
# Open N connections in two steps and keep them idle: tunnels get a ClientHello for SNI and
# nothing more; terminated ones complete their TLS handshake. After the first fifth it touches
# STEP.1 and waits for GO; after the rest it touches STEP.2.
import os, socket, ssl, sys, time
port, n, sni, tls, ca, step = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4] == "1", sys.argv[5], sys.argv[6]
ctx = ssl.create_default_context(cafile=ca)
ctx.set_alpn_protocols(["http/1.1"])
bio_in, bio_out = ssl.MemoryBIO(), ssl.MemoryBIO()
probe = ctx.wrap_bio(bio_in, bio_out, server_hostname=sni)
try:
    probe.do_handshake()
except ssl.SSLWantReadError:
    pass
hello = bio_out.read()
held = []
def open_some(k):
    for _ in range(k):
        s = socket.create_connection(("127.0.0.1", port))
        if tls:
            s = ctx.wrap_socket(s, server_hostname=sni)
        else:
            s.sendall(hello)
        held.append(s)
open_some(n // 5)
open(step + ".1", "w").close()
while not os.path.exists(step + ".go"):
    time.sleep(0.05)
open_some(n - n // 5)
open(step + ".2", "w").close()
time.sleep(600)
PY
# RSS per connection as the slope between n/5 and n connections held, all in one round: the
# fixed costs (arenas, first pages) cancel out, and nothing freed earlier is counted.
hold() { # proxy-pid port count sni tls(0|1) expected-fds -> "KiB per connection (fds each)"
  local p=$1 port=$2 n=$3 sni=$4 tls=$5 want=$6 step="$dir/step" r1 r2 f1 f2 py
  rm -f "$step".*
  python3 "$dir/hold.py" "$port" "$n" "$sni" "$tls" "$dir/ca.pem" "$step" & py=$!
  for _ in $(seq 1200); do [ -e "$step.1" ] && break; sleep 0.1; done
  sleep 2; r1=$(rss_kib "$p"); f1=$(fds "$p"); touch "$step.go"
  for _ in $(seq 1200); do [ -e "$step.2" ] && break; sleep 0.1; done
  sleep 2; r2=$(rss_kib "$p"); f2=$(fds "$p")
  kill $py 2>/dev/null; wait $py 2>/dev/null || true
  sleep 3
  awk "BEGIN {k = $n - int($n/5); per = ($f2-$f1)/k; printf \"%.1f (%.2f fds each%s)\", ($r2-$r1)/k, per, per < 0.98*$want ? \", NOT ALL HELD\" : \"\"}"
}
for row in "edgewarm:edgewarm:$ew:$ew" "nginx:nginx:$ns:$nh" "HAProxy:haproxy:$ht:$hh"; do
  IFS=: read -r label name tport hport <<<"$row"
  hname=$name-https; [ "$name" = edgewarm ] && hname=edgewarm
  restart "$hname" "$hport"
  term=$(hold "${pid[$hname]}" "$hport" 2000 h.test 1 1)
  restart "$name" "$tport"
  tun=$(hold "${pid[$name]}" "$tport" 5000 a.test 0 2)
  echo "| $label | $tun | $term |"
done
fi
