#!/usr/bin/env bash
# `make image-check`: tests the OCI archive written by `make image`, without buildah or a container runtime.
#
#   1. the archive is an OCI image layout: oci-layout, index.json, blobs whose sha256 and sizes match their
#      descriptors; the config says linux/amd64, user 65532:65532, entrypoint /cmset-controller, OCI labels;
#   2. the layers, unpacked with tar into an empty directory, hold the binary and nothing else: no libc, no
#      shell, no /tmp;
#   3. the entrypoint runs from that root filesystem under chroot, as user 65532: --version and --help;
#   4. size budget: the compressed archive and the unpacked root filesystem (MAX_MB, default 40 MB each);
#   5. when the local control plane (make cluster-up) answers, a smoke run: the entrypoint, chrooted into a
#      read-only bind mount of that root filesystem with only a ServiceAccount mount added the way a kubelet
#      would (token, ca.crt, namespace) and KUBERNETES_SERVICE_HOST/PORT, connects over TLS, syncs its caches
#      (/readyz answers 200), serves /metrics and exits 0 on SIGTERM; afterwards the root filesystem is
#      unchanged. IMAGE_SMOKE=0 skips it, IMAGE_SMOKE=1 makes it mandatory (default: auto).
set -euo pipefail

cd "$(dirname "$0")/../.."
ROOT=$PWD
ARCHIVE=${ARCHIVE:-target/image/cmset-controller.oci.tar}
MAX_MB=${MAX_MB:-40}
IMAGE_SMOKE=${IMAGE_SMOKE:-auto}
CLUSTER_DIR=${CLUSTER_DIR:-$ROOT/.cluster}
VERSION=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version *= *"\(.*\)"/\1/p' Cargo.toml)

# The binary gets no environment but PATH (env -i), as in an image without one.
CLEAN_ENV=(env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin)

say() { printf '[image-check] %s\n' "$*"; }
die() { printf '[image-check] FAIL: %s\n' "$*" >&2; exit 1; }
mb() { awk -v b="$1" 'BEGIN { printf "%.1f MB", b / 1000000 }'; }

[[ -f $ARCHIVE ]] || die "$ARCHIVE does not exist: run 'make image' first"
[[ $(id -u) == 0 ]] || die "needs root (chroot)"

WORK=$(mktemp -d)
SMOKE_PID=
cleanup() {
  if [[ -n $SMOKE_PID ]] && kill -0 "$SMOKE_PID" 2>/dev/null; then kill -KILL "$SMOKE_PID" 2>/dev/null || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT

# --- 1. OCI layout ------------------------------------------------------------------------------------------
LAYOUT=$WORK/layout
mkdir -p "$LAYOUT"
tar -xf "$ARCHIVE" -C "$LAYOUT"
python3 - "$LAYOUT" "$VERSION" "$WORK/layers" <<'EOF'
import hashlib, json, os, sys

layout, version, layers_out = sys.argv[1], sys.argv[2], sys.argv[3]
def fail(msg):
    sys.exit(f"[image-check] FAIL: {msg}")

def blob(desc, media_types):
    if desc.get("mediaType") not in media_types:
        fail(f"unexpected media type {desc.get('mediaType')}")
    algo, digest = desc["digest"].split(":", 1)
    if algo != "sha256":
        fail(f"digest algorithm {algo}")
    path = os.path.join(layout, "blobs", "sha256", digest)
    if not os.path.isfile(path):
        fail(f"blob {digest} is missing")
    data = open(path, "rb").read()
    if hashlib.sha256(data).hexdigest() != digest or len(data) != desc["size"]:
        fail(f"blob {digest} does not match its descriptor")
    return path, data

if json.load(open(os.path.join(layout, "oci-layout"))).get("imageLayoutVersion") != "1.0.0":
    fail("oci-layout is not version 1.0.0")
index = json.load(open(os.path.join(layout, "index.json")))
if index.get("schemaVersion") != 2 or len(index.get("manifests", [])) != 1:
    fail("index.json must have schemaVersion 2 and one manifest")
mdesc = index["manifests"][0]
_, mdata = blob(mdesc, ["application/vnd.oci.image.manifest.v1+json"])
manifest = json.loads(mdata)
_, cdata = blob(manifest["config"], ["application/vnd.oci.image.config.v1+json"])
config = json.loads(cdata)
cfg = config.get("config", {})
checks = {
    "os": config.get("os") == "linux",
    "architecture": config.get("architecture") == "amd64",
    "User": cfg.get("User") == "65532:65532",
    "Entrypoint": cfg.get("Entrypoint") == ["/cmset-controller"],
    "Cmd": not cfg.get("Cmd"),
}
labels = cfg.get("Labels") or {}
for name in ("title", "source", "version", "licenses", "revision"):
    checks[f"label org.opencontainers.image.{name}"] = bool(labels.get(f"org.opencontainers.image.{name}"))
checks["label version = workspace version"] = labels.get("org.opencontainers.image.version") == version
bad = [k for k, ok in checks.items() if not ok]
if bad:
    fail("image config: " + ", ".join(bad))
with open(layers_out, "w") as out:
    for layer in manifest["layers"]:
        path, _ = blob(layer, ["application/vnd.oci.image.layer.v1.tar+gzip", "application/vnd.oci.image.layer.v1.tar"])
        print(path, file=out)
ref = mdesc.get("annotations", {}).get("org.opencontainers.image.ref.name", "(none)")
print(f"[image-check] OCI layout ok: 1 manifest ({ref}), {len(manifest['layers'])} layer(s), "
      f"user {cfg['User']}, entrypoint {cfg['Entrypoint']}, version label {labels['org.opencontainers.image.version']}")
EOF

# --- 2. root filesystem -------------------------------------------------------------------------------------
ROOTFS=$WORK/rootfs
mkdir -p "$ROOTFS"
while read -r layer; do
  tar -xf "$layer" -C "$ROOTFS" --no-same-owner --numeric-owner   # gzip is detected by tar
done <"$WORK/layers"
contents=$(cd "$ROOTFS" && find . -mindepth 1 | sort | tr '\n' ' ')
[[ $contents == "./cmset-controller " ]] || die "the root filesystem holds more than the binary: $contents"
BIN=$ROOTFS/cmset-controller
[[ -x $BIN ]] || die "/cmset-controller is not executable"
if LC_ALL=C readelf -lW "$BIN" | grep -q INTERP; then die "/cmset-controller asks for a dynamic loader"; fi
say "root filesystem: /cmset-controller only (static: no program interpreter, no shared libraries)"

# --- 3. the entrypoint runs from the bare root filesystem --------------------------------------------------
out=$("${CLEAN_ENV[@]}" chroot --userspec=65532:65532 "$ROOTFS" /cmset-controller --version) \
  || die "chroot /cmset-controller --version failed"
[[ $out == "cmset-controller $VERSION" ]] || die "--version printed '$out', expected 'cmset-controller $VERSION'"
say "chroot (user 65532) /cmset-controller --version: $out"
help=$("${CLEAN_ENV[@]}" chroot --userspec=65532:65532 "$ROOTFS" /cmset-controller --help) \
  || die "chroot /cmset-controller --help failed"
grep -q -- '--metrics-address' <<<"$help" || die "--help does not list --metrics-address"
say "chroot (user 65532) /cmset-controller --help: $(wc -l <<<"$help") lines, lists every flag"

# --- 4. size budget ----------------------------------------------------------------------------------------
archive_bytes=$(stat -c %s "$ARCHIVE")
rootfs_bytes=$(du -sb "$ROOTFS" | cut -f1)
binary_bytes=$(stat -c %s "$BIN")
budget=$((MAX_MB * 1000000))
say "sizes: archive $(mb "$archive_bytes") (compressed), unpacked $(mb "$rootfs_bytes"), binary $(mb "$binary_bytes"); budget ${MAX_MB} MB"
((archive_bytes <= budget)) || die "the archive exceeds ${MAX_MB} MB"
((rootfs_bytes <= budget)) || die "the unpacked image exceeds ${MAX_MB} MB"

# --- 5. smoke run against the local control plane -----------------------------------------------------------
smoke_skip() {
  [[ $IMAGE_SMOKE == 1 ]] && die "smoke run required (IMAGE_SMOKE=1) but $1"
  say "smoke run skipped: $1"
  say "all checks passed"
  exit 0
}
[[ $IMAGE_SMOKE == 0 ]] && smoke_skip "IMAGE_SMOKE=0"
[[ -f $CLUSTER_DIR/ports.env && -f $CLUSTER_DIR/operator.token && -f $CLUSTER_DIR/certs/ca.crt ]] \
  || smoke_skip "no local control plane in $CLUSTER_DIR (make cluster-up)"
API_PORT=$(sed -n 's/^API_PORT=//p' "$CLUSTER_DIR/ports.env")
token=$(<"$CLUSTER_DIR/operator.token")
curl -sf --max-time 5 --cacert "$CLUSTER_DIR/certs/ca.crt" -H "Authorization: Bearer $token" \
  "https://127.0.0.1:$API_PORT/apis/cmset.dev/v1alpha1/configmapsets?limit=1" >/dev/null \
  || smoke_skip "the local control plane does not answer, or the operator's RBAC is not installed (make install)"

SMOKE=$WORK/smoke
cp -a "$ROOTFS" "$SMOKE"
SA=$SMOKE/var/run/secrets/kubernetes.io/serviceaccount      # what the kubelet mounts
mkdir -p "$SA"
printf '%s' "$token" >"$SA/token"
cp "$CLUSTER_DIR/certs/ca.crt" "$SA/ca.crt"
printf cmset-system >"$SA/namespace"
chmod 0644 "$SA"/*
before=$(cd "$SMOKE" && find . -printf '%p %s %T@\n' | sort)
metrics_port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')

# A private mount namespace where the root filesystem is a read-only bind mount, as readOnlyRootFilesystem.
"${CLEAN_ENV[@]}" KUBERNETES_SERVICE_HOST=127.0.0.1 KUBERNETES_SERVICE_PORT="$API_PORT" \
  POD_NAME=cmset-image-check POD_NAMESPACE=cmset-system \
  unshare --mount --propagation private -- bash -c '
    mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" && shift &&
    exec chroot --userspec=65532:65532 "$@"' _ "$SMOKE" "$SMOKE" /cmset-controller \
    --namespace cmset-image-check --leader-election=false --log-format=json \
    --metrics-address "127.0.0.1:$metrics_port" >"$WORK/smoke.log" 2>&1 &
SMOKE_PID=$!

ready=
for _ in $(seq 1 60); do
  if curl -sf --max-time 2 "http://127.0.0.1:$metrics_port/readyz" >/dev/null 2>&1; then ready=1; break; fi
  kill -0 "$SMOKE_PID" 2>/dev/null || break
  sleep 0.5
done
if [[ -z $ready ]]; then
  cat "$WORK/smoke.log" >&2
  die "smoke run: /readyz never answered 200"
fi
curl -sf --max-time 2 "http://127.0.0.1:$metrics_port/metrics" | grep -q '^cmset_' \
  || die "smoke run: /metrics has no cmset_ metrics"
kill -TERM "$SMOKE_PID"
for _ in $(seq 1 20); do kill -0 "$SMOKE_PID" 2>/dev/null || break; sleep 0.5; done
kill -0 "$SMOKE_PID" 2>/dev/null && die "smoke run: still running 10 s after SIGTERM"
rc=0
wait "$SMOKE_PID" || rc=$?
SMOKE_PID=
((rc == 0)) || { cat "$WORK/smoke.log" >&2; die "smoke run: exit code $rc after SIGTERM"; }
grep -q 'caches synced; ready' "$WORK/smoke.log" || die "smoke run: no 'caches synced; ready' in the log"
after=$(cd "$SMOKE" && find . -printf '%p %s %T@\n' | sort)
[[ $before == "$after" ]] || die "smoke run: the root filesystem changed: $(diff <(echo "$before") <(echo "$after") || true)"
say "smoke run: in-cluster config over TLS from a read-only root filesystem, caches synced, /readyz 200, /metrics, clean exit on SIGTERM; nothing written"
say "all checks passed"
