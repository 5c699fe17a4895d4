#!/bin/bash
# Live heap of one replica (built with `--features dhat-heap`; no leader election, no webhook) at N
# sets + N opted-in Deployments in a fresh namespace per N, written by SIGUSR2 once every set names
# its revision, every Deployment reads it and kube-controller-manager has observed each.
# Run from the checkout, the local control plane up with cmset's CRDs installed (as `make bench` leaves
# it): bash heap-live.sh <binary> <label> 100 1000; then
# python3 dhat_groups.py target/dhat-live/<label>/dhat-100.json 100 target/dhat-live/<label>/dhat-1000.json 1000
set -u
bin=$1; label=$2; shift 2
export KUBECONFIG=${CMSET_CLUSTER_DIR:-.cluster}/kubeconfig
out=$PWD/target/dhat-live/$label; mkdir -p $out
for n in "$@"; do
  ns=dhat-$label-$n
  kubectl create namespace $ns >/dev/null
  python3 - $n > $out/objects-$n.yaml <<'PY'
import sys, json
n = int(sys.argv[1])
docs = []
for i in range(n):
    s = f"s-{i:05}"; d = f"d-{i:05}"
    docs.append({"apiVersion": "cmset.dev/v1alpha1", "kind": "ConfigMapSet", "metadata": {"name": s},
                 "spec": {"template": {"data": {"v": "0"}}}})
    docs.append({"apiVersion": "apps/v1", "kind": "Deployment",
                 "metadata": {"name": d, "labels": {"cmset.dev/enabled": "true"}},
                 "spec": {"replicas": 0, "selector": {"matchLabels": {"app": d}},
                          "template": {"metadata": {"labels": {"app": d}},
                                       "spec": {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.9",
                                                                "envFrom": [{"configMapRef": {"name": s, "optional": False}}]}]}}}})
print(json.dumps({"apiVersion": "v1", "kind": "List", "items": docs}))
PY
  kubectl -n $ns create -f $out/objects-$n.yaml >/dev/null
  (cd $out && exec $bin --namespace $ns --leader-election=false --metrics-address 127.0.0.1:18080 > $out/operator-$n.log 2>&1) &
  pid=$(pgrep -n -f "cmset.*--namespace $ns")
  start=$(date +%s)
  while :; do
    sleep 10
    done_sets=$(kubectl -n $ns get cmset -o json | python3 -c 'import sys,json; print(sum(1 for i in json.load(sys.stdin)["items"] if (i.get("status") or {}).get("currentRevision")))')
    moved=$(kubectl -n $ns get deploy -o json | python3 -c 'import sys,json; print(sum(1 for i in json.load(sys.stdin)["items"] if i["spec"]["template"]["spec"]["containers"][0]["envFrom"][0]["configMapRef"]["name"]!=i["metadata"]["name"].replace("d-","s-")))')
    rs=$(kubectl -n $ns get rs --no-headers 2>/dev/null | wc -l)
    observed=$(kubectl -n $ns get deploy -o json | python3 -c 'import sys,json; print(sum(1 for i in json.load(sys.stdin)["items"] if (i.get("status") or {}).get("observedGeneration")==i["metadata"]["generation"]))')
    echo "$(date +%T) n=$n sets=$done_sets moved=$moved rs=$rs observed=$observed" >> $out/progress.log
    if [ "$done_sets" -ge "$n" ] && [ "$moved" -ge "$n" ] && [ "$observed" -ge "$n" ]; then break; fi
    if [ $(( $(date +%s) - start )) -gt 1500 ]; then echo "timeout" >> $out/progress.log; break; fi
  done
  sleep 30
  kill -USR2 $pid; sleep 20
  while ! ls $out/dhat-heap-$pid.json >/dev/null 2>&1; do sleep 5; done
  sleep 10
  kill $pid; wait $pid 2>/dev/null
  mv $out/dhat-heap-$pid.json $out/dhat-$n.json
  kubectl delete namespace $ns --wait=false >/dev/null
  echo "$(date +%T) n=$n written" >> $out/progress.log
done
