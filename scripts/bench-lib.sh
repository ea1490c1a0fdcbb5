# Shared by the bench scripts (sourced): a throwaway folder and its cleanup, a PKI in it, and
# waiting for ports.
# shellcheck shell=bash

# $edgewarm: the proxy, built for release from the checkout at $root.
bench_edgewarm() {
  cargo build --release -q -p edgewarm --manifest-path "$root/Cargo.toml"
  edgewarm="$root/target/release/edgewarm"
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

# bench_http_edge LISTEN_PORT ADMIN_PORT ORIGIN_PORT [EXTRA_ROUTE_LINE]: an edgewarm config (on
# stdout) with one `http` route for b.test, two standing connections to the origin.
bench_http_edge() {
  cat <<CONF
admin: {listen: "127.0.0.1:$2"}
listeners: [{listen: "127.0.0.1:$1"}]
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

# bench_haproxy_http THREADS PORT FWD_PORT ORIGIN_PORT: an HAProxy config (on stdout) proxying
# HTTPS (h2 or HTTP/1.1) to the origin over reused HTTP/2: on PORT as it comes, on FWD_PORT
# adding the forwarding headers edgewarm adds by default (X-Forwarded-For, X-Forwarded-Proto,
# Forwarded, Via both ways), so that frontend does the same header work.
bench_haproxy_http() {
  cat <<CONF
global
  nbthread $1
defaults
  mode http
  timeout connect 5s
  timeout client 60s
  timeout server 60s
frontend fe
  bind 127.0.0.1:$2 ssl crt $dir/b.test.bundle alpn h2,http/1.1
  default_backend be
frontend fe_fwd
  bind 127.0.0.1:$3 ssl crt $dir/b.test.bundle alpn h2,http/1.1
  option forwardfor
  http-request set-header X-Forwarded-Proto https
  http-request set-header Forwarded "for=%[src];proto=https;host=\\"%[req.hdr(host)]\\""
  http-request add-header Via "2 haproxy"
  http-response add-header Via "2 haproxy"
  default_backend be
backend be
  http-reuse always
  server origin 127.0.0.1:$4 ssl verify required ca-file $dir/ca.pem sni str(origin.test) alpn h2
CONF
}
