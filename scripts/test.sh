#!/usr/bin/env bash
# The test command (README): installs what the tests need, then runs every test, the system
# tests included (feature `system-tests`: network namespaces, nginx, curl, openssl, h2load,
# nghttp; they need root, as CI has). A plain `cargo test` runs only the unprivileged ones.
# The lab tests use python3 one-liners as TCP probes inside the namespaces. Then the kernel TLS
# tests again, inside a QEMU VM whose kernel has TLS (scripts/test-ktls.sh; this machine's
# kernel has none, so cargo test ran only their user-space checks).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
cargo test --locked --workspace --all-features "$@"
scripts/test-ktls.sh
