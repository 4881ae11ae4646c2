#!/usr/bin/env bash
# Builds the fully static x86-64 release binary and the Debian package from it:
#   target/x86_64-unknown-linux-gnu/release/parasol   (static-pie, no shared libraries)
#   target/debian/parasol_<version>-1_amd64.deb
# The package's contents are described by [package.metadata.deb] in Cargo.toml and the files in
# packaging/. Installs cargo-deb (3.x) from crates.io when it is missing. Prints the .deb's path
# as its last line.
set -euo pipefail
cd "$(dirname "$0")/.."

TARGET=x86_64-unknown-linux-gnu

if ! cargo deb --version >/dev/null 2>&1; then
    echo "build-deb: installing cargo-deb" >&2
    cargo install cargo-deb --locked --version '^3'
fi

# An explicit --target keeps RUSTFLAGS off build scripts and proc macros, which cannot be static.
# crt-static links glibc statically; the bundled SQLite and ring need nothing else.
start=$(date +%s)
RUSTFLAGS="-C target-feature=+crt-static" \
    cargo build --release --locked --target "$TARGET"
echo "build-deb: release build took $(( $(date +%s) - start )) s" >&2

mkdir -p target/debian
cargo deb --no-build --locked --target "$TARGET" --output target/debian/ >&2
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n1)
deb="target/debian/parasol_${version}-1_amd64.deb"
test -f "$deb" || { echo "build-deb: $deb was not made" >&2; exit 1; }
echo "$deb"
