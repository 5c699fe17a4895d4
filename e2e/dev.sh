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
# The admission webhook, registered at this machine's loopback (config/dev); the operator keeps its
# certificate in the Secret cmset-webhook-tls and the CA in the registration, as in a cluster.
kubectl apply -k config/dev

cat <<TXT

cmset is starting (Ctrl-C stops it); the sample follows once its webhook answers. In another terminal:

  export KUBECONFIG=${KUBECONFIG:-$HOME/.kube/config}
  kubectl -n cmset-demo get cmset                       # REVISION, CONFIGMAP, READY
  kubectl -n cmset-demo get deploy web -o jsonpath='{.spec.template.spec.volumes[0].configMap.name}{"\n"}'
  kubectl -n cmset-demo patch cmset app-config --type merge -p '{"spec":{"template":{"data":{"APP_VERSION":"2"}}}}'
  kubectl -n cmset-demo rollout history deployment/web  # one rollout per config change
  kubectl -n cmset-demo rollout undo deployment/web     # old pods, old config; cmset marks it pinned
  kubectl -n cmset-demo get cmset app-config -o yaml    # status: workloads, history

TXT
target/debug/cmset-controller --metrics-address "${METRICS_ADDRESS:-127.0.0.1:8080}" \
  --webhook-address 127.0.0.1:9443 --webhook-cert-secret cmset-webhook-tls &
operator=$!
trap 'kill -TERM "$operator" 2>/dev/null; wait "$operator"' INT TERM

# The sample goes in once the webhook can be called (its CA trusted, serving), so that its Deployment is
# stored already naming the set's first revision: one revision in its rollout history, not two.
for _ in $(seq 1 120); do
  bundle=$(kubectl get mutatingwebhookconfiguration cmset -o jsonpath='{.webhooks[0].clientConfig.caBundle}' 2>/dev/null || true)
  code=$(curl -sk -o /dev/null -w '%{http_code}' -m 2 -X POST https://127.0.0.1:9443/mutate || true)
  [[ -n "$bundle" && "$code" != "000" ]] && break
  kill -0 "$operator" 2>/dev/null || { echo "dev: the operator exited" >&2; exit 1; }
  sleep 0.5
done
kubectl apply -k config/samples
wait "$operator"
