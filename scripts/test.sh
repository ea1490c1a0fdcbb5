#!/usr/bin/env bash
# The test command: installs what the tests need, then runs every test.
# Needs root (network namespaces for the TCP Fast Open test), as CI has.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
cargo test --workspace "$@"
