# Shared by the bench scripts (sourced): a throwaway folder and its cleanup, a PKI in it, and
# waiting for ports.
# shellcheck shell=bash

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
