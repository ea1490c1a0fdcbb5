#!/usr/bin/env bash
# The price of the SNI peek in instructions, not seconds: each proxy's user-space instructions
# per tunnel connection with its SNI peek and without (its own plain forwarding), counted by
# callgrind. Instruction counts do not move with the load of a shared machine, where the
# connections/s of bench-peers.sh (a) spread ±8 % between rounds, wider than any peek's cost.
#
#   edgewarm: `tunnel` route (peek + route + replay)  vs  `edgewarm-lab forward` (the same connect
#             and splice relay code, no peek)
#   nginx:    stream + ssl_preread + map              vs  stream proxy_pass
#   HAProxy:  tcp + inspect-delay + req_ssl_sni       vs  tcp default_backend
#
# nginx and HAProxy run the peer configs the lab runs (examples/peers/nginx-stream.conf,
# haproxy-tcp.cfg); their plain forwarding is the same config with the peek taken out.
#
# Each proxy runs alone under callgrind (one worker, one thread). Per connection is the slope
# between two windows in one process (N1 and N2 connections, counters zeroed before each), so
# start-up and idle timers cancel out. The connections are real: TLS 1.3 through the tunnel
# to an nginx origin, one request each (`edgewarm-lab load`). The kernel's share (system calls,
# splice) is not counted: the ratio is of user-space work, the absolute figure is what the peek
# itself adds.
#
#   scripts/bench-peek.sh [N1] [N2]       # default 50 and 250
# Needs valgrind (callgrind_control) and nginx (the origin); nginx's stream module and HAProxy
# (both from scripts/deps.sh) are measured when installed, skipped otherwise.
set -euo pipefail
n1=${1:-50}
n2=${2:-250}
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=scripts/bench-lib.sh
. "$root/scripts/bench-lib.sh"
bench_edgewarm_and_lab
bench_workdir
bench_ca
bench_cert origin "DNS:origin.test,DNS:a.test"
mkdir -p "$dir/tmp" "$dir/www"
echo hello > "$dir/www/small"
chmod 755 "$dir" "$dir/www"; chmod 644 "$dir/www/small"
origin=18543 peek=19543 plain=19544 admin=19950

cat > "$dir/origin.conf" <<CONF
daemon off; worker_processes 1; pid $dir/origin.pid; error_log $dir/origin.err;
events { worker_connections 1024; }
http { access_log off; client_body_temp_path $dir/tmp; proxy_temp_path $dir/tmp; fastcgi_temp_path $dir/tmp;
  uwsgi_temp_path $dir/tmp; scgi_temp_path $dir/tmp;
  server { listen 127.0.0.1:$origin ssl; ssl_certificate $dir/origin.pem; ssl_certificate_key $dir/origin.key;
    ssl_protocols TLSv1.3; root $dir/www; } }
CONF
# The shipped peer configs, one worker or thread each (callgrind runs one thread at a time),
# and the same configs without their peek.
one_nginx='s/worker_processes 2;/worker_processes 1; master_process off;/'
bench_peer nginx-stream.conf "127.0.0.1:$peek" "127.0.0.1:$origin" "$one_nginx"
bench_peer nginx-stream.conf:nginx-plain.conf "127.0.0.1:$plain" "127.0.0.1:$origin" "$one_nginx" "${bench_no_peek_nginx[@]}"
bench_peer haproxy-tcp.cfg "127.0.0.1:$peek" "127.0.0.1:$origin" 's/nbthread 2/nbthread 1/'
bench_peer haproxy-tcp.cfg:haproxy-plain.cfg "127.0.0.1:$plain" "127.0.0.1:$origin" 's/nbthread 2/nbthread 1/' "${bench_no_peek_haproxy[@]}"
cat > "$dir/edge.yaml" <<CONF
admin: {listen: "127.0.0.1:$admin"}
upgrade: {socket: $dir/upgrade.sock}
listeners: [{listen: "127.0.0.1:$peek"}]
routes: [{sni: a.test, action: tunnel, origin: "127.0.0.1:$origin"}]
CONF

nginx -c "$dir/origin.conf" & pids+=($!)
wait_ports $origin

load() { # port count
  "$lab" load "https://a.test/small" --connect-to "127.0.0.1:$1" --cacert "$dir/ca.pem" --requests "$2" \
    --concurrency 1 --json | python3 -c "import json,sys; r=json.load(sys.stdin); sys.exit(r['ok'] != $2)"
}
# Instructions (Ir) of the callgrind dump made by the last `callgrind_control --dump`.
dumped() { # out-prefix
  local f; f=$(ls -t "$1".* | head -1)
  awk '/^(summary|totals):/ {print $2; exit}' "$f"
}
# window PID PORT N: instructions the process spent while N connections went through PORT.
window() {
  callgrind_control --zero "$1" >/dev/null
  load "$2" "$3"
  callgrind_control --dump "$1" >/dev/null
  sleep 0.5
}
# measure NAME PORT: instructions per connection through PORT of the callgrind'ed process.
measure() { # pid out-prefix port
  local a b
  load "$3" 5 # warm-up: first connections fill caches and pools
  window "$1" "$3" "$n1"; a=$(dumped "$2")
  window "$1" "$3" "$n2"; b=$(dumped "$2")
  echo $(((b - a) / (n2 - n1)))
}
# run NAME PEEK-PORT PLAIN-PORT COMMAND...: one process under callgrind, both ports measured.
declare -A per
run_one() { # key port command...
  local key=$1 port=$2; shift 2
  local out="$dir/cg.$key"
  valgrind --tool=callgrind --callgrind-out-file="$out.%p" --dump-instr=no "$@" >"$dir/$key.log" 2>&1 &
  local p=$!; pids+=($p)
  wait_ports "$port"
  sleep 2
  per[$key]=$(measure "$p" "$out" "$port")
  # The windows are dumped already; HAProxy under valgrind ignores SIGINT.
  kill -KILL "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true
}

RUST_LOG=warn TOKIO_WORKER_THREADS=1 run_one edgewarm-peek $peek "$edgewarm" run --config "$dir/edge.yaml"
TOKIO_WORKER_THREADS=1 run_one edgewarm-plain $plain "$lab" forward --listen "127.0.0.1:$plain" --origin "127.0.0.1:$origin"
if [ -e /usr/lib/nginx/modules/ngx_stream_module.so ]; then
  run_one nginx-peek $peek nginx -c "$dir/nginx-stream.conf"
  run_one nginx-plain $plain nginx -c "$dir/nginx-plain.conf"
fi
if command -v haproxy >/dev/null; then
  run_one haproxy-peek $peek haproxy -db -f "$dir/haproxy-tcp.cfg"
  run_one haproxy-plain $plain haproxy -db -f "$dir/haproxy-plain.cfg"
fi

echo "| proxy | user-space instructions per connection, peeking | without the peek | added by the peek | peek cost (user space) |"
echo "|---|---|---|---|---|"
for name in edgewarm nginx haproxy; do
  [ -n "${per[$name-peek]:-}" ] || continue
  k=${per[$name-peek]} p=${per[$name-plain]}
  awk -v n="$name" -v k="$k" -v p="$p" 'BEGIN {printf "| %s | %d | %d | %+d | %+.1f %% |\n", n, k, p, k - p, (k / p - 1) * 100}'
done
echo
echo "(callgrind, N = $n2 - $n1 connections per slope, TLS 1.3 through the tunnel, one request each)"
