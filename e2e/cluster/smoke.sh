#!/usr/bin/env bash
# Smoke test of the local e2e cluster (e2e/cluster/cluster.sh up), with kubectl only:
#   Deployment, StatefulSet (OrderedReady) and DaemonSet: create, become available, template update, rollout undo;
#   a CRD (apiextensions.k8s.io/v1, status subresource, printer columns) and custom resources (reflect2 fix);
#   the operator token's identity: RBAC bindings to ServiceAccount cmset-system/cmset-controller (and its group)
#   apply to it.
# Works in its own namespace, removes it (and the CRD) at the end, exits non-zero on the first failure.
#
#   KUBECONFIG           cluster to test (default: <state>/kubeconfig written by cluster.sh up)
#   OPERATOR_KUBECONFIG  operator identity (default with the local cluster: <state>/operator.kubeconfig;
#                        the operator checks are skipped without one)
#   SMOKE_TIMEOUT        per-rollout timeout (default 120s)
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$SCRIPT_DIR/../.." && pwd)
STATE=${CMSET_CLUSTER_DIR:-$REPO_ROOT/.cluster}
export KUBECONFIG=${KUBECONFIG:-$STATE/kubeconfig}
if [[ -z ${OPERATOR_KUBECONFIG:-} && $(realpath -m "$KUBECONFIG") == "$(realpath -m "$STATE/kubeconfig")" ]]; then
  OPERATOR_KUBECONFIG=$STATE/operator.kubeconfig   # the local cluster's operator identity
fi
OPERATOR_KUBECONFIG=${OPERATOR_KUBECONFIG:-}
OPERATOR_USER=system:serviceaccount:cmset-system:cmset-controller
TIMEOUT=${SMOKE_TIMEOUT:-120s}
RUN_ID=$(date +%s)-$$
NS=cmset-smoke-$RUN_ID
CRD_GROUP=s${RUN_ID//-/x}.smoke.cmset.io
CRD_NAME=widgets.$CRD_GROUP

k() { kubectl --request-timeout=30s -n "$NS" "$@"; }
step() { printf '\n== %s\n' "$*" >&2; }
fail() { printf 'SMOKE FAILED: %s\n' "$*" >&2; exit 1; }

# expect DESCRIPTION EXPECTED COMMAND...: polls COMMAND's output until it equals EXPECTED (30 s at most).
expect() {
  local what=$1 want=$2 got=; shift 2
  for _ in $(seq 60); do
    got=$("$@" 2>&1) || true
    [[ $got == "$want" ]] && { echo "ok: $what = $want" >&2; return 0; }
    sleep 0.5
  done
  fail "$what: expected '$want', got '$got'"
}

cleanup() {
  local rc=$?
  set +e
  if [[ $rc -ne 0 ]]; then
    step "diagnostics"
    k get all,controllerrevisions -o wide
    k get events --sort-by=.lastTimestamp | tail -n 30
  fi
  step "cleanup"
  kubectl --request-timeout=30s delete crd "$CRD_NAME" --ignore-not-found --wait=true --timeout=60s
  kubectl --request-timeout=30s delete namespace "$NS" --ignore-not-found --wait=true --timeout=120s
  exit $rc
}

[[ -f $KUBECONFIG ]] || fail "no kubeconfig at $KUBECONFIG (run e2e/cluster/cluster.sh up first)"
kubectl get --raw /readyz >/dev/null || fail "API server not ready"
trap cleanup EXIT

step "namespace $NS"
kubectl create namespace "$NS"
# Pods are rejected until the namespace's default ServiceAccount exists (and, on v1.20, has its token secret).
expect "ServiceAccount default" default k get serviceaccount default -o 'jsonpath={.metadata.name}'
for _ in $(seq 40); do
  [[ -n $(k get serviceaccount default -o 'jsonpath={.secrets[0].name}' 2>/dev/null) ]] && break
  sleep 0.5
done

# ---------------------------------------------------------------------------------------------------- Deployment --
step "Deployment: create, available, update, undo"
k apply -f - <<'EOF'
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replicas: 2
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: nginx
        image: nginx:1.25
EOF
k rollout status deployment/web --timeout="$TIMEOUT"
expect "deployment available replicas" 2 k get deployment web -o 'jsonpath={.status.availableReplicas}'

k set image deployment/web nginx=nginx:1.26
k rollout status deployment/web --timeout="$TIMEOUT"
rs_images() {
  k get replicasets -l app=web \
    -o 'jsonpath={range .items[*]}{.spec.template.spec.containers[0].image}={.status.replicas} {end}' \
    | tr ' ' '\n' | grep . | sort | tr '\n' ' '
}
expect "replica sets after update (old scaled to 0)" "nginx:1.25=0 nginx:1.26=2 " rs_images

k rollout undo deployment/web
k rollout status deployment/web --timeout="$TIMEOUT"
expect "deployment image after undo" nginx:1.25 k get deployment web -o 'jsonpath={.spec.template.spec.containers[0].image}'
expect "replica sets after undo" "nginx:1.25=2 nginx:1.26=0 " rs_images
expect "deployment available replicas" 2 k get deployment web -o 'jsonpath={.status.availableReplicas}'
k rollout history deployment/web

# --------------------------------------------------------------------------------------------------- StatefulSet --
step "StatefulSet (OrderedReady): create, ready, update, undo"
k apply -f - <<'EOF'
apiVersion: v1
kind: Service
metadata:
  name: db
spec:
  clusterIP: None
  selector: {app: db}
  ports:
  - port: 5432
---
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: db
spec:
  serviceName: db
  replicas: 3
  podManagementPolicy: OrderedReady
  updateStrategy:
    type: RollingUpdate
  selector:
    matchLabels: {app: db}
  template:
    metadata:
      labels: {app: db}
    spec:
      containers:
      - name: db
        image: postgres:15
EOF
k rollout status statefulset/db --timeout="$TIMEOUT"
expect "statefulset ready replicas" 3 k get statefulset db -o 'jsonpath={.status.readyReplicas}'
pod_images() { k get pods -l "app=$1" -o 'jsonpath={range .items[*]}{.metadata.name}={.spec.containers[0].image} {end}'; }

k set image statefulset/db db=postgres:16
k rollout status statefulset/db --timeout="$TIMEOUT"
expect "statefulset pods after update" "db-0=postgres:16 db-1=postgres:16 db-2=postgres:16 " pod_images db

k rollout undo statefulset/db
k rollout status statefulset/db --timeout="$TIMEOUT"
expect "statefulset image after undo" postgres:15 k get statefulset db -o 'jsonpath={.spec.template.spec.containers[0].image}'
expect "statefulset pods after undo" "db-0=postgres:15 db-1=postgres:15 db-2=postgres:15 " pod_images db

# ----------------------------------------------------------------------------------------------------- DaemonSet --
step "DaemonSet: create, available, update, undo"
k apply -f - <<'EOF'
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: agent
spec:
  selector:
    matchLabels: {app: agent}
  template:
    metadata:
      labels: {app: agent}
    spec:
      containers:
      - name: agent
        image: busybox:1.36
EOF
k rollout status daemonset/agent --timeout="$TIMEOUT"
nodes=$(k get daemonset agent -o 'jsonpath={.status.desiredNumberScheduled}')
[[ ${nodes:-0} -ge 1 ]] || fail "daemonset agent schedules no pod (desiredNumberScheduled=${nodes:-})"
expect "daemonset available pods (one per node)" "$nodes" k get daemonset agent -o 'jsonpath={.status.numberAvailable}'

k set image daemonset/agent agent=busybox:1.37
k rollout status daemonset/agent --timeout="$TIMEOUT"
expect "daemonset updated pods" "$nodes" k get daemonset agent -o 'jsonpath={.status.updatedNumberScheduled}'

k rollout undo daemonset/agent
k rollout status daemonset/agent --timeout="$TIMEOUT"
expect "daemonset image after undo" busybox:1.36 k get daemonset agent -o 'jsonpath={.spec.template.spec.containers[0].image}'
expect "daemonset available pods after undo" "$nodes" k get daemonset agent -o 'jsonpath={.status.numberAvailable}'

# ------------------------------------------------------------------------------------------ CRD, custom resources --
step "CRD with status subresource and custom resources"
kubectl apply -f - <<EOF
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: $CRD_NAME
spec:
  group: $CRD_GROUP
  scope: Namespaced
  names:
    kind: Widget
    listKind: WidgetList
    plural: widgets
    singular: widget
  versions:
  - name: v1alpha1
    served: true
    storage: true
    subresources:
      status: {}
    additionalPrinterColumns:
    - name: Size
      type: integer
      jsonPath: .spec.size
    - name: Phase
      type: string
      jsonPath: .status.phase
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            required: [size]
            properties:
              size:
                type: integer
                minimum: 1
              labels:
                type: object
                additionalProperties: {type: string}
          status:
            type: object
            properties:
              phase: {type: string}
EOF
kubectl wait --for=condition=Established "crd/$CRD_NAME" --timeout=60s
# Discovery can lag the Established condition by a moment.
expect "widgets served" served bash -c "kubectl -n '$NS' get widgets.$CRD_GROUP -o name >/dev/null && echo served"

watch_out=$(mktemp)
timeout 15 kubectl -n "$NS" get "widgets.$CRD_GROUP" --watch-only -o name >"$watch_out" 2>&1 &
watch_pid=$!
sleep 2
# A map-valued field: map iteration is where the unpatched reflect2 v1.0.1 crashed the API server.
k apply -f - <<EOF
apiVersion: $CRD_GROUP/v1alpha1
kind: Widget
metadata:
  name: w1
spec:
  size: 3
  labels: {a: "1", b: "2", c: "3"}
EOF
k get "widgets.$CRD_GROUP" w1
k get "widgets.$CRD_GROUP"
k patch "widgets.$CRD_GROUP" w1 --subresource=status --type=merge -p '{"status":{"phase":"Ready"}}'
expect "widget status.phase via the status subresource" Ready k get "widgets.$CRD_GROUP" w1 -o 'jsonpath={.status.phase}'
k patch "widgets.$CRD_GROUP" w1 --type=merge -p '{"spec":{"size":4},"status":{"phase":"Ignored"}}'
expect "widget after a main-resource patch (status ignored)" "4 Ready" \
  k get "widgets.$CRD_GROUP" w1 -o 'jsonpath={.spec.size} {.status.phase}'
if k create -f - 2>/dev/null <<EOF; then
apiVersion: $CRD_GROUP/v1alpha1
kind: Widget
metadata:
  name: invalid
spec:
  size: 0
EOF
  fail "a Widget with size 0 was accepted (schema minimum: 1)"
fi
echo "ok: schema validation rejects size 0" >&2
wait "$watch_pid" || true
grep -q "widget.$CRD_GROUP/w1" "$watch_out" || { cat "$watch_out" >&2; rm -f "$watch_out"; fail "watch on widgets saw nothing"; }
rm -f "$watch_out"
echo "ok: watch on widgets" >&2
kubectl get --raw /readyz >/dev/null || fail "API server no longer ready after serving custom resources"
echo "ok: API server still ready" >&2

# ------------------------------------------------------------------------------------------- operator identity --
if [[ -n $OPERATOR_KUBECONFIG && -f $OPERATOR_KUBECONFIG ]]; then
  # Uses this run's own CRD group, so RBAC the operator may already have on a shared cluster cannot interfere.
  step "operator identity ($OPERATOR_USER)"
  op() { kubectl --kubeconfig "$OPERATOR_KUBECONFIG" --request-timeout=30s -n "$NS" "$@"; }
  if out=$(op get "widgets.$CRD_GROUP" 2>&1); then
    fail "operator could list widgets before any RBAC was granted"
  fi
  grep -qF "$OPERATOR_USER" <<<"$out" || fail "unexpected denial for the operator: $out"
  echo "ok: operator is denied without RBAC, as $OPERATOR_USER" >&2
  k create role widget-reader --verb=get,list,watch --resource="widgets.$CRD_GROUP"
  k create rolebinding widget-reader --role=widget-reader --serviceaccount=cmset-system:cmset-controller
  k create role widget-patcher --verb=patch --resource="widgets.$CRD_GROUP"
  k create rolebinding widget-patcher --role=widget-patcher --group=system:serviceaccounts:cmset-system
  expect "operator lists widgets (RoleBinding to the ServiceAccount)" w1 \
    bash -c "kubectl --kubeconfig '$OPERATOR_KUBECONFIG' -n '$NS' get widgets.$CRD_GROUP -o 'jsonpath={.items[*].metadata.name}'"
  expect "operator may patch widgets (RoleBinding to its group)" yes op auth can-i patch "widgets.$CRD_GROUP"
  expect "operator may not delete widgets" no op auth can-i delete "widgets.$CRD_GROUP"
fi

step "SMOKE OK"
