#!/usr/bin/env bash
# Runs the benchmark (make bench, make bench-smoke): against the cluster in KUBECONFIG when set, otherwise
# against the local control plane, which it starts or reuses. Arguments go to cmset-bench (--help).
#
# CMSET_BENCH_OPERATOR_BIN names the operator to measure; when unset, the working tree's is built
# and measured. CMSET_BENCH_PROFILE (release) is the cargo profile of both builds: bench-smoke uses
# dev, which `make test` has built already, because it checks that every figure is produced, not speed.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
cluster_dir=${CMSET_CLUSTER_DIR:-$root/.cluster}

# Empty settings from make mean "not set".
profile=${CMSET_BENCH_PROFILE:-release}
profile_dir=$([[ $profile == dev ]] && echo debug || echo "$profile")
for v in CMSET_BENCH_OPERATOR_BIN CMSET_BENCH_BASELINE CMSET_BENCH_PUBLISH CMSET_BENCH_OPERATOR_KUBECONFIG; do
  [[ -n ${!v:-} ]] || unset "$v"
done

if [[ -z ${KUBECONFIG:-} ]]; then
  CMSET_CLUSTER_DIR=$cluster_dir bash e2e/cluster/cluster.sh up >/dev/null
  export KUBECONFIG=$cluster_dir/kubeconfig
fi

args=()
if [[ $KUBECONFIG -ef $cluster_dir/kubeconfig ]]; then
  # The local control plane: the operator runs under its own identity (the shipped RBAC), and the
  # control plane's CPU per change is reported too.
  export CMSET_BENCH_OPERATOR_KUBECONFIG=${CMSET_BENCH_OPERATOR_KUBECONFIG:-$cluster_dir/operator.kubeconfig}
  for c in kube-apiserver etcd kube-controller-manager; do
    pid=$(cat "$cluster_dir/pids/$c.pid" 2>/dev/null || true)
    [[ -n $pid && -d /proc/$pid ]] && args+=(--pid "$c=$pid")
  done
fi

echo "bench: installing the CRD and RBAC" >&2
make -s install >/dev/null
if [[ -z ${CMSET_BENCH_OPERATOR_BIN:-} ]]; then
  echo "bench: building the operator ($profile)" >&2
  cargo build --profile "$profile" --locked -q -p cmset-controller
  export CMSET_BENCH_OPERATOR_BIN=$root/target/$profile_dir/cmset-controller
fi
echo "bench: building the bench ($profile)" >&2
cargo build --profile "$profile" --locked -q -p cmset-bench
exec "$root/target/$profile_dir/cmset-bench" "${args[@]}" "$@"
