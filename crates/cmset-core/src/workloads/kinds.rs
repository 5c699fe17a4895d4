//! The table of workload kinds: everything cmset needs to know about a kind that carries a pod template,
//! said once. Finding and rewriting references, health, history, the hold at admission, the watches, the
//! webhook rules and RBAC all follow from a kind's entry, so adding a kind is adding an entry (or, for a
//! kind the operator does not know, declaring one at start-up: see [`Declaration`]).

use std::collections::BTreeMap;
use std::fmt;

use json_patch::jsonptr::Pointer;
use serde::Deserialize;

/// What keeps an older pod template of a kind alive, so that the revisions it names stay in use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum HistoryRule {
    /// ReplicaSets it owns (Deployments, Argo Rollouts): `rollout undo` returns to one.
    ReplicaSets,
    /// ControllerRevisions it owns (StatefulSets, DaemonSets).
    ControllerRevisions,
    /// Jobs it created (CronJobs): a Job runs the template it was made from for as long as it exists.
    Jobs,
    /// Nothing but the object itself (and its Pods).
    None,
}

/// How a kind's rollout is read from its status (see [`crate::workloads::health`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum HealthRule {
    Deployment,
    StatefulSet,
    DaemonSet,
    /// Argo Rollouts: `status.phase` once the controller observed the generation.
    ArgoRollout,
    /// A declared kind: `status.observedGeneration` and the `Ready` or `Available` condition where the
    /// kind reports them; without either, the move itself counts as done.
    Conditions,
    /// Nothing rolls out when the template changes (a CronJob's next Job takes it): moved is done.
    Moved,
}

/// One workload kind.
#[derive(Debug)]
pub struct KindSpec {
    pub group: &'static str,
    /// The versions cmset can use, preferred first: the first the server serves is used.
    pub versions: &'static [&'static str],
    pub kind: &'static str,
    /// The resource name, for RBAC and webhook rules; declared kinds learn theirs from discovery.
    pub plural: Option<&'static str>,
    /// JSON pointer to its pod template (a `PodTemplateSpec`).
    pub template: &'static str,
    /// JSON pointer to the template's pod spec (`template` + `/spec`).
    pub pod_spec: &'static str,
    /// JSON pointers to object metadata that also gets cmset's managed label when the template is
    /// rewritten, so that the objects made from it can be watched by that label (a CronJob's Jobs).
    pub managed_metadata: &'static [&'static str],
    pub history: HistoryRule,
    pub health: HealthRule,
    /// JSON pointer to the boolean that holds a new object at admission until the sets it reads have
    /// revisions (a Deployment's `spec.paused`); `None`: never held.
    pub hold: Option<&'static str>,
    /// Whether the template can change after creation. When it cannot (a Job), cmset rewrites it only
    /// at admission, and never patches it.
    pub template_mutable: bool,
    /// What `kubectl cmset` accepts for it besides its kind (lower case): plural and short names.
    pub aliases: &'static [&'static str],
    /// Declared by the operator's settings rather than built in.
    pub declared: bool,
}

const DEPLOYMENT: KindSpec = KindSpec {
    group: "apps",
    versions: &["v1"],
    kind: "Deployment",
    plural: Some("deployments"),
    template: "/spec/template",
    pod_spec: "/spec/template/spec",
    managed_metadata: &[],
    history: HistoryRule::ReplicaSets,
    health: HealthRule::Deployment,
    hold: Some("/spec/paused"),
    template_mutable: true,
    aliases: &["deployments", "deploy"],
    declared: false,
};

const STATEFUL_SET: KindSpec = KindSpec {
    group: "apps",
    versions: &["v1"],
    kind: "StatefulSet",
    plural: Some("statefulsets"),
    template: "/spec/template",
    pod_spec: "/spec/template/spec",
    managed_metadata: &[],
    history: HistoryRule::ControllerRevisions,
    health: HealthRule::StatefulSet,
    hold: None,
    template_mutable: true,
    aliases: &["statefulsets", "sts"],
    declared: false,
};

const DAEMON_SET: KindSpec = KindSpec {
    group: "apps",
    versions: &["v1"],
    kind: "DaemonSet",
    plural: Some("daemonsets"),
    template: "/spec/template",
    pod_spec: "/spec/template/spec",
    managed_metadata: &[],
    history: HistoryRule::ControllerRevisions,
    health: HealthRule::DaemonSet,
    hold: None,
    template_mutable: true,
    aliases: &["daemonsets", "ds"],
    declared: false,
};

const CRON_JOB: KindSpec = KindSpec {
    group: "batch",
    // `batch/v1` from Kubernetes 1.21; older servers (the local control plane) serve only v1beta1, with
    // the same schema.
    versions: &["v1", "v1beta1"],
    kind: "CronJob",
    plural: Some("cronjobs"),
    template: "/spec/jobTemplate/spec/template",
    pod_spec: "/spec/jobTemplate/spec/template/spec",
    managed_metadata: &["/spec/jobTemplate/metadata"],
    history: HistoryRule::Jobs,
    health: HealthRule::Moved,
    // A suspended CronJob starts no Job: a new one waits for its sets' revisions like a Deployment.
    hold: Some("/spec/suspend"),
    template_mutable: true,
    aliases: &["cronjobs", "cj"],
    declared: false,
};

const JOB: KindSpec = KindSpec {
    group: "batch",
    versions: &["v1"],
    kind: "Job",
    plural: Some("jobs"),
    template: "/spec/template",
    pod_spec: "/spec/template/spec",
    managed_metadata: &[],
    history: HistoryRule::None,
    health: HealthRule::Moved,
    hold: None,
    template_mutable: false,
    aliases: &["jobs"],
    declared: false,
};

const ARGO_ROLLOUT: KindSpec = KindSpec {
    group: "argoproj.io",
    versions: &["v1alpha1"],
    kind: "Rollout",
    plural: Some("rollouts"),
    template: "/spec/template",
    pod_spec: "/spec/template/spec",
    managed_metadata: &[],
    history: HistoryRule::ReplicaSets,
    health: HealthRule::ArgoRollout,
    hold: Some("/spec/paused"),
    template_mutable: true,
    aliases: &["rollouts", "ro"],
    declared: false,
};

/// A workload kind: an entry of the table. Copied freely; compared by its kind name, which is unique
/// among the kinds one operator serves (see [`Kinds`]).
#[derive(Clone, Copy)]
pub struct WorkloadKind(&'static KindSpec);

// The built-in kinds read like the enum variants they once were.
#[allow(non_upper_case_globals)]
impl WorkloadKind {
    pub const Deployment: Self = Self(&DEPLOYMENT);
    pub const StatefulSet: Self = Self(&STATEFUL_SET);
    pub const DaemonSet: Self = Self(&DAEMON_SET);
    pub const CronJob: Self = Self(&CRON_JOB);
    pub const Job: Self = Self(&JOB);
    pub const Rollout: Self = Self(&ARGO_ROLLOUT);
}

impl WorkloadKind {
    /// Every built-in kind.
    pub const BUILT_IN: [WorkloadKind; 6] = [
        Self::Deployment,
        Self::StatefulSet,
        Self::DaemonSet,
        Self::CronJob,
        Self::Job,
        Self::Rollout,
    ];

    pub fn spec(self) -> &'static KindSpec {
        self.0
    }

    pub fn as_str(self) -> &'static str {
        self.0.kind
    }

    /// A built-in kind by its kind name (declared kinds are found through [`Kinds::parse`]).
    pub fn parse(kind: &str) -> Option<Self> {
        Self::BUILT_IN.into_iter().find(|k| k.as_str() == kind)
    }

    /// Where its pod template lives.
    pub fn template(self) -> &'static Pointer {
        pointer(self.0.template)
    }

    /// Where its template's pod spec lives.
    pub fn pod_spec(self) -> &'static Pointer {
        pointer(self.0.pod_spec)
    }

    /// Where its template's metadata lives.
    pub fn template_metadata(self) -> String {
        format!("{}/metadata", self.0.template)
    }

    /// Whether cmset may patch its template after creation.
    pub fn is_mutable(self) -> bool {
        self.0.template_mutable
    }

    /// Whether its rollout is tracked: waves and automatic rollback apply to it.
    pub fn rolls_out(self) -> bool {
        self.0.template_mutable && self.0.health != HealthRule::Moved
    }

    /// `group/version` for a version of it.
    pub fn api_version(self, version: &str) -> String {
        if self.0.group.is_empty() {
            version.to_string()
        } else {
            format!("{}/{version}", self.0.group)
        }
    }

    /// Whether `name` (any case) names this kind in `kubectl cmset`: its kind or an alias.
    pub fn is_called(self, name: &str) -> bool {
        let name = name.to_ascii_lowercase();
        name == self.0.kind.to_ascii_lowercase() || self.0.aliases.contains(&name.as_str())
    }
}

/// Pointers in the table are checked when the table is made (tests for the built-in entries,
/// [`Declaration::check`] for declared ones), so they always parse.
fn pointer(text: &'static str) -> &'static Pointer {
    Pointer::parse(text).unwrap_or_else(|_| Pointer::root())
}

impl PartialEq for WorkloadKind {
    fn eq(&self, other: &Self) -> bool {
        self.0.kind == other.0.kind
    }
}

impl Eq for WorkloadKind {}

impl PartialOrd for WorkloadKind {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for WorkloadKind {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.kind.cmp(other.0.kind)
    }
}

impl std::hash::Hash for WorkloadKind {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.kind.hash(state);
    }
}

impl fmt::Debug for WorkloadKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0.kind)
    }
}

impl fmt::Display for WorkloadKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0.kind)
    }
}

/// A kind declared in the operator's settings: a CRD with a pod template that cmset does not know,
/// such as OpenKruise's CloneSet.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Declaration {
    pub group: String,
    pub version: String,
    pub kind: String,
    /// Where its pod template lives: dotted field names (`spec.template`) or a JSON pointer
    /// (`/spec/template`).
    pub template: String,
}

/// Why a declaration cannot be served.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeclarationError {
    pub declaration: String,
    pub problem: String,
}

impl fmt::Display for DeclarationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "workload kind {:?}: {}", self.declaration, self.problem)
    }
}

impl std::error::Error for DeclarationError {}

impl Declaration {
    /// Parses the flag form `GROUP/VERSION/KIND=TEMPLATE`, e.g.
    /// `apps.kruise.io/v1alpha1/CloneSet=spec.template`.
    pub fn parse(text: &str) -> Result<Self, DeclarationError> {
        let error = |problem: &str| DeclarationError {
            declaration: text.to_string(),
            problem: problem.to_string(),
        };
        let form =
            "expected GROUP/VERSION/KIND=TEMPLATE, e.g. apps.kruise.io/v1alpha1/CloneSet=spec.template";
        let (resource, template) = text.trim().split_once('=').ok_or_else(|| error(form))?;
        let parts: Vec<&str> = resource.split('/').collect();
        let [group, version, kind] = parts[..] else {
            return Err(error(form));
        };
        let declaration = Self {
            group: group.to_string(),
            version: version.to_string(),
            kind: kind.to_string(),
            template: template.to_string(),
        };
        declaration.check().map_err(|e| DeclarationError {
            declaration: text.to_string(),
            ..e
        })?;
        Ok(declaration)
    }

    fn label(&self) -> String {
        format!("{}/{}/{}={}", self.group, self.version, self.kind, self.template)
    }

    /// The template's JSON pointer, from either spelling.
    pub fn template_pointer(&self) -> Result<String, String> {
        let text = self.template.trim();
        let tokens: Vec<String> = if let Some(pointer) = text.strip_prefix('/') {
            pointer.split('/').map(str::to_string).collect()
        } else {
            text.split('.').map(str::to_string).collect()
        };
        if tokens.iter().any(|t| t.is_empty()) {
            return Err(format!(
                "template {text:?} is not a path of field names such as spec.template"
            ));
        }
        if tokens.first().map(String::as_str) != Some("spec") {
            return Err(format!(
                "template {text:?} must lie under spec (a pod template is part of the desired state)"
            ));
        }
        let pointer = format!(
            "/{}",
            tokens
                .iter()
                .map(|t| if text.starts_with('/') {
                    t.clone()
                } else {
                    crate::workloads::refs::escape_pointer_token(t)
                })
                .collect::<Vec<_>>()
                .join("/")
        );
        Pointer::parse(&pointer).map_err(|e| format!("template {text:?}: {e}"))?;
        Ok(pointer)
    }

    /// Whether the declaration describes something cmset can serve.
    pub fn check(&self) -> Result<(), DeclarationError> {
        let error = |problem: String| DeclarationError {
            declaration: self.label(),
            problem,
        };
        if !is_dns_subdomain(&self.group) || !self.group.contains('.') {
            return Err(error(format!(
                "group {:?} is not the API group of a custom resource (a DNS name such as apps.kruise.io)",
                self.group
            )));
        }
        if !is_version(&self.version) {
            return Err(error(format!(
                "version {:?} is not an API version such as v1 or v1alpha1",
                self.version
            )));
        }
        if !is_kind(&self.kind) {
            return Err(error(format!(
                "kind {:?} is not a kind name such as CloneSet (a letter, then letters and digits)",
                self.kind
            )));
        }
        self.template_pointer().map_err(error)?;
        Ok(())
    }
}

fn is_dns_subdomain(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= 253
        && text.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

fn is_version(text: &str) -> bool {
    let Some(rest) = text.strip_prefix('v') else {
        return false;
    };
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 || rest.starts_with('0') {
        return false;
    }
    let tail = &rest[digits..];
    tail.is_empty()
        || ["alpha", "beta"].iter().any(|stage| {
            tail.strip_prefix(stage).is_some_and(|n| {
                !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) && !n.starts_with('0')
            })
        })
}

fn is_kind(text: &str) -> bool {
    text.len() <= 63
        && text.chars().next().is_some_and(|c| c.is_ascii_uppercase())
        && text.chars().all(|c| c.is_ascii_alphanumeric())
}

/// Every kind one operator serves: the built-in ones and those declared at start-up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Kinds {
    all: Vec<WorkloadKind>,
}

impl Default for Kinds {
    fn default() -> Self {
        Self::built_in()
    }
}

impl Kinds {
    pub fn built_in() -> Self {
        Self {
            all: WorkloadKind::BUILT_IN.to_vec(),
        }
    }

    /// The built-in kinds and `declared`, each checked; a kind name may appear once.
    ///
    /// A declared kind's entry lives as long as the process (it is leaked once, at start-up), so that it
    /// is as cheap to pass around as a built-in one.
    pub fn with_declared(declared: &[Declaration]) -> Result<Self, DeclarationError> {
        let mut all = WorkloadKind::BUILT_IN.to_vec();
        let mut seen: BTreeMap<String, String> = all
            .iter()
            .map(|k| (k.as_str().to_string(), format!("the built-in {}", k.as_str())))
            .collect();
        for declaration in declared {
            declaration.check()?;
            if let Some(earlier) = seen.get(&declaration.kind) {
                return Err(DeclarationError {
                    declaration: declaration.label(),
                    problem: format!(
                        "kind {} is already served as {earlier}; kinds are told apart by name in a set's status",
                        declaration.kind
                    ),
                });
            }
            seen.insert(declaration.kind.clone(), declaration.label());
            all.push(WorkloadKind(leak(declaration)));
        }
        Ok(Self { all })
    }

    pub fn iter(&self) -> impl Iterator<Item = WorkloadKind> + '_ {
        self.all.iter().copied()
    }

    /// A kind by its kind name.
    pub fn parse(&self, kind: &str) -> Option<WorkloadKind> {
        self.iter().find(|k| k.as_str() == kind)
    }

    /// The kinds declared at start-up.
    pub fn declared(&self) -> impl Iterator<Item = WorkloadKind> + '_ {
        self.iter().filter(|k| k.spec().declared)
    }
}

fn leak(declaration: &Declaration) -> &'static KindSpec {
    let text = |s: &str| -> &'static str { Box::leak(s.to_string().into_boxed_str()) };
    // `check` passed, so the pointer is there.
    let template = declaration.template_pointer().unwrap_or_default();
    let version: &'static str = text(&declaration.version);
    Box::leak(Box::new(KindSpec {
        group: text(&declaration.group),
        versions: Box::leak(vec![version].into_boxed_slice()),
        kind: text(&declaration.kind),
        plural: None,
        template: text(&template),
        pod_spec: text(&format!("{template}/spec")),
        managed_metadata: &[],
        history: HistoryRule::None,
        health: HealthRule::Conditions,
        hold: None,
        template_mutable: true,
        aliases: &[],
        declared: true,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_pointer_of_the_built_in_table_parses_and_pod_specs_sit_in_templates() {
        for kind in WorkloadKind::BUILT_IN {
            let spec = kind.spec();
            for p in [spec.template, spec.pod_spec]
                .into_iter()
                .chain(spec.managed_metadata.iter().copied())
                .chain(spec.hold)
            {
                assert!(Pointer::parse(p).is_ok(), "{kind}: {p}");
            }
            assert_eq!(spec.pod_spec, format!("{}/spec", spec.template), "{kind}");
            assert!(!spec.versions.is_empty(), "{kind}");
            assert!(
                spec.plural.is_some(),
                "{kind}: built-in kinds name their resource"
            );
            assert_eq!(WorkloadKind::parse(kind.as_str()), Some(kind));
        }
    }

    #[test]
    fn the_table_says_what_each_kind_is() {
        use HealthRule as H;
        use HistoryRule as R;
        let rows = [
            (
                WorkloadKind::Deployment,
                "apps",
                "/spec/template",
                R::ReplicaSets,
                H::Deployment,
                true,
                true,
            ),
            (
                WorkloadKind::StatefulSet,
                "apps",
                "/spec/template",
                R::ControllerRevisions,
                H::StatefulSet,
                false,
                true,
            ),
            (
                WorkloadKind::DaemonSet,
                "apps",
                "/spec/template",
                R::ControllerRevisions,
                H::DaemonSet,
                false,
                true,
            ),
            (
                WorkloadKind::CronJob,
                "batch",
                "/spec/jobTemplate/spec/template",
                R::Jobs,
                H::Moved,
                true,
                true,
            ),
            (
                WorkloadKind::Job,
                "batch",
                "/spec/template",
                R::None,
                H::Moved,
                false,
                false,
            ),
            (
                WorkloadKind::Rollout,
                "argoproj.io",
                "/spec/template",
                R::ReplicaSets,
                H::ArgoRollout,
                true,
                true,
            ),
        ];
        for (kind, group, template, history, health, held, mutable) in rows {
            let spec = kind.spec();
            assert_eq!(
                (
                    spec.group,
                    spec.template,
                    spec.history,
                    spec.health,
                    spec.hold.is_some(),
                    spec.template_mutable
                ),
                (group, template, history, health, held, mutable),
                "{kind}"
            );
        }
        assert_eq!(WorkloadKind::CronJob.spec().versions, ["v1", "v1beta1"]);
        assert!(WorkloadKind::Rollout.rolls_out());
        assert!(
            !WorkloadKind::CronJob.rolls_out(),
            "a CronJob has no rollout to wait for"
        );
        assert!(!WorkloadKind::Job.rolls_out());
    }

    #[test]
    fn kinds_are_compared_by_name_and_called_by_aliases() {
        assert_eq!(
            WorkloadKind::Deployment,
            WorkloadKind::parse("Deployment").unwrap()
        );
        assert_ne!(WorkloadKind::Deployment, WorkloadKind::StatefulSet);
        assert_eq!(format!("{:?}", WorkloadKind::CronJob), "CronJob");
        assert!(WorkloadKind::Rollout.is_called("rollout"));
        assert!(WorkloadKind::Rollout.is_called("ro"));
        assert!(WorkloadKind::Deployment.is_called("deploy"));
        assert!(WorkloadKind::CronJob.is_called("CronJobs"));
        assert!(!WorkloadKind::Job.is_called("cronjob"));
    }

    #[test]
    fn declarations_parse_from_the_flag_form() {
        let d = Declaration::parse("apps.kruise.io/v1alpha1/CloneSet=spec.template").unwrap();
        assert_eq!(
            d,
            Declaration {
                group: "apps.kruise.io".into(),
                version: "v1alpha1".into(),
                kind: "CloneSet".into(),
                template: "spec.template".into(),
            }
        );
        assert_eq!(d.template_pointer().unwrap(), "/spec/template");
        let nested = Declaration::parse("serving.knative.dev/v1/Service=/spec/template").unwrap();
        assert_eq!(nested.template_pointer().unwrap(), "/spec/template");
    }

    #[test]
    fn bad_declarations_say_what_is_wrong() {
        let cases = [
            (
                "apps.kruise.io/v1alpha1/CloneSet",
                "expected GROUP/VERSION/KIND=TEMPLATE",
            ),
            (
                "apps.kruise.io/CloneSet=spec.template",
                "expected GROUP/VERSION/KIND=TEMPLATE",
            ),
            (
                "apps/v1/Thing=spec.template",
                "not the API group of a custom resource",
            ),
            ("Apps.Kruise.io/v1/CloneSet=spec.template", "not the API group"),
            ("apps.kruise.io/1/CloneSet=spec.template", "not an API version"),
            (
                "apps.kruise.io/v1gamma1/CloneSet=spec.template",
                "not an API version",
            ),
            ("apps.kruise.io/v1/cloneSet=spec.template", "not a kind name"),
            ("apps.kruise.io/v1/Clone-Set=spec.template", "not a kind name"),
            ("apps.kruise.io/v1/CloneSet=", "not a path of field names"),
            (
                "apps.kruise.io/v1/CloneSet=spec..template",
                "not a path of field names",
            ),
            ("apps.kruise.io/v1/CloneSet=template", "must lie under spec"),
        ];
        for (text, expected) in cases {
            let error = Declaration::parse(text).unwrap_err();
            assert!(
                error.to_string().contains(expected),
                "{text}: {error} lacks {expected:?}"
            );
            assert!(error.to_string().contains(text), "{error} names the declaration");
        }
    }

    #[test]
    fn declared_kinds_join_the_table_once_and_never_shadow_a_built_in_one() {
        let clone_set = Declaration::parse("apps.kruise.io/v1alpha1/CloneSet=spec.template").unwrap();
        let kinds = Kinds::with_declared(std::slice::from_ref(&clone_set)).unwrap();
        let kind = kinds.parse("CloneSet").unwrap();
        assert!(kind.spec().declared);
        assert_eq!(kind.pod_spec().as_str(), "/spec/template/spec");
        assert_eq!(kind.spec().health, HealthRule::Conditions);
        assert_eq!(kinds.declared().collect::<Vec<_>>(), [kind]);
        assert_eq!(kinds.parse("Deployment"), Some(WorkloadKind::Deployment));

        let twice = Kinds::with_declared(&[clone_set.clone(), clone_set]).unwrap_err();
        assert!(twice.problem.contains("already served"), "{twice}");
        let shadow = Declaration::parse("argoproj.example.com/v1/Rollout=spec.template").unwrap();
        let error = Kinds::with_declared(&[shadow]).unwrap_err();
        assert!(error.problem.contains("the built-in Rollout"), "{error}");
    }
}
