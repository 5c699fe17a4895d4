#!/usr/bin/env bash
# `make helm-check`: the chart config/helm/cmset, offline.
#   1. helm lint --strict, with the defaults and with each ci/*-values.yaml;
#   2. config/ (every kustomize tree), the chart's copies of its inputs and the golden files
#      tests/golden/<variant>.yaml are what the chart renders (config/helm/render.py --check);
#   3. README.md is what values.yaml documents (config/helm/readme.py --check);
#   4. values.schema.json refuses a misspelt key, naming it, and accepts `global` and `enabled`; combinations
#      that cannot work are refused with a message;
#   5. each golden file is valid against the Kubernetes schemas, the CRDs' and the Prometheus Operator's, strict
#      (config/validate.sh, as `make manifests-check` validates config/);
#   6. what the server's version decides (--kube-version): matchConditions, CEL rules, the PDB's API version.
set -euo pipefail
cd "$(dirname "$0")/../.."
helm=$(bash config/helm/install-helm.sh)
chart=config/helm/cmset
start=$SECONDS

echo "[helm] 1. lint --strict"
"$helm" lint --strict --quiet "$chart" >/dev/null
for values in "$chart"/ci/*-values.yaml; do
  "$helm" lint --strict --quiet "$chart" -f "$values" >/dev/null || { echo "[helm] lint failed with $values"; exit 1; }
done
echo "  ok    the defaults and $(ls "$chart"/ci/*-values.yaml | wc -l) values files"

echo "[helm] 2. config/, the chart's inputs and its golden files are rendered from the chart"
python3 config/helm/render.py "$helm" --check

# The check itself, on a copy: a rendered file edited by hand, or the chart edited without rendering
# again, must each fail it.
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
drifts() { # what-was-edited
  if python3 "$scratch/config/helm/render.py" "$helm" --check >/dev/null 2>&1; then
    echo "[helm] the drift check passed although $1"; exit 1
  fi
}
fresh_copy() { rm -rf "${scratch:?}"/*; cp -r config crds "$scratch"/; }
fresh_copy
sed -i 's/^rules:/rules: # edited by hand/' "$scratch/config/rbac/cluster_role.yaml"
drifts "config/rbac/cluster_role.yaml was edited by hand"
fresh_copy
sed -i '0,/^spec:/s//spec: # edited without make manifests/' "$scratch/config/helm/cmset/templates/deployment.yaml"
drifts "the chart's Deployment template changed and nothing was rendered again"
echo "  ok    self-test: an edit of config/ alone, or of the chart alone, fails the check"

echo "[helm] 3. README.md"
python3 config/helm/readme.py --check
echo "  ok    README.md documents every value of values.yaml"

echo "[helm] 4. values.schema.json"
refused() { # expected-message helm-args...
  local want=$1 out
  shift
  if out=$("$helm" template cmset "$chart" "$@" 2>&1); then
    echo "[helm] accepted: $*"; exit 1
  fi
  grep -qF -- "$want" <<<"$out" || { echo "[helm] '$*' refused without naming '$want':"; echo "$out"; exit 1; }
}
refused "additional properties 'replicaCout' not allowed" --set replicaCout=3
refused "additional properties 'certManagr' not allowed" --set webhook.certManagr.enabled=true
refused "replicaCount" --set-string replicaCount=two
refused "secretSets.enabled=false promises the operator no access to Secrets" --set secretSets.enabled=false
refused "watchNamespaces: a webhook configuration is cluster-wide" --set 'watchNamespaces={team-a}'
"$helm" template cmset "$chart" --set global.imageRegistry=example.com --set enabled=true >/dev/null
echo "  ok    misspelt keys refused by name; global and enabled accepted; impossible combinations refused"

echo "[helm] 5. golden files validated offline"
args=()
for golden in "$chart"/tests/golden/*.yaml; do
  args+=("helm/$(basename "$golden" .yaml)=$golden")
done
bash config/validate.sh e2e/monitoring/prometheus-operator-crds "${args[@]}" | grep -E '^(  FAIL|  - |\[manifests\] [0-9]+ objects|manifests-check)'

echo "[helm] 6. what the server's version decides"
at() { "$helm" template cmset "$chart" --kube-version "$1"; }
has() { # kube-version what pattern
  grep -qE -- "$3" <<<"$(at "$1")" || { echo "[helm] at Kubernetes $1 the chart renders no $2"; exit 1; }
}
lacks() { # kube-version what pattern
  if grep -qE -- "$3" <<<"$(at "$1")"; then echo "[helm] at Kubernetes $1 the chart renders $2"; exit 1; fi
}
lacks 1.27.0 "matchConditions (served from 1.28)" '^ +matchConditions:'
has 1.28.0 "matchConditions for /validate-set" 'name: declares-validation-or-windows'
has 1.20.2 "PodDisruptionBudget of policy/v1beta1" '^apiVersion: policy/v1beta1'
lacks 1.20.2 "a CEL rule (served from 1.25)" 'x-kubernetes-validations'
has 1.25.0 "CEL rules" 'x-kubernetes-validations'
echo "  ok    matchConditions from 1.28, CEL from 1.25, policy/v1 from 1.21"
echo "helm-check: all passed in $((SECONDS - start)) s"
