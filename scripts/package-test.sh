#!/usr/bin/env bash
# CI: install the package built by scripts/package.sh on this machine (dpkg -i), verify its
# unit with systemd-analyze, check the configuration it ships, and serve one request through
# it: the shipped tunnel route for www.example.com, to an openssl s_server on 127.0.0.1:8443.
# Removes the package and everything it started, also on failure. Needs root.
set -euo pipefail
cd "$(dirname "$0")/.."
deb=$(ls -t "${CARGO_TARGET_DIR:-target}"/debian/edgewarm_*.deb | head -1)
work=$(mktemp -d)
had_user=$(getent passwd edgewarm >/dev/null && echo yes || true)
had_run=$([ -e /run/edgewarm ] && echo yes || true)
# Every step may fail (a process already gone, say) without stopping the rest of the cleanup.
cleanup() {
  set +e
  for pid in ${edge:-} ${origin:-}; do kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; done
  dpkg --purge edgewarm >/dev/null 2>&1
  # Packages leave their system users behind (Debian policy); the test removes the one it made.
  [ -n "$had_user" ] || userdel edgewarm 2>/dev/null
  # The run below, as root, made the default upgrade socket's folder.
  [ -n "$had_run" ] || rm -rf /run/edgewarm
  rm -rf "$work"
}
trap cleanup EXIT
DEBIAN_FRONTEND=noninteractive dpkg -i --force-confdef --force-confold "$deb"
# Where systemd runs, the package started the service (it holds the shipped ports): the
# manual run below needs them.
if [ -d /run/systemd/system ]; then systemctl stop edgewarm.service || true; fi
dpkg -L edgewarm | grep -E '^/usr/(bin/edgewarm|share/man/man1/edgewarm.1|lib/systemd/system/edgewarm.service)$' | wc -l | grep -qx 3
getent passwd edgewarm >/dev/null
# Unknown keys and bad values are warnings to systemd-analyze: a line about our unit, or a
# failed exit, fails the step (what it says of other units on this machine is not ours).
rc=0 out=$(systemd-analyze verify --man=no /lib/systemd/system/edgewarm.service 2>&1) || rc=$?
if [ "$rc" -ne 0 ] || printf '%s\n' "$out" | grep -q edgewarm; then
  echo "systemd-analyze verify (exit $rc): $out"; exit 1
fi
/usr/bin/edgewarm check --config /etc/edgewarm/edgewarm.yaml
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj /CN=www.example.com \
  -addext subjectAltName=DNS:www.example.com -keyout "$work/key.pem" -out "$work/cert.pem" 2>/dev/null
openssl s_server -accept 127.0.0.1:8443 -cert "$work/cert.pem" -key "$work/key.pem" -www -quiet \
  </dev/null >"$work/origin.log" 2>&1 &
origin=$!
# The edge is ready within milliseconds; s_server may not be listening yet on a fresh machine
# (CI once sent the request before it was: "connection refused by 127.0.0.1:8443").
for _ in $(seq 100); do ss -Hltn 'sport = :8443' | grep -q . && break; sleep 0.1; done
ss -Hltn 'sport = :8443' | grep -q . || { echo "origin s_server did not listen on 8443"; cat "$work/origin.log"; exit 1; }
/usr/bin/edgewarm run --config /etc/edgewarm/edgewarm.yaml 2>"$work/edge.log" &
edge=$!
for _ in $(seq 100); do curl -sf --max-time 1 -o /dev/null http://127.0.0.1:9900/ready && break; sleep 0.1; done
# To a file, then read: `grep -q` in a pipe stops reading at its match, and with pipefail
# curl's broken pipe would fail the step.
curl -sf --max-time 10 --cacert "$work/cert.pem" --resolve www.example.com:443:127.0.0.1 \
  -o "$work/page.html" https://www.example.com/ && grep -q 's_server' "$work/page.html" \
  || { cat "$work/edge.log"; exit 1; }
echo "package: installed, unit verified, shipped config checked, one request served through it"
