#!/usr/bin/env bash
# The `lossy` scenario with edgewarm's standing HTTP/2 origin connections in several settings,
# measured in one run: each setting is an edgewarm process of its own beside the lab's (an
# `http` peer, `--proxy NAME:http=…`), serving only h.test, with its own `upstream` section;
# BASELINE (optional) is another build run the same way with `connections: 2` (the default
# before #34). Needs root and a release build (`cargo build --release -p edgewarm -p edgewarm-lab`).
#
#   scripts/lab-standing.sh [BASELINE] -- [edgewarm-lab lab flags, e.g. --loss 0%,1%,2% --seed 11]
#   VARIANTS="c4=connections: 4;c8=connections: 8" scripts/lab-standing.sh /tmp/ew-before -- --seed 11
set -euo pipefail
cd "$(dirname "$0")/.."
baseline=""
if [[ $# -gt 0 && $1 != "--" ]]; then baseline=$(realpath "$1"); shift; fi
[[ $# -gt 0 && $1 == "--" ]] && shift
bin=$(realpath target/release/edgewarm)
variants=${VARIANTS:-"c2=connections: 2;c8=connections: 8;c16=connections: 16, max_connections: 32"}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# {listen}, {origin} and {dir} are filled in by the lab; the rest here.
cat > "$tmp/peer.sh" <<'SH'
#!/bin/sh
# peer.sh BINARY ADMIN_PORT UPSTREAM LISTEN ORIGIN DIR
cat > "$6/peer-$2.yaml" <<YAML
admin: {listen: "127.0.0.1:$2"}
upgrade: {socket: $6/peer-$2.sock}
listeners: [{listen: "$4"}]
routes:
  - sni: h.test
    action: http
    origin: "$5"
    cert: $6/edge.pem
    key: $6/edge.key
    origin_tls: {sni: origin.test, ca: $6/ca.pem}
    upstream: {$3}
  - {sni: "*", action: reject}
YAML
exec "$1" run --config "$6/peer-$2.yaml"
SH
chmod +x "$tmp/peer.sh"
peers=()
port=9910
if [[ -n $baseline ]]; then
  peers+=(--proxy "before:http=$tmp/peer.sh $baseline $port 'connections: 2' {listen} {origin} {dir}")
fi
IFS=';' read -ra list <<< "$variants"
for v in "${list[@]}"; do
  port=$((port + 1))
  peers+=(--proxy "${v%%=*}:http=$tmp/peer.sh $bin $port '${v#*=}' {listen} {origin} {dir}")
done
./target/release/edgewarm-lab lab --scenario lossy --modes prewarm "${peers[@]}" "$@"
