#!/usr/bin/env bash
# The main job: the lab's default scenario. Installs what it needs, builds edgewarm (the proxy)
# and edgewarm-lab, and runs `edgewarm-lab lab` (r = 20 ms, R = 100 ms, TLS 1.3; about a
# minute), which runs the proxy binary in the edge namespace. Needs root (namespaces).
# Extra arguments go to `edgewarm-lab lab`, e.g. `scripts/lab.sh --scenario far-origin`. Honours
# CARGO_TARGET_DIR.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
cargo build --release --quiet -p edgewarm -p edgewarm-lab
exec "${CARGO_TARGET_DIR:-target}/release/edgewarm-lab" lab "$@"
