#!/usr/bin/env bash
# Run every fuzz target for SECONDS each (default 300), starting from the committed seeds
# (fuzz/seeds/<target>: the ClientHello captures, also cut into 100- and 7-byte records,
# PROXY v1/v2 headers, HTTP/3 request heads and trailers as QPACK field sections, HTTP/3 frame
# streams, control and QPACK streams, and decrypted QUIC packets with padding).
# Works on the stable toolchain: cargo-fuzz's -Z flags are allowed with
# RUSTC_BOOTSTRAP=1, and `--sanitizer none` needs no nightly runtime (the parsers are safe
# Rust: what the fuzzer hunts is panics, hangs and runaway allocation). The targets run at the
# same time (libFuzzer uses one core; each target gets SECONDS). Prints each target's total
# executions. The working corpus goes to fuzz/corpus (not committed).
#
#   scripts/fuzz.sh [SECONDS]
set -euo pipefail
seconds=${1:-300}
cd "$(dirname "$0")/../fuzz"
command -v cargo-fuzz >/dev/null 2>&1 || cargo install cargo-fuzz --locked --quiet
export RUSTC_BOOTSTRAP=1
cargo fuzz build --sanitizer none -O
targets=(clienthello proxy_header http3_head http3_frames http3_uni quic_padding)
declare -A pids logs
# Each target in a process group of its own (job control), ended whole if this script stops early.
set -m
trap 'for p in "${pids[@]}"; do kill -- "-$p" 2>/dev/null || true; done' EXIT
trap 'exit 130' INT TERM
for target in "${targets[@]}"; do
  mkdir -p "corpus/$target"
  logs[$target]=$(mktemp)
  # -rss_limit_mb: an input that makes the parser allocate without bound is a finding too.
  cargo fuzz run --sanitizer none -O "$target" "corpus/$target" "seeds/$target" -- \
    -max_total_time="$seconds" -rss_limit_mb=1024 -timeout=5 -print_final_stats=1 >"${logs[$target]}" 2>&1 &
  pids[$target]=$!
done
failed=0
for target in "${targets[@]}"; do
  log=${logs[$target]}
  if ! wait "${pids[$target]}"; then
    tail -40 "$log"
    echo "fuzz: $target found a crash (artifacts in fuzz/artifacts/$target)" >&2
    failed=1
  else
    runs=$(grep -o 'Done [0-9]* runs in [0-9]* second' "$log" | tail -1)
    echo "fuzz: $target: $runs(s), corpus $(ls "corpus/$target" | wc -l) inputs"
  fi
  rm -f "$log"
done
exit "$failed"
