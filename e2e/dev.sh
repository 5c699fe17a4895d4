#!/usr/bin/env bash
# `make dev`: the newcomer's first command. Uses the cluster in KUBECONFIG (or ~/.kube/config); with none
# configured, starts the local control plane. Then installs cmset, applies a sample, runs the operator.
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ -z "${KUBECONFIG:-}" && ! -f "$HOME/.kube/config" ]]; then
  echo "dev: no cluster configured; starting the local control plane (the first time builds it: ~5 min)"
  bash e2e/cluster/cluster.sh up
  export KUBECONFIG=$PWD/.cluster/kubeconfig
fi
echo "dev: using the cluster in ${KUBECONFIG:-$HOME/.kube/config}"

cargo build --locked -q -p cmset-controller
make -s install
kubectl apply -k config/samples

cat <<TXT

cmset is starting in the foreground (Ctrl-C stops it). In another terminal:

  export KUBECONFIG=${KUBECONFIG:-$HOME/.kube/config}
  kubectl -n cmset-demo get cmset                       # REVISION, CONFIGMAP, READY
  kubectl -n cmset-demo get deploy web -o jsonpath='{.spec.template.spec.volumes[0].configMap.name}{"\n"}'
  kubectl -n cmset-demo patch cmset app-config --type merge -p '{"spec":{"template":{"data":{"APP_VERSION":"2"}}}}'
  kubectl -n cmset-demo rollout history deployment/web  # one rollout per config change
  kubectl -n cmset-demo rollout undo deployment/web     # old pods, old config; cmset marks it pinned
  kubectl -n cmset-demo get cmset app-config -o yaml    # status: workloads, history

TXT
exec target/debug/cmset-controller --metrics-address "${METRICS_ADDRESS:-127.0.0.1:8080}"
