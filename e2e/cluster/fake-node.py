#!/usr/bin/env python3
"""Simulated Kubernetes node for the cmset e2e control plane (kwok-style; Python 3 standard library only).

There is no kubelet and no scheduler in the local cluster. This process plays both parts for one Node:

* registers the Node object and keeps its status Ready (capacity cpu 32, memory 256Gi, pods 1000), refreshing the
  Ready heartbeat every 20 s; it also removes the node.kubernetes.io/not-ready taint that the API server's
  TaintNodesByCondition admission adds on creation (the node lifecycle controller that would lift it is disabled);
* watches pods in all namespaces and
  - binds every pod without spec.nodeName to the node (a Binding, as the scheduler would),
  - marks pods on the node that are not Running+Ready as Running with Ready containers (status subresource),
  - deletes pods on the node that are being deleted (deletionTimestamp set) with gracePeriodSeconds=0, since no
    kubelet will ever confirm their termination.

The "bad config" switch, CMSET_FAKE_NODE_FAIL: a pod that reads a ConfigMap or Secret holding the key
CMSET_FAKE_NODE_FAIL (whatever its value) is never made ready; it is marked Running with its containers started but
not ready, and its ContainersReady and Ready conditions False with reason CMSET_FAKE_NODE_FAIL and a message naming
the object, as a pod whose readiness probe keeps failing would be. This is how the e2e tests make a configuration
revision "bad" (a Deployment reading it never completes its rollout). The key counts in a ConfigMap's `data` or
`binaryData` and in a Secret's `data` (where `stringData` ends up), and every way a pod can read the object counts,
in containers, initContainers and ephemeralContainers alike: env[].valueFrom.configMapKeyRef/secretKeyRef (whatever
key it names), envFrom[].configMapRef/secretRef, and volumes[].configMap/secret and
volumes[].projected.sources[].configMap/secret. A referenced object that does not exist (or that the node may not read)
does not hold the pod back. Only a pod about to be marked is checked, so a pod already Ready stays Ready whatever its config
becomes. The referenced objects are read with one GET each, only for pods that reference any; an immutable object
(every cmset revision is one) is remembered for a minute by name, so the pods of one revision cost one GET. Secret
values are never logged: only the object's name.

Check pods (cmset's `spec.checks`): a pod labelled cmset.dev/check-of is a check Job's pod, and is run to its end
instead of being kept Running: Succeeded, every container terminated with exit code 0; or, when it reads a ConfigMap or
Secret holding CMSET_FAKE_NODE_FAIL (the same rule as above), Failed, its first container terminated with exit code 1,
reason Error and a termination message naming the object (never a value), "CMSET_FAKE_NODE_FAIL: ConfigMap ns/name
holds key CMSET_FAKE_NODE_FAIL", which is what cmset reports of a failed check. Other containers end with exit code 0.

It relists and rewatches when a watch ends or expires, exits 0 on SIGTERM/SIGINT and exits 2 when the API server
has been unreachable for --give-up-after seconds.
"""

import argparse
import datetime
import hashlib
import http.client
import json
import logging
import os
import signal
import ssl
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

LOG = logging.getLogger("fake-node")

NOT_READY_TAINT_KEYS = {
    "node.kubernetes.io/not-ready",
    "node.kubernetes.io/unreachable",
    "node.cloudprovider.kubernetes.io/uninitialized",
}
POD_CONDITIONS = ("PodScheduled", "Initialized", "ContainersReady", "Ready")
# A ConfigMap or Secret holding this key makes the pods that read it never ready (see the module's doc).
FAIL_KEY = "CMSET_FAKE_NODE_FAIL"
# A pod with this label is a cmset check and runs to its end (see the module's doc).
CHECK_LABEL = "cmset.dev/check-of"
NEVER_READY = " (cmset fake node: never ready)"
# How long the verdict on an immutable ConfigMap/Secret is reused without reading it again. Its content cannot
# change; only deleting it and creating another under the same name could, hence the limit.
IMMUTABLE_CACHE_SECONDS = 60


def now_rfc3339():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class ApiError(Exception):
    def __init__(self, status, body):
        super().__init__("HTTP %s: %s" % (status, body))
        self.status = status
        self.body = body


class ApiUnreachable(Exception):
    pass


class Api:
    """A tiny Kubernetes API client: JSON over HTTPS with a bearer token."""

    def __init__(self, server, token, ca_file=None, insecure=False):
        self.server = server.rstrip("/")
        self.token = token
        if insecure:
            ctx = ssl.create_default_context()
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        else:
            ctx = ssl.create_default_context(cafile=ca_file)
        # No proxies: the API server is on loopback, whatever HTTPS_PROXY says.
        self.opener = urllib.request.build_opener(
            urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=ctx)
        )

    def _request(self, method, path, query=None, body=None, content_type="application/json"):
        url = self.server + path
        if query:
            url += "?" + urllib.parse.urlencode(query)
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(url, data=data, method=method)
        req.add_header("Authorization", "Bearer " + self.token)
        req.add_header("Accept", "application/json")
        req.add_header("User-Agent", "cmset-fake-node")
        if data is not None:
            req.add_header("Content-Type", content_type)
        return req

    def call(self, method, path, query=None, body=None, content_type="application/json", timeout=15):
        req = self._request(method, path, query, body, content_type)
        try:
            with self.opener.open(req, timeout=timeout) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as e:
            raw = e.read()
            try:
                payload = json.loads(raw)
            except ValueError:
                payload = raw.decode(errors="replace")
            raise ApiError(e.code, payload) from None
        except (urllib.error.URLError, OSError, http.client.HTTPException) as e:
            raise ApiUnreachable(str(e)) from None
        return json.loads(raw) if raw else None

    def stream(self, path, query, timeout):
        """Open a watch; returns the response to iterate line by line."""
        req = self._request("GET", path, query)
        try:
            return self.opener.open(req, timeout=timeout)
        except urllib.error.HTTPError as e:
            raise ApiError(e.code, e.read().decode(errors="replace")) from None
        except (urllib.error.URLError, OSError, http.client.HTTPException) as e:
            raise ApiUnreachable(str(e)) from None


class FakeNode:
    def __init__(self, api, name, give_up_after, heartbeat_interval, watch_timeout):
        self.api = api
        self.name = name
        self.give_up_after = give_up_after
        self.heartbeat_interval = heartbeat_interval
        self.watch_timeout = watch_timeout
        self.last_contact = time.monotonic()
        self.ready_since = now_rfc3339()
        self.deleting = {}  # pod uid -> monotonic time of our last force delete
        # (kind, namespace, name) of an immutable ConfigMap/Secret -> (monotonic expiry, holds FAIL_KEY)
        self.immutable_verdicts = {}
        self.ip = "10.244.0.1"

    # ----------------------------------------------------------------------------------------------------- contact --

    def contact_ok(self):
        self.last_contact = time.monotonic()

    def check_give_up(self, err):
        gone_for = time.monotonic() - self.last_contact
        if gone_for > self.give_up_after:
            LOG.error("API server unreachable for %.0f s (%s): exiting", gone_for, err)
            # os._exit: also ends the process when called from the heartbeat thread.
            logging.shutdown()
            os._exit(2)

    def call(self, *args, retries=3, **kwargs):
        """API call with a few quick retries on connection errors and 5xx/429 answers."""
        delay = 0.3
        for attempt in range(retries):
            try:
                result = self.api.call(*args, **kwargs)
                self.contact_ok()
                return result
            except ApiUnreachable as e:
                self.check_give_up(e)
                if attempt == retries - 1:
                    raise
            except ApiError as e:
                self.contact_ok()
                if (e.status < 500 and e.status != 429) or attempt == retries - 1:
                    raise
            time.sleep(delay)
            delay *= 2
        raise AssertionError("unreachable")

    # -------------------------------------------------------------------------------------------------------- node --

    def node_status(self):
        ts = now_rfc3339()

        def cond(ctype, status, reason, message):
            return {
                "type": ctype,
                "status": status,
                "reason": reason,
                "message": message,
                "lastHeartbeatTime": ts,
                "lastTransitionTime": self.ready_since,
            }

        resources = {"cpu": "32", "memory": "256Gi", "pods": "1000", "ephemeral-storage": "1Ti"}
        return {
            "capacity": resources,
            "allocatable": resources,
            "conditions": [
                cond("MemoryPressure", "False", "KubeletHasSufficientMemory", "simulated"),
                cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "simulated"),
                cond("PIDPressure", "False", "KubeletHasSufficientPID", "simulated"),
                cond("Ready", "True", "KubeletReady", "simulated node (cmset e2e fake-node.py)"),
            ],
            "addresses": [
                {"type": "InternalIP", "address": self.ip},
                {"type": "Hostname", "address": self.name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "machineID": "cmset-fake-node",
                "systemUUID": "cmset-fake-node",
                "bootID": "cmset-fake-node",
                "kernelVersion": "fake",
                "osImage": "fake",
                "containerRuntimeVersion": "fake://0",
                "kubeletVersion": "v1.20.2-fake",
                "kubeProxyVersion": "v1.20.2-fake",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        }

    def ensure_node(self):
        path = "/api/v1/nodes/" + self.name
        try:
            node = self.call("GET", path)
        except ApiError as e:
            if e.status != 404:
                raise
            LOG.info("creating node %s", self.name)
            body = {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": self.name,
                    "labels": {
                        "kubernetes.io/hostname": self.name,
                        "kubernetes.io/os": "linux",
                        "kubernetes.io/arch": "amd64",
                        "beta.kubernetes.io/os": "linux",
                        "beta.kubernetes.io/arch": "amd64",
                        "type": "cmset-fake-node",
                    },
                },
                "spec": {},
            }
            try:
                node = self.call("POST", "/api/v1/nodes", body=body)
            except ApiError as e2:
                if e2.status != 409:
                    raise
                node = self.call("GET", path)
        taints = node.get("spec", {}).get("taints") or []
        kept = [t for t in taints if t.get("key") not in NOT_READY_TAINT_KEYS]
        if len(kept) != len(taints):
            LOG.info("removing taints %s from node %s",
                     [t["key"] for t in taints if t.get("key") in NOT_READY_TAINT_KEYS], self.name)
            self.call("PATCH", path, body={"spec": {"taints": kept or None}},
                      content_type="application/merge-patch+json")
        self.call("PATCH", path + "/status", body={"status": self.node_status()},
                  content_type="application/merge-patch+json")

    def heartbeat_loop(self, stop):
        while not stop.is_set():
            try:
                self.ensure_node()
            except ApiUnreachable as e:
                LOG.warning("heartbeat: API server unreachable: %s", e)
                self.check_give_up(e)
            except Exception as e:  # keep beating whatever happens
                LOG.warning("heartbeat failed: %s", e)
            stop.wait(self.heartbeat_interval)

    # -------------------------------------------------------------------------------------------------------- pods --

    def pod_ip(self, pod):
        if pod["spec"].get("hostNetwork"):
            return self.ip
        h = hashlib.sha1(pod["metadata"]["uid"].encode()).digest()
        return "10.244.%d.%d" % (1 + h[0] % 254, 1 + h[1] % 254)

    @staticmethod
    def is_running_ready(pod):
        status = pod.get("status") or {}
        if status.get("phase") != "Running":
            return False
        conds = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
        if conds.get("Ready") != "True" or conds.get("ContainersReady") != "True":
            return False
        names = {c["name"] for c in pod["spec"].get("containers", [])}
        ready = {c.get("name") for c in status.get("containerStatuses") or [] if c.get("ready")}
        return names <= ready

    def handle_pod(self, pod):
        meta = pod["metadata"]
        ns, name, uid = meta["namespace"], meta["name"], meta["uid"]
        node = pod["spec"].get("nodeName") or ""
        if meta.get("deletionTimestamp"):
            if node in ("", self.name):
                self.force_delete(ns, name, uid)
            return
        if not node:
            self.bind(ns, name, uid)
            return
        if node != self.name:
            return
        phase = (pod.get("status") or {}).get("phase")
        if phase in ("Succeeded", "Failed") or self.is_running_ready(pod) or self.is_marked_failing(pod):
            return
        bad = self.bad_reference(pod)
        if CHECK_LABEL in (meta.get("labels") or {}):
            self.mark_finished(pod, failing=bad)
        elif bad is None:
            self.mark_running(pod)
        else:
            self.mark_running(pod, failing=bad)

    # ------------------------------------------------------------------------------- the bad config switch --

    @staticmethod
    def config_references(pod):
        """Every (kind, name) of a ConfigMap or Secret the pod reads, in order, without duplicates."""
        spec = pod.get("spec") or {}
        refs = []

        def add(kind, name):
            if name and (kind, name) not in refs:
                refs.append((kind, name))

        for field in ("initContainers", "containers", "ephemeralContainers"):
            for c in spec.get(field) or []:
                for e in c.get("env") or []:
                    value_from = e.get("valueFrom") or {}
                    add("ConfigMap", (value_from.get("configMapKeyRef") or {}).get("name"))
                    add("Secret", (value_from.get("secretKeyRef") or {}).get("name"))
                for e in c.get("envFrom") or []:
                    add("ConfigMap", (e.get("configMapRef") or {}).get("name"))
                    add("Secret", (e.get("secretRef") or {}).get("name"))
        for v in spec.get("volumes") or []:
            add("ConfigMap", (v.get("configMap") or {}).get("name"))
            add("Secret", (v.get("secret") or {}).get("secretName"))
            for source in (v.get("projected") or {}).get("sources") or []:
                add("ConfigMap", (source.get("configMap") or {}).get("name"))
                add("Secret", (source.get("secret") or {}).get("name"))
        return refs

    def holds_fail_key(self, kind, ns, name):
        """Whether ConfigMap/Secret ns/name exists and holds FAIL_KEY. Reads only key names, never values."""
        key = (kind, ns, name)
        cached = self.immutable_verdicts.get(key)
        if cached is not None and cached[0] > time.monotonic():
            return cached[1]
        resource = "configmaps" if kind == "ConfigMap" else "secrets"
        try:
            obj = self.call("GET", "/api/v1/namespaces/%s/%s/%s" % (ns, resource, name))
        except ApiError as e:
            # Missing (or forbidden): it holds nothing back, as before the switch existed. Other errors propagate,
            # and the pod is tried again after a relist.
            if e.status in (403, 404):
                self.immutable_verdicts.pop(key, None)
                return False
            raise
        fields = ("data", "binaryData") if kind == "ConfigMap" else ("data",)
        bad = any(FAIL_KEY in (obj.get(f) or {}) for f in fields)
        if obj.get("immutable"):
            if len(self.immutable_verdicts) > 20000:
                self.immutable_verdicts.clear()
            self.immutable_verdicts[key] = (time.monotonic() + IMMUTABLE_CACHE_SECONDS, bad)
        else:
            self.immutable_verdicts.pop(key, None)
        return bad

    def bad_reference(self, pod):
        """A message naming the first ConfigMap/Secret the pod reads that holds FAIL_KEY, or None."""
        ns = pod["metadata"]["namespace"]
        for kind, name in self.config_references(pod):
            if self.holds_fail_key(kind, ns, name):
                return "%s %s/%s holds key %s%s" % (kind, ns, name, FAIL_KEY, NEVER_READY)
        return None

    @staticmethod
    def is_marked_failing(pod):
        status = pod.get("status") or {}
        if status.get("phase") != "Running":
            return False
        return any(c.get("type") == "Ready" and c.get("status") == "False" and c.get("reason") == FAIL_KEY
                   for c in status.get("conditions") or [])

    def bind(self, ns, name, uid):
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "namespace": ns, "uid": uid},
            "target": {"apiVersion": "v1", "kind": "Node", "name": self.name},
        }
        try:
            self.call("POST", "/api/v1/namespaces/%s/pods/%s/binding" % (ns, name), body=body)
            LOG.info("bound %s/%s to %s", ns, name, self.name)
        except ApiError as e:
            if e.status in (404, 409):  # gone, or already bound: the next event tells us more
                LOG.debug("bind %s/%s: %s", ns, name, e)
            else:
                raise

    def mark_running(self, pod, failing=None):
        """Running and Ready; or, with `failing` (why), Running with started containers that are not ready."""
        meta, spec = pod["metadata"], pod["spec"]
        ns, name, uid = meta["namespace"], meta["name"], meta["uid"]
        ts = now_rfc3339()
        old = pod.get("status") or {}
        ip = self.pod_ip(pod)

        def cid(cname):
            return "fake://%s-%s" % (uid[:8], cname)

        container_statuses = [
            {
                "name": c["name"],
                "ready": failing is None,
                "started": True,
                "restartCount": 0,
                "image": c.get("image", ""),
                "imageID": "fake://" + c.get("image", ""),
                "containerID": cid(c["name"]),
                "state": {"running": {"startedAt": ts}},
            }
            for c in spec.get("containers", [])
        ]
        init_statuses = [
            {
                "name": c["name"],
                "ready": True,
                "restartCount": 0,
                "image": c.get("image", ""),
                "imageID": "fake://" + c.get("image", ""),
                "containerID": cid(c["name"]),
                "state": {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": ts,
                                         "finishedAt": ts, "containerID": cid(c["name"])}},
            }
            for c in spec.get("initContainers") or []
        ]
        conditions = [
            {"type": t, "status": "True", "lastProbeTime": None, "lastTransitionTime": ts}
            for t in POD_CONDITIONS
        ]
        if failing is not None:
            for c in conditions:
                if c["type"] in ("ContainersReady", "Ready"):
                    c.update(status="False", reason=FAIL_KEY, message=failing)
        status = {
            "phase": "Running",
            "conditions": conditions,
            "containerStatuses": container_statuses,
            "hostIP": self.ip,
            "podIP": ip,
            "podIPs": [{"ip": ip}],
            "startTime": old.get("startTime") or ts,
        }
        if init_statuses:
            status["initContainerStatuses"] = init_statuses
        try:
            self.call("PATCH", "/api/v1/namespaces/%s/pods/%s/status" % (ns, name), body={"status": status},
                      content_type="application/merge-patch+json")
            if failing is None:
                LOG.info("running %s/%s", ns, name)
            else:
                LOG.info("running %s/%s, not ready: %s", ns, name, failing)
        except ApiError as e:
            if e.status == 404:
                return
            raise

    def mark_finished(self, pod, failing=None):
        """A check pod run to its end: Succeeded, or with `failing` (why) Failed with exit code 1 and that message."""
        meta, spec = pod["metadata"], pod["spec"]
        ns, name, uid = meta["namespace"], meta["name"], meta["uid"]
        ts = now_rfc3339()
        statuses = []
        for i, c in enumerate(spec.get("containers", [])):
            terminated = {"exitCode": 0, "reason": "Completed", "startedAt": ts, "finishedAt": ts,
                          "containerID": "fake://%s-%s" % (uid[:8], c["name"])}
            if failing is not None and i == 0:
                terminated.update(exitCode=1, reason="Error", message="%s: %s" % (FAIL_KEY, failing.replace(NEVER_READY, "")))
            statuses.append({"name": c["name"], "ready": False, "started": False, "restartCount": 0,
                             "image": c.get("image", ""), "imageID": "fake://" + c.get("image", ""),
                             "containerID": terminated["containerID"], "state": {"terminated": terminated}})
        ok = failing is None
        conditions = [
            {"type": t, "status": "True" if t in ("PodScheduled", "Initialized") else "False",
             "reason": None if t in ("PodScheduled", "Initialized") else "PodCompleted",
             "lastProbeTime": None, "lastTransitionTime": ts}
            for t in POD_CONDITIONS
        ]
        status = {"phase": "Succeeded" if ok else "Failed", "conditions": conditions,
                  "containerStatuses": statuses, "hostIP": self.ip,
                  "startTime": (pod.get("status") or {}).get("startTime") or ts}
        try:
            self.call("PATCH", "/api/v1/namespaces/%s/pods/%s/status" % (ns, name), body={"status": status},
                      content_type="application/merge-patch+json")
            LOG.info("check %s/%s %s", ns, name, "succeeded" if ok else "failed: " + failing)
        except ApiError as e:
            if e.status != 404:
                raise

    def force_delete(self, ns, name, uid):
        last = self.deleting.get(uid)
        if last is not None and time.monotonic() - last < 5:
            return
        self.deleting[uid] = time.monotonic()
        if len(self.deleting) > 10000:
            self.deleting.clear()
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0,
                "preconditions": {"uid": uid}}
        try:
            self.call("DELETE", "/api/v1/namespaces/%s/pods/%s" % (ns, name), body=body)
            LOG.info("deleted %s/%s (gracePeriodSeconds=0)", ns, name)
        except ApiError as e:
            if e.status not in (404, 409):
                raise

    def safe_handle(self, pod):
        try:
            self.handle_pod(pod)
            return True
        except ApiUnreachable:
            raise
        except Exception as e:
            meta = pod.get("metadata", {})
            LOG.warning("pod %s/%s: %s", meta.get("namespace"), meta.get("name"), e)
            return False

    def pod_loop(self):
        rv = None
        backoff = 0.5
        while True:
            try:
                if rv is None:
                    pods = self.call("GET", "/api/v1/pods", timeout=60)
                    rv = pods["metadata"]["resourceVersion"]
                    LOG.info("listed %d pods (resourceVersion %s)", len(pods.get("items", [])), rv)
                    failed = 0
                    for pod in pods.get("items", []):
                        if not self.safe_handle(pod):
                            failed += 1
                    if failed:  # retry soon through a fresh list
                        time.sleep(1)
                        rv = None
                        continue
                query = {"watch": "1", "resourceVersion": rv, "allowWatchBookmarks": "true",
                         "timeoutSeconds": str(self.watch_timeout)}
                resp = self.api.stream("/api/v1/pods", query, timeout=self.watch_timeout + 30)
                self.contact_ok()
                backoff = 0.5
                with resp:
                    for line in resp:
                        if not line.strip():
                            continue
                        event = json.loads(line)
                        etype, obj = event.get("type"), event.get("object") or {}
                        if etype == "ERROR":
                            # 410 Gone: our resourceVersion is too old. Anything else: start over as well.
                            LOG.info("watch error (%s): relisting", obj.get("message", obj))
                            rv = None
                            break
                        rv = obj.get("metadata", {}).get("resourceVersion") or rv
                        self.contact_ok()
                        if etype in ("ADDED", "MODIFIED"):
                            if not self.safe_handle(obj):
                                rv = None  # relist after this watch to retry the failed pod
                                break
                # The watch timed out or broke: rewatch from rv (or relist when rv is None).
            except ApiUnreachable as e:
                LOG.warning("API server unreachable: %s", e)
                self.check_give_up(e)
                rv = None
                time.sleep(backoff)
                backoff = min(backoff * 2, 5)
            except ApiError as e:
                LOG.warning("pod list/watch failed: %s", e)
                rv = None
                time.sleep(backoff)
                backoff = min(backoff * 2, 5)
            except (OSError, http.client.HTTPException, ValueError) as e:
                # Read timeout or a connection cut mid-stream.
                LOG.info("watch ended (%s): rewatching", e)
                self.check_give_up(e)
                rv = None
                time.sleep(0.2)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", required=True, help="API server URL, e.g. https://127.0.0.1:6443")
    parser.add_argument("--token-file", required=True, help="file holding a bearer token (admin)")
    parser.add_argument("--ca-file", help="CA bundle for the API server's certificate")
    parser.add_argument("--insecure", action="store_true", help="skip TLS verification")
    parser.add_argument("--node-name", default="cmset-fake-node")
    parser.add_argument("--log", help="log file (default: stderr)")
    parser.add_argument("--give-up-after", type=float, default=60, help="exit after this long without the API server")
    parser.add_argument("--heartbeat-interval", type=float, default=20)
    parser.add_argument("--watch-timeout", type=int, default=120)
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args()

    logging.basicConfig(
        filename=args.log,
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(message)s",
    )

    def on_signal(signum, _frame):
        LOG.info("signal %d: exiting", signum)
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    with open(args.token_file) as f:
        token = f.read().strip()
    api = Api(args.server, token, ca_file=args.ca_file, insecure=args.insecure)
    fake = FakeNode(api, args.node_name, args.give_up_after, args.heartbeat_interval, args.watch_timeout)
    LOG.info("simulated node %s for %s (pid %d)", args.node_name, args.server, os.getpid())

    # Register the node before looking at pods, so DaemonSet pods have somewhere to go.
    deadline = time.monotonic() + args.give_up_after
    while True:
        try:
            fake.ensure_node()
            break
        except Exception as e:
            if time.monotonic() > deadline:
                LOG.error("could not register node %s: %s", args.node_name, e)
                return 2
            time.sleep(1)

    stop = threading.Event()
    threading.Thread(target=fake.heartbeat_loop, args=(stop,), name="heartbeat", daemon=True).start()
    try:
        fake.pod_loop()
    finally:
        stop.set()
    return 0


if __name__ == "__main__":
    sys.exit(main())
