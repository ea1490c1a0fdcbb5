#!/usr/bin/env bash
# Build the Debian package, target/debian/edgewarm_*.deb: the release binary, the systemd unit,
# the default configuration, man pages and shell completions generated from the CLI. Installs
# cargo-deb first if it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v cargo-deb >/dev/null || cargo install --locked --quiet cargo-deb --version 3.8.0
cargo build --release --locked --quiet -p edgewarm
target=${CARGO_TARGET_DIR:-target}
assets=$target/release/assets
rm -rf "$assets" && mkdir -p "$assets/man" "$assets/completions"
"$target/release/edgewarm" generate man "$assets/man"
"$target/release/edgewarm" generate completions bash >"$assets/completions/edgewarm.bash"
"$target/release/edgewarm" generate completions zsh >"$assets/completions/_edgewarm"
"$target/release/edgewarm" generate completions fish >"$assets/completions/edgewarm.fish"
cargo deb --locked -p edgewarm --no-build "$@"
