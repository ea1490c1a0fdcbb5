#!/usr/bin/env bash
# The kernel TLS tests (crates/edgewarm/tests/ktls.rs) inside a VM whose kernel has TLS: this
# machine's has none. scripts/vm.sh boots Debian's kernel under QEMU with this machine's root
# shared read-only, so the test binary built here runs there as it is; EDGEWARM_REQUIRE_KTLS
# makes a kernel without TLS a failure in there instead of a skip.
#
#   scripts/test-ktls.sh            # build (the workspace's tests), then run every test of tests/ktls.rs in the VM
#   scripts/test-ktls.sh NAME       # only the tests whose name contains NAME
#
# Where QEMU cannot run, says why and exits 0: the tests then ran only their user-space checks
# (cargo test runs them on the host, where each kernel-only test prints SKIP).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! why=$(scripts/vm.sh --check 2>&1); then
  echo "SKIP kernel TLS tests in a VM: ${why:-QEMU cannot run here}"
  exit 0
fi
# The same cargo test as scripts/test.sh's, every test target of the workspace, so what it built
# is reused. `--test ktls` alone would select a smaller unit graph: build-only dependencies
# (proc-macro2, quote, syn) then get the build profile's debuginfo instead of the one they share
# with edgewarm-lab's, and every crate behind a proc macro compiled again (~160 crates, 70 s on
# CI).
bin=$(cargo test --workspace --all-features --no-run --message-format=json 2>/dev/null |
  python3 -c 'import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "ktls":
        print(m["executable"])')
[ -x "$bin" ] || { echo "test-ktls: could not build the ktls test binary" >&2; exit 1; }
echo "== kernel TLS tests in a VM ($(basename "$bin"))"
scripts/vm.sh --timeout "${VM_TIMEOUT:-900}" -- env EDGEWARM_REQUIRE_KTLS=1 RUST_BACKTRACE=1 \
  "$bin" --test-threads=2 "$@"
