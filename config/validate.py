#!/usr/bin/env python3
"""Offline validation of cmset's kustomize builds; run by config/validate.sh (`make manifests-check`).

Arguments: NAME=FILE pairs, each the output of `kubectl kustomize NAME`.

1. Schemas. Every object of a built-in kind is validated with kubernetes-validate's `validate()` (the
   function behind `kubernetes-validate -k 1.33.0 --strict`): Kubernetes' own OpenAPI schemas, unknown
   fields rejected. The CRD is a built-in kind (apiextensions.k8s.io/v1) and is validated like the rest.
   kubernetes-validate has no schema for custom resources, and its CLI only *warns* (exit 0) for a kind it
   does not know, which would also let a typo such as `apps/v2` through. So here a kind without a schema is
   validated against the openAPIV3Schema of a CRD found in the builds (ConfigMapSet samples against
   crds/configmapsets.cmset.dev.yaml: types, bounds, required fields, unknown fields; CEL rules are not
   evaluated offline); third-party custom resources listed in THIRD_PARTY (cert-manager's, Argo Rollouts'
   Rollout) are skipped
   with a message; any other kind without a schema is an error.
2. cmset's own rules, which no schema knows: the namespaced Role has exactly the ClusterRole's rules; the
   copied files in config/namespaced match their originals; the namespaces listed in CMSET_NAMESPACES are the
   ones with a Role; each installation binds the operator's ServiceAccount to what it needs; ports, probes,
   selectors and the image tag agree; pods in `restricted` namespaces meet the restricted Pod Security
   Standard (the local v1.20 API server has no Pod Security admission to tell); no role aggregated into the
   built-in admin, edit or view roles grants anything on Secrets, and view's only read; config/no-secrets
   grants nothing on Secrets or SecretSets to anyone, has no SecretSet CRD and no webhook, and runs the
   operator with --secret-sets=false.
3. A self-test: known-bad objects must be rejected, so a silently permissive setup cannot pass; so must
   aggregated roles that reach Secrets.

The operator's rules on workloads and the webhook's rules are checked against the table of workload kinds
(crates/cmset-core/src/workloads/kinds.rs) by crates/kubectl-cmset/tests/install_manifests.rs (`make unit`), which
reads the table itself.
"""

import argparse
import copy
import os
import re
import sys

import jsonschema
import yaml
from kubernetes_validate.utils import SchemaNotFoundError, ValidationError
from kubernetes_validate.utils import validate as k8s_validate

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
IMAGE = "ghcr.io/cmset/cmset-controller"
OPERATOR = "cmset-controller"
# Which builds are applied together, and how the operator is scoped in each.
# Third-party custom resources that an install may carry but whose CRDs are not ours: no schema to check
# them against offline, so they are skipped, by name and with a message. Anything else unknown fails.
THIRD_PARTY = {
    "cert-manager.io": {"Certificate", "Issuer", "ClusterIssuer"},
    # The sample Rollout (config/samples/rollout).
    "argoproj.io": {"Rollout"},
}
# The third field says whether the installation runs SecretSets; one that does not must have no access to
# Secrets at all (see check_no_secrets).
INSTALLATIONS = {
    "all namespaces (config/default)": (["config/default"], "cluster", True),
    "all namespaces, cert-manager certificates (config/cert-manager)": (["config/cert-manager"], "cluster", True),
    "listed namespaces (config/namespaced)":
        (["config/namespaced", "config/namespaced/cluster-admin"], "namespaced", True),
    "all namespaces, no access to Secrets (config/no-secrets)": (["config/no-secrets"], "cluster", False),
}
SECRET_SETS_OFF = "--secret-sets=false"
SECRET_SET_CRD = "secretsets.cmset.dev"
AGGREGATE_LABEL = "rbac.authorization.k8s.io/aggregate-to-"


class Checker:
    def __init__(self, k8s_version):
        self.k8s_version = k8s_version
        self.failures = []
        self.counts = {"built-in": 0, "custom": 0, "skipped": 0, "rules": 0}

    def fail(self, where, message):
        self.failures.append(f"{where}: {message}")
        print(f"  FAIL  {where}: {message}")

    def rule(self, where, ok, message):
        """A consistency rule: counted, and reported only when broken."""
        self.counts["rules"] += 1
        if not ok:
            self.fail(where, message)
        return ok


def load(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def ident(obj):
    md = obj.get("metadata", {})
    ns = md.get("namespace")
    return f"{obj.get('apiVersion')} {obj.get('kind')} {ns + '/' if ns else ''}{md.get('name')}"


def key(obj):
    md = obj.get("metadata", {})
    return (obj.get("apiVersion"), obj.get("kind"), md.get("namespace"), md.get("name"))


# --- 1. schemas --------------------------------------------------------------------------------------------

def crd_to_json_schema(schema, strict=True):
    """A CRD's structural openAPIV3Schema as a JSON Schema (draft 4) that behaves like the API server:
    `nullable`, int-or-string, and (strict) unknown fields rejected where the server would prune them."""
    if not isinstance(schema, dict):
        return schema
    out = {}
    for k, v in schema.items():
        if k.startswith("x-kubernetes-") or k in ("description", "default", "example", "externalDocs", "nullable"):
            continue
        if k == "properties":
            out[k] = {name: crd_to_json_schema(p, strict) for name, p in v.items()}
        elif k in ("items", "additionalProperties", "not") and isinstance(v, dict):
            out[k] = crd_to_json_schema(v, strict)
        elif k in ("allOf", "anyOf", "oneOf"):
            out[k] = [crd_to_json_schema(s, strict) for s in v]
        else:
            out[k] = v
    if schema.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if (strict and out.get("type") == "object" and "properties" in out and "additionalProperties" not in out
            and not schema.get("x-kubernetes-preserve-unknown-fields")):
        out["additionalProperties"] = False
    if schema.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
    return out


def custom_resource_schema(obj, crds):
    """The JSON Schema for a custom resource from a CRD in `crds`, or None."""
    group, _, version = obj.get("apiVersion", "").rpartition("/")
    for crd in crds:
        spec = crd["spec"]
        if spec["group"] != group or spec["names"]["kind"] != obj.get("kind"):
            continue
        for v in spec["versions"]:
            if v["name"] == version and v.get("served", False):
                schema = crd_to_json_schema(v["schema"]["openAPIV3Schema"])
                # The API server accepts these at the root of every object.
                schema.setdefault("properties", {}).update(
                    {"apiVersion": {"type": "string"}, "kind": {"type": "string"}, "metadata": {"type": "object"}})
                return schema
        raise SchemaNotFoundError(version=f"CRD {crd['metadata']['name']}", kind=obj.get("kind"),
                                  api_version=obj.get("apiVersion"))
    return None


def validate_object(chk, where, obj, crds, quiet=False):
    """Validates one object; returns None when valid, else the error message."""
    try:
        version = k8s_validate(obj, chk.k8s_version, strict=True)
        kind = "built-in"
        how = f"Kubernetes {version} schema, strict"
    except ValidationError as e:
        return f"{'.'.join(str(p) for p in e.path) or '<root>'}: {e.message}"
    except SchemaNotFoundError as e:
        try:
            schema = custom_resource_schema(obj, crds)
        except SchemaNotFoundError as served:
            return f"no served version {obj.get('apiVersion')} in {served.version}"
        if schema is None:
            group = obj.get("apiVersion", "").rpartition("/")[0]
            if obj.get("kind") in THIRD_PARTY.get(group, ()):
                chk.counts["skipped"] += 1
                if not quiet:
                    print(f"  skip  {where}  {ident(obj)}  [third-party custom resource: no schema offline]")
                return None
            return f"unknown kind: {e.message} and no CRD in the builds defines it"
        errors = sorted(jsonschema.Draft4Validator(schema).iter_errors(obj), key=lambda x: list(x.path))
        if errors:
            return "; ".join(f"{'.'.join(str(p) for p in err.path) or '<root>'}: {err.message}" for err in errors)
        kind = "custom"
        how = "schema of its CRD, strict (CEL rules not evaluated offline)"
    chk.counts[kind] += 1
    if not quiet:
        print(f"  ok    {where}  {ident(obj)}  [{how}]")
    return None


# --- 2. cmset's rules ----------------------------------------------------------------------------------------

def rule_tuples(rules):
    """RBAC rules as a set of (group, resource, verb, resourceName) atoms, so formatting cannot matter."""
    atoms = set()
    for r in rules:
        for g in r.get("apiGroups", []):
            for res in r.get("resources", []):
                for v in r.get("verbs", []):
                    for n in r.get("resourceNames") or ["*"]:
                        atoms.add((g, res, v, n))
    return atoms


# Cluster-scoped resources the operator reads: no Role in a watched namespace can grant them, so in
# config/namespaced a cluster admin grants them once, through config/namespaced/cluster-admin.
CLUSTER_SCOPED = {("cmset.dev", "analysistemplates"), ("cmset.dev", "changewindows")}
# Needed only by the webhook: an installation without it (config/namespaced) need not grant these.
WEBHOOK_ONLY = set()


def webhook_only(atom):
    return (atom[0], atom[1]) in WEBHOOK_ONLY


def cluster_scoped(atom):
    return (atom[0], atom[1]) in CLUSTER_SCOPED


def on_secrets(atom):
    """Whether an RBAC atom grants anything on Secrets, wildcards included."""
    group, resource = atom[0], atom[1]
    return group in ("", "*") and (resource in ("secrets", "*") or resource.startswith("secrets/"))


def breaks_glass(atom):
    """Whether an RBAC atom lets its holder create a WindowOverride (break glass), wildcards included."""
    group, resource, verb = atom[0], atom[1], atom[2]
    return group in ("cmset.dev", "*") and resource in ("windowoverrides", "*") and verb in ("create", "*")


def on_secret_sets(atom):
    """Whether an RBAC atom grants anything on SecretSets or their subresources, wildcards included."""
    group, resource = atom[0], atom[1]
    return group in ("cmset.dev", "*") and (resource == "*" or resource.split("/")[0] == "secretsets")


def pod_templates(obj):
    kind, spec = obj.get("kind"), obj.get("spec", {})
    if kind in ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"):
        yield spec.get("template", {}).get("spec", {})
    elif kind == "CronJob":
        yield spec.get("jobTemplate", {}).get("spec", {}).get("template", {}).get("spec", {})
    elif kind == "Pod":
        yield spec


def check_restricted(chk, where, obj, pod):
    """The restricted Pod Security Standard (the parts a manifest controls)."""
    name = ident(obj)
    psc = pod.get("securityContext", {})
    for f in ("hostNetwork", "hostPID", "hostIPC"):
        chk.rule(where, not pod.get(f), f"{name}: {f} is not allowed")
    chk.rule(where, not any("hostPath" in v for v in pod.get("volumes", [])), f"{name}: hostPath volume")
    containers = pod.get("containers", []) + pod.get("initContainers", []) + pod.get("ephemeralContainers", [])
    for c in containers:
        sc = c.get("securityContext", {})
        cn = f"{name} container {c.get('name')}"
        chk.rule(where, sc.get("allowPrivilegeEscalation") is False, f"{cn}: allowPrivilegeEscalation must be false")
        chk.rule(where, not sc.get("privileged"), f"{cn}: privileged")
        caps = sc.get("capabilities", {})
        chk.rule(where, "ALL" in caps.get("drop", []), f"{cn}: capabilities must drop ALL")
        chk.rule(where, set(caps.get("add", [])) <= {"NET_BIND_SERVICE"}, f"{cn}: capabilities.add beyond NET_BIND_SERVICE")
        non_root = sc.get("runAsNonRoot", psc.get("runAsNonRoot"))
        chk.rule(where, non_root is True, f"{cn}: runAsNonRoot must be true")
        chk.rule(where, sc.get("runAsUser", psc.get("runAsUser")) != 0, f"{cn}: runAsUser 0")
        seccomp = sc.get("seccompProfile", psc.get("seccompProfile", {})).get("type")
        chk.rule(where, seccomp in ("RuntimeDefault", "Localhost"), f"{cn}: seccompProfile must be RuntimeDefault or Localhost")
        chk.rule(where, not any(p.get("hostPort") for p in c.get("ports", [])), f"{cn}: hostPort")


def matches(selector, labels):
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def check_operator(chk, where, objs, mode, secrets, cluster_role_atoms, version):
    """One installation (the builds applied together) is complete and consistent. With `secrets` False it
    runs without SecretSets and must have no access to Secrets (see check_no_secrets)."""
    by_kind = {}
    for o in objs:
        by_kind.setdefault(o["kind"], []).append(o)
    deps = [d for d in by_kind.get("Deployment", []) if d["metadata"]["name"] == OPERATOR]
    if not chk.rule(where, len(deps) == 1, f"expected one Deployment {OPERATOR}, found {len(deps)}"):
        return
    dep = deps[0]
    ns = dep["metadata"]["namespace"]
    tmpl = dep["spec"]["template"]
    pod, labels = tmpl["spec"], tmpl["metadata"].get("labels", {})
    chk.rule(where, matches(dep["spec"]["selector"].get("matchLabels"), labels), "Deployment selector does not match its pods")
    chk.rule(where, dep["spec"].get("replicas", 1) >= 2, "fewer than 2 replicas")
    chk.rule(where, any(c["kind"] == "CustomResourceDefinition" and c["metadata"]["name"] == "configmapsets.cmset.dev"
                        for c in objs), "the ConfigMapSet CRD is missing")
    chk.rule(where, any(n["metadata"]["name"] == ns for n in by_kind.get("Namespace", [])), f"namespace {ns} is missing")
    has_secret_set_crd = any(c["metadata"]["name"] == SECRET_SET_CRD for c in by_kind.get("CustomResourceDefinition", []))
    chk.rule(where, has_secret_set_crd == secrets,
             "the SecretSet CRD is missing" if secrets else "the SecretSet CRD is installed, but SecretSets are off")

    c = next((c for c in pod["containers"] if c["name"] == "manager"), None)
    if not chk.rule(where, c is not None, "no container `manager`"):
        return
    chk.rule(where, c["image"] == f"{IMAGE}:v{version}",
             f"image {c['image']} is not {IMAGE}:v{version} (the workspace version in Cargo.toml)")
    ports = {p.get("name"): p["containerPort"] for p in c.get("ports", [])}
    chk.rule(where, "metrics" in ports, "no container port named metrics")
    addr = next((a.split("=", 1)[1] for a in c.get("args", []) if a.startswith("--metrics-address=")), "0.0.0.0:8080")
    chk.rule(where, int(addr.rsplit(":", 1)[1]) == ports.get("metrics"),
             f"--metrics-address {addr} and the metrics port {ports.get('metrics')} differ")
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        get = c.get(probe, {}).get("httpGet", {})
        chk.rule(where, get.get("path") == path and get.get("port") in ("metrics", ports.get("metrics")),
                 f"{probe} must GET {path} on the metrics port")
    env = {e["name"]: e for e in c.get("env", [])}
    for var, field in (("POD_NAME", "metadata.name"), ("POD_NAMESPACE", "metadata.namespace")):
        chk.rule(where, env.get(var, {}).get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == field,
                 f"env {var} must come from the downward API ({field})")
    for k in ("requests", "limits"):
        chk.rule(where, {"cpu", "memory"} <= set(c.get("resources", {}).get(k, {})), f"resources.{k} needs cpu and memory")

    check_shutdown(chk, where, pod, c)

    svcs = [s for s in by_kind.get("Service", []) if s["metadata"].get("namespace") == ns]
    chk.rule(where, any(matches(s["spec"].get("selector"), labels)
                        and any(p.get("targetPort") in ("metrics", ports.get("metrics")) for p in s["spec"]["ports"])
                        for s in svcs), "no Service selects the operator's metrics port")
    pdbs = [p for p in by_kind.get("PodDisruptionBudget", []) if p["metadata"].get("namespace") == ns]
    chk.rule(where, any(matches(p["spec"]["selector"].get("matchLabels"), labels) for p in pdbs),
             "no PodDisruptionBudget selects the operator's pods")

    # RBAC: what the ServiceAccount is granted, namespace by namespace.
    sa = pod.get("serviceAccountName")
    chk.rule(where, any(s["metadata"]["name"] == sa and s["metadata"].get("namespace") == ns
                        for s in by_kind.get("ServiceAccount", [])), f"ServiceAccount {ns}/{sa} is missing")
    subject = {"kind": "ServiceAccount", "name": sa, "namespace": ns}
    roles = {(r["metadata"]["namespace"], r["metadata"]["name"]): r for r in by_kind.get("Role", [])}
    cluster_roles = {r["metadata"]["name"]: r for r in by_kind.get("ClusterRole", [])}

    def bound(binding):
        return any({k: s.get(k) for k in subject} == subject for s in binding.get("subjects", []))

    granted = {}  # namespace (None: cluster-wide) -> atoms
    for b in by_kind.get("ClusterRoleBinding", []):
        if bound(b) and b["roleRef"]["name"] in cluster_roles:
            granted.setdefault(None, set()).update(rule_tuples(cluster_roles[b["roleRef"]["name"]]["rules"]))
    for b in by_kind.get("RoleBinding", []):
        bns = b["metadata"]["namespace"]
        ref = b["roleRef"]
        role = roles.get((bns, ref["name"])) if ref["kind"] == "Role" else cluster_roles.get(ref["name"])
        if bound(b) and role is not None:
            granted.setdefault(bns, set()).update(rule_tuples(role["rules"]))

    lease = {("coordination.k8s.io", "leases", "create", "*"), ("coordination.k8s.io", "leases", "get", OPERATOR),
             ("coordination.k8s.io", "leases", "update", OPERATOR)}
    chk.rule(where, lease <= granted.get(ns, set()) | granted.get(None, set()),
             f"the ServiceAccount cannot take the Lease {OPERATOR} in {ns}")

    if mode != "cluster":
        cluster_role_atoms = {a for a in cluster_role_atoms if not webhook_only(a)}
    off = SECRET_SETS_OFF in c.get("args", [])
    chk.rule(where, off != secrets,
             f"the operator runs with {SECRET_SETS_OFF}, but this installation has SecretSets" if secrets
             else f"SecretSets are off, but the operator does not run with {SECRET_SETS_OFF}")
    if not secrets:
        check_no_secrets(chk, where, by_kind, c, pod)
        cluster_role_atoms = {a for a in cluster_role_atoms if not on_secrets(a) and not on_secret_sets(a)}
    elif mode == "cluster":
        check_webhook(chk, where, by_kind, ns, labels, c, ports, granted)

    listed = env.get("CMSET_NAMESPACES", {}).get("value")
    if mode == "cluster":
        chk.rule(where, listed is None, "CMSET_NAMESPACES is set, but this installation watches all namespaces")
        chk.rule(where, cluster_role_atoms <= granted.get(None, set()),
                 "the ServiceAccount is not bound to the cmset-controller ClusterRole")
        if not secrets:
            # Exactly the ClusterRole's rights less those on Secrets and SecretSets: the rules removed are
            # those and no others.
            extra = granted.get(None, set()) - cluster_role_atoms
            chk.rule(where, not extra, f"the operator's cluster-wide rights exceed the ClusterRole's: {sorted(extra)}")
    else:
        wide = {a for a in granted.get(None, set()) if not cluster_scoped(a)}
        chk.rule(where, not wide, f"the namespaced installation grants cluster-wide rights: {sorted(wide)}")
        chk.rule(where, {a for a in cluster_role_atoms if cluster_scoped(a)} <= granted.get(None, set()),
                 "the operator cannot read the cluster-scoped resources it needs")
        watched = sorted(n.strip() for n in (listed or "").split(",") if n.strip())
        # Namespaces where the ServiceAccount is granted anything besides its Lease.
        bound_in = sorted(n for n, atoms in granted.items() if n is not None and atoms - lease)
        chk.rule(where, bool(watched), "CMSET_NAMESPACES is not set")
        chk.rule(where, watched == bound_in,
                 f"CMSET_NAMESPACES lists {watched}, but the operator is granted rights in {bound_in}")
        for n in bound_in:
            missing = {a for a in cluster_role_atoms if not cluster_scoped(a)} - granted[n]
            extra = granted[n] - cluster_role_atoms - (lease if n == ns else set())
            chk.rule(where, not missing, f"the operator's rights in {n} lack what the ClusterRole has: {sorted(missing)}")
            chk.rule(where, not extra, f"the operator's rights in {n} exceed the ClusterRole's: {sorted(extra)}")


def stated_seconds(c, flag, var):
    """The value of `flag` as the container states it, as a flag (the last wins) or else its environment
    variable; None if it states neither."""
    given = [a.split("=", 1)[1] for a in c.get("args", []) if a.startswith(flag + "=")]
    value = given[-1] if given else next((e.get("value") for e in c.get("env", []) if e["name"] == var), None)
    return int(value) if value is not None else None


def check_shutdown(chk, where, pod, c):
    """The pod's terminationGracePeriodSeconds exceeds the time the operator may take after SIGTERM: its
    drain (answering admission while not ready; only when it serves the webhook) plus the time its
    controllers have to stop. Both are stated in the manifest, so this check needs no copy of the
    operator's defaults."""
    grace = stated_seconds(c, "--shutdown-grace-seconds", "CMSET_SHUTDOWN_GRACE_SECONDS")
    drain = stated_seconds(c, "--shutdown-drain-seconds", "CMSET_SHUTDOWN_DRAIN_SECONDS")
    webhook = any(a.startswith("--webhook-address") for a in c.get("args", []))
    if not chk.rule(where, grace is not None, "the operator's shutdown grace is not stated (CMSET_SHUTDOWN_GRACE_SECONDS)"):
        return
    if webhook and not chk.rule(where, drain is not None,
                                "the operator serves the webhook but its drain is not stated (CMSET_SHUTDOWN_DRAIN_SECONDS)"):
        return
    needed = grace + (drain if webhook else 0)
    period = pod.get("terminationGracePeriodSeconds", 30)
    chk.rule(where, period > needed,
             f"terminationGracePeriodSeconds {period} does not exceed the drain ({drain if webhook else 0} s) "
             f"plus the controllers' stop ({grace} s)")


def check_no_secrets(chk, where, by_kind, c, pod):
    """An installation without SecretSets has no access to Secrets: no Role or ClusterRole in it grants
    anything on Secrets or SecretSets (to the operator or to anyone), none aggregates others (whose rules
    cannot be seen here), the operator's pod mounts no Secret, and there is no webhook (the default one
    keeps its certificate in a Secret)."""
    for role in by_kind.get("Role", []) + by_kind.get("ClusterRole", []):
        atoms = rule_tuples(role.get("rules") or [])
        chk.rule(where, not any(on_secrets(a) for a in atoms), f"{ident(role)} grants rights on Secrets")
        chk.rule(where, not any(on_secret_sets(a) for a in atoms), f"{ident(role)} grants rights on SecretSets")
        chk.rule(where, "aggregationRule" not in role, f"{ident(role)} aggregates other roles")
    for v in pod.get("volumes", []):
        sources = [v] + (v.get("projected") or {}).get("sources", [])
        chk.rule(where, not any("secret" in src for src in sources), f"the operator's pod mounts a Secret ({v.get('name')})")
    chk.rule(where, not by_kind.get("MutatingWebhookConfiguration"), "a webhook is installed")
    chk.rule(where, not by_kind.get("ValidatingWebhookConfiguration"), "a validating webhook is installed")
    chk.rule(where, not any(a.startswith("--webhook-") for a in c.get("args", [])), "the operator serves a webhook")


def check_aggregates(chk, builds, cluster_role_atoms):
    """The ClusterRoles aggregated into the built-in admin, edit and view roles. None grants anything on
    Secrets (the built-in view role deliberately reads none; cmset must not change that); the ones for view
    only read; and in config/namespaced the ones for admin let a namespace admin grant the operator its Role
    (RBAC escalation prevention: one may only grant what one holds)."""
    for name, objs in builds.items():
        for role in (o for o in objs if o["kind"] == "ClusterRole"):
            aggregates = {k[len(AGGREGATE_LABEL):] for k, v in role["metadata"].get("labels", {}).items()
                          if k.startswith(AGGREGATE_LABEL) and v == "true"}
            if not aggregates:
                continue
            atoms = rule_tuples(role.get("rules", []))
            chk.rule(name, not any(on_secrets(a) for a in atoms),
                     f"{ident(role)}, aggregated into {sorted(aggregates)}, grants rights on Secrets")
            # Break glass is ClusterRole cmset-break-glass's alone: no role aggregated into admin, edit or
            # view (cmset-edit included) may let a tenant create a WindowOverride.
            glass = sorted(a for a in atoms if breaks_glass(a))
            chk.rule(name, not glass,
                     f"{ident(role)}, aggregated into {sorted(aggregates)}, lets tenants break the glass "
                     f"(create windowoverrides.cmset.dev, only ClusterRole cmset-break-glass may grant it): {glass}")
            if "view" in aggregates:
                writes = sorted(a for a in atoms if a[2] not in ("get", "list", "watch"))
                chk.rule(name, not writes, f"{ident(role)}, aggregated into view, grants more than reading: {writes}")
            # Status is cmset's: a tenant (edit) may read it, never write it (a forged status would
            # steer rollouts and notifications). Only a namespace admin may, to grant it to the operator.
            if "edit" in aggregates:
                status = sorted(a for a in atoms if a[0] in ("cmset.dev", "*")
                                and (a[1].endswith("/status") or a[1] in ("*", "*/status"))
                                and a[2] not in ("get", "list", "watch"))
                chk.rule(name, not status, f"{ident(role)}, aggregated into edit, lets tenants write status: {status}")
    # The built-in admin role holds every verb the operator's Role has on core, apps and batch resources;
    # the rest must come from the roles aggregated into admin.
    if "config/namespaced/cluster-admin" in builds:
        admin = set()
        for role in builds["config/namespaced/cluster-admin"]:
            if role["kind"] == "ClusterRole" and role["metadata"].get("labels", {}).get(AGGREGATE_LABEL + "admin") == "true":
                admin |= rule_tuples(role.get("rules", []))
        missing = sorted(a for a in cluster_role_atoms
                         if a[0] not in ("", "apps", "batch") and a not in admin and not cluster_scoped(a)
                         and not webhook_only(a))
        chk.rule("config/namespaced/cluster-admin", not missing,
                 f"a namespace admin cannot grant the operator its Role: the aggregated admin roles lack {missing}")
        # What no Role can grant, the cluster admin grants the operator's ServiceAccount once.
        objs = builds["config/namespaced/cluster-admin"]
        roles = {o["metadata"]["name"]: rule_tuples(o.get("rules", [])) for o in objs if o["kind"] == "ClusterRole"}
        bound = set()
        for b in (o for o in objs if o["kind"] == "ClusterRoleBinding"):
            if any(s.get("kind") == "ServiceAccount" and s.get("name") == OPERATOR for s in b.get("subjects", [])):
                bound |= roles.get(b["roleRef"]["name"], set())
        wanted = {a for a in cluster_role_atoms if cluster_scoped(a) and not webhook_only(a)}
        chk.rule("config/namespaced/cluster-admin", wanted == bound,
                 f"the operator's cluster-scoped rights {sorted(wanted)} are granted as {sorted(bound)}")


def check_webhook(chk, where, by_kind, ns, labels, c, ports, granted):
    """The admission webhook is installed, callable, fails open, and its certificate can be kept."""
    configs = [m for m in by_kind.get("MutatingWebhookConfiguration", []) if m["metadata"]["name"] == "cmset"]
    if not chk.rule(where, len(configs) == 1, "no MutatingWebhookConfiguration cmset: the webhook is not installed"):
        return
    args = dict(a.split("=", 1) for a in c.get("args", []) if a.startswith("--") and "=" in a)
    addr = args.get("--webhook-address")
    if not chk.rule(where, addr is not None, "the operator does not serve the webhook (--webhook-address)"):
        return
    chk.rule(where, int(addr.rsplit(":", 1)[1]) == ports.get("webhook"),
             f"--webhook-address {addr} and the container port named webhook ({ports.get('webhook')}) differ")
    svcs = {s["metadata"]["name"]: s for s in by_kind.get("Service", []) if s["metadata"].get("namespace") == ns}
    for hook in configs[0]["webhooks"]:
        name = hook["name"]
        chk.rule(where, hook.get("failurePolicy") == "Ignore", f"webhook {name}: failurePolicy must be Ignore (fail open)")
        chk.rule(where, hook.get("timeoutSeconds", 10) <= 10, f"webhook {name}: timeoutSeconds above 10")
        if name == "window-overrides.cmset.dev":
            # Break glass: sent the creates and updates of WindowOverrides only (it records who created
            # one; never workloads, never sets).
            sent = {(g, r, op) for rule in hook.get("rules", []) for g in rule.get("apiGroups", [])
                    for r in rule.get("resources", []) for op in rule.get("operations", [])}
            chk.rule(where, sent == {("cmset.dev", "windowoverrides", "CREATE"), ("cmset.dev", "windowoverrides", "UPDATE")},
                     f"webhook {name}: must be sent creates and updates of WindowOverrides only, not {sorted(sent)}")
        else:
            chk.rule(where, hook.get("objectSelector", {}).get("matchLabels") == {"cmset.dev/enabled": "true"},
                     f"webhook {name}: must only be sent opted-in workloads")
        ref = hook["clientConfig"].get("service", {})
        svc = svcs.get(ref.get("name")) if ref.get("namespace") == ns else None
        if chk.rule(where, svc is not None, f"webhook {name}: its Service {ref} is not installed in {ns}"):
            chk.rule(where, matches(svc["spec"].get("selector"), labels)
                     and any(p.get("targetPort") in ("webhook", ports.get("webhook")) for p in svc["spec"]["ports"]),
                     f"webhook {name}: Service {ref.get('name')} does not route to the operator's webhook port")
    # The validation of AnalysisTemplates: same Service and certificate, fails open (the controller checks
    # every template a set uses anyway), and sent AnalysisTemplates only.
    validating = [m for m in by_kind.get("ValidatingWebhookConfiguration", []) if m["metadata"]["name"] == "cmset"]
    if chk.rule(where, len(validating) == 1, "no ValidatingWebhookConfiguration cmset: AnalysisTemplates are not checked at admission"):
        for hook in validating[0]["webhooks"]:
            name = hook["name"]
            chk.rule(where, hook.get("failurePolicy") == "Ignore", f"webhook {name}: failurePolicy must be Ignore (fail open)")
            chk.rule(where, hook.get("timeoutSeconds", 10) <= 10, f"webhook {name}: timeoutSeconds above 10")
            resources = {(g, r) for rule in hook.get("rules", []) for g in rule.get("apiGroups", [])
                         for r in rule.get("resources", [])}
            # Each validating webhook is sent exactly the cmset kinds its path checks, and nothing else.
            expected = {
                "/validate-analysistemplate": {("cmset.dev", "analysistemplates")},
                "/validate-set": {("cmset.dev", "configmapsets"), ("cmset.dev", "secretsets")},
                "/validate-windows": {("cmset.dev", "changewindows")},
            }
            ref = hook["clientConfig"].get("service", {})
            path = ref.get("path")
            chk.rule(where, ref.get("namespace") == ns and ref.get("name") in svcs and path in expected,
                     f"webhook {name}: must call the operator's Service at one of {sorted(expected)}, not {ref}")
            chk.rule(where, resources == expected.get(path, resources),
                     f"webhook {name}: must be sent {sorted(expected.get(path, []))} only, not {sorted(resources)}")
    secret = args.get("--webhook-cert-secret")
    if secret is not None:
        have = granted.get(ns, set()) | granted.get(None, set())
        need = {("", "secrets", "create", "*"), ("", "secrets", "get", secret), ("", "secrets", "update", secret),
                ("admissionregistration.k8s.io", "mutatingwebhookconfigurations", "get", "cmset"),
                ("admissionregistration.k8s.io", "mutatingwebhookconfigurations", "patch", "cmset"),
                ("admissionregistration.k8s.io", "validatingwebhookconfigurations", "get", "cmset"),
                ("admissionregistration.k8s.io", "validatingwebhookconfigurations", "patch", "cmset")}
        chk.rule(where, need <= have, f"the operator cannot keep its certificate: lacks {sorted(need - have)}")
    else:
        chk.rule(where, "--webhook-cert-dir" in args, "no certificate source (--webhook-cert-secret or --webhook-cert-dir)")


# --- 3. self-test ----------------------------------------------------------------------------------------------

# Where `make dev` serves the webhook (e2e/dev.sh: --webhook-address 127.0.0.1:9443).
DEV_LOOPBACK = "https://127.0.0.1:9443"
WEBHOOK_KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")


def dev_webhook_problems(shipped_objs, dev_objs):
    """What is wrong with config/dev's webhooks: each one the install registers (through the Service) must be
    registered by config/dev too, at the loopback URL with the same path, and nothing more."""
    def webhooks(objs):
        return {(o["kind"], o["metadata"]["name"], w["name"]): w.get("clientConfig", {})
                for o in objs if o["kind"] in WEBHOOK_KINDS for w in o.get("webhooks", [])}
    shipped, dev = webhooks(shipped_objs), webhooks(dev_objs)
    problems = [f"{k[0]} {k[1]}: webhook {k[2]} is not registered" for k in sorted(set(shipped) - set(dev))]
    problems += [f"{k[0]} {k[1]}: webhook {k[2]} is not in the install" for k in sorted(set(dev) - set(shipped))]
    for k in sorted(set(shipped) & set(dev)):
        want = DEV_LOOPBACK + shipped[k].get("service", {}).get("path", "/")
        got = {f: v for f, v in dev[k].items() if f != "caBundle"}
        if got != {"url": want}:
            problems.append(f"{k[0]} {k[1]}: webhook {k[2]} is registered as {got}, not at {want}")
    return problems


def check_dev_webhooks(chk, builds):
    if "config/default" not in builds or "config/dev" not in builds:
        return
    problems = dev_webhook_problems(builds["config/default"], builds["config/dev"])
    for p in problems:
        chk.fail("config/dev", f"{p} (run `make dev-config`)")
    chk.rule("config/dev", bool(webhooks_in(builds["config/dev"])), "registers no webhook")
    if not problems:
        print(f"  ok    config/dev registers each of the install's {len(webhooks_in(builds['config/dev']))} webhooks "
              f"at {DEV_LOOPBACK}, with the same path")


def webhooks_in(objs):
    return [w for o in objs if o["kind"] in WEBHOOK_KINDS for w in o.get("webhooks", [])]


def self_test(chk, crds):
    """Objects the validation must refuse; fails the run if one of them passes."""
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x"},
                  "spec": {"selector": {"matchLabels": {"a": "b"}},
                           "template": {"metadata": {"labels": {"a": "b"}},
                                        "spec": {"containers": [{"name": "c", "image": "i"}]}}}}
    cmset = {"apiVersion": "cmset.dev/v1alpha1", "kind": "ConfigMapSet", "metadata": {"name": "x"},
             "spec": {"template": {"data": {"k": "v"}}}}
    # A set in source mode needs no template (it defaults to empty).
    source = {"apiVersion": "cmset.dev/v1alpha1", "kind": "ConfigMapSet", "metadata": {"name": "x"},
              "spec": {"configMapName": "app"}}
    secset = {"apiVersion": "cmset.dev/v1alpha1", "kind": "SecretSet", "metadata": {"name": "x"},
              "spec": {"secretName": "app"}}
    bad = []
    d = copy.deepcopy(deployment); d["spec"]["replicas"] = "two"; bad.append(("replicas: \"two\"", d))
    d = copy.deepcopy(deployment); d["spec"]["replica"] = 2; bad.append(("unknown field spec.replica", d))
    d = copy.deepcopy(deployment); d["apiVersion"] = "apps/v2"; bad.append(("apiVersion apps/v2", d))
    d = copy.deepcopy(deployment); d["apiVersion"] = "policy/v1beta1"; d["kind"] = "PodDisruptionBudget"
    bad.append(("policy/v1beta1 PodDisruptionBudget (removed in 1.25)", d))
    c = copy.deepcopy(cmset); c["spec"]["revisionHistoryLimit"] = -1; bad.append(("revisionHistoryLimit: -1", c))
    c = copy.deepcopy(cmset); c["spec"]["configMapName"] = "App"; bad.append(("configMapName App (not a DNS subdomain)", c))
    s = copy.deepcopy(secset); del s["spec"]["secretName"]; bad.append(("SecretSet without secretName", s))
    s = copy.deepcopy(secset); s["spec"]["template"] = {"data": {"k": "dg=="}}; bad.append(("SecretSet with inline data", s))
    c = copy.deepcopy(cmset); c["spec"]["templat"] = {}; bad.append(("unknown field spec.templat", c))
    c = copy.deepcopy(cmset); c["spec"]["template"]["data"] = {"k": 1}; bad.append(("data value 1 (not a string)", c))
    c = copy.deepcopy(cmset); c["apiVersion"] = "cmset.dev/v1"; bad.append(("ConfigMapSet cmset.dev/v1", c))
    # config/dev that leaves a webhook at the Service, or forgets one, is refused.
    install = [{"kind": "ValidatingWebhookConfiguration", "metadata": {"name": "cmset"}, "webhooks": [
        {"name": n, "clientConfig": {"service": {"name": "cmset-webhook", "path": f"/{n}"}}} for n in ("a", "b")]}]
    at_service = copy.deepcopy(install)
    at_service[0]["webhooks"][0]["clientConfig"] = {"url": f"{DEV_LOOPBACK}/a"}
    chk.rule("self-test", len(dev_webhook_problems(install, at_service)) == 1,
             "accepted a config/dev that leaves a webhook at the in-cluster Service")
    forgot = copy.deepcopy(at_service)
    del forgot[0]["webhooks"][1]
    chk.rule("self-test", len(dev_webhook_problems(install, forgot)) == 1,
             "accepted a config/dev that forgets a webhook")
    good = [("a minimal Deployment", deployment), ("a minimal ConfigMapSet", cmset),
            ("a ConfigMapSet in source mode", source), ("a minimal SecretSet", secset)]
    for label, obj in bad:
        chk.rule("self-test", validate_object(chk, "self-test", obj, crds, quiet=True) is not None,
                 f"accepted a bad object ({label})")
    for label, obj in good:
        err = validate_object(chk, "self-test", obj, crds, quiet=True)
        chk.rule("self-test", err is None, f"refused {label}: {err}")
    chk.counts["built-in"] -= 1
    chk.counts["custom"] -= len(good) - 1
    print(f"  ok    self-test: {len(bad)} bad objects refused, {len(good)} good ones accepted")

    # Aggregated roles that must be refused: each reaches Secrets, or lets view write.
    def role(aggregate, rules):
        return {"kind": "ClusterRole", "metadata": {"name": "x", "labels": {AGGREGATE_LABEL + aggregate: "true"}},
                "rules": rules}
    bad_roles = [
        ("view reads secrets", role("view", [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}])),
        ("view reads every core resource", role("view", [{"apiGroups": [""], "resources": ["*"], "verbs": ["list"]}])),
        ("edit watches every group's secrets", role("edit", [{"apiGroups": ["*"], "resources": ["secrets"], "verbs": ["watch"]}])),
        ("view patches a set", role("view", [{"apiGroups": ["cmset.dev"], "resources": ["secretsets"], "verbs": ["patch"]}])),
        ("edit patches a set's status", role("edit", [{"apiGroups": ["cmset.dev"], "resources": ["configmapsets/status"], "verbs": ["patch"]}])),
        ("edit updates every cmset.dev subresource", role("edit", [{"apiGroups": ["cmset.dev"], "resources": ["*"], "verbs": ["update"]}])),
        ("edit creates WindowOverrides", role("edit", [{"apiGroups": ["cmset.dev"], "resources": ["windowoverrides"], "verbs": ["create"]}])),
        ("admin may do anything to WindowOverrides", role("admin", [{"apiGroups": ["cmset.dev"], "resources": ["windowoverrides"], "verbs": ["*"]}])),
        ("admin may create anything of cmset.dev", role("admin", [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["create"]}])),
    ]
    for label, obj in bad_roles:
        scratch = Checker(chk.k8s_version)
        scratch.fail = lambda where, message, scratch=scratch: scratch.failures.append(message)
        check_aggregates(scratch, {"self-test": [obj]}, set())
        chk.rule("self-test", bool(scratch.failures), f"accepted a bad aggregated role ({label})")
    print(f"  ok    self-test: {len(bad_roles)} bad aggregated roles refused")

    # Shutdown timings the pod's grace period does not cover, and ones it does.
    def shutdown(period, args=(), env=()):
        c = {"args": list(args), "env": [{"name": k, "value": v} for k, v in env]}
        pod = {} if period is None else {"terminationGracePeriodSeconds": period}
        scratch = Checker(chk.k8s_version)
        scratch.fail = lambda where, message, scratch=scratch: scratch.failures.append(message)
        check_shutdown(scratch, "self-test", pod, c)
        return scratch.failures
    webhook = ["--webhook-address=0.0.0.0:9443"]
    timings = [("CMSET_SHUTDOWN_DRAIN_SECONDS", "10"), ("CMSET_SHUTDOWN_GRACE_SECONDS", "20")]
    bad_shutdowns = [
        ("drain and grace exactly fill the period", shutdown(30, webhook, timings)),
        ("no period: Kubernetes' 30 s", shutdown(None, webhook, timings)),
        ("a flag overrides the environment", shutdown(40, webhook + ["--shutdown-drain-seconds=25"], timings)),
        ("the drain is not stated", shutdown(40, webhook, timings[1:])),
        ("the grace is not stated", shutdown(40, webhook, timings[:1])),
    ]
    for label, failures in bad_shutdowns:
        chk.rule("self-test", bool(failures), f"accepted a grace period that does not cover shutdown ({label})")
    for label, failures in [("the default install's", shutdown(40, webhook, timings)),
                            ("no webhook, nothing to drain", shutdown(25, [], timings[1:]))]:
        chk.rule("self-test", not failures, f"refused a grace period that covers shutdown ({label}): {failures}")
    print(f"  ok    self-test: {len(bad_shutdowns)} grace periods too short refused, 2 sufficient ones accepted")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kubernetes-version", default="1.33.0")
    ap.add_argument("--image-override", help="FILE=IMAGE: the build of an overlay that sets `images:`")
    ap.add_argument("builds", nargs="+", help="NAME=FILE")
    args = ap.parse_args()
    chk = Checker(args.kubernetes_version)
    with open(os.path.join(REPO, "Cargo.toml")) as f:
        version = re.search(r'\[workspace\.package\][^\[]*?\nversion\s*=\s*"([^"]+)"', f.read()).group(1)

    builds = {}
    for arg in args.builds:
        name, path = arg.split("=", 1)
        builds[name] = load(path)
    crds = [o for objs in builds.values() for o in objs
            if o.get("kind") == "CustomResourceDefinition" and o.get("apiVersion") == "apiextensions.k8s.io/v1"]

    print(f"[manifests] 1. schemas (kubernetes-validate, Kubernetes {args.kubernetes_version}, strict)")
    for name, objs in builds.items():
        if not chk.rule(name, bool(objs), "the build is empty"):
            continue
        for obj in objs:
            err = validate_object(chk, name, obj, crds)
            if err:
                chk.fail(name, f"{ident(obj)}: {err}")

    print("[manifests] 2. cmset's rules")
    cluster_role = next((o for o in builds.get("config/rbac", []) if o["kind"] == "ClusterRole"
                         and o["metadata"]["name"] == OPERATOR), None)
    if chk.rule("config/rbac", cluster_role is not None, f"no ClusterRole {OPERATOR}"):
        atoms = rule_tuples(cluster_role["rules"])
        for label, (names, mode, secrets) in INSTALLATIONS.items():
            if all(n in builds for n in names):
                before = len(chk.failures)
                check_operator(chk, label, [o for n in names for o in builds[n]], mode, secrets, atoms, version)
                if len(chk.failures) == before:
                    print(f"  ok    {label}: the operator's Deployment, Service, PDB, RBAC and scope agree")
                    if not secrets:
                        print(f"  ok    {label}: nothing on Secrets or SecretSets, no SecretSet CRD, no webhook, "
                              f"{SECRET_SETS_OFF}")
        before = len(chk.failures)
        check_aggregates(chk, builds, atoms)
        if len(chk.failures) == before:
            print("  ok    the roles aggregated into admin/edit/view grant nothing on Secrets, view's only read, "
                  "edit's write no status, and admin's let a namespace admin grant the operator its Role")

    check_dev_webhooks(chk, builds)

    # Files copied into config/namespaced must equal their originals (kustomize cannot share single files).
    originals = {key(o): o for n in ("config/rbac", "config/default") for o in builds.get(n, [])}
    before = len(chk.failures)
    for name in ("config/namespaced", "config/namespaced/cluster-admin"):
        for obj in builds.get(name, []):
            orig = originals.get(key(obj))
            if orig is None:
                continue
            mine, orig = copy.deepcopy(obj), copy.deepcopy(orig)
            if obj["kind"] == "Deployment":
                # Differs only by the namespaces it watches, by notifications (their configuration
                # lives in cmset-system, where this install grants nothing), and by the webhook, which
                # a namespaced install cannot register (a MutatingWebhookConfiguration is
                # cluster-scoped).
                own = ("CMSET_NAMESPACES", "CMSET_NOTIFICATIONS")
                for c in mine["spec"]["template"]["spec"]["containers"]:
                    c["env"] = [e for e in c.get("env", []) if e["name"] not in own]
                for c in orig["spec"]["template"]["spec"]["containers"]:
                    c["args"] = [a for a in c.get("args", []) if not a.startswith("--webhook-")]
                    c["ports"] = [p for p in c.get("ports", []) if p.get("name") != "webhook"]
            chk.rule(name, mine == orig, f"{ident(obj)} differs from its original in config/default or config/rbac")
    if len(chk.failures) == before:
        print("  ok    the copies in config/namespaced equal their originals")

    restricted = {o["metadata"]["name"] for objs in builds.values() for o in objs if o["kind"] == "Namespace"
                  and o["metadata"].get("labels", {}).get("pod-security.kubernetes.io/enforce") == "restricted"}
    before = len(chk.failures)
    for name, objs in builds.items():
        for obj in objs:
            if obj.get("metadata", {}).get("namespace") in restricted:
                for pod in pod_templates(obj):
                    check_restricted(chk, name, obj, pod)
    if len(chk.failures) == before:
        print(f"  ok    pod templates in restricted namespaces {sorted(restricted)} meet the restricted Pod Security Standard")

    if args.image_override:
        path, want = args.image_override.split("=", 1)
        images = [c["image"] for o in load(path) if o["kind"] == "Deployment"
                  for c in o["spec"]["template"]["spec"]["containers"]]
        if chk.rule("images override", images == [want], f"an overlay's `images:` gave {images}, not [{want}]"):
            print(f"  ok    an overlay's `images:` replaces the operator image ({want})")

    print("[manifests] 3. self-test")
    self_test(chk, crds)

    total = chk.counts["built-in"] + chk.counts["custom"]
    print(f"[manifests] {total} objects in {len(builds)} builds validated ({chk.counts['built-in']} built-in, "
          f"{chk.counts['custom']} custom resources), {chk.counts['skipped']} third-party custom resources skipped, "
          f"{chk.counts['rules']} rules checked")
    if chk.failures:
        print(f"manifests-check: {len(chk.failures)} failed")
        for f in chk.failures:
            print(f"  - {f}")
        return 1
    print("manifests-check: all passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
