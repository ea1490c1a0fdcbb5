#!/usr/bin/env bash
# Cache hits per second, and proxy CPU per hit, through edgewarm's `http` route with
# `cache: {}`, HAProxy 2.6's `cache` and nginx 1.22's `proxy_cache`, in one run, on one 1 KiB
# object (Cache-Control: max-age=3600). Each proxy terminates TLS (HTTP/2 from the client) and
# may use both cores; each fetches from one nginx origin over cleartext HTTP/1.1 keep-alive
# (the same leg for all three, and one a hit never takes), on a port of its own, so the
# origin's access log says whose requests it served: none while measuring. Each cache is
# warmed first. Alternating rounds, median reported. Needs: nginx, haproxy, h2load, curl.
#
#   scripts/bench-cache.sh [ROUNDS] [REQUESTS]
#   ENTRIES=20000 scripts/bench-cache.sh ...   # then edgewarm's memory per stored entry
set -euo pipefail
rounds=${1:-3}
requests=${2:-40000}
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=scripts/bench-lib.sh
. "$root/scripts/bench-lib.sh"
bench_edgewarm
bench_workdir
bench_http_pki
edge=19843 haproxy_port=19844 nginx_proxy=19845 admin=19993
declare -A origin=([edgewarm]=18843 [haproxy]=18844 [nginx]=18845) pid before
cat > "$dir/origin.conf" <<CONF
daemon off; worker_processes 1; pid $dir/origin.pid; error_log $dir/origin.err; events { worker_connections 4096; }
http { client_body_temp_path $dir/tmp; proxy_temp_path $dir/tmp; fastcgi_temp_path $dir/tmp; uwsgi_temp_path $dir/tmp;
  scgi_temp_path $dir/tmp; keepalive_requests 1000000; log_format port '\$server_port'; access_log $dir/origin.log port;
  server { $(printf 'listen 127.0.0.1:%s; ' "${origin[@]}") add_header Cache-Control max-age=3600;
    location = /obj { return 200 "$(head -c 1024 /dev/zero | tr '\0' x)"; } location /o/ { return 200 "x"; } } }
CONF
bench_edge_cert b.test
bench_peer haproxy-cache.cfg "127.0.0.1:$haproxy_port" "127.0.0.1:${origin[haproxy]}"
bench_peer nginx-cache.conf "127.0.0.1:$nginx_proxy" "127.0.0.1:${origin[nginx]}"
chmod 711 "$dir" && chmod 777 "$dir/nginx-tmp" # nginx's workers (nobody) write its cache files
bench_http_edge $edge $admin "${origin[edgewarm]}" "    cache: {}" \
  | sed -e '/origin_tls/d' -e 's#upstream: {#upstream: {protocol: http/1.1, tls: false, #' > "$dir/edge.yaml"

nginx -c "$dir/origin.conf" & pids+=($!)
haproxy -db -f "$dir/haproxy-cache.cfg" & pids+=($!); pid[haproxy]=$!
nginx -c "$dir/nginx-cache.conf" & pids+=($!); pid[nginx]=$!
RUST_LOG=warn "$edgewarm" run --config "$dir/edge.yaml" 2>"$dir/edge.log" & pids+=($!); pid[edgewarm]=$!
contenders=("edgewarm:$edge" "haproxy:$haproxy_port" "nginx:$nginx_proxy")
wait_ports "${origin[@]}" $edge $haproxy_port $nginx_proxy

# Warm each cache: three requests, one of which may reach the origin; edgewarm's third a hit.
for pair in "${contenders[@]}"; do for _ in 1 2 3; do
  curl -sS --cacert "$dir/ca.pem" --resolve "b.test:${pair##*:}:127.0.0.1" -D "$dir/warm.${pair%%:*}" -o /dev/null "https://b.test:${pair##*:}/obj"
done; done
grep -qi '^cache-status: edgewarm; hit' "$dir/warm.edgewarm" || { echo "edgewarm's third request was no hit:"; cat "$dir/warm.edgewarm"; exit 1; }
served() { grep -c "^${origin[$1]}\$" "$dir/origin.log" || true; }
for n in "${!origin[@]}"; do before[$n]=$(served "$n"); done
echo "origin requests while warming: edgewarm ${before[edgewarm]}, haproxy ${before[haproxy]}, nginx ${before[nginx]}"

rps() { # port -> requests/s
  h2load -c 50 -m 10 -n "$requests" --connect-to="127.0.0.1:$1" "https://b.test:$1/obj" 2>/dev/null | awk -v n="$requests" '
    /^finished in/ {gsub(",", "", $4); print $4}
    /succeeded,/ {if ($10 != 0 || $12 != 0) print "ERRORS: " $0 > "/dev/stderr"}
    /^status codes:/ {if ($3 != n) print "NOT ALL 2xx: " $0 > "/dev/stderr"}'
}
hz=$(getconf CLK_TCK)
declare -A all cpu
for round in $(seq "$rounds"); do
  for pair in "${contenders[@]}"; do
    name=${pair%%:*} port=${pair##*:}
    t0=$(ticks "${pid[$name]}")
    r=$(rps "$port")
    us=$(awk "BEGIN {printf \"%.1f\", ($(ticks "${pid[$name]}") - $t0) * 1e6 / $hz / $requests}")
    all[$name]="${all[$name]:-} $r" cpu[$name]="${cpu[$name]:-} $us"
    echo "round $round $name $r req/s, $us µs CPU/hit"
  done
done
e=$(echo "${all[edgewarm]}" | median) ce=$(echo "${cpu[edgewarm]}" | median)
row() { # name label
  local r c
  r=$(echo "${all[$1]}" | median) c=$(echo "${cpu[$1]}" | median)
  echo "| $2 | $r | $(awk "BEGIN {printf \"%.2f\", $e/$r}") | $c | $(awk "BEGIN {printf \"%.2f\", $c/$ce}") | $(($(served "$1") - ${before[$1]})) |"
}
echo
echo "| cache hits, 1 KiB (h2load -c 50 -m 10 -n $requests, median of $rounds) | req/s | edgewarm / it | proxy CPU µs per hit | its CPU / edgewarm's | origin requests while measuring |"
echo "|---|---|---|---|---|---|"
row edgewarm "edgewarm http route, cache: {}"
row haproxy "HAProxy 2.6 cache (RAM)"
row nginx "nginx 1.22 proxy_cache (files)"

[ -n "${ENTRIES:-}" ] || exit 0
# Memory per stored entry: ENTRIES tiny objects (/o/N, 1-byte bodies), then ENTRIES more; the
# second fill's growth is the marginal cost (the first also grows the origin pool).
fill() { # FIRST LAST -> the RSS and the weigher's bytes once they are stored
  seq "$1" "$2" | sed "s#.*#https://b.test:$edge/o/&#" > "$dir/urls"
  h2load -c 1 -m 10 -n $(($2 - $1 + 1)) -i "$dir/urls" --connect-to="127.0.0.1:$edge" >/dev/null 2>&1
  sleep 2; echo "$(curl -s "http://127.0.0.1:$admin/cache")" >&2
  echo "$(awk '/^VmRSS/ {print $2 * 1024}' "/proc/${pid[edgewarm]}/status")" \
    "$(curl -s "http://127.0.0.1:$admin/metrics" | awk '/^edgewarm_cache_stored_bytes/ {print $2}')"
}
read -r r0 s0 < <(fill 1 "$ENTRIES")
read -r r1 s1 < <(fill $((ENTRIES + 1)) $((2 * ENTRIES)))
echo "edgewarm, $ENTRIES entries more: RSS $r0 -> $r1 B, +$(((r1 - r0) / ENTRIES)) B per entry;" \
  "the weigher counted +$(((s1 - s0) / ENTRIES)) B per entry (body, headers and ENTRY_OVERHEAD)"
