#!/usr/bin/env bash
# Runs the end-to-end suite: against the cluster in E2E_KUBECONFIG when set (any cluster, e.g. kind),
# otherwise against the local control plane, which it starts or reuses.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

if [[ -n "${E2E_KUBECONFIG:-}" ]]; then
  export KUBECONFIG=$E2E_KUBECONFIG
  operator_kubeconfig=${E2E_OPERATOR_KUBECONFIG:-$E2E_KUBECONFIG}
else
  CMSET_CLUSTER_DIR=${CMSET_CLUSTER_DIR:-$root/.cluster} bash e2e/cluster/cluster.sh up
  export KUBECONFIG=${CMSET_CLUSTER_DIR:-$root/.cluster}/kubeconfig
  operator_kubeconfig=${CMSET_CLUSTER_DIR:-$root/.cluster}/operator.kubeconfig
fi

echo "e2e: building the operator"
cargo build --locked -q -p cmset-controller -p kubectl-cmset
echo "e2e: installing the CRD and RBAC"
make -s install >/dev/null
# Each test operator registers its own webhook (see e2e/src/webhook.rs); test-only rights for that.
kubectl apply -f e2e/rbac.yaml >/dev/null

# Where cargo built it: a worktree may share another checkout's target directory.
target=${CARGO_TARGET_DIR:-$root/target}
export CMSET_CONTROLLER_BIN=$target/debug/cmset-controller
# The plugin too: with a separate build directory the tests do not run from beside it.
export CMSET_PLUGIN_BIN=${CMSET_PLUGIN_BIN:-$target/debug/kubectl-cmset}
export CMSET_OPERATOR_KUBECONFIG=$operator_kubeconfig
# Helm for e2e/tests/helm.rs (installed once into target/tools/ by `make helm`).
CMSET_HELM_BIN=$(bash config/helm/install-helm.sh)
export CMSET_HELM_BIN
export CMSET_E2E_LOGS=$target/e2e-logs
mkdir -p "$CMSET_E2E_LOGS"
echo "e2e: running the suite (operator logs in $CMSET_E2E_LOGS)"
# E2E_TESTS="analysis steer" runs those test files only; arguments after it filter tests by name and
# go to the test harness (`--ignored` runs the heavy tests left out by default).
files=()
for file in ${E2E_TESTS:-}; do files+=(--test "$file"); done
cargo test --locked --no-fail-fast -p cmset-e2e "${files[@]}" -- --test-threads="${E2E_THREADS:-3}" "$@"
