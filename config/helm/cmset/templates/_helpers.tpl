{{/*
Names are fixed (cmset-controller, cmset-webhook, ...), as in config/: cmset is one per cluster (its webhook
configurations and ClusterRoles are cluster-scoped and named `cmset`), and the Deployment's selector stays the
one of a kubectl-applied install, so moving between the two keeps it.
*/}}

{{/* Labels every object carries. The Helm ones are left out of config/ when it is rendered (make manifests). */}}
{{- define "cmset.labels" -}}
app.kubernetes.io/name: cmset
{{- if .component }}
app.kubernetes.io/component: {{ .component }}
{{- end }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
{{- end }}

{{/* The operator pods' labels, and the selector of its Deployment, Services and PodDisruptionBudget. */}}
{{- define "cmset.selectorLabels" -}}
app.kubernetes.io/name: cmset
app.kubernetes.io/component: controller
{{- end }}

{{- define "cmset.image" -}}
{{- $tag := .Values.image.tag | default (printf "v%s" .Chart.AppVersion) -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ $tag }}
{{- end -}}
{{- end }}

{{/* Whether the operator keeps its webhook certificate itself (in the Secret cmset-webhook-tls). */}}
{{- define "cmset.keepsCertificate" -}}
{{- if and .Values.webhook.enabled (not .Values.webhook.certManager.enabled) }}true{{ end -}}
{{- end }}

{{/* Combinations that cannot work, refused with a message naming the values. */}}
{{- define "cmset.validate" -}}
{{- if and (not .Values.secretSets.enabled) (include "cmset.keepsCertificate" .) }}
{{- fail "secretSets.enabled=false promises the operator no access to Secrets, but the webhook keeps its certificate in one: set webhook.enabled=false, or webhook.certManager.enabled=true" }}
{{- end }}
{{- if and .Values.watchNamespaces .Values.webhook.enabled }}
{{- fail "watchNamespaces: a webhook configuration is cluster-wide and the operator could answer only for the namespaces it watches; set webhook.enabled=false" }}
{{- end }}
{{- end }}

{{/*
The operator's rules, the same as a ClusterRole (all namespaces) or as a Role in each watched namespace.
Each rule says why it is needed.
*/}}
{{- define "cmset.operatorRules" -}}
# Read the sets; write only their status.
- apiGroups: ["cmset.dev"]
  resources: ["configmapsets"]
  verbs: ["get", "list", "watch"]
- apiGroups: ["cmset.dev"]
  resources: ["configmapsets/status"]
  verbs: ["get", "patch"]
# Revisions carry a blocking owner reference to their set; clusters that enforce owner-reference
# permissions require this to set it.
- apiGroups: ["cmset.dev"]
  resources: ["configmapsets/finalizers"]
  verbs: ["update"]
# Revision ConfigMaps: created immutable, metadata patched (labels, annotations, owners), old unused ones
# deleted. RBAC cannot restrict by label; cmset itself only ever writes ConfigMaps its sets own. One
# metadata-only watch of every ConfigMap in scope finds revisions (label `cmset.dev/set`) and the sources
# named by `spec.configMapName`; `get` reads a source's data, or a ConfigMap that has a new revision's name.
- apiGroups: [""]
  resources: ["configmaps"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
# Opted-in workloads of every built-in kind (the table in crates/cmset-core/src/workloads/kinds.rs, which a test
# checks these rules against): watched by label, changed only by guarded JSON patches of reference
# names. A kind whose API is not served (Argo Rollouts not installed) is simply not watched.
- apiGroups: ["apps"]
  resources: ["deployments", "statefulsets", "daemonsets"]
  verbs: ["get", "list", "watch", "patch"]
# CronJobs (batch/v1, or batch/v1beta1 before Kubernetes 1.21): the template of the Jobs they create.
- apiGroups: ["batch"]
  resources: ["cronjobs"]
  verbs: ["list", "watch", "patch"]
# Argo Rollouts' Rollout.
- apiGroups: ["argoproj.io"]
  resources: ["rollouts"]
  verbs: ["list", "watch", "patch"]
# Jobs are never patched: a Job's template cannot change, so the webhook names the revision when one is
# created. Jobs labelled cmset.dev/managed=true (opted-in Jobs, and those a rewritten CronJob creates)
# are watched: a revision a Job names stays in use while the Job exists.
- apiGroups: ["batch"]
  resources: ["jobs"]
  verbs: ["list", "watch"]
# Their history, read to know which revisions a rollback can still need (ReplicaSets of Deployments and
# Rollouts, ControllerRevisions of StatefulSets and DaemonSets).
- apiGroups: ["apps"]
  resources: ["replicasets", "controllerrevisions"]
  verbs: ["get", "list", "watch"]
# Pods of rewritten templates (label cmset.dev/managed=true) are listed, never watched, and only when
# a revision is due to be pruned: one a Pod still runs (its owner gone) is kept.
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["list"]
# Events that tell the story on the set and the workloads.
- apiGroups: ["events.k8s.io"]
  resources: ["events"]
  verbs: ["create", "patch"]
# Break glass: WindowOverrides (created by people with ClusterRole cmset-break-glass), watched so that
# an override lets its set's rollout through at once. Read only: the use is recorded in the set's status.
- apiGroups: ["cmset.dev"]
  resources: ["windowoverrides"]
  verbs: ["list", "watch"]
{{- if .Values.secretSets.enabled }}
# SecretSets (secretSets.enabled; the operator runs with --secret-sets=false otherwise). A SecretSet holds
# no secret value, only the name of its source.
# Read the sets; write only their status (server-side apply).
- apiGroups: ["cmset.dev"]
  resources: ["secretsets"]
  verbs: ["get", "list", "watch"]
- apiGroups: ["cmset.dev"]
  resources: ["secretsets/status"]
  verbs: ["get", "patch"]
# Revision Secrets carry a blocking owner reference to their set, as revision ConfigMaps do.
- apiGroups: ["cmset.dev"]
  resources: ["secretsets/finalizers"]
  verbs: ["update"]
# One metadata-only watch of Secrets in scope: revisions by label `cmset.dev/set`, sources by name.
# RBAC cannot grant metadata only: list and watch also allow reading every Secret's values.
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["list", "watch"]
# A source's type and data, read when its resourceVersion changes; a Secret that has a new revision's name.
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["get"]
# Revision Secrets: created immutable, metadata patched (labels, annotations, owners; taking over a
# secretGenerator's Secret), old unused ones deleted. Never `update` or `deletecollection`.
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["create", "patch", "delete"]
{{- end }}
{{- if not .Values.watchNamespaces }}
# AnalysisTemplates (cluster-scoped, installed by cmset's admins): watched (with --prometheus-url) so
# that a set's metric analysis reads them from a cache and a template changed reconciles the sets
# that name it. Never read one by one, never written.
- apiGroups: ["cmset.dev"]
  resources: ["analysistemplates"]
  verbs: ["list", "watch"]
# ChangeWindows (cluster-scoped, installed by cmset's admins): watched so that every set's rollout
# reads the cluster's windows from a cache. Never written.
- apiGroups: ["cmset.dev"]
  resources: ["changewindows"]
  verbs: ["list", "watch"]
{{- end }}
{{- end }}
