# Shared by the bench scripts (sourced): a throwaway folder and its cleanup, a PKI in it, and
# waiting for ports.
# shellcheck shell=bash

# $edgewarm: the proxy, built for release from the checkout at $root.
bench_edgewarm() {
  cargo build --release -q -p edgewarm --manifest-path "$root/Cargo.toml"
  edgewarm="$root/target/release/edgewarm"
}

# bench_edgewarm_and_lab: the same, and $lab, the lab's load generator.
bench_edgewarm_and_lab() {
  cargo build --release -q -p edgewarm -p edgewarm-lab --manifest-path "$root/Cargo.toml"
  edgewarm="$root/target/release/edgewarm" lab="$root/target/release/edgewarm-lab"
}

# bench_http_setup: the builds, the folder and the PKI the HTTP benches share, and their ports:
# $origin, $edge (listener) and $admin.
bench_http_setup() {
  bench_edgewarm_and_lab
  bench_workdir
  bench_http_pki
  origin=18743 edge=19743 admin=19990
}

# $dir: a new folder, removed on exit (kept with KEEP=1) after every pid in $pids is killed.
bench_workdir() {
  dir=$(mktemp -d)
  pids=()
  trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; [ -n "${KEEP:-}" ] || rm -rf "$dir"' EXIT
}

# $dir/ca.pem and ca.key: a P-256 CA valid for two days.
bench_ca() {
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=bench-ca \
    -keyout "$dir/ca.key" -out "$dir/ca.pem" 2>/dev/null
}

# bench_cert NAME SANS (e.g. "DNS:a.test,DNS:b.test"): $dir/NAME.key, NAME.pem signed by the
# CA, and NAME.bundle (certificate then key, as HAProxy wants).
bench_cert() {
  printf "subjectAltName=%s" "$2" > "$dir/$1.ext"
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=$1" -keyout "$dir/$1.key" \
    -out "$dir/$1.csr" 2>/dev/null
  openssl x509 -req -in "$dir/$1.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" -CAcreateserial -days 2 \
    -extfile "$dir/$1.ext" -out "$dir/$1.pem" 2>/dev/null
  cat "$dir/$1.pem" "$dir/$1.key" > "$dir/$1.bundle"
}

# ticks PID: CPU time (user + system, clock ticks) of a process and its children (nginx's
# workers).
ticks() {
  local total=0 p
  for p in $1 $(pgrep -P "$1"); do
    [ -r "/proc/$p/stat" ] && total=$((total + $(awk '{print $14 + $15}' "/proc/$p/stat")))
  done
  echo "$total"
}

# median: the median of the numbers on stdin (space or newline separated).
median() { tr ' ' '\n' | grep -v '^$' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
# h3_ratio "H3 SAMPLES" "H2 SAMPLES": prints the ratio of their medians (HTTP/3 over HTTP/2).
h3_ratio() {
  awk -v a="$(echo "$1" | median)" -v b="$(echo "$2" | median)" \
    'BEGIN {printf "HTTP/3 CPU per request / HTTP/2 = %.2f\n", a / b}'
}

# wait_ports PORT...: until each accepts a connection on 127.0.0.1 (20 s at most each).
wait_ports() {
  local port
  for port in "$@"; do
    for _ in $(seq 200); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.1; done
  done
}

# bench_http_pki: the CA, origin.test (the origin's name) and b.test (the proxies' name), and
# $dir/tmp for nginx's temporary files.
bench_http_pki() {
  bench_ca
  bench_cert origin.test DNS:origin.test
  bench_cert b.test DNS:b.test
  mkdir -p "$dir/tmp"
}

# bench_h2_origin PORT WORKERS: $dir/origin.conf, an nginx HTTP/2 origin on 127.0.0.1:PORT that
# answers every request with a short body.
bench_h2_origin() {
  local temp="client_body_temp_path $dir/tmp; proxy_temp_path $dir/tmp; fastcgi_temp_path $dir/tmp; uwsgi_temp_path $dir/tmp; scgi_temp_path $dir/tmp;"
  cat > "$dir/origin.conf" <<CONF
daemon off; worker_processes $2; pid $dir/origin.pid; error_log $dir/origin.err; events { worker_connections 4096; }
http { access_log off; $temp keepalive_requests 100000;
  server { listen 127.0.0.1:$1 ssl http2; ssl_certificate $dir/origin.test.pem; ssl_certificate_key $dir/origin.test.key;
    location / { return 200 "hello from the origin\n"; } } }
CONF
}

# bench_h3_start: after bench_http_setup, the nginx HTTP/2 origin (two workers) and one edge with
# HTTP/3 on its listener ($dir/edge.yaml), both up; $pid is the edge's.
bench_h3_start() {
  bench_h2_origin "$origin" 2
  BENCH_HTTP3=1 bench_http_edge "$edge" "$admin" "$origin" > "$dir/edge.yaml"
  nginx -c "$dir/origin.conf" & pids+=($!)
  RUST_LOG=warn "$edgewarm" run --config "$dir/edge.yaml" 2>"$dir/edge.log" & pids+=($!); pid=$!
  wait_ports "$origin" "$edge"
}

# bench_http_edge LISTEN_PORT ADMIN_PORT ORIGIN_PORT [EXTRA_ROUTE_LINE]: an edgewarm config (on
# stdout) with one `http` route for b.test, two standing connections to the origin; with
# BENCH_HTTP3=1, HTTP/3 on the listener too. Its upgrade socket is in $dir (the default, under
# /run, would outlive the bench).
bench_http_edge() {
  cat <<CONF
admin: {listen: "127.0.0.1:$2"}
upgrade: {socket: $dir/upgrade-$1.sock}
listeners: [{listen: "127.0.0.1:$1"${BENCH_HTTP3:+, http3: true}}]
routes:
  - sni: b.test
    action: http
    origin: "127.0.0.1:$3"
    cert: $dir/b.test.pem
    key: $dir/b.test.key
    origin_tls: {sni: origin.test, ca: $dir/ca.pem}
    upstream: {connections: 2}
${4:-}
CONF
}

# bench_peer FILE[:OUT] LISTEN ORIGIN [SED_EXPR...]: $dir/FILE (or $dir/OUT), the peer config
# examples/peers/FILE, the same one `edgewarm-lab lab --peers` runs, with {listen}, {origin}
# and {dir} filled in. The sed expressions adjust it for one bench first (they may use the
# placeholders), e.g. 's/nbthread 2/nbthread 1/'. The configs read edge.pem, edge.key,
# edge.bundle.pem and ca.pem from $dir: bench_edge_cert links the first three.
bench_peer() {
  local file=${1%%:*} out=${1#*:} listen=$2 origin=$3 expr=(-e '')
  shift 3
  for e in "$@"; do expr+=(-e "$e"); done
  sed "${expr[@]}" "$root/examples/peers/$file" \
    | sed -e "s#{listen}#$listen#g" -e "s#{origin}#$origin#g" -e "s#{dir}#$dir#g" > "$dir/$out"
  mkdir -p "$dir/nginx-tmp"
}

# bench_edge_cert NAME: the peer configs' edge certificate (edge.pem, edge.key, edge.bundle.pem)
# is NAME's (from bench_cert).
bench_edge_cert() {
  if [ "$1" != edge ]; then
    ln -sf "$dir/$1.pem" "$dir/edge.pem"
    ln -sf "$dir/$1.key" "$dir/edge.key"
  fi
  ln -sf "$dir/$1.bundle" "$dir/edge.bundle.pem"
}

# The sed expressions that turn a tunnel peer config into the same proxy without its SNI peek
# (plain TCP forwarding to the origin: the baseline its peek is priced against), and name its
# files apart so both can run at once.
bench_no_peek_nginx=('s/ssl_preread on;//' 's/proxy_pass \$backend;/proxy_pass {origin};/' 's#{dir}/nginx-stream\.#{dir}/nginx-plain.#g')
bench_no_peek_haproxy=('/tcp-request/d' 's/use_backend origin if .*/default_backend origin/')
