#!/usr/bin/env bash
# Runs the benchmark (make bench, make bench-smoke). Arguments go to cmset-bench (--help).
#
# Which cluster:
#   - KUBECONFIG set: that cluster, never started or restarted from here. When it is a local control
#     plane (CMSET_CLUSTER_DIR, or the directory of KUBECONFIG, holds operator.kubeconfig), the operator
#     runs under that identity (the shipped RBAC) and the control plane's CPU per change is reported.
#   - CMSET_CLUSTER_DIR set (e.g. a shared /work/main/.cluster) and its kubeconfig present: that local
#     control plane, used as it is (not started or restarted from here).
#   - neither: the local control plane in <repo>/.cluster, started or reused like `make e2e` does.
#
# CMSET_BENCH_OPERATOR_BIN names the operator to measure; when unset, the working tree's is built
# and measured. CMSET_BENCH_PROFILE (release) is the cargo profile of both builds: bench-smoke uses
# dev, which `make test` has built already, because it checks that every figure is produced, not speed.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD

# Empty settings from make mean "not set".
profile=${CMSET_BENCH_PROFILE:-release}
profile_dir=$([[ $profile == dev ]] && echo debug || echo "$profile")
for v in CMSET_BENCH_OPERATOR_BIN CMSET_BENCH_BASELINE CMSET_BENCH_PUBLISH CMSET_BENCH_OPERATOR_KUBECONFIG \
  CMSET_CLUSTER_DIR KUBECONFIG; do
  [[ -n ${!v:-} ]] || unset "$v"
done

if [[ -n ${KUBECONFIG:-} ]]; then
  cluster_dir=${CMSET_CLUSTER_DIR:-$(dirname "$KUBECONFIG")}
elif [[ -n ${CMSET_CLUSTER_DIR:-} && -f $CMSET_CLUSTER_DIR/kubeconfig ]]; then
  cluster_dir=$CMSET_CLUSTER_DIR
  export KUBECONFIG=$cluster_dir/kubeconfig
else
  cluster_dir=${CMSET_CLUSTER_DIR:-$root/.cluster}
  CMSET_CLUSTER_DIR=$cluster_dir bash e2e/cluster/cluster.sh up >/dev/null
  export KUBECONFIG=$cluster_dir/kubeconfig
fi

args=()
if [[ -f $cluster_dir/operator.kubeconfig && -f $cluster_dir/kubeconfig && $KUBECONFIG -ef $cluster_dir/kubeconfig ]]; then
  # A local control plane: the operator runs under its own identity (the shipped RBAC), and the
  # control plane's CPU per change is reported too.
  export CMSET_BENCH_OPERATOR_KUBECONFIG=${CMSET_BENCH_OPERATOR_KUBECONFIG:-$cluster_dir/operator.kubeconfig}
  for c in kube-apiserver etcd kube-controller-manager; do
    pid=$(cat "$cluster_dir/pids/$c.pid" 2>/dev/null || true)
    [[ -n $pid && -d /proc/$pid ]] && args+=(--pid "$c=$pid")
  done
  # Whose LISTs each window saw: the control plane logs every LIST (e2e/cluster/cluster.sh).
  [[ -f $cluster_dir/logs/audit.log ]] && args+=(--audit-log "$cluster_dir/logs/audit.log")
fi
echo "bench: using the cluster in $KUBECONFIG" >&2

echo "bench: installing the CRD and RBAC" >&2
make -s install >/dev/null
# Bench-only rights, as the e2e suite has them (never part of an install): every configuration
# registers its own webhook (cmset-bench-<namespace>), whose caBundle its replicas keep.
kubectl apply -f e2e/rbac.yaml >/dev/null
if [[ -z ${CMSET_BENCH_OPERATOR_BIN:-} ]]; then
  echo "bench: building the operator ($profile)" >&2
  cargo build --profile "$profile" --locked -q -p cmset-controller
  export CMSET_BENCH_OPERATOR_BIN=$root/target/$profile_dir/cmset-controller
  export CMSET_BENCH_OPERATOR_SOURCE="built from this tree"
fi
echo "bench: building the bench ($profile)" >&2
cargo build --profile "$profile" --locked -q -p cmset-bench
exec "$root/target/$profile_dir/cmset-bench" "${args[@]}" "$@"
