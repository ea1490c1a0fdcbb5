#!/usr/bin/env bash
# The kernel TLS tests (crates/edgewarm/tests/ktls.rs) inside a VM whose kernel has TLS: this
# machine's has none. scripts/vm.sh boots Debian's kernel under QEMU with this machine's root
# shared read-only, so the test binary built here runs there as it is; EDGEWARM_REQUIRE_KTLS
# makes a kernel without TLS a failure in there instead of a skip.
#
#   scripts/test-ktls.sh            # build, then run every test of tests/ktls.rs in the VM
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
# The same flags as scripts/test.sh's cargo test, so the binary it built is reused.
bin=$(cargo test --workspace --all-features --test ktls --no-run --message-format=json 2>/dev/null |
  python3 -c 'import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "ktls":
        print(m["executable"])')
[ -x "$bin" ] || { echo "test-ktls: could not build the ktls test binary" >&2; exit 1; }
echo "== kernel TLS tests in a VM ($(basename "$bin"))"
scripts/vm.sh --timeout "${VM_TIMEOUT:-900}" -- env EDGEWARM_REQUIRE_KTLS=1 RUST_BACKTRACE=1 \
  "$bin" --test-threads=2 "$@"
