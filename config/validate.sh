#!/usr/bin/env bash
# `make manifests-check`: builds every kustomization under config/ and validates every object offline, with
# no cluster: built-in kinds against the Kubernetes 1.33 schemas of kubernetes-validate (strict: unknown
# fields are errors), ConfigMapSets against the schema of our own CRD, plus cmset's own consistency rules
# (see config/validate.py).
#
# kubernetes-validate is installed, pinned, into a virtualenv under ~/.cache/cmset/venv, only when missing.
# Usage: config/validate.sh [EXTRA_KUSTOMIZATION | NAME=FILE ...]   (built and validated too; NAME=FILE: a file
# already rendered, e.g. by helm template, validated under NAME)
# Environment: CMSET_VENV (venv path), K8S_VERSION (schema version, default 1.33.0).
set -euo pipefail

cd "$(dirname "$0")/.."

KV_VERSION=1.37.0                       # kubernetes-validate on PyPI; carries schemas up to Kubernetes 1.37
K8S_VERSION=${K8S_VERSION:-1.33.0}
VENV=${CMSET_VENV:-$HOME/.cache/cmset/venv}

# The kustomizations a user may apply (config/manager, config/webhook (a component) and crds are
# included through config/default).
KUSTOMIZATIONS=(
  config/default
  config/cert-manager
  config/dev
  config/namespaced
  config/namespaced/cluster-admin
  config/no-secrets
  config/rbac
  config/samples
  config/samples/jobs
  config/samples/rollout
  "$@"
)

if [[ "$("$VENV/bin/kubernetes-validate" --version 2>/dev/null || true)" != "$KV_VERSION" ]]; then
  echo "[manifests] installing kubernetes-validate==$KV_VERSION into $VENV"
  mkdir -p "$(dirname "$VENV")"
  [[ -x "$VENV/bin/python" ]] || python3 -m venv "$VENV"
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "kubernetes-validate==$KV_VERSION"
fi

if ! command -v kubectl >/dev/null 2>&1; then
  echo "[manifests] kubectl is needed (for 'kubectl kustomize')" >&2
  exit 1
fi

BUILD=$(mktemp -d)
trap 'rm -rf "$BUILD"' EXIT

args=()
for k in "${KUSTOMIZATIONS[@]}"; do
  if [[ $k == *=* ]]; then
    args+=("$k")
    continue
  fi
  out="$BUILD/${k//\//_}.yaml"
  if ! kubectl kustomize "$k" >"$out" 2>"$out.err"; then
    echo "[manifests] FAIL kubectl kustomize $k:" >&2
    cat "$out.err" >&2
    exit 1
  fi
  args+=("$k=$out")
done

# An overlay that only sets `images:` must change the operator's image: users override it that way.
mkdir -p "$BUILD/overlay"
# (kustomize wants a relative path to a base)
cat >"$BUILD/overlay/kustomization.yaml" <<EOF
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - $(realpath --relative-to="$BUILD/overlay" config/default)
images:
  - name: ghcr.io/cmset/cmset-controller
    newName: registry.example.com/cmset-controller
    newTag: override-check
EOF
kubectl kustomize "$BUILD/overlay" >"$BUILD/overlay.yaml"

exec "$VENV/bin/python" config/validate.py \
  --kubernetes-version "$K8S_VERSION" \
  --image-override "$BUILD/overlay.yaml=registry.example.com/cmset-controller:override-check" \
  "${args[@]}"
