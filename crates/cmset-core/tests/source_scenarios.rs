//! Sets whose content lives in a source object: a SecretSet (revisions are Secrets) and a ConfigMapSet
//! in source mode (`spec.configMapName`). Literal observations in, the exact writes out.

use std::collections::BTreeMap;

use cmset_api::{
    ConfigMapSet, ConfigMapSetSpec, ConfigMapSetStatus, SecretSet, SecretSetSpec, WorkloadState, labels,
};
use cmset_core::revisions::revision::{NewRevision, set_owner_reference};
use cmset_core::rollout::pinning::{SetTarget, plan_workload};
use cmset_core::rollout::plan::{SetInput, SetPlan, plan_set};
use cmset_core::set::{Content, SetRef, SourceState};
use cmset_core::workloads::observe::{RevisionView, WorkloadKind, WorkloadView};
use cmset_core::workloads::refs::Referenced;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, PodSpec, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use serde_json::json;

const NS: &str = "team";

fn secret_set(name: &str, source: &str) -> SecretSet {
    let mut set = SecretSet::new(
        name,
        SecretSetSpec {
            secret_name: source.into(),
            revision_history_limit: 10,
            rollout: None,
            ..SecretSetSpec::default()
        },
    );
    set.metadata.namespace = Some(NS.into());
    set.metadata.uid = Some(format!("uid-{name}"));
    set.metadata.generation = Some(1);
    set
}

fn source_secret(type_: &str, data: &[(&str, &str)]) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some("db-credentials".into()),
            namespace: Some(NS.into()),
            resource_version: Some("7".into()),
            ..ObjectMeta::default()
        },
        type_: Some(type_.into()),
        data: Some(
            data.iter()
                .map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec())))
                .collect(),
        ),
        ..Secret::default()
    }
}

fn plan(
    set: SetRef<'_>,
    source: SourceState<'_>,
    revisions: &[RevisionView],
    workloads: &[WorkloadView],
) -> SetPlan {
    plan_set(&SetInput {
        set,
        source,
        revisions,
        workloads,
        history: &[],
        pod_refs: None,
        now: Time(Timestamp::from_second(1_800_000_000).unwrap()),
        budget_waiting: &Default::default(),
        analysis: None,
        windows: &Default::default(),
        schemas: &Default::default(),
        check_jobs: &Default::default(),
        content_budget: Default::default(),
    })
}

fn ready_of(plan: &SetPlan) -> (String, String, String) {
    let ready = plan
        .status
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .expect("a Ready condition");
    (ready.status.clone(), ready.reason.clone(), ready.message.clone())
}

/// A revision of `set` as the controller makes it, as its watch sees it.
fn revision_view(set: SetRef<'_>, name: &str, number: i64) -> RevisionView {
    RevisionView {
        name: name.into(),
        uid: format!("uid-{name}"),
        labels: BTreeMap::from([(labels::SET.to_string(), set.name().to_string())]),
        annotations: BTreeMap::from([
            (labels::REVISION.to_string(), number.to_string()),
            (
                labels::CONTENT_HASH.to_string(),
                name.rsplit('-').next().unwrap().to_string(),
            ),
        ]),
        owner_references: vec![set_owner_reference(set)],
        being_deleted: false,
        created: None,
        resource_version: None,
    }
}

fn workload(spec: serde_json::Value) -> WorkloadView {
    WorkloadView {
        kind: WorkloadKind::Deployment,
        name: "web".into(),
        uid: "uid-web".into(),
        pod_spec: serde_json::from_value::<PodSpec>(spec).unwrap(),
        template_labels: BTreeMap::new(),
        wave: Default::default(),
        health: Default::default(),
    }
}

// From the issue, checked with `kubectl kustomize`: Opaque password=s3cret,user=app.
const DB_V1: &str = "db-9k5ddchd8d";

#[test]
fn a_secret_set_stamps_an_immutable_secret_of_the_source_s_type_with_the_kustomize_name() {
    let set = secret_set("db", "db-credentials");
    let source = source_secret("Opaque", &[("password", "s3cret"), ("user", "app")]);
    let p = plan(
        (&set).into(),
        SourceState::Read(Content::of_secret(&source)),
        &[],
        &[],
    );
    let Some(NewRevision::Secret(revision)) = &p.create else {
        panic!("a Secret revision to create: {p:?}");
    };
    assert_eq!(revision.metadata.name.as_deref(), Some(DB_V1));
    assert_eq!(revision.immutable, Some(true));
    assert_eq!(revision.type_.as_deref(), Some("Opaque"));
    assert_eq!(revision.data, source.data);
    assert_eq!(revision.metadata.labels.as_ref().unwrap()[labels::SET], "db");
    assert_eq!(
        revision.metadata.annotations.as_ref().unwrap()[labels::REVISION],
        "1"
    );
    let owner = &revision.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!((owner.kind.as_str(), owner.controller), ("SecretSet", Some(true)));
    assert_eq!(
        p.events[0].message,
        format!("Created revision 1 as Secret {DB_V1}")
    );

    // A TLS source keeps its type, and its name is kustomize's for that type.
    let tls = source_secret("kubernetes.io/tls", &[("tls.crt", "CERT"), ("tls.key", "KEY")]);
    let p = plan(
        (&set).into(),
        SourceState::Read(Content::of_secret(&tls)),
        &[],
        &[],
    );
    let Some(NewRevision::Secret(revision)) = &p.create else {
        panic!("a Secret revision");
    };
    assert_eq!(revision.metadata.name.as_deref(), Some("db-4b255hm948"));
    assert_eq!(revision.type_.as_deref(), Some("kubernetes.io/tls"));
}

#[test]
fn a_known_identity_finds_the_existing_revision_without_reading_the_source() {
    let set = secret_set("db", "db-credentials");
    let existing = [revision_view((&set).into(), DB_V1, 1)];
    let p = plan((&set).into(), SourceState::Known("9k5ddchd8d"), &existing, &[]);
    assert!(!p.needs_content && p.create.is_none(), "{p:?}");
    assert_eq!(p.status.current_revision.as_deref(), Some(DB_V1));
    assert_eq!(ready_of(&p).1, "RolledOut");
}

#[test]
fn new_content_known_only_by_identity_asks_for_the_content_and_plans_nothing_else() {
    let mut set = secret_set("db", "db-credentials");
    set.status = Some(ConfigMapSetStatus {
        revision: Some(1),
        current_revision: Some(DB_V1.into()),
        ..ConfigMapSetStatus::default()
    });
    let existing = [revision_view((&set).into(), DB_V1, 1)];
    let p = plan((&set).into(), SourceState::Known("tttttttttt"), &existing, &[]);
    assert!(p.needs_content);
    assert!(p.create.is_none() && p.patches.is_empty() && p.prune.is_empty() && p.events.is_empty());
    assert!(
        !p.is_quiet((&set).into()),
        "a plan that needs the content is not quiet"
    );
    assert!(!p.status_changed((&set).into()), "the status waits for the read");
}

#[test]
fn a_missing_source_is_reported_once_and_workloads_stay_on_the_last_good_revision() {
    let mut set = secret_set("db", "db-credentials");
    set.status = Some(ConfigMapSetStatus {
        observed_generation: Some(1),
        revision: Some(1),
        current_revision: Some(DB_V1.into()),
        ..ConfigMapSetStatus::default()
    });
    let existing = [revision_view((&set).into(), DB_V1, 1)];
    let p = plan((&set).into(), SourceState::Missing, &existing, &[]);
    let (status, reason, message) = ready_of(&p);
    assert_eq!((status.as_str(), reason.as_str()), ("False", "SourceNotFound"));
    assert_eq!(
        message,
        format!(
            "Secret {NS}/db-credentials does not exist; workloads stay on revision 1 ({DB_V1}) until it can be read"
        )
    );
    assert_eq!(
        p.status.current_revision.as_deref(),
        Some(DB_V1),
        "the last good revision stays"
    );
    assert!(p.create.is_none() && p.prune.is_empty() && p.patches.is_empty());
    assert_eq!(p.events.len(), 1);
    // Told once: the same plan again publishes nothing and writes nothing.
    let mut reported = set.clone();
    reported.status = Some(p.status.clone());
    let again = plan((&reported).into(), SourceState::Missing, &existing, &[]);
    assert!(
        again.events.is_empty() && again.is_quiet((&reported).into()),
        "{again:?}"
    );
    // Workloads keep the recorded revision: the target falls back to the status.
    let target = SetTarget::observed((&reported).into(), None, &existing, "uid-web").unwrap();
    assert_eq!(target.current, DB_V1);
    // Unreadable (forbidden) is its own reason.
    let refused = plan(
        (&set).into(),
        SourceState::Unreadable("forbidden"),
        &existing,
        &[],
    );
    assert_eq!(ready_of(&refused).1, "SourceUnreadable");
}

#[test]
fn a_secret_set_moves_only_secret_references_and_a_config_map_set_only_config_map_ones() {
    let secrets = secret_set("app", "app-src");
    let mut configs = ConfigMapSet::new("app", ConfigMapSetSpec::default());
    configs.metadata.namespace = Some(NS.into());
    configs.metadata.uid = Some("uid-cms".into());
    let web = workload(json!({
        "containers": [{"name": "c", "envFrom": [{"secretRef": {"name": "app"}}, {"configMapRef": {"name": "app"}}],
            "env": [{"name": "P", "valueFrom": {"secretKeyRef": {"name": "app", "key": "password"}}}]}],
        "volumes": [{"name": "s", "secret": {"secretName": "app"}},
                    {"name": "p", "projected": {"sources": [{"secret": {"name": "app"}}, {"configMap": {"name": "app"}}]}}]
    }));
    let secret_target = SetTarget {
        kind: Referenced::Secret,
        name: "app".into(),
        current: "app-9k5ddchd8d".into(),
        revisions: ["app-9k5ddchd8d".to_string()].into(),
        rolled_out: None,
        gate: cmset_core::rollout::waves::Gate::Open,
        immediate: false,
    };
    let plan_secrets = plan_workload(&web, std::slice::from_ref(&secret_target));
    let moved: Vec<&str> = plan_secrets.changes.iter().map(|c| c.pointer.as_str()).collect();
    assert_eq!(
        moved,
        [
            "/volumes/0/secret/secretName",
            "/volumes/1/projected/sources/0/secret/name",
            "/containers/0/env/0/valueFrom/secretKeyRef/name",
            "/containers/0/envFrom/0/secretRef/name",
        ]
    );
    let config_target = SetTarget {
        kind: Referenced::ConfigMap,
        name: "app".into(),
        current: "app-d2c65kk9hm".into(),
        revisions: ["app-d2c65kk9hm".to_string()].into(),
        rolled_out: None,
        gate: cmset_core::rollout::waves::Gate::Open,
        immediate: false,
    };
    let both = plan_workload(&web, &[secret_target, config_target]);
    assert_eq!(
        both.changes.len(),
        6,
        "one plan, one rollout, for both kinds: {both:?}"
    );
    let configs_only: Vec<String> = both
        .changes
        .iter()
        .filter(|c| c.to.starts_with("app-d2c"))
        .map(|c| c.pointer.to_string())
        .collect();
    assert_eq!(
        configs_only,
        [
            "/volumes/1/projected/sources/1/configMap/name",
            "/containers/0/envFrom/1/configMapRef/name"
        ]
    );
    // The set planners see only their own kind's references.
    let p = plan(
        (&configs).into(),
        SourceState::Inline,
        &[],
        std::slice::from_ref(&web),
    );
    assert_eq!(p.status.workloads.len(), 1);
    assert_eq!(p.status.workloads[0].state, WorkloadState::Pending);
    let secret_plan = plan(
        (&secrets).into(),
        SourceState::Known("9k5ddchd8d"),
        &[revision_view((&secrets).into(), "app-9k5ddchd8d", 1)],
        std::slice::from_ref(&web),
    );
    assert_eq!(secret_plan.status.workloads[0].revision, "app");
}

#[test]
fn a_config_map_set_in_source_mode_versions_the_source_with_the_generator_s_name() {
    let mut set = ConfigMapSet::new(
        "nginx-config",
        ConfigMapSetSpec {
            config_map_name: Some("nginx-from-helm".into()),
            revision_history_limit: 10,
            rollout: None,
            ..ConfigMapSetSpec::default()
        },
    );
    set.metadata.namespace = Some(NS.into());
    set.metadata.uid = Some("uid-cms".into());
    set.metadata.generation = Some(1);
    let source: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "nginx-from-helm"}, "data": {"APP_VERSION": "1"}
    }))
    .unwrap();
    let p = plan(
        (&set).into(),
        SourceState::Read(Content::of_config_map(&source)),
        &[],
        &[],
    );
    let revision = p
        .create
        .as_ref()
        .and_then(NewRevision::config_map)
        .expect("a ConfigMap");
    // The name an inline template with the same data gets (checked with `kubectl kustomize`).
    assert_eq!(revision.metadata.name.as_deref(), Some("nginx-config-d2c65kk9hm"));
    assert_eq!(revision.data, source.data);
    // Both a source and inline data: refused with a message naming the field.
    let mut both = set.clone();
    both.spec.template.data = Some(BTreeMap::from([("K".to_string(), "v".to_string())]));
    let refused = plan(
        (&both).into(),
        SourceState::Read(Content::of_config_map(&source)),
        &[],
        &[],
    );
    let (status, reason, message) = ready_of(&refused);
    assert_eq!((status.as_str(), reason.as_str()), ("False", "InvalidSpec"));
    assert!(message.starts_with("spec.configMapName:"), "{message}");
}

#[test]
fn a_secret_set_s_spec_is_validated_like_a_config_map_set_s() {
    let mut set = secret_set("db", "Not_A_Name");
    set.spec.revision_history_limit = -1;
    let p = plan((&set).into(), SourceState::Missing, &[], &[]);
    let (status, reason, message) = ready_of(&p);
    assert_eq!((status.as_str(), reason.as_str()), ("False", "InvalidSpec"));
    assert!(
        message.contains("spec.secretName") && message.contains("spec.revisionHistoryLimit"),
        "{message}"
    );
}
