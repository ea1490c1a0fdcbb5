#!/usr/bin/env bash
# Requests per second through edgewarm's `http` route, nginx and HAProxy as HTTPS reverse
# proxies, in one run, against one nginx HTTP/2 origin on loopback. Each proxy terminates TLS
# (HTTP/2 from the client) and keeps connections to the origin open; each may use both cores
# (nginx: 2 workers; HAProxy: 2 threads; edgewarm: its runtime). Alternating rounds,
# median reported. Needs: nginx, haproxy, h2load, openssl (all from scripts/deps.sh).
#
#   scripts/bench-http.sh [ROUNDS] [REQUESTS]
#   BASELINE=/path/to/older/edgewarm scripts/bench-http.sh ...   # also measure another build
set -euo pipefail
rounds=${1:-3}
requests=${2:-40000}
root=$(cd "$(dirname "$0")/.." && pwd)
cargo build --release -q -p edgewarm --manifest-path "$root/Cargo.toml"
edgewarm="$root/target/release/edgewarm"
dir=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$dir"; }
trap cleanup EXIT

# One CA; origin.test for the origin, b.test for the proxies.
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=bench-ca \
  -keyout "$dir/ca.key" -out "$dir/ca.pem" 2>/dev/null
for name in origin.test b.test; do
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=$name" \
    -keyout "$dir/$name.key" -out "$dir/$name.csr" 2>/dev/null
  openssl x509 -req -in "$dir/$name.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" -CAcreateserial -days 2 \
    -extfile <(printf "subjectAltName=DNS:%s" "$name") -out "$dir/$name.pem" 2>/dev/null
  cat "$dir/$name.pem" "$dir/$name.key" > "$dir/$name.bundle"
done
mkdir -p "$dir/tmp"
origin=18443 edge=19443 nginx_proxy=19444 haproxy_port=19445 admin=19900
temp="client_body_temp_path $dir/tmp; proxy_temp_path $dir/tmp; fastcgi_temp_path $dir/tmp; uwsgi_temp_path $dir/tmp; scgi_temp_path $dir/tmp;"

cat > "$dir/origin.conf" <<CONF
daemon off; worker_processes 2; pid $dir/origin.pid; error_log $dir/origin.err; events { worker_connections 4096; }
http { access_log off; $temp keepalive_requests 100000;
  server { listen 127.0.0.1:$origin ssl http2; ssl_certificate $dir/origin.test.pem; ssl_certificate_key $dir/origin.test.key;
    location / { return 200 "hello from the origin\n"; } } }
CONF
cat > "$dir/proxy.conf" <<CONF
daemon off; worker_processes 2; pid $dir/proxy.pid; error_log $dir/proxy.err; events { worker_connections 4096; }
http { access_log off; $temp
  upstream origin { server 127.0.0.1:$origin; keepalive 64; }
  server { listen 127.0.0.1:$nginx_proxy ssl http2; ssl_certificate $dir/b.test.pem; ssl_certificate_key $dir/b.test.key;
    location / { proxy_pass https://origin; proxy_http_version 1.1; proxy_set_header Connection "";
      proxy_ssl_server_name on; proxy_ssl_name origin.test; proxy_ssl_verify on;
      proxy_ssl_trusted_certificate $dir/ca.pem; proxy_ssl_session_reuse on; } } }
CONF
cat > "$dir/haproxy.cfg" <<CONF
global
  nbthread 2
defaults
  mode http
  timeout connect 5s
  timeout client 60s
  timeout server 60s
frontend fe
  bind 127.0.0.1:$haproxy_port ssl crt $dir/b.test.bundle alpn h2,http/1.1
  default_backend be
backend be
  http-reuse always
  server origin 127.0.0.1:$origin ssl verify required ca-file $dir/ca.pem sni str(origin.test) alpn h2
CONF
cat > "$dir/edge.yaml" <<CONF
admin: {listen: "127.0.0.1:$admin"}
listeners: [{listen: "127.0.0.1:$edge"}]
routes:
  - sni: b.test
    action: http
    origin: "127.0.0.1:$origin"
    cert: $dir/b.test.pem
    key: $dir/b.test.key
    origin_tls: {sni: origin.test, ca: $dir/ca.pem}
    upstream: {connections: 2}
CONF

declare -A pid
nginx -c "$dir/origin.conf" & pids+=($!)
nginx -c "$dir/proxy.conf" & pids+=($!); pid[nginx]=$!
haproxy -db -f "$dir/haproxy.cfg" & pids+=($!); pid[haproxy]=$!
RUST_LOG=warn "$edgewarm" run --config "$dir/edge.yaml" 2>"$dir/edge.log" & pids+=($!); pid[edgewarm]=$!
contenders=("edgewarm:$edge" "nginx:$nginx_proxy" "haproxy:$haproxy_port")
if [ -n "${BASELINE:-}" ]; then
  sed -e "s/127.0.0.1:$edge/127.0.0.1:19446/" -e "s/127.0.0.1:$admin/127.0.0.1:19901/" "$dir/edge.yaml" > "$dir/baseline.yaml"
  RUST_LOG=warn "$BASELINE" run --config "$dir/baseline.yaml" 2>"$dir/baseline.log" & pids+=($!); pid[baseline]=$!
  contenders+=("baseline:19446")
fi
for port in $origin $edge $nginx_proxy $haproxy_port ${BASELINE:+19446}; do
  for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.1; done
done

rps() { # port -> requests/s
  h2load -c 50 -m 10 -n "$requests" --connect-to="127.0.0.1:$1" "https://b.test:$1/" 2>/dev/null \
    | awk '/^finished in/ {gsub(",", "", $4); print $4} /succeeded,/ {if ($10 != 0 || $12 != 0) print "ERRORS: " $0 > "/dev/stderr"}'
}
# CPU time (user + system, clock ticks) of a process and its children (nginx's workers).
ticks() {
  local total=0 p
  for p in $1 $(pgrep -P "$1"); do
    [ -r "/proc/$p/stat" ] && total=$((total + $(awk '{print $14 + $15}' "/proc/$p/stat")))
  done
  echo "$total"
}
hz=$(getconf CLK_TCK)
declare -A all cpu
for name in edgewarm nginx haproxy baseline; do all[$name]=""; cpu[$name]=""; done
for round in $(seq "$rounds"); do
  for pair in "${contenders[@]}"; do
    name=${pair%%:*} port=${pair##*:}
    before=$(ticks "${pid[$name]}")
    r=$(rps "$port")
    # Proxy CPU per request, in µs: steadier than req/s on a shared machine, where h2load and
    # the origin compete for the same two cores.
    us=$(awk "BEGIN {printf \"%.1f\", ($(ticks "${pid[$name]}") - $before) * 1e6 / $hz / $requests}")
    all[$name]="${all[$name]} $r"
    cpu[$name]="${cpu[$name]} $us"
    echo "round $round $name $r req/s, $us µs CPU/request"
  done
done
median() { tr ' ' '\n' | grep -v '^$' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
e=$(echo "${all[edgewarm]}" | median) n=$(echo "${all[nginx]}" | median) h=$(echo "${all[haproxy]}" | median)
ce=$(echo "${cpu[edgewarm]}" | median) cn=$(echo "${cpu[nginx]}" | median) ch=$(echo "${cpu[haproxy]}" | median)
echo
echo "| proxy (h2load -c 50 -m 10 -n $requests, median of $rounds) | req/s | edgewarm / it | proxy CPU µs per request | its CPU / edgewarm's |"
echo "|---|---|---|---|---|"
echo "| edgewarm http route | $e | 1.00 | $ce | 1.00 |"
echo "| nginx 1.22 (HTTPS/1.1 keep-alive upstream) | $n | $(awk "BEGIN {printf \"%.2f\", $e/$n}") | $cn | $(awk "BEGIN {printf \"%.2f\", $cn/$ce}") |"
echo "| HAProxy 2.6 (h2 upstream, http-reuse always) | $h | $(awk "BEGIN {printf \"%.2f\", $e/$h}") | $ch | $(awk "BEGIN {printf \"%.2f\", $ch/$ce}") |"
if [ -n "${BASELINE:-}" ]; then
  b=$(echo "${all[baseline]}" | median) cb=$(echo "${cpu[baseline]}" | median)
  echo "| edgewarm baseline ($BASELINE) | $b | $(awk "BEGIN {printf \"%.2f\", $e/$b}") | $cb | $(awk "BEGIN {printf \"%.2f\", $cb/$ce}") |"
fi
