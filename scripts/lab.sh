#!/usr/bin/env bash
# The main job: the lab's default scenario. Installs what it needs, builds edgewarm, and runs
# `edgewarm lab` (r = 20 ms, R = 100 ms, TLS 1.3; about a minute). Needs root (namespaces).
# Extra arguments go to `edgewarm lab`, e.g. `scripts/lab.sh --scenario far-origin`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
cargo build --release --quiet
exec ./target/release/edgewarm lab "$@"
