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
threads=${E2E_THREADS:-3}
lanes=${E2E_LANES:-2}
if [[ $lanes -le 1 ]]; then
  cargo test --locked --no-fail-fast -p cmset-e2e "${files[@]}" -- --test-threads="$threads" "$@"
  exit
fi

# E2E_LANES (2) test files run at once, each with E2E_THREADS (3) tests at once: each test has its own
# namespace and operator, and most of the suite's time is spent waiting on controllers, so two files
# share the cluster as three tests of one file do. A file that changes what every namespace sees
# (cluster-scoped objects: change windows, analysis templates, the chart's webhooks and roles; the
# API server's own restarts) runs alone, after the others. Files are started longest first (the
# order below, from a run of the whole suite), so that the last ones to finish are short.
solo="analysis break_glass checks helm monitoring no_secrets plan refusals restarts status_after_hold
  window_judgement window_scope window_visibility windows"
solo=" ${solo//$'\n'/ } "
longest_first="notification_policy faults crash_points budget waves kinds admission notifications
  secret_sets rolling_restart leader_election concurrent_writers steer quiet crash bad_input"

cargo test --locked --no-run -q -p cmset-e2e "${files[@]}"
binaries=$(cargo test --locked --no-run --message-format=json -p cmset-e2e "${files[@]}" 2>/dev/null \
  | python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        kind = m["target"]["kind"][0]
        print(m["target"]["name"] if kind == "test" else "lib", m["executable"])
')
declare -A path
shared=() alone=()
for name in $longest_first; do
  grep -q "^$name " <<<"$binaries" && shared+=("$name")
done
while read -r name exe; do
  path[$name]=$exe
  if [[ $solo == *" $name "* ]]; then
    alone+=("$name")
  elif [[ " ${shared[*]} " != *" $name "* ]]; then
    shared+=("$name")
  fi
done <<<"$binaries"

results=$(mktemp -d)
trap 'rm -rf "$results"' EXIT
# Runs one test file as cargo would (from the package's folder); its output is shown when it ends.
run_one() {
  local name=$1 start=$SECONDS status=0
  shift
  (cd "$root/e2e" && "${path[$name]}" --test-threads="$threads" "$@") >"$results/$name.log" 2>&1 || status=$?
  local took=$((SECONDS - start))
  if [[ $status -eq 0 ]]; then
    echo "e2e: ok     $name (${took}s): $(grep -m1 '^test result' "$results/$name.log")"
  else
    echo "e2e: FAILED $name (${took}s)"
    cat "$results/$name.log"
    touch "$results/$name.failed"
  fi
}
echo "e2e: ${#shared[@]} files $lanes at a time, then ${#alone[@]} alone"
for lane in $(seq "$lanes"); do
  (
    while true; do
      i=$(flock "$results/lock" bash -c 'n=$(cat "$1/next" 2>/dev/null || echo 0); echo $((n + 1)) >"$1/next"; echo "$n"' _ "$results")
      [[ $i -lt ${#shared[@]} ]] || break
      run_one "${shared[$i]}" "$@"
    done
  ) &
done
wait
for name in "${alone[@]}"; do run_one "$name" "$@"; done
failed=()
for f in "$results"/*.failed; do
  if [[ -e $f ]]; then failed+=("$(basename "$f" .failed)"); fi
done
if [[ ${#failed[@]} -gt 0 ]]; then
  echo "e2e: FAILED: ${failed[*]}"
  exit 1
fi
echo "e2e: every test file passed"
