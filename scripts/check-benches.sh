#!/usr/bin/env bash
# CI's check of the bench scripts, which CI does not run (they take minutes each and want the
# release build): each must parse, and must call the helpers of bench-lib.sh only after
# sourcing it (two scripts once called one before, and stopped at once). What it cannot see,
# a broken measurement, only a run finds.
set -euo pipefail
cd "$(dirname "$0")"
fail=0
helpers=$(sed -n 's/^\([a-z_][a-z_0-9]*\)() {.*/\1/p' bench-lib.sh | paste -sd'|')
for f in bench-*.sh; do
  bash -n "$f" || fail=1
  [ "$f" = bench-lib.sh ] && continue
  sourced=$(grep -nE '^(\.|source) "\$root/scripts/bench-lib.sh"' "$f" | cut -d: -f1 | head -1 || true)
  if [ -z "$sourced" ]; then
    echo "$f: does not source bench-lib.sh"; fail=1; continue
  fi
  early=$(head -n "$sourced" "$f" | grep -nE "^[^#]*\b($helpers)\b" || true)
  if [ -n "$early" ]; then
    echo "$f: calls bench-lib.sh's helpers before sourcing it (line $sourced):"; echo "$early"; fail=1
  fi
done
[ "$fail" = 0 ] && echo "bench scripts: $(ls bench-*.sh | wc -l) parse, and source bench-lib.sh before using it"
exit "$fail"
