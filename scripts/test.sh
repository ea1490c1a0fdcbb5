#!/usr/bin/env bash
# The test command (README): installs what the tests need, then runs every test.
# The lab tests use python3 one-liners as TCP probes inside the namespaces.
# Needs root (network namespaces for the TCP Fast Open test), as CI has.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
cargo test --workspace "$@"
