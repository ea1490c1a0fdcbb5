#!/usr/bin/env bash
# Requests per second through edgewarm's `http` route, nginx and HAProxy as HTTPS reverse
# proxies, in one run, against one nginx HTTP/2 origin on loopback. Each proxy terminates TLS
# (HTTP/2 from the client) and keeps connections to the origin open; each may use both cores
# (nginx: 2 workers; HAProxy: 2 threads; edgewarm: its runtime). Alternating rounds,
# median reported. Needs: nginx, haproxy, h2load, openssl (all from scripts/deps.sh).
#
#   scripts/bench-http.sh [ROUNDS] [REQUESTS]
#   BASELINE=/path/to/older/edgewarm scripts/bench-http.sh ...   # also measure another build
#   BASELINE="/path/a /path/b" scripts/bench-http.sh ...          # or several, each in every round
set -euo pipefail
rounds=${1:-3}
requests=${2:-40000}
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=scripts/bench-lib.sh
. "$root/scripts/bench-lib.sh"
bench_edgewarm
bench_workdir

bench_http_pki
origin=18443 edge=19443 nginx_proxy=19444 haproxy_port=19445 admin=19900 nginx_fwd=19447 haproxy_fwd=19448
edge_bare=19449 admin_bare=19902 edge_group=19460 admin_group=19903 edge_limits=19461 admin_limits=19904
edge_rules=19462 admin_rules=19905
bench_h2_origin $origin 2
bench_edge_cert b.test
bench_peer nginx-https.conf "127.0.0.1:$nginx_proxy" "127.0.0.1:$origin"
bench_peer nginx-https-fwd.conf "127.0.0.1:$nginx_fwd" "127.0.0.1:$origin"
bench_peer haproxy-http.cfg "127.0.0.1:$haproxy_port" "127.0.0.1:$origin"
bench_peer haproxy-http-fwd.cfg "127.0.0.1:$haproxy_fwd" "127.0.0.1:$origin"
bench_http_edge $edge $admin $origin > "$dir/edge.yaml"
# The same route adding no forwarding headers: the same header work as plain nginx and HAProxy.
bench_http_edge $edge_bare $admin_bare $origin "    forward_headers: []" > "$dir/bare.yaml"
# The same route with two servers (`origins:`, the same nginx by two names): what choosing a
# server for every request costs beside one server.
bench_http_edge $edge_group $admin_group $origin \
  | sed "s|    origin: \"127.0.0.1:$origin\"|    origins: [{address: \"127.0.0.1:$origin\"}, {address: \"localhost:$origin\"}]|" > "$dir/group.yaml"

# The same route with every limit configured and none hit: a rate far above the load, an allow
# list, a per-client cap above h2load's 50 connections: what checking them costs.
bench_http_edge $edge_limits $admin_limits $origin \
  "    limits: {requests_per_second: 1000000, burst: 1000000}
    allow: [\"127.0.0.0/8\"]" \
  | sed "s|{listen: \"127.0.0.1:$edge_limits\"|{listen: \"127.0.0.1:$edge_limits\", max_connections_per_client: 1000, deny: [\"192.0.2.0/24\"]|" > "$dir/limits.yaml"

# The same route with 1,000 rules (exact and prefix, half each), the one every request meets
# (`exact: /`, sent on to the route's upstream) written last: what normalizing the path and
# finding the rule costs.
{
  echo "    rules:"
  for i in $(seq 0 498); do
    echo "      - {exact: /e$i/page, respond: {status: 404}}"
    echo "      - {prefix: /p$i/, respond: {status: 404}}"
  done
  echo "      - {prefix: /x/, respond: {status: 404}}"
  echo "      - {exact: /}"
} > "$dir/rules.part"
bench_http_edge $edge_rules $admin_rules $origin "$(cat "$dir/rules.part")" > "$dir/rules.yaml"

declare -A pid
nginx -c "$dir/origin.conf" & pids+=($!)
nginx -c "$dir/nginx-https.conf" & pids+=($!); pid[nginx]=$!
nginx -c "$dir/nginx-https-fwd.conf" & pids+=($!); pid[nginx+fwd]=$!
haproxy -db -f "$dir/haproxy-http.cfg" & pids+=($!); pid[haproxy]=$!
haproxy -db -f "$dir/haproxy-http-fwd.cfg" & pids+=($!); pid[haproxy+fwd]=$!
RUST_LOG=warn "$edgewarm" run --config "$dir/edge.yaml" 2>"$dir/edge.log" & pids+=($!); pid[edgewarm]=$!
RUST_LOG=warn "$edgewarm" run --config "$dir/bare.yaml" 2>"$dir/bare.log" & pids+=($!); pid[bare]=$!
RUST_LOG=warn "$edgewarm" run --config "$dir/group.yaml" 2>"$dir/group.log" & pids+=($!); pid[group]=$!
RUST_LOG=warn "$edgewarm" run --config "$dir/limits.yaml" 2>"$dir/limits.log" & pids+=($!); pid[limits]=$!
RUST_LOG=warn "$edgewarm" run --config "$dir/rules.yaml" 2>"$dir/rules.log" & pids+=($!); pid[rules]=$!
contenders=("edgewarm:$edge" "bare:$edge_bare" "group:$edge_group" "limits:$edge_limits" "rules:$edge_rules" "nginx:$nginx_proxy" "haproxy:$haproxy_port" "nginx+fwd:$nginx_fwd" "haproxy+fwd:$haproxy_fwd")
baselines=(${BASELINE:-}) base_ports=()
for i in "${!baselines[@]}"; do
  port=$((19450 + i)) name="baseline$((i + 1))"
  sed -e "s/127.0.0.1:$edge/127.0.0.1:$port/" -e "s/127.0.0.1:$admin/127.0.0.1:$((19910 + i))/" "$dir/edge.yaml" > "$dir/$name.yaml"
  RUST_LOG=warn "${baselines[$i]}" run --config "$dir/$name.yaml" 2>"$dir/$name.log" & pids+=($!); pid[$name]=$!
  contenders+=("$name:$port") base_ports+=("$port")
done
wait_ports $origin $edge $edge_bare $edge_group $edge_limits $edge_rules $nginx_proxy $haproxy_port $nginx_fwd $haproxy_fwd "${base_ports[@]}"

rps() { # port -> requests/s
  h2load -c 50 -m 10 -n "$requests" --connect-to="127.0.0.1:$1" "https://b.test:$1/" 2>/dev/null \
    | awk '/^finished in/ {gsub(",", "", $4); print $4} /succeeded,/ {if ($10 != 0 || $12 != 0) print "ERRORS: " $0 > "/dev/stderr"}'
}
hz=$(getconf CLK_TCK)
declare -A all cpu
for pair in "${contenders[@]}"; do all[${pair%%:*}]=""; cpu[${pair%%:*}]=""; done
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
e=$(echo "${all[edgewarm]}" | median) ce=$(echo "${cpu[edgewarm]}" | median)
row() { # name label
  local r c
  r=$(echo "${all[$1]}" | median) c=$(echo "${cpu[$1]}" | median)
  echo "| $2 | $r | $(awk "BEGIN {printf \"%.2f\", $e/$r}") | $c | $(awk "BEGIN {printf \"%.2f\", $c/$ce}") |"
}
echo
echo "| proxy (h2load -c 50 -m 10 -n $requests, median of $rounds) | req/s | edgewarm / it | proxy CPU µs per request | its CPU / edgewarm's |"
echo "|---|---|---|---|---|"
echo "| edgewarm http route | $e | 1.00 | $ce | 1.00 |"
row bare "edgewarm http route, forward_headers: []"
row group "edgewarm http route, two servers (origins:, balance: latency)"
row limits "edgewarm http route, limits configured and not hit (rate, allow, per-client cap, deny)"
row rules "edgewarm http route, 1,000 rules, the one met written last"
row nginx "nginx 1.22 (HTTPS/1.1 keep-alive upstream)"
row nginx+fwd "nginx 1.22, adding edgewarm's forwarding headers"
row haproxy "HAProxy 2.6 (h2 upstream, http-reuse always)"
row haproxy+fwd "HAProxy 2.6, adding edgewarm's forwarding headers"
for i in "${!baselines[@]}"; do row "baseline$((i + 1))" "edgewarm build ${baselines[$i]}"; done
# Like for like: each proxy doing the same header work.
m() { echo "${all[$1]}" | median; }
mc() { echo "${cpu[$1]}" | median; }
echo
awk -v a="$(m bare)" -v b="$(m haproxy)" -v ca="$(mc bare)" -v cb="$(mc haproxy)" 'BEGIN {printf "Same header work, none added: edgewarm (forward_headers: []) / HAProxy = %.2f in req/s, %.2f in CPU per request\n", a / b, ca / cb}'
awk -v a="$e" -v b="$(m haproxy+fwd)" -v ca="$ce" -v cb="$(mc haproxy+fwd)" 'BEGIN {printf "Same header work, all four added: edgewarm / HAProxy adding them = %.2f in req/s, %.2f in CPU per request\n", a / b, ca / cb}'
