#!/usr/bin/env bash
# `make image`: builds the operator's OCI image without a container daemon and writes it as an OCI archive.
#
#   1. installs Debian's buildah if it is missing (apt-get update only when apt knows no candidate);
#   2. builds a static release binary (glibc, +crt-static) in its own target dir, target/static, so the
#      other builds' caches are untouched, and checks that it has no dynamic loader and no shared libraries;
#   3. `buildah bud` of config/image/Containerfile (FROM scratch, COPY only) on the vfs storage driver;
#   4. `buildah push` to oci-archive:target/image/cmset-controller.oci.tar.
#
# Environment: IMAGE (default ghcr.io/cmset/cmset-controller), TAG (default v<workspace version>),
# CARGO (default cargo). `make image-check` (config/image/check.sh) tests the result.
set -euo pipefail

cd "$(dirname "$0")/../.."
ROOT=$PWD

CARGO=${CARGO:-cargo}
TRIPLE=x86_64-unknown-linux-gnu
STATIC_TARGET_DIR=$ROOT/target/static
OUT_DIR=$ROOT/target/image
ARCHIVE=$OUT_DIR/cmset-controller.oci.tar
BUILDAH=(buildah --storage-driver vfs)

VERSION=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version *= *"\(.*\)"/\1/p' Cargo.toml)
IMAGE=${IMAGE:-ghcr.io/cmset/cmset-controller}
TAG=${TAG:-v$VERSION}
LOCAL_REF=localhost/cmset-controller:$TAG

say() { printf '[image] %s\n' "$*"; }
t0=$(date +%s)

# --- 1. buildah -------------------------------------------------------------------------------------------
if ! command -v buildah >/dev/null 2>&1; then
  if ! apt-cache policy buildah 2>/dev/null | grep -q 'Candidate: [0-9]'; then
    say "apt-get update (apt knows no buildah candidate yet)"
    apt-get update -qq
  fi
  say "installing buildah from Debian"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq buildah >/dev/null
fi
say "$(buildah --version)"

# --- 2. static binary -------------------------------------------------------------------------------------
# +crt-static on the gnu target links glibc statically: it needs libc.a (libc6-dev).
if [[ ! -f /usr/lib/x86_64-linux-gnu/libc.a ]]; then
  say "installing libc6-dev (libc.a, for static linking)"
  apt-cache policy libc6-dev 2>/dev/null | grep -q 'Candidate: [0-9]' || apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libc6-dev >/dev/null
fi
say "cargo build --release (static, $TRIPLE, target dir target/static)"
# RUSTFLAGS with an explicit --target applies to the target only, not to build scripts and proc macros.
# getrandom_backend: getrandom 0.3 (via ahash) finds glibc's getrandom() with dlsym, which finds nothing in
# a static executable, and then silently falls back to reading /dev/urandom. Calling getrandom() directly
# keeps the binary independent of /dev (config/image/check.sh runs it without one).
# Symbols stripped: 8.7 of the binary's 40.9 MB. A panic still names its file and line; only backtrace
# frames lose their names. The release builds the bench and `make profile` use keep theirs.
RUSTFLAGS='-C target-feature=+crt-static --cfg getrandom_backend="linux_getrandom"' \
  CARGO_PROFILE_RELEASE_STRIP=symbols \
  "$CARGO" build --release --locked --target "$TRIPLE" --target-dir "$STATIC_TARGET_DIR" -p cmset-controller
BIN=$STATIC_TARGET_DIR/$TRIPLE/release/cmset-controller

# A static executable has no program interpreter (PT_INTERP) and no DT_NEEDED entries.
if LC_ALL=C readelf -lW "$BIN" | grep -q 'INTERP'; then
  say "error: $BIN asks for a dynamic loader"; exit 1
fi
if LC_ALL=C readelf -dW "$BIN" | grep -q '(NEEDED)'; then
  say "error: $BIN needs shared libraries:"; readelf -dW "$BIN" | grep NEEDED; exit 1
fi
say "binary is static: $(stat -c %s "$BIN") bytes"

# --- 3. build the image -----------------------------------------------------------------------------------
CONTEXT=$OUT_DIR/context
rm -rf "$CONTEXT"
mkdir -p "$CONTEXT"
cp "$BIN" "$CONTEXT/cmset-controller"

REVISION=$(git -C "$ROOT" rev-parse HEAD 2>/dev/null || echo unknown)
# Fixed timestamps (the commit's time) make the image digest depend only on the binary and the labels.
EPOCH=$(git -C "$ROOT" log -1 --format=%ct 2>/dev/null || echo 0)

say "buildah bud -> $LOCAL_REF"
"${BUILDAH[@]}" bud --quiet \
  --format oci \
  --timestamp "$EPOCH" \
  --build-arg VERSION="$VERSION" \
  --build-arg REVISION="$REVISION" \
  -f "$ROOT/config/image/Containerfile" \
  -t "$LOCAL_REF" \
  "$CONTEXT" >/dev/null
rm -rf "$CONTEXT"

# --- 4. OCI archive ---------------------------------------------------------------------------------------
rm -f "$ARCHIVE"
say "buildah push -> oci-archive:${ARCHIVE#"$ROOT"/}:$IMAGE:$TAG"
"${BUILDAH[@]}" push --quiet "$LOCAL_REF" "oci-archive:$ARCHIVE:$IMAGE:$TAG"

# Drop the previous builds' images that the new tag left untagged (vfs keeps full copies of each layer).
"${BUILDAH[@]}" rmi --prune >/dev/null 2>&1 || true

say "wrote ${ARCHIVE#"$ROOT"/} ($(stat -c %s "$ARCHIVE") bytes) in $(( $(date +%s) - t0 )) s"
say "local image: $LOCAL_REF (buildah --storage-driver vfs images)"
