#!/usr/bin/env bash
# Install what edgewarm's tests and lab need on a fresh Debian machine (idempotent, quiet).
# Real peers and clients come from Debian: curl, openssl, nghttp2-client; iproute2 and
# util-linux give `ip` and `unshare` for the network-namespace tests; Chromium is the browser the
# HTTP/3 tests and the browser lab (`--scenario pages`) load pages with; systemd-analyze and adduser for the package test;
# pebble (with pebble-challtestsrv) is the ACME server the certificate tests order from;
# nats-server (with JetStream) is what a fleet's nodes share purges through; python3-grpcio is the
# real gRPC server and client of tests/http/grpc.rs (for Debian's /usr/bin/python3).
set -euo pipefail
packages=(curl openssl iproute2 util-linux procps ca-certificates nginx libnginx-mod-stream nghttp2-client python3 python3-websockets python3-grpcio haproxy trafficserver chromium systemd adduser pebble nats-server)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "scripts/deps.sh: need root to install: ${missing[*]}" >&2
    exit 1
  fi
  echo "installing: ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# Node.js and npm: the HTTP cache test suite (../shared/cache-tests, run by `edgewarm-lab
# cache-tests` and tests/lab_cache_tests.rs) is a Node program whose dependencies come from the
# npm registry. This kind of machine comes with Node 20 and npm 11; Debian's (bookworm: Node 18)
# are the fallback where they are missing.
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "scripts/deps.sh: need root to install: nodejs npm" >&2
    exit 1
  fi
  echo "installing: nodejs npm"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null
fi
# aioquic (PyPI): the HTTP/3 client of the tests, a real QUIC stack with resumption and 0-RTT.
if ! python3 -c "import aioquic" 2>/dev/null; then
  if ! python3 -m pip --version >/dev/null 2>&1; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-pip >/dev/null
  fi
  python3 -m pip install --quiet --root-user-action=ignore aioquic 2>/dev/null \
    || python3 -m pip install --quiet --root-user-action=ignore --break-system-packages aioquic
fi
