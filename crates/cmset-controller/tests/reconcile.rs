//! Reconcile scenarios against a mocked API server. Each states the exact requests the controller sends
//! (method, path, and the bodies that matter), and the scenarios where it must send none assert exactly
//! that: an unchanged set, a restart with everything in place, a pinned workload, a workload not opted in.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock};

use cmset_api::{
    AnalysisTemplate, ConfigMapSet, ConfigMapSetSpec, ConfigMapTemplate, SecretSet, SecretSetSpec, labels,
};
use cmset_controller::engine::context::{Clock, Context as EngineContext};
use cmset_controller::engine::index::{
    Index, Key, TEMPLATES, TriggerReceivers, TriggerSenders, trigger_channels,
};
use cmset_controller::engine::rollout_budget::RolloutBudget;
use cmset_controller::engine::stored_workload::StoredWorkload;
use cmset_controller::engine::stores::{Stores, WorkloadStore};
use cmset_controller::platform::metrics::Metrics;
use cmset_controller::reconcile::context::Context;
use cmset_controller::reconcile::{set_controller, workload_controller};
use cmset_core::revisions::revision::NewRevision;
use cmset_core::rollout::plan::{SetInput, plan_set};
use cmset_core::set::{Content, SetKind, SourceState};
use cmset_core::workloads::observe::WorkloadKind;
use futures::StreamExt;
use k8s_openapi::api::apps::v1::{ControllerRevision, Deployment, DeploymentSpec, ReplicaSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{
    ConfigMap, ConfigMapEnvSource, Container, EnvFromSource, PodSpec, PodTemplateSpec, Secret,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference, Time};
use k8s_openapi::jiff::Timestamp;
use kube::Resource;
use kube::api::ApiResource;
use kube::core::PartialObjectMeta;
use kube::runtime::controller::Action;
use kube::runtime::reflector::{self, store::Writer};
use kube::runtime::watcher;
use serde_json::{Value, json};

mod support;

use support::{Responder, Seen, mock_client, server_ends};

const NS: &str = "team";
const V1: &str = "nginx-config-d2c65kk9hm";
const V2: &str = "nginx-config-tc2kg4m444";

/// The answer to a create whose name is taken.
fn already_exists() -> (u16, Value) {
    (
        409,
        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "AlreadyExists", "code": 409}),
    )
}

/// The answers of a well-behaved API server: creates and patches echo an object, events succeed.
fn ok_responder(set: ConfigMapSet) -> Responder {
    Arc::new(move |s: &Seen| match (s.method.as_str(), s.path.as_str()) {
        ("POST", p) if p.ends_with("/events") => (201, s.body.clone()),
        ("POST", p) if p.ends_with("/configmaps") => (201, s.body.clone()),
        ("PATCH", p) if p.ends_with("/status") => (200, serde_json::to_value(&set).unwrap()),
        ("PATCH", p) => {
            let name = p.rsplit('/').next().unwrap();
            (
                200,
                json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata", "metadata": {"name": name}}),
            )
        }
        ("DELETE", _) => (
            200,
            json!({"apiVersion": "v1", "kind": "Status", "status": "Success", "code": 200}),
        ),
        ("GET", p) if p.ends_with("/pods") => (
            200,
            json!({"apiVersion": "v1", "kind": "PodList", "metadata": {}, "items": []}),
        ),
        _ => (
            500,
            json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": "unexpected", "code": 500}),
        ),
    })
}

/// What the controllers observe: the stores they are keyed by and the index, fed the way the watches
/// feed them.
struct World {
    sets: Writer<ConfigMapSet>,
    secret_sets: Writer<SecretSet>,
    deployments: Writer<StoredWorkload>,
    templates: Writer<AnalysisTemplate>,
    index: Arc<Index>,
    stores: Stores,
}

/// Deployments as the workload watch keeps them: dynamic objects of the table's kind.
fn deployment_resource() -> ApiResource {
    ApiResource::erase::<Deployment>(&())
}

/// A Deployment as its watch stores it: decoded by its wire type, slimmed.
fn dynamic(d: &Deployment) -> StoredWorkload {
    let object: cmset_controller::engine::wire::WireWorkload =
        serde_json::from_value(serde_json::to_value(d).unwrap()).unwrap();
    StoredWorkload::slim(WorkloadKind::Deployment, object)
}

impl World {
    fn new() -> Self {
        Self::with_budget(None)
    }

    /// A world whose index feeds the cluster-wide rollout budget `budget`.
    fn with_budget(budget: Option<Arc<RolloutBudget>>) -> Self {
        let world = Self::build(budget, None);
        world.list_history();
        world
    }

    /// A world as a replica that has just taken the lease sees it: its history watches have not
    /// listed yet.
    fn before_history_lists() -> Self {
        Self::build(None, None)
    }

    /// The history watches deliver their first lists (nothing).
    fn list_history(&self) {
        self.index.handle::<ReplicaSet>(&watcher::Event::InitDone);
        self.index.handle::<ControllerRevision>(&watcher::Event::InitDone);
        self.index.handle::<Job>(&watcher::Event::InitDone);
    }

    /// A world whose index sends the reconciles it triggers to the returned queues, as a leader's does.
    fn leading() -> (Self, TriggerReceivers) {
        let (senders, receivers) = trigger_channels();
        let world = Self::build(None, Some(senders));
        world.index.lead();
        world.list_history();
        (world, receivers)
    }

    fn build(budget: Option<Arc<RolloutBudget>>, senders: Option<TriggerSenders>) -> Self {
        let (sets_r, sets) = reflector::store();
        let (secret_sets_r, secret_sets) = reflector::store();
        let (templates_r, templates) = reflector::store();
        let deployments = Writer::new(deployment_resource());
        let index = Arc::new(Index::new(senders).with_budget(budget));
        // Every watch has listed (nothing yet), but the history kinds' (see `list_history`): the
        // caches count as ready.
        for kind in [
            "ConfigMapSet",
            "ConfigMap",
            "Deployment",
            "ReplicaSet",
            "ControllerRevision",
            "Job",
            TEMPLATES,
        ] {
            index.expect(kind);
        }
        index.settle();
        index.handle_template(&watcher::Event::InitDone);
        index.handle::<ConfigMapSet>(&watcher::Event::InitDone);
        index.handle::<PartialObjectMeta<ConfigMap>>(&watcher::Event::InitDone);
        index.handle_workload(WorkloadKind::Deployment, &watcher::Event::InitDone);
        let workloads = HashMap::from([(
            WorkloadKind::Deployment,
            WorkloadStore {
                resource: deployment_resource(),
                store: deployments.as_reader(),
            },
        )]);
        Self {
            sets,
            secret_sets,
            deployments,
            templates,
            index,
            stores: Stores {
                sets: sets_r,
                secret_sets: Some(secret_sets_r),
                workloads: Arc::new(RwLock::new(workloads)),
                templates: Some(templates_r),
            },
        }
    }

    /// An AnalysisTemplate as its watch stores it.
    fn add_template(&mut self, name: &str, spec: Value) {
        let template: AnalysisTemplate = serde_json::from_value(json!({
            "apiVersion": "cmset.dev/v1alpha1", "kind": "AnalysisTemplate",
            "metadata": {"name": name}, "spec": spec,
        }))
        .unwrap();
        let event = watcher::Event::Apply(template);
        self.templates.apply_watcher_event(&event);
        self.index.handle_template(&event);
    }

    fn add_set(&mut self, set: &ConfigMapSet) {
        let event = watcher::Event::Apply(set.clone());
        self.sets.apply_watcher_event(&event);
        self.index.handle(&event);
    }

    fn add_secret_set(&mut self, set: &SecretSet) {
        let event = watcher::Event::Apply(set.clone());
        self.secret_sets.apply_watcher_event(&event);
        self.index.handle(&event);
    }

    /// A Secret as the metadata-only watch sees it: a source's new version, or a revision.
    fn see_secret(&mut self, secret: &Secret) {
        let meta = PartialObjectMeta::<Secret> {
            types: None,
            metadata: secret.metadata.clone(),
            _phantom: Default::default(),
        };
        self.index.handle(&watcher::Event::Apply(meta));
    }

    fn add_revision(&mut self, cm: &ConfigMap) {
        let meta = PartialObjectMeta::<ConfigMap> {
            types: None,
            metadata: cm.metadata.clone(),
            _phantom: Default::default(),
        };
        self.index.handle(&watcher::Event::Apply(meta));
    }

    fn add_deployment(&mut self, d: &Deployment) {
        let event = watcher::Event::Apply(dynamic(d));
        self.deployments.apply_watcher_event(&event);
        self.index.handle_workload(WorkloadKind::Deployment, &event);
    }

    fn add_replica_set(&mut self, rs: &ReplicaSet) {
        self.index.handle(&watcher::Event::Apply(rs.clone()));
    }

    fn revisions(&self) -> Vec<cmset_core::workloads::observe::RevisionView> {
        self.index.revisions(SetKind::ConfigMapSet, NS, "nginx-config")
    }
}

fn fixed_clock() -> Clock {
    Arc::new(|| Time(Timestamp::from_second(1_800_000_000).unwrap()))
}

/// Runs `f` against a mocked API answering with `respond`; returns what `f` returned and every request.
async fn scenario<F, Fut, T>(world: &World, respond: Responder, f: F) -> (T, Vec<Seen>)
where
    F: FnOnce(Arc<Context>) -> Fut,
    Fut: std::future::Future<Output = T>,
{
    scenario_after(world, respond, |_| {}, f).await
}

/// [`scenario`], with the context prepared first (as earlier reconciles would have left it).
async fn scenario_after<F, Fut, T>(
    world: &World,
    respond: Responder,
    prepare: impl FnOnce(&EngineContext),
    f: F,
) -> (T, Vec<Seen>)
where
    F: FnOnce(Arc<Context>) -> Fut,
    Fut: std::future::Future<Output = T>,
{
    scenario_in(world, respond, |ctx| prepare(ctx), f).await
}

/// [`scenario`], with the engine's part of the context set up by `configure` first.
async fn scenario_in<F, Fut, T>(
    world: &World,
    respond: Responder,
    configure: impl FnOnce(&mut EngineContext),
    f: F,
) -> (T, Vec<Seen>)
where
    F: FnOnce(Arc<Context>) -> Fut,
    Fut: std::future::Future<Output = T>,
{
    let (client, server, seen) = mock_client(respond, NS);
    let mut engine = EngineContext::new(
        client,
        world.index.clone(),
        world.stores.clone(),
        Arc::new(Metrics::default()),
        fixed_clock(),
        None,
    );
    configure(&mut engine);
    let out = f(Arc::new(Context::new(engine))).await;
    // Dropping the last client ends the mock server.
    server_ends(server).await;
    let seen = seen.lock().unwrap().clone();
    (out, seen)
}

/// Reconciles `set` against a well-behaved mocked API server.
async fn reconcile_set(
    world: &World,
    set: &ConfigMapSet,
) -> (cmset_controller::platform::error::Result<Action>, Vec<Seen>) {
    let owned = set.clone();
    scenario(world, ok_responder(set.clone()), |ctx| {
        set_controller::reconcile(Arc::new(owned), ctx)
    })
    .await
}

/// Reconciles `deployment` against a well-behaved mocked API server.
async fn reconcile_deployment(
    world: &World,
    set: &ConfigMapSet,
    deployment: &Deployment,
) -> (cmset_controller::platform::error::Result<Action>, Vec<Seen>) {
    let owned = deployment.clone();
    scenario(world, ok_responder(set.clone()), |ctx| {
        workload_controller::reconcile(WorkloadKind::Deployment, Arc::new(dynamic(&owned)), ctx)
    })
    .await
}

fn assert_no_requests(seen: &[Seen]) {
    assert!(
        seen.is_empty(),
        "expected no request, got: {:?}",
        seen.iter().map(Seen::line).collect::<Vec<_>>()
    );
}

fn nginx_set(version: &str) -> ConfigMapSet {
    let mut set = ConfigMapSet::new(
        "nginx-config",
        ConfigMapSetSpec {
            template: ConfigMapTemplate {
                data: Some(BTreeMap::from([("APP_VERSION".to_string(), version.to_string())])),
                ..ConfigMapTemplate::default()
            },
            revision_history_limit: 10,
            rollout: None,
            config_map_name: None,
            ..ConfigMapSetSpec::default()
        },
    );
    set.metadata.namespace = Some(NS.into());
    set.metadata.uid = Some("set-uid".into());
    set.metadata.generation = Some(1);
    set
}

fn web(configmap: &str, opted_in: bool) -> Deployment {
    let labels = BTreeMap::from([("app".to_string(), "web".to_string())]);
    let mut meta_labels = labels.clone();
    if opted_in {
        meta_labels.insert(labels::ENABLED.to_string(), "true".to_string());
    }
    Deployment {
        metadata: ObjectMeta {
            name: Some("web".into()),
            namespace: Some(NS.into()),
            uid: Some("uid-web".into()),
            labels: Some(meta_labels),
            ..ObjectMeta::default()
        },
        spec: Some(DeploymentSpec {
            selector: LabelSelector {
                match_labels: Some(labels.clone()),
                ..LabelSelector::default()
            },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    containers: vec![Container {
                        name: "app".into(),
                        env_from: Some(vec![EnvFromSource {
                            config_map_ref: Some(ConfigMapEnvSource {
                                name: configmap.into(),
                                optional: None,
                            }),
                            ..EnvFromSource::default()
                        }]),
                        ..Container::default()
                    }],
                    ..PodSpec::default()
                }),
            },
            ..DeploymentSpec::default()
        }),
        status: None,
    }
}

/// The revision ConfigMap of `set`'s content, as the set controller makes it.
fn new_revision(set: &ConfigMapSet, name: &str, number: i64) -> ConfigMap {
    let content = Content::of_template(&set.spec.template);
    cmset_core::revisions::revision::new_revision(set.into(), &content, name, number)
        .config_map()
        .expect("a ConfigMapSet's revision is a ConfigMap")
        .clone()
}

/// Brings `set` and its revisions to what the controller would have written, planning from the world.
fn settle(world: &mut World, set: &ConfigMapSet) -> ConfigMapSet {
    world.add_set(set);
    let revisions = world.revisions();
    let readers = world
        .index
        .readers(&(SetKind::ConfigMapSet, Key::new(NS, "nginx-config")));
    let workloads: Vec<_> = readers
        .workloads
        .iter()
        .filter_map(|(kind, name)| world.stores.workload(*kind, NS, name))
        .collect();
    let history = readers.history;
    let pods = Default::default();
    let input = SetInput {
        set: set.into(),
        source: SourceState::Inline,
        revisions: &revisions,
        workloads: &workloads,
        history: &history,
        pod_refs: Some(&pods),
        now: fixed_clock()(),
        budget_waiting: &Default::default(),
        analysis: None,
        windows: &Default::default(),
        schemas: &Default::default(),
        check_jobs: &Default::default(),
        content_budget: Default::default(),
    };
    let plan = plan_set(&input);
    if let Some(cm) = plan.create.as_ref().and_then(NewRevision::config_map) {
        world.add_revision(cm);
    }
    let mut settled = set.clone();
    settled.status = Some(plan.status);
    world.add_set(&settled);
    settled
}

#[tokio::test]
async fn a_new_set_creates_its_revision_then_writes_status_then_tells() {
    let mut world = World::new();
    let set = nginx_set("1");
    world.add_set(&set);
    let (result, seen) = reconcile_set(&world, &set).await;
    result.expect("reconcile succeeds");
    let lines: Vec<String> = seen.iter().map(Seen::line).collect();
    assert_eq!(
        lines,
        vec![
            "POST /api/v1/namespaces/team/configmaps",
            "PATCH /apis/cmset.dev/v1alpha1/namespaces/team/configmapsets/nginx-config/status",
            "POST /apis/events.k8s.io/v1/namespaces/team/events",
        ]
    );
    assert!(
        seen[0].query.contains("fieldManager=cmset-controller"),
        "{}",
        seen[0].query
    );
    assert_eq!(
        seen[0].body,
        json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {
                "name": V1, "namespace": "team",
                "labels": {"cmset.dev/set": "nginx-config"},
                "annotations": {"cmset.dev/revision": "1", "cmset.dev/content-hash": "d2c65kk9hm"},
                "ownerReferences": [{
                    "apiVersion": "cmset.dev/v1alpha1", "kind": "ConfigMapSet", "name": "nginx-config",
                    "uid": "set-uid", "controller": true, "blockOwnerDeletion": true
                }]
            },
            "immutable": true,
            "data": {"APP_VERSION": "1"}
        })
    );
    // Status goes by server-side apply of the whole status, as cmset's field manager, forced.
    assert!(
        seen[1].query.contains("fieldManager=cmset-controller"),
        "{}",
        seen[1].query
    );
    assert!(seen[1].query.contains("force=true"), "{}", seen[1].query);
    assert_eq!(seen[1].body["apiVersion"], "cmset.dev/v1alpha1");
    assert_eq!(seen[1].body["kind"], "ConfigMapSet");
    let status = &seen[1].body["status"];
    assert_eq!(status["currentRevision"], V1);
    assert_eq!(status["revision"], 1);
    assert_eq!(status["observedGeneration"], 1);
    assert_eq!(
        status["workloads"],
        json!([]),
        "an empty list is sent, so it clears"
    );
    assert_eq!(seen[2].body["reason"], "RevisionCreated");
}

/// `nginx_set` whose `config.json` is `json`, which must parse as JSON and have an integer `port`, the
/// schema kept in ConfigMap `schemas` when `from_configmap`.
fn validated_set(json: &str, from_configmap: bool) -> ConfigMapSet {
    let mut set = nginx_set("1");
    set.spec.template.data = Some(BTreeMap::from([("config.json".to_string(), json.to_string())]));
    let mut rule: cmset_api::KeyValidation = serde_json::from_value(json!({
        "schema": {"properties": {"port": {"type": "integer"}}}
    }))
    .unwrap();
    if from_configmap {
        rule.schema = None;
        rule.schema_from = Some(
            serde_json::from_value(json!({"configMapKeyRef": {"name": "schemas", "key": "app"}})).unwrap(),
        );
    }
    set.spec.validation.keys.insert("*.json".into(), rule);
    set
}

#[tokio::test]
async fn content_that_fails_its_validation_creates_nothing_and_writes_only_why() {
    let mut world = World::new();
    let set = validated_set(r#"{"port": "80"}"#, false);
    world.add_set(&set);
    let (result, seen) = reconcile_set(&world, &set).await;
    result.expect("reconcile succeeds");
    let lines: Vec<String> = seen.iter().map(Seen::line).collect();
    assert_eq!(
        lines,
        vec![
            "PATCH /apis/cmset.dev/v1alpha1/namespaces/team/configmapsets/nginx-config/status",
            "POST /apis/events.k8s.io/v1/namespaces/team/events",
        ],
        "no revision is created"
    );
    let conditions = seen[0].body["status"]["conditions"].as_array().unwrap();
    let valid = conditions.iter().find(|c| c["type"] == "Valid").unwrap();
    assert_eq!(
        (&valid["status"], &valid["reason"]),
        (&json!("False"), &json!("ValidationFailed"))
    );
    assert!(
        valid["message"]
            .as_str()
            .unwrap()
            .ends_with(r#"key "config.json": at /port: "80" is not of type "integer" (rule "type")"#),
        "{valid}"
    );
    assert_eq!(
        (&seen[1].body["type"], &seen[1].body["reason"]),
        (&json!("Warning"), &json!("ValidationFailed"))
    );

    // Planned again from what it wrote: no request at all.
    let mut written = set.clone();
    written.status = Some(serde_json::from_value(seen[0].body["status"].clone()).unwrap());
    world.add_set(&written);
    let (result, seen) = reconcile_set(&world, &written).await;
    result.expect("reconcile succeeds");
    assert_no_requests(&seen);
}

#[tokio::test]
async fn a_schema_kept_in_a_configmap_is_read_once_with_the_content() {
    let mut world = World::new();
    let set = validated_set(r#"{"port": 80}"#, true);
    world.add_set(&set);
    let schemas = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "schemas", "namespace": NS},
                         "data": {"app": "properties:\n  port: {type: integer}\n"}});
    let ok = ok_responder(set.clone());
    let respond: Responder = Arc::new(move |s: &Seen| match (s.method.as_str(), s.path.as_str()) {
        ("GET", "/api/v1/namespaces/team/configmaps/schemas") => (200, schemas.clone()),
        _ => ok(s),
    });
    let owned = set.clone();
    let (result, seen) = scenario(&world, respond, |ctx| {
        set_controller::reconcile(Arc::new(owned), ctx)
    })
    .await;
    result.expect("reconcile succeeds");
    let lines: Vec<String> = seen.iter().map(Seen::line).collect();
    assert_eq!(
        lines,
        vec![
            "GET /api/v1/namespaces/team/configmaps/schemas",
            "POST /api/v1/namespaces/team/configmaps",
            "PATCH /apis/cmset.dev/v1alpha1/namespaces/team/configmapsets/nginx-config/status",
            "POST /apis/events.k8s.io/v1/namespaces/team/events",
        ]
    );
    assert_eq!(
        seen[1].body["data"],
        json!({"config.json": r#"{"port": 80}"#}),
        "stored as written"
    );
}

#[tokio::test]
async fn a_new_revision_is_owned_from_the_start_by_the_deployment_that_reads_it() {
    let mut world = World::new();
    let deployment = web(V1, true);
    world.add_deployment(&deployment);
    let set = settle(&mut world, &nginx_set("1"));
    let changed = changed_without_revision(&mut world, &set, "2");
    let (result, seen) = reconcile_set(&world, &changed).await;
    result.unwrap();
    assert_eq!(seen[0].line(), "POST /api/v1/namespaces/team/configmaps");
    // The Deployment keeps it after the set is gone, as its ReplicaSets did once they were patched
    // in: its new ReplicaSet then needs no write at all.
    assert_eq!(
        seen[0].body["metadata"]["ownerReferences"],
        json!([
            {"apiVersion": "cmset.dev/v1alpha1", "kind": "ConfigMapSet", "name": "nginx-config",
             "uid": "set-uid", "controller": true, "blockOwnerDeletion": true},
            {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web",
             "uid": "uid-web", "controller": false, "blockOwnerDeletion": false}
        ])
    );
    assert!(
        seen.iter()
            .all(|s| !s.line().starts_with("PATCH /api/v1/namespaces/team/configmaps")),
        "no owner patch follows: {:?}",
        seen.iter().map(Seen::line).collect::<Vec<_>>()
    );
}

#[tokio::test]
async fn a_set_waits_for_a_kind_still_listing_then_plans_without_a_poll() {
    let mut world = World::new();
    let set = nginx_set("1");
    world.add_set(&set);
    // A kind found moments ago has not listed yet: a plan now could prune what its objects name.
    world.index.expect("CronJob");
    let (result, seen) = reconcile_set(&world, &set).await;
    assert_eq!(
        result.unwrap(),
        Action::requeue(std::time::Duration::from_millis(250)),
        "its list never ends: requeued"
    );
    assert_no_requests(&seen);

    // Its list ends while the reconcile waits: the plan goes on at once.
    let index = world.index.clone();
    let lists = tokio::spawn(async move {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        index.handle_workload(WorkloadKind::CronJob, &watcher::Event::InitDone);
    });
    let started = std::time::Instant::now();
    let (result, seen) = reconcile_set(&world, &set).await;
    result.unwrap();
    lists.await.unwrap();
    assert!(
        started.elapsed() < cmset_controller::engine::context::CACHES_WAIT,
        "woken by the list's end: {:?}",
        started.elapsed()
    );
    assert_eq!(
        seen.iter().map(Seen::line).collect::<Vec<_>>(),
        vec![
            "POST /api/v1/namespaces/team/configmaps",
            "PATCH /apis/cmset.dev/v1alpha1/namespaces/team/configmapsets/nginx-config/status",
            "POST /apis/events.k8s.io/v1/namespaces/team/events",
        ]
    );
}

#[tokio::test]
async fn an_unchanged_set_sends_no_request() {
    let mut world = World::new();
    world.add_deployment(&web(V1, true));
    let set = settle(&mut world, &nginx_set("1"));
    let (result, seen) = reconcile_set(&world, &set).await;
    result.unwrap();
    assert_no_requests(&seen);
}

#[tokio::test]
async fn a_restart_with_everything_in_place_sends_no_request() {
    // Everything a previous run wrote is in the caches of a fresh process: set, revision with its
    // ReplicaSet owner, workload on the current revision, and that ReplicaSet.
    let mut world = World::new();
    let deployment = web(V1, true);
    world.add_deployment(&deployment);
    let set = settle(&mut world, &nginx_set("1"));
    let mut rs = ReplicaSet {
        metadata: ObjectMeta {
            name: Some("web-abc".into()),
            namespace: Some(NS.into()),
            uid: Some("uid-web-abc".into()),
            // Controlled by a Deployment that does not own the revision (one made before revisions
            // were owned by their readers): the ReplicaSet itself must keep it.
            owner_references: Some(vec![OwnerReference {
                uid: "uid-web-before".into(),
                ..deployment.controller_owner_ref(&()).unwrap()
            }]),
            ..ObjectMeta::default()
        },
        ..ReplicaSet::default()
    };
    rs.spec = Some(k8s_openapi::api::apps::v1::ReplicaSetSpec {
        template: Some(deployment.spec.as_ref().unwrap().template.clone()),
        ..Default::default()
    });
    world.add_replica_set(&rs);
    let mut revision = PartialObjectMeta::<ConfigMap> {
        types: None,
        metadata: ObjectMeta {
            name: Some(V1.into()),
            namespace: Some(NS.into()),
            ..ObjectMeta::default()
        },
        _phantom: Default::default(),
    };
    let view = world.revisions().remove(0);
    revision.metadata.labels = Some(view.labels);
    revision.metadata.annotations = Some(view.annotations);
    revision.metadata.owner_references = Some(view.owner_references);
    revision
        .metadata
        .owner_references
        .get_or_insert_with(Vec::new)
        .push(k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
            api_version: "apps/v1".into(),
            kind: "ReplicaSet".into(),
            name: "web-abc".into(),
            uid: "uid-web-abc".into(),
            controller: Some(false),
            block_owner_deletion: Some(false),
        });
    world.index.handle(&watcher::Event::Apply(revision));
    let set = settle(&mut world, &set);

    let (set_result, set_seen) = reconcile_set(&world, &set).await;
    set_result.unwrap();
    let (workload_result, workload_seen) = reconcile_deployment(&world, &set, &deployment).await;
    workload_result.unwrap();
    assert_no_requests(&set_seen);
    assert_no_requests(&workload_seen);
}

#[tokio::test]
async fn a_workload_naming_the_bare_set_is_moved_with_one_guarded_json_patch() {
    let mut world = World::new();
    let deployment = web("nginx-config", true);
    world.add_deployment(&deployment);
    let set = settle(&mut world, &nginx_set("1"));
    let (result, seen) = reconcile_deployment(&world, &set, &deployment).await;
    result.unwrap();
    let lines: Vec<String> = seen.iter().map(Seen::line).collect();
    // The move is the only request: the set's Event and status tell of the change (one of each per
    // change, however many workloads move).
    assert_eq!(lines, vec!["PATCH /apis/apps/v1/namespaces/team/deployments/web"]);
    assert!(seen[0].query.contains("fieldManager=cmset-controller"));
    assert_eq!(
        seen[0].body,
        json!([
            {"op": "test", "path": "/metadata/uid", "value": "uid-web"},
            {"op": "test", "path": "/spec/template/spec/containers/0/envFrom/0/configMapRef/name", "value": "nginx-config"},
            {"op": "replace", "path": "/spec/template/spec/containers/0/envFrom/0/configMapRef/name", "value": V1},
            {"op": "add", "path": "/spec/template/metadata/labels/cmset.dev~1managed", "value": "true"}
        ])
    );
}

#[tokio::test]
async fn a_pinned_workload_sends_no_request() {
    let mut world = World::new();
    // cmset rolled web out to V2, then someone ran `kubectl rollout undo` back to V1.
    world.add_deployment(&web(V2, true));
    let v1 = nginx_set("1");
    world.add_revision(&new_revision(&v1, V1, 1));
    let set = settle(&mut world, &nginx_set("2"));
    assert_eq!(set.status.as_ref().unwrap().current_revision.as_deref(), Some(V2));
    let rolled_back = web(V1, true);
    world.add_deployment(&rolled_back);
    let set = settle(&mut world, &set);
    assert_eq!(
        set.status.as_ref().unwrap().workloads[0].state,
        cmset_api::WorkloadState::Pinned
    );
    let (result, seen) = reconcile_deployment(&world, &set, &rolled_back).await;
    result.unwrap();
    assert_no_requests(&seen);
}

#[tokio::test]
async fn a_workload_not_opted_in_sends_no_request() {
    let mut world = World::new();
    let deployment = web("nginx-config", false);
    world.add_deployment(&deployment);
    let set = settle(&mut world, &nginx_set("1"));
    let (result, seen) = reconcile_deployment(&world, &set, &deployment).await;
    result.unwrap();
    assert_no_requests(&seen);
    assert!(
        set.status.as_ref().unwrap().workloads.is_empty(),
        "not listed in status either"
    );
}

#[tokio::test]
async fn a_workload_that_moved_underneath_is_a_conflict_to_retry() {
    let mut world = World::new();
    let deployment = web("nginx-config", true);
    world.add_deployment(&deployment);
    let _set = settle(&mut world, &nginx_set("1"));
    let respond: Responder = Arc::new(|_s: &Seen| {
        (
            422,
            json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Invalid", "message": "the server rejected our request due to an error in our request", "code": 422}),
        )
    });
    let (result, seen) = scenario(&world, respond, |ctx| {
        workload_controller::reconcile(WorkloadKind::Deployment, Arc::new(dynamic(&deployment)), ctx)
    })
    .await;
    let error = result.expect_err("the test guard failed");
    assert!(error.is_conflict());
    assert_eq!(seen.len(), 1, "no event for an update that did not happen");
}

#[tokio::test]
async fn a_name_taken_by_a_foreign_configmap_bumps_the_collision_count_and_touches_nothing() {
    let mut world = World::new();
    let set = nginx_set("1");
    world.add_set(&set);
    let respond: Responder = Arc::new(|s: &Seen| match (s.method.as_str(), s.path.as_str()) {
        ("POST", p) if p.ends_with("/configmaps") => already_exists(),
        ("GET", _) => (
            200,
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": V1, "namespace": NS}, "data": {"APP_VERSION": "other"}}),
        ),
        ("PATCH", _) => (200, serde_json::to_value(nginx_set("1")).unwrap()),
        ("POST", _) => (201, s.body.clone()),
        _ => (500, json!({})),
    });
    let (result, seen) = scenario(&world, respond, |ctx| {
        set_controller::reconcile(Arc::new(set.clone()), ctx)
    })
    .await;
    result.unwrap();
    let lines: Vec<String> = seen.iter().map(Seen::line).collect();
    assert_eq!(
        lines,
        vec![
            "POST /api/v1/namespaces/team/configmaps",
            format!("GET /api/v1/namespaces/team/configmaps/{V1}").as_str(),
            "PATCH /apis/cmset.dev/v1alpha1/namespaces/team/configmapsets/nginx-config/status",
            "POST /apis/events.k8s.io/v1/namespaces/team/events",
        ]
    );
    assert_eq!(seen[2].body["status"]["collisionCount"], 1);
    assert_eq!(seen[3].body["reason"], "RevisionCollision");
}

#[tokio::test]
async fn a_generators_configmap_of_the_same_name_and_content_becomes_the_revision() {
    let mut world = World::new();
    let set = nginx_set("1");
    world.add_set(&set);
    // What configMapGenerator made: the revision's very name and content, mutable, no owner.
    let generated = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": V1, "namespace": NS, "resourceVersion": "7"}, "data": {"APP_VERSION": "1"}});
    let respond: Responder = Arc::new(move |s: &Seen| match (s.method.as_str(), s.path.as_str()) {
        ("POST", p) if p.ends_with("/configmaps") => already_exists(),
        ("GET", _) | ("PATCH", _) => (200, generated.clone()),
        _ => (500, json!({})),
    });
    let (result, seen) = scenario(&world, respond, |ctx| {
        set_controller::reconcile(Arc::new(set.clone()), ctx)
    })
    .await;
    result.unwrap();
    let lines: Vec<String> = seen.iter().map(Seen::line).collect();
    let revision = format!("/api/v1/namespaces/team/configmaps/{V1}");
    assert_eq!(
        lines,
        vec![
            "POST /api/v1/namespaces/team/configmaps".to_string(),
            format!("GET {revision}"),
            format!("PATCH {revision}"),
        ],
        "no collision, no status write yet: the next reconcile plans from the claimed revision"
    );
    let claim = &seen[2].body;
    assert_eq!(claim["immutable"], true);
    assert_eq!(
        claim["metadata"]["resourceVersion"], "7",
        "only the version that was compared"
    );
    assert_eq!(claim["metadata"]["labels"]["cmset.dev/set"], "nginx-config");
    assert_eq!(claim["metadata"]["ownerReferences"][0]["uid"], "set-uid");
    assert_eq!(claim["metadata"]["ownerReferences"][0]["controller"], true);
}

/// A revision older than V1, for the pruning scenarios.
const V0: &str = "nginx-config-5b8c7x2vhq";

/// Revisions V0 (1), V1 (2) and V2 (3, current) of a set that keeps no unused old revision: V0 and V1
/// are both due to be pruned.
fn three_revisions(world: &mut World) -> ConfigMapSet {
    let mut set = nginx_set("2");
    set.spec.revision_history_limit = 0;
    for (content, name, number) in [("0", V0, 1), ("1", V1, 2)] {
        let mut old = new_revision(&nginx_set(content), name, number);
        old.metadata.uid = Some(format!("uid-{number}"));
        old.metadata.resource_version = Some(format!("4{number}"));
        world.add_revision(&old);
    }
    world.add_revision(&new_revision(&set, V2, 3));
    set.status = Some(cmset_api::ConfigMapSetStatus {
        revision: Some(3),
        ..Default::default()
    });
    world.add_set(&set);
    set
}

/// [`ok_responder`], whose Pods are the named ones, each reading the ConfigMap it is paired with.
fn pods_responder(set: ConfigMapSet, pods: &[(&str, &str)]) -> Responder {
    let items: Vec<Value> = pods
        .iter()
        .map(|(name, reads)| {
            json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": NS, "labels": {"cmset.dev/managed": "true"}},
                "spec": {"containers": [{"name": "app", "envFrom": [{"configMapRef": {"name": reads}}]}]},
                "status": {"phase": "Running"}
            })
        })
        .collect();
    let others = ok_responder(set);
    Arc::new(move |s: &Seen| match (s.method.as_str(), s.path.as_str()) {
        ("GET", "/api/v1/namespaces/team/pods") => (
            200,
            json!({"apiVersion": "v1", "kind": "PodList", "metadata": {"resourceVersion": "77"}, "items": items}),
        ),
        _ => others(s),
    })
}

#[tokio::test]
async fn a_due_prune_lists_the_managed_pods_once_and_spares_a_revision_a_pod_still_runs() {
    let mut world = World::new();
    let set = three_revisions(&mut world);
    // Deployment web was deleted with `--cascade=orphan`: its ReplicaSet is gone from the index, and
    // its orphaned Pod still runs V1.
    let respond = pods_responder(set.clone(), &[("web-7d4b9c-x2x9q", V1)]);
    let (result, seen) = scenario(&world, respond, |ctx| {
        set_controller::reconcile(Arc::new(set.clone()), ctx)
    })
    .await;
    result.unwrap();
    let lines: Vec<String> = seen.iter().map(Seen::line).collect();
    assert_eq!(
        lines,
        vec![
            "GET /api/v1/namespaces/team/pods".to_string(),
            format!("DELETE /api/v1/namespaces/team/configmaps/{V0}"),
            "PATCH /apis/cmset.dev/v1alpha1/namespaces/team/configmapsets/nginx-config/status".to_string(),
            "POST /apis/events.k8s.io/v1/namespaces/team/events".to_string(),
        ],
        "V1, which the orphaned Pod runs, is not deleted"
    );
    let query: BTreeMap<String, String> = url_query(&seen[0].query);
    assert_eq!(
        query,
        BTreeMap::from([
            ("labelSelector".to_string(), "cmset.dev/managed=true".to_string()),
            ("resourceVersion".to_string(), "0".to_string()),
        ]),
        "only the Pods of rewritten templates, from the API server's cache"
    );
    assert_eq!(seen[1].body["preconditions"]["uid"], "uid-1");
    // The version the plan saw: a revision changed since (an owner added by a ReplicaSet that names
    // it) is not deleted from a store that has not seen the change.
    assert_eq!(seen[1].body["preconditions"]["resourceVersion"], "41");
    assert_eq!(seen[3].body["reason"], "RevisionPruned");
    assert!(
        seen[3].body["note"].as_str().unwrap().contains(V0),
        "{}",
        seen[3].body
    );
}

#[tokio::test]
async fn a_set_with_nothing_to_prune_lists_no_pods() {
    let mut world = World::new();
    let mut set = three_revisions(&mut world);
    set.spec.revision_history_limit = 2;
    world.add_set(&set);
    let respond = pods_responder(set.clone(), &[]);
    let (result, seen) = scenario(&world, respond, |ctx| {
        set_controller::reconcile(Arc::new(set.clone()), ctx)
    })
    .await;
    result.unwrap();
    assert!(
        seen.iter()
            .all(|s| s.method != "DELETE" && !s.path.ends_with("/pods")),
        "{:?}",
        seen.iter().map(Seen::line).collect::<Vec<_>>()
    );
}

#[tokio::test]
async fn a_failed_list_of_pods_fails_the_reconcile_and_prunes_nothing() {
    let mut world = World::new();
    let set = three_revisions(&mut world);
    let others = ok_responder(set.clone());
    let respond: Responder = Arc::new(move |s: &Seen| {
        if s.path.ends_with("/pods") {
            (
                403,
                json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Forbidden", "code": 403}),
            )
        } else {
            others(s)
        }
    });
    let (result, seen) = scenario(&world, respond, |ctx| {
        set_controller::reconcile(Arc::new(set.clone()), ctx)
    })
    .await;
    let error = result.unwrap_err();
    assert_eq!(error.category(), "ListPods", "{error}");
    assert_eq!(
        seen.iter().map(Seen::line).collect::<Vec<_>>(),
        vec!["GET /api/v1/namespaces/team/pods"],
        "no delete, and no status that would claim the revisions pruned"
    );
}

#[tokio::test]
async fn until_history_has_listed_a_set_plans_but_prunes_nothing_and_keeps_what_was_in_use() {
    let mut world = World::before_history_lists();
    let mut set = three_revisions(&mut world);
    // The previous leader saw a ReplicaSet naming V1.
    let in_use = |name: &str, revision, in_use| cmset_api::RevisionStatus {
        name: name.to_string(),
        revision,
        in_use,
        failed: false,
    };
    set.status.as_mut().unwrap().history = vec![in_use(V1, 2, true)];
    world.add_set(&set);
    let (result, seen) = reconcile_set(&world, &set).await;
    result.unwrap();
    assert_eq!(
        seen.iter().map(Seen::line).collect::<Vec<_>>(),
        vec!["PATCH /apis/cmset.dev/v1alpha1/namespaces/team/configmapsets/nginx-config/status"],
        "no Pod list, no delete: history is not known yet"
    );
    let history = &seen[0].body["status"]["history"];
    assert_eq!(
        history,
        &json!([
            {"name": V2, "revision": 3, "inUse": false},
            {"name": V1, "revision": 2, "inUse": true},
            {"name": V0, "revision": 1, "inUse": false},
        ]),
        "V1 stays in use until history says otherwise"
    );

    // The history kinds list (nothing names V0 or V1): the set prunes.
    world.list_history();
    let (result, seen) = reconcile_set(&world, &set).await;
    result.unwrap();
    assert_eq!(
        seen.iter().map(Seen::line).collect::<Vec<_>>()[..3],
        [
            "GET /api/v1/namespaces/team/pods".to_string(),
            format!("DELETE /api/v1/namespaces/team/configmaps/{V0}"),
            format!("DELETE /api/v1/namespaces/team/configmaps/{V1}"),
        ]
    );
}

/// The pairs of a URL's query string, percent-decoded.
fn url_query(query: &str) -> BTreeMap<String, String> {
    let decode = |text: &str| {
        let mut bytes = Vec::new();
        let mut rest = text.as_bytes();
        while let Some((&b, tail)) = rest.split_first() {
            match (b, tail.get(..2)) {
                (b'%', Some(hex)) => {
                    let hex = std::str::from_utf8(hex).unwrap();
                    bytes.push(u8::from_str_radix(hex, 16).unwrap());
                    rest = &tail[2..];
                }
                _ => {
                    bytes.push(if b == b'+' { b' ' } else { b });
                    rest = tail;
                }
            }
        }
        String::from_utf8(bytes).unwrap()
    };
    query
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (decode(k), decode(v))
        })
        .collect()
}
#[tokio::test]
async fn a_set_whose_deployments_cannot_be_listed_writes_only_why_and_plans_once_they_list_again() {
    let mut world = World::new();
    world.add_deployment(&web(V1, true));
    let settled = settle(&mut world, &nginx_set("1"));
    let mut changed = nginx_set("2");
    changed.spec.revision_history_limit = 0;
    changed.metadata.generation = Some(2);
    changed.status = settled.status.clone();
    world.add_set(&changed);
    // cmset's right to list Deployments is revoked: the index keeps web, and the set must not plan
    // from it (a new revision would start a rollout whose health it cannot see).
    let why = "403 Forbidden: cmset's service account may not list or watch it";
    world
        .index
        .unavailable(WorkloadKind::Deployment, why.to_string())
        .expect("news");
    let (result, seen) = reconcile_set(&world, &changed).await;
    assert_eq!(
        result.unwrap(),
        Action::requeue(std::time::Duration::from_secs(30))
    );
    assert_eq!(
        seen.iter().map(Seen::line).collect::<Vec<_>>(),
        vec!["PATCH /apis/cmset.dev/v1alpha1/namespaces/team/configmapsets/nginx-config/status"],
        "no revision created, none pruned, no event: only the status says why"
    );
    let status = &seen[0].body["status"];
    assert_eq!(
        (
            &status["revision"],
            &status["currentRevision"],
            &status["observedGeneration"]
        ),
        (&json!(1), &json!(V1), &json!(1)),
        "the status still describes what was planned last"
    );
    let ready = &status["conditions"][0];
    assert_eq!(
        (&ready["type"], &ready["status"], &ready["reason"]),
        (&json!("Ready"), &json!("Unknown"), &json!("WorkloadsUnobserved"))
    );
    assert!(
        ready["message"]
            .as_str()
            .unwrap()
            .contains(&format!("Deployment ({why})")),
        "{ready}"
    );

    // Deployments list again: the set plans from that list (its status, which now only says that web
    // is about to move, waits for the move).
    world
        .index
        .handle_workload(WorkloadKind::Deployment, &watcher::Event::Init);
    world.index.handle_workload(
        WorkloadKind::Deployment,
        &watcher::Event::InitApply(dynamic(&web(V1, true))),
    );
    world
        .index
        .handle_workload(WorkloadKind::Deployment, &watcher::Event::InitDone);
    let (result, seen) = reconcile_set(&world, &changed).await;
    result.unwrap();
    assert_eq!(
        seen.iter().map(Seen::line).collect::<Vec<_>>(),
        vec![
            "POST /api/v1/namespaces/team/configmaps",
            "POST /apis/events.k8s.io/v1/namespaces/team/events",
        ]
    );
    assert_eq!(seen[0].body["metadata"]["name"], V2);
}

/// `set` changed to new content whose revision the set controller has just created; its status still
/// describes the previous generation.
/// `set` changed to content `version` (generation 2), its status still the last one written.
fn changed_without_revision(world: &mut World, set: &ConfigMapSet, version: &str) -> ConfigMapSet {
    let mut changed = nginx_set(version);
    changed.metadata.generation = Some(2);
    changed.status = set.status.clone();
    world.add_set(&changed);
    changed
}

/// [`changed_without_revision`], and the revision `revision` of the new content made already.
fn changed_with_revision(
    world: &mut World,
    set: &ConfigMapSet,
    version: &str,
    revision: &str,
) -> ConfigMapSet {
    let changed = changed_without_revision(world, set, version);
    world.add_revision(&new_revision(&changed, revision, 2));
    changed
}

#[tokio::test]
async fn a_workload_moves_as_soon_as_its_revision_exists_without_waiting_for_status() {
    let mut world = World::new();
    let deployment = web(V1, true);
    world.add_deployment(&deployment);
    let set = settle(&mut world, &nginx_set("1"));
    let changed = changed_with_revision(&mut world, &set, "2", V2);
    assert_eq!(
        changed.status.as_ref().unwrap().observed_generation,
        Some(1),
        "status is behind"
    );
    let (result, seen) = reconcile_deployment(&world, &changed, &deployment).await;
    result.unwrap();
    let lines: Vec<String> = seen.iter().map(Seen::line).collect();
    assert_eq!(lines, vec!["PATCH /apis/apps/v1/namespaces/team/deployments/web"]);
    assert_eq!(
        seen[0].body[2],
        json!({"op": "replace", "path": "/spec/template/spec/containers/0/envFrom/0/configMapRef/name", "value": V2})
    );
}

#[tokio::test]
async fn a_workload_whose_revision_does_not_exist_yet_waits_and_sends_no_request() {
    let mut world = World::new();
    let deployment = web(V1, true);
    world.add_deployment(&deployment);
    let set = settle(&mut world, &nginx_set("1"));
    let changed = changed_without_revision(&mut world, &set, "2");
    let (result, seen) = reconcile_deployment(&world, &changed, &deployment).await;
    assert!(
        matches!(result, Ok(action) if action != Action::await_change()),
        "it looks again later"
    );
    assert_no_requests(&seen);
}

#[tokio::test]
async fn a_workload_reading_two_sets_waits_while_one_changed_moments_ago() {
    let mut world = World::new();
    let mut deployment = web(V1, true);
    let other = {
        let mut s = nginx_set("1");
        s.metadata.name = Some("feature-flags".into());
        s.metadata.uid = Some("flags-uid".into());
        s
    };
    let pod = deployment.spec.as_mut().unwrap().template.spec.as_mut().unwrap();
    pod.containers[0].env_from.as_mut().unwrap().push(EnvFromSource {
        config_map_ref: Some(ConfigMapEnvSource {
            name: "feature-flags".into(),
            optional: None,
        }),
        ..EnvFromSource::default()
    });
    world.add_deployment(&deployment);
    let flags_revision = "feature-flags-d2c65kk9hm";
    world.add_revision(&new_revision(&other, flags_revision, 1));
    world.add_set(&other);
    let set = settle(&mut world, &nginx_set("1"));
    // Both sets were just seen (a fresh index): the window since the last change is open.
    let changed = changed_with_revision(&mut world, &set, "2", V2);
    let (result, seen) = reconcile_deployment(&world, &changed, &deployment).await;
    let action = result.unwrap();
    assert_no_requests(&seen);
    assert!(
        action != Action::await_change(),
        "it comes back when the window closes"
    );
}

#[tokio::test]
async fn a_status_that_only_says_workloads_are_about_to_move_is_deferred() {
    let mut world = World::new();
    world.add_deployment(&web(V1, true));
    let set = settle(&mut world, &nginx_set("1"));
    // The revision for the new content exists; the workload has not moved yet.
    let changed = changed_with_revision(&mut world, &set, "2", V2);
    let (result, seen) = reconcile_set(&world, &changed).await;
    assert!(matches!(result, Ok(action) if action != Action::await_change()));
    assert_no_requests(&seen);
}

#[tokio::test]
async fn owners_for_new_replica_sets_are_batched() {
    let mut world = World::new();
    let deployment = web(V1, true);
    world.add_deployment(&deployment);
    let set = settle(&mut world, &nginx_set("1"));
    let mut rs = ReplicaSet {
        metadata: ObjectMeta {
            name: Some("web-abc".into()),
            namespace: Some(NS.into()),
            uid: Some("uid-web-abc".into()),
            // Controlled by a Deployment that does not own the revision (one made before revisions
            // were owned by their readers): the ReplicaSet itself must keep it.
            owner_references: Some(vec![OwnerReference {
                uid: "uid-web-before".into(),
                ..deployment.controller_owner_ref(&()).unwrap()
            }]),
            ..ObjectMeta::default()
        },
        ..ReplicaSet::default()
    };
    rs.spec = Some(k8s_openapi::api::apps::v1::ReplicaSetSpec {
        template: Some(deployment.spec.as_ref().unwrap().template.clone()),
        ..Default::default()
    });
    world.add_replica_set(&rs);
    // The only write due is the revision's new owner: it waits for more to come along.
    let (result, seen) = reconcile_set(&world, &set).await;
    assert!(matches!(result, Ok(action) if action != Action::await_change()));
    assert_no_requests(&seen);
    // Once the batch window has passed since the first deferral, one patch carries the owner.
    let deferred_long_ago = |ctx: &EngineContext| {
        let since = std::time::Instant::now() - cmset_controller::engine::context::BATCH_WINDOW * 2;
        let id = (SetKind::ConfigMapSet, Key::new(NS, "nginx-config"));
        ctx.memory().deferred_since(&id, since, |_| true);
    };
    let (result, seen) = scenario_after(&world, ok_responder(set.clone()), deferred_long_ago, |ctx| {
        set_controller::reconcile(Arc::new(set.clone()), ctx)
    })
    .await;
    result.unwrap();
    let lines: Vec<String> = seen.iter().map(Seen::line).collect();
    assert_eq!(
        lines,
        vec![format!("PATCH /api/v1/namespaces/team/configmaps/{V1}")]
    );
    assert_eq!(
        seen[0].body,
        json!({"metadata": {"ownerReferences": [{
            "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-abc", "uid": "uid-web-abc",
            "controller": false, "blockOwnerDeletion": false
        }]}})
    );
}

#[tokio::test]
async fn a_status_already_written_is_not_written_again_while_the_store_lags() {
    let mut world = World::new();
    let set = nginx_set("1");
    world.add_set(&set);
    world.add_revision(&new_revision(&set, V1, 1));
    // This process wrote the status the plan wants; the store still shows the set without it.
    let pods = Default::default();
    let revisions = world.revisions();
    let input = SetInput {
        set: (&set).into(),
        source: SourceState::Inline,
        revisions: &revisions,
        workloads: &[],
        history: &[],
        pod_refs: Some(&pods),
        now: fixed_clock()(),
        budget_waiting: &Default::default(),
        analysis: None,
        windows: &Default::default(),
        check_jobs: &Default::default(),
        content_budget: Default::default(),
        schemas: &Default::default(),
    };
    let status = plan_set(&input).status;
    let wrote_it = |ctx: &EngineContext| {
        ctx.remember_written(
            &(SetKind::ConfigMapSet, Key::new(NS, "nginx-config")),
            (&set).into(),
            &status,
            Some("2".into()),
        )
    };
    let (result, seen) = scenario_after(&world, ok_responder(set.clone()), wrote_it, |ctx| {
        set_controller::reconcile(Arc::new(set.clone()), ctx)
    })
    .await;
    result.unwrap();
    assert_no_requests(&seen);
    // Without that memory, the same reconcile writes it.
    let (_, seen) = reconcile_set(&world, &set).await;
    assert_eq!(
        seen.iter().map(Seen::line).collect::<Vec<_>>(),
        vec!["PATCH /apis/cmset.dev/v1alpha1/namespaces/team/configmapsets/nginx-config/status"]
    );
}

// ------------------------------------------------------------------ writes cannot go back in time --

const SET_STATUS: &str = "PATCH /apis/cmset.dev/v1alpha1/namespaces/team/configmapsets/nginx-config/status";

/// A set whose revision exists and whose status is still to be written, as the store shows it at
/// resourceVersion 41.
fn set_at_41(world: &mut World) -> ConfigMapSet {
    let mut set = nginx_set("1");
    set.metadata.resource_version = Some("41".into());
    world.add_revision(&new_revision(&set, V1, 1));
    world.add_set(&set);
    set
}

/// The API server's answer to a write whose resourceVersion precondition failed.
fn conflict() -> (u16, Value) {
    (
        409,
        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Conflict", "code": 409,
            "message": "Operation cannot be fulfilled on configmapsets.cmset.dev \"nginx-config\": the object has been modified; please apply your changes to the latest version and try again"}),
    )
}

fn lines(seen: &[Seen]) -> Vec<String> {
    seen.iter().map(Seen::line).collect()
}

#[tokio::test]
async fn the_status_apply_carries_the_resource_version_it_was_planned_from() {
    let mut world = World::new();
    let set = set_at_41(&mut world);
    let (result, seen) = reconcile_set(&world, &set).await;
    result.unwrap();
    let status = seen
        .iter()
        .find(|s| s.line() == SET_STATUS)
        .expect("a status write");
    assert_eq!(status.body["metadata"], json!({"resourceVersion": "41"}));
    assert_eq!(status.body["kind"], "ConfigMapSet");
    assert_eq!(status.body["status"]["currentRevision"], V1);
    assert!(
        status.query.contains("fieldManager=cmset-controller"),
        "{}",
        status.query
    );
}

#[tokio::test]
async fn a_conflict_on_the_status_write_is_retried_quietly_with_backoff_and_sends_nothing_else() {
    use cmset_controller::engine::context::Reconciled;
    use cmset_controller::platform::backoff::{self, Failure};
    let mut world = World::new();
    let set = set_at_41(&mut world);
    let ok = ok_responder(set.clone());
    let respond: Responder = Arc::new(
        move |s: &Seen| {
            if s.line() == SET_STATUS { conflict() } else { ok(s) }
        },
    );
    let owned = Arc::new(set.clone());
    let id = (SetKind::ConfigMapSet, Key::new(NS, "nginx-config"));
    let ((result, retries, after), seen) = scenario(&world, respond, |ctx| async move {
        let result = set_controller::reconcile(owned.clone(), ctx.clone()).await;
        // The controller hands the error to its error policy; a writer fighting cmset would make it
        // conflict again and again.
        let retries: Vec<Action> = match &result {
            Err(error) => (0..2)
                .map(|_| set_controller::error_policy(owned.clone(), error, ctx.clone()))
                .collect(),
            Ok(_) => Vec::new(),
        };
        let label = |operation| cmset_controller::platform::metrics::WriteLabel { operation };
        let after = (
            ctx.metrics.writes.get_or_create(&label("write_status")).get(),
            ctx.metrics
                .write_conflicts
                .get_or_create(&label("write_status"))
                .get(),
            ctx.metrics
                .errors
                .get_or_create(&cmset_controller::platform::metrics::ErrorLabels {
                    controller: set_controller::NAME,
                    category: "WriteStatus",
                })
                .get(),
            // Nothing remembered of a write that did not happen: the next plan writes.
            ctx.behind_own_write(&id, (&*owned).into()),
        );
        (result, retries, after)
    })
    .await;
    let error = result.expect_err("a conflict");
    assert!(error.is_conflict(), "{error}");
    assert_eq!(
        lines(&seen),
        vec![SET_STATUS],
        "no event for a plan that was refused"
    );
    assert_eq!(
        after,
        (1, 1, 0, false),
        "(writes sent, conflicts, reconcile errors, behind)"
    );
    // Retried soon (the set's watch event plans again at once anyway), then later and later.
    let key = Reconciled::Set((SetKind::ConfigMapSet, Key::new(NS, "nginx-config")));
    let expected: Vec<Action> = (1..=2)
        .map(|count| {
            let failure = Failure {
                count,
                conflict: true,
                unreachable: false,
                retry_after: None,
            };
            Action::requeue(backoff::delay(failure, backoff::seed(&key, count)))
        })
        .collect();
    assert_eq!(retries, expected);
}

#[tokio::test]
async fn a_store_behind_its_own_status_write_plans_again_before_writing_status() {
    let mut world = World::new();
    let set = set_at_41(&mut world);
    let id = (SetKind::ConfigMapSet, Key::new(NS, "nginx-config"));
    // This process wrote another status planned from version 41, which the API server answered with
    // version 42; the store still shows 41.
    let earlier = cmset_api::ConfigMapSetStatus {
        observed_generation: Some(1),
        ..Default::default()
    };
    let wrote_earlier =
        |ctx: &EngineContext| ctx.remember_written(&id, (&set).into(), &earlier, Some("42".into()));
    let (result, seen) = scenario_after(&world, ok_responder(set.clone()), wrote_earlier, |ctx| {
        set_controller::reconcile(Arc::new(set.clone()), ctx)
    })
    .await;
    assert_eq!(
        result.unwrap(),
        Action::requeue(std::time::Duration::from_secs(1))
    );
    assert_no_requests(&seen);
    // Once the store shows version 42, the status planned from it is written, carrying 42.
    let mut caught_up = set.clone();
    caught_up.metadata.resource_version = Some("42".into());
    caught_up.status = Some(earlier.clone());
    world.add_set(&caught_up);
    let wrote_earlier =
        |ctx: &EngineContext| ctx.remember_written(&id, (&set).into(), &earlier, Some("42".into()));
    let (result, seen) = scenario_after(&world, ok_responder(caught_up.clone()), wrote_earlier, |ctx| {
        set_controller::reconcile(Arc::new(caught_up.clone()), ctx)
    })
    .await;
    result.unwrap();
    let status = seen
        .iter()
        .find(|s| s.line() == SET_STATUS)
        .expect("a status write");
    assert_eq!(status.body["metadata"]["resourceVersion"], "42");
}

#[tokio::test]
async fn nothing_is_sent_once_the_term_as_leader_has_ended() {
    use cmset_controller::platform::leader::Term;
    let mut world = World::new();
    let set = nginx_set("1");
    world.add_set(&set);
    world.add_deployment(&web("nginx-config", true));
    let ended = tokio::time::Instant::now() - std::time::Duration::from_millis(1);
    for term in [Term::until(Some(ended)), Term::until(None)] {
        let owned = set.clone();
        let ((result, counted), seen) = scenario_in(
            &world,
            ok_responder(set.clone()),
            |ctx| ctx.term = Some(term.clone()),
            |ctx| async move {
                let result = set_controller::reconcile(Arc::new(owned), ctx.clone()).await;
                let label = cmset_controller::platform::metrics::WriteLabel {
                    operation: "create_revision",
                };
                (result, ctx.metrics.writes.get_or_create(&label).get())
            },
        )
        .await;
        let error = result.expect_err("the revision cannot be created");
        assert!(error.is_term_ended(), "{error}");
        assert_no_requests(&seen);
        assert_eq!(counted, 0, "not sent, not counted");
    }
    // Nor does the workload controller move a Deployment it would move with the term running (see
    // a_workload_naming_the_bare_set_is_moved_with_one_guarded_json_patch).
    let mut world = World::new();
    let deployment = web("nginx-config", true);
    world.add_deployment(&deployment);
    let set = settle(&mut world, &nginx_set("1"));
    for term in [Term::until(Some(ended)), Term::until(None)] {
        let (result, seen) = scenario_in(
            &world,
            ok_responder(set.clone()),
            |ctx| ctx.term = Some(term),
            |ctx| {
                workload_controller::reconcile(WorkloadKind::Deployment, Arc::new(dynamic(&deployment)), ctx)
            },
        )
        .await;
        let error = result.expect_err("the Deployment cannot be patched");
        assert!(error.is_term_ended(), "{error}");
        assert_no_requests(&seen);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_in_flight_when_the_term_ends_is_cut_off() {
    use cmset_controller::platform::leader::Term;
    use std::time::Duration;
    let mut world = World::new();
    let set = set_at_41(&mut world);
    // The API server takes three seconds to answer the status write; the term ends in 300 ms.
    let ok = ok_responder(set.clone());
    let respond: Responder = Arc::new(move |s: &Seen| {
        if s.line() == SET_STATUS {
            std::thread::sleep(Duration::from_secs(3));
        }
        ok(s)
    });
    let end = tokio::time::Instant::now() + Duration::from_millis(300);
    let started = std::time::Instant::now();
    let (result, seen) = scenario_in(
        &world,
        respond,
        |ctx| ctx.term = Some(Term::until(Some(end))),
        |ctx| async move {
            let result = set_controller::reconcile(Arc::new(set.clone()), ctx).await;
            (result, started.elapsed())
        },
    )
    .await;
    let (result, took) = result;
    let error = result.expect_err("cut off");
    assert!(error.is_term_ended(), "{error}");
    assert!(
        took < Duration::from_secs(2),
        "returned at the end of the term, not with the answer: {took:?}"
    );
    assert_eq!(lines(&seen), vec![SET_STATUS], "no event after it");
}

#[tokio::test]
async fn a_failing_set_backs_off_exponentially_honours_retry_after_and_resets_on_success() {
    use cmset_controller::engine::context::Reconciled;
    use cmset_controller::platform::backoff::{self, Failure};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    let mut world = World::new();
    let set = nginx_set("1");
    world.add_set(&set);
    // Creates of the revision: three 500s, one 429 asking for 30 s, one success, then 500 again.
    let creates = Arc::new(AtomicUsize::new(0));
    let ok = ok_responder(set.clone());
    let counter = creates.clone();
    let respond: Responder = Arc::new(move |s: &Seen| {
        if s.method == "POST" && s.path.ends_with("/configmaps") {
            let failure = |code: u16, reason: &str, details: Value| {
                let status = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                    "reason": reason, "message": "injected", "code": code, "details": details});
                (code, status)
            };
            match counter.fetch_add(1, Ordering::SeqCst) {
                0..=2 | 5 => return failure(500, "InternalError", json!({})),
                3 => return failure(429, "TooManyRequests", json!({"retryAfterSeconds": 30})),
                _ => {}
            }
        }
        ok(s)
    });
    let object = Reconciled::Set((SetKind::ConfigMapSet, Key::new(NS, "nginx-config")));
    let expected = |count: u32, retry_after: Option<Duration>| {
        let failure = Failure {
            count,
            conflict: false,
            unreachable: false,
            retry_after,
        };
        Action::requeue(backoff::delay(failure, backoff::seed(&object, count)))
    };
    let counted = object.clone();
    let ((actions, counts), _seen) = scenario(&world, respond, |ctx| async move {
        let mut actions = Vec::new();
        let mut counts = Vec::new();
        for _ in 0..6 {
            let set = Arc::new(set.clone());
            let action = match set_controller::reconcile(set.clone(), ctx.clone()).await {
                Ok(action) => action,
                Err(e) => set_controller::error_policy(set, &e, ctx.clone()),
            };
            actions.push(action);
            counts.push(ctx.failures.count(&counted));
        }
        (actions, counts)
    })
    .await;
    assert_eq!(creates.load(Ordering::SeqCst), 6);
    assert_eq!(
        counts,
        vec![1, 2, 3, 4, 0, 1],
        "counted per failure, forgotten on success"
    );
    assert_eq!(actions[0], expected(1, None));
    assert_eq!(actions[1], expected(2, None));
    assert_eq!(actions[2], expected(3, None));
    assert_eq!(
        actions[3],
        Action::requeue(Duration::from_secs(30)),
        "the server's 30 s wins over 8 s"
    );
    assert_eq!(actions[5], expected(1, None), "back to the base after a success");
    // (The jitter's bounds, 80–100% of the doubled delay, are table-tested in `backoff`.)
    assert_ne!(actions[0], actions[1]);
}

// ------------------------------------------------------------------------------------ SecretSets --

const DB_V1: &str = "db-9k5ddchd8d";

fn db_set() -> SecretSet {
    let mut set = SecretSet::new(
        "db",
        SecretSetSpec {
            secret_name: "db-credentials".into(),
            revision_history_limit: 10,
            rollout: None,
            ..SecretSetSpec::default()
        },
    );
    set.metadata.namespace = Some(NS.into());
    set.metadata.uid = Some("uid-db".into());
    set.metadata.generation = Some(1);
    set
}

/// The source: Opaque, password=s3cret, user=app (the issue's vector), at `version`.
fn db_source(version: &str) -> Secret {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "db-credentials", "namespace": NS, "resourceVersion": version},
        "type": "Opaque", "data": {"password": "czNjcmV0", "user": "YXBw"}
    }))
    .unwrap()
}

fn secret_responder(set: SecretSet, source: Secret) -> Responder {
    Arc::new(move |s: &Seen| match (s.method.as_str(), s.path.as_str()) {
        ("GET", p) if p.ends_with("/secrets/db-credentials") => (200, serde_json::to_value(&source).unwrap()),
        ("POST", p) if p.ends_with("/secrets") || p.ends_with("/events") => (201, s.body.clone()),
        ("PATCH", p) if p.ends_with("/status") => (200, serde_json::to_value(&set).unwrap()),
        _ => (
            500,
            json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": "unexpected", "code": 500}),
        ),
    })
}

#[tokio::test]
async fn a_new_secret_set_reads_its_source_once_and_stamps_an_immutable_secret() {
    let mut world = World::new();
    let mut set = db_set();
    set.metadata.resource_version = Some("12".into());
    world.add_secret_set(&set);
    world.see_secret(&db_source("7"));
    let (result, seen) = scenario(&world, secret_responder(set.clone(), db_source("7")), |ctx| {
        set_controller::reconcile(Arc::new(set.clone()), ctx)
    })
    .await;
    result.expect("reconcile succeeds");
    let lines: Vec<String> = seen.iter().map(Seen::line).collect();
    assert_eq!(
        lines,
        vec![
            "GET /api/v1/namespaces/team/secrets/db-credentials",
            "POST /api/v1/namespaces/team/secrets",
            "PATCH /apis/cmset.dev/v1alpha1/namespaces/team/secretsets/db/status",
            "POST /apis/events.k8s.io/v1/namespaces/team/events",
        ]
    );
    assert_eq!(
        seen[1].body,
        json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {
                "name": DB_V1, "namespace": "team",
                "labels": {"cmset.dev/set": "db"},
                "annotations": {"cmset.dev/revision": "1", "cmset.dev/content-hash": "9k5ddchd8d"},
                "ownerReferences": [{
                    "apiVersion": "cmset.dev/v1alpha1", "kind": "SecretSet", "name": "db",
                    "uid": "uid-db", "controller": true, "blockOwnerDeletion": true
                }]
            },
            "immutable": true,
            "type": "Opaque",
            "data": {"password": "czNjcmV0", "user": "YXBw"}
        })
    );
    assert_eq!(seen[2].body["status"]["currentRevision"], DB_V1);
    // Planned from version 12: refused if the SecretSet changed since.
    assert_eq!(seen[2].body["metadata"], json!({"resourceVersion": "12"}));
    assert_eq!(seen[2].body["kind"], "SecretSet");
    // Nothing sent besides the revision itself holds a value.
    for s in seen
        .iter()
        .filter(|s| s.method != "POST" || !s.path.ends_with("/secrets"))
    {
        let text = s.body.to_string();
        assert!(
            !text.contains("czNjcmV0") && !text.contains("s3cret"),
            "{}: {text}",
            s.line()
        );
    }
}

#[tokio::test]
async fn a_secret_set_whose_source_version_was_read_sends_no_request() {
    let mut world = World::new();
    let set = db_set();
    world.add_secret_set(&set);
    world.see_secret(&db_source("7"));
    // The first reconcile reads the source and makes the revision.
    let (result, _) = scenario(&world, secret_responder(set.clone(), db_source("7")), |ctx| {
        set_controller::reconcile(Arc::new(set.clone()), ctx)
    })
    .await;
    result.unwrap();
    let revision: Secret = serde_json::from_value(json!({"metadata": {
        "name": DB_V1, "namespace": NS, "uid": "uid-rev",
        "labels": {"cmset.dev/set": "db"},
        "annotations": {"cmset.dev/revision": "1", "cmset.dev/content-hash": "9k5ddchd8d"},
        "ownerReferences": [{"apiVersion": "cmset.dev/v1alpha1", "kind": "SecretSet", "name": "db",
            "uid": "uid-db", "controller": true, "blockOwnerDeletion": true}]
    }}))
    .unwrap();
    world.see_secret(&revision);
    let mut settled = set.clone();
    settled.status = Some(cmset_api::ConfigMapSetStatus {
        observed_generation: Some(1),
        revision: Some(1),
        current_revision: Some(DB_V1.into()),
        ..cmset_api::ConfigMapSetStatus::default()
    });
    // Settle the status the way the planner writes it, then reconcile again: the source is not read
    // again (its version did not move), and nothing is written.
    let input_status = {
        let (_, seen) = scenario(&world, secret_responder(settled.clone(), db_source("7")), |ctx| {
            set_controller::reconcile(Arc::new(settled.clone()), ctx)
        })
        .await;
        seen.iter()
            .find(|s| s.path.ends_with("/status"))
            .map(|s| s.body["status"].clone())
    };
    if let Some(status) = input_status {
        settled.status = Some(serde_json::from_value(status).unwrap());
    }
    world.add_secret_set(&settled);
    let (result, seen) = scenario(&world, secret_responder(settled.clone(), db_source("7")), |ctx| {
        set_controller::reconcile(Arc::new(settled.clone()), ctx)
    })
    .await;
    result.unwrap();
    assert_no_requests(&seen);
    // A new version of the source: read again.
    world.see_secret(&db_source("8"));
    let (result, seen) = scenario(&world, secret_responder(settled.clone(), db_source("8")), |ctx| {
        set_controller::reconcile(Arc::new(settled.clone()), ctx)
    })
    .await;
    result.unwrap();
    let lines: Vec<String> = seen.iter().map(Seen::line).collect();
    assert_eq!(lines, vec!["GET /api/v1/namespaces/team/secrets/db-credentials"]);
}

// ------------------------------------------------------------------------------ rollouts in waves --

/// Deployment `name` reading `configmap`, in `wave` (no label for `None`).
fn waved(name: &str, configmap: &str, wave: Option<&str>) -> Deployment {
    let mut deployment = web(configmap, true);
    deployment.metadata.name = Some(name.into());
    deployment.metadata.uid = Some(format!("uid-{name}"));
    if let Some(wave) = wave {
        deployment
            .metadata
            .labels
            .get_or_insert_with(BTreeMap::new)
            .insert(labels::WAVE.to_string(), wave.to_string());
    }
    deployment
}

/// A ChangeWindow `freeze` of the set's namespace denying moves from 07:00 to 09:00 UTC every day: the
/// fixed clock (08:00) is inside it.
fn freeze() -> cmset_api::ChangeWindow {
    serde_json::from_value(json!({
        "apiVersion": "cmset.dev/v1alpha1", "kind": "ChangeWindow",
        "metadata": {"name": "freeze"},
        "spec": {
            "namespaces": [NS],
            "windows": [{"kind": "Deny", "schedule": "0 7 * * *", "duration": "2h"}]
        }
    }))
    .unwrap()
}

#[tokio::test]
async fn a_window_starting_or_ending_over_a_set_with_nothing_to_move_sends_no_request() {
    // A set without spec.rollout whose reader runs its current revision (and is not healthy yet: it
    // has no status), settled without windows.
    let mut world = World::new();
    let deployment = web(V1, true);
    world.add_deployment(&deployment);
    let set = settle(&mut world, &nginx_set("1"));
    assert_eq!(set.status.as_ref().unwrap().rollout, None);

    // The freeze begins: the set is held, and has nothing to move. No status write, no Event.
    let freeze = Arc::new(freeze());
    world
        .index
        .handle_change_window(&watcher::Event::InitDone, std::slice::from_ref(&freeze));
    let held = cmset_core::rollout::window_hold::verdict(
        (&set).into(),
        &world.index.cluster_windows_for((&set).into()),
        fixed_clock()().0,
    );
    assert!(held.held.is_some(), "the freeze holds the set: {held:?}");
    let (result, seen) = reconcile_set(&world, &set).await;
    result.unwrap();
    assert_no_requests(&seen);
    let (result, seen) = reconcile_deployment(&world, &set, &deployment).await;
    result.unwrap();
    assert_no_requests(&seen);

    // The freeze ends (the ChangeWindow is deleted): still nothing to say.
    world
        .index
        .handle_change_window(&watcher::Event::Delete((*freeze).clone()), &[]);
    let (result, seen) = reconcile_set(&world, &set).await;
    result.unwrap();
    assert_no_requests(&seen);
}

#[tokio::test]
async fn a_workload_of_a_later_wave_sends_no_request_until_its_wave_opens() {
    let mut world = World::new();
    let first = waved("first", V1, None);
    let second = waved("second", V1, Some("1"));
    world.add_deployment(&first);
    world.add_deployment(&second);
    let set = settle(&mut world, &nginx_set("1"));
    let changed = changed_with_revision(&mut world, &set, "2", V2);

    let (result, seen) = reconcile_deployment(&world, &changed, &second).await;
    assert!(
        matches!(result, Ok(action) if action == Action::await_change()),
        "the set's status wakes it when its wave opens"
    );
    assert_no_requests(&seen);

    let (result, seen) = reconcile_deployment(&world, &changed, &first).await;
    result.unwrap();
    let lines: Vec<String> = seen.iter().map(Seen::line).collect();
    assert_eq!(
        lines,
        vec!["PATCH /apis/apps/v1/namespaces/team/deployments/first"]
    );
    assert_eq!(seen[0].body[2]["value"], V2);

    // Once the status records wave 1 as open, it moves in one patch.
    let mut open = changed.clone();
    let status = open.status.get_or_insert_with(Default::default);
    status.rollout = Some(cmset_api::RolloutStatus {
        revision: V2.into(),
        phase: cmset_api::RolloutPhase::Progressing,
        wave: 1,
        waves: vec![0, 1],
        ..Default::default()
    });
    world.add_set(&open);
    let (result, seen) = reconcile_deployment(&world, &open, &second).await;
    result.unwrap();
    assert_eq!(
        seen[0].line(),
        "PATCH /apis/apps/v1/namespaces/team/deployments/second"
    );
    assert_eq!(seen[0].body[2]["value"], V2);
}

#[tokio::test]
async fn a_workload_whose_rollout_failed_is_moved_back_in_one_guarded_patch_with_a_warning() {
    let mut world = World::new();
    let v1 = nginx_set("1");
    world.add_revision(&new_revision(&v1, V1, 1));
    let deployment = waved("first", V2, None);
    world.add_deployment(&deployment);
    let mut set = settle(&mut world, &nginx_set("2"));
    let status = set.status.as_mut().unwrap();
    assert_eq!(status.current_revision.as_deref(), Some(V2));
    status.rollout = Some(cmset_api::RolloutStatus {
        revision: V2.into(),
        phase: cmset_api::RolloutPhase::Failed,
        wave: 0,
        waves: vec![0],
        message: Some("the rollout failed".into()),
        ..Default::default()
    });
    let entry = &mut status.workloads[0];
    entry.state = cmset_api::WorkloadState::RolledBack;
    entry.previous_revision = Some(V1.into());
    world.add_set(&set);

    let (result, seen) = reconcile_deployment(&world, &set, &deployment).await;
    result.unwrap();
    let lines: Vec<String> = seen.iter().map(Seen::line).collect();
    assert_eq!(
        lines,
        vec![
            "PATCH /apis/apps/v1/namespaces/team/deployments/first",
            "POST /apis/events.k8s.io/v1/namespaces/team/events"
        ]
    );
    assert_eq!(
        seen[0].body,
        json!([
            {"op": "test", "path": "/metadata/uid", "value": "uid-first"},
            {"op": "test", "path": "/spec/template/spec/containers/0/envFrom/0/configMapRef/name", "value": V2},
            {"op": "replace", "path": "/spec/template/spec/containers/0/envFrom/0/configMapRef/name", "value": V1},
            {"op": "add", "path": "/spec/template/metadata/labels/cmset.dev~1managed", "value": "true"}
        ])
    );
    assert_eq!(seen[1].body["type"], "Warning");
    assert_eq!(seen[1].body["reason"], "RolledBack");

    // Back on V1, the record keeps it there: no request.
    let rolled_back = waved("first", V1, None);
    world.add_deployment(&rolled_back);
    let (result, seen) = reconcile_deployment(&world, &set, &rolled_back).await;
    result.unwrap();
    assert_no_requests(&seen);
}

// ---------------------------------------------------------------------------- one decision, any replica --

/// A Deployment `name` reading Secret `secret` (the bare SecretSet name, say) through `envFrom`.
fn reading_secret(name: &str, secret: &str) -> Deployment {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": NS, "uid": format!("uid-{name}"),
                     "labels": {"cmset.dev/enabled": "true"}},
        "spec": {"selector": {}, "template": {"spec": {"containers": [
            {"name": "app", "envFrom": [{"secretRef": {"name": secret}}]}
        ]}}}
    }))
    .unwrap()
}

#[tokio::test]
async fn a_standby_decides_a_source_mode_set_by_its_status_and_the_leader_waits_for_its_read() {
    let mut world = World::new();
    let mut set = db_set();
    set.status = Some(cmset_api::ConfigMapSetStatus {
        observed_generation: Some(1),
        revision: Some(1),
        current_revision: Some(DB_V1.into()),
        history: vec![cmset_api::RevisionStatus {
            name: DB_V1.into(),
            revision: 1,
            ..Default::default()
        }],
        ..Default::default()
    });
    world.add_secret_set(&set);
    // The watch saw the source's version; nobody on this replica read its content.
    world.see_secret(&db_source("7"));
    let view = cmset_controller::engine::views::workload_view(
        WorkloadKind::Deployment,
        &dynamic(&reading_secret("web", "db")),
    )
    .unwrap();
    let decide = |world: &World| {
        cmset_controller::reconcile::decisions::Gathered::of(&world.index, &world.stores, NS, &view, true)
            .and_then(|g| g.decide(&view))
    };
    // A standby (every replica serves admission) decides by what the leader recorded.
    let targets = decide(&world).expect("decided from the status");
    assert_eq!(targets.len(), 1);
    assert_eq!(targets[0].current, DB_V1);
    // The leader itself waits for its own read of the source's current version.
    world.index.lead();
    assert!(
        decide(&world).is_err(),
        "undecided until the leader reads the source"
    );
}

/// A Job being created that reads ConfigMap `reads`, started by the CronJob `nightly` or by hand.
fn new_job(reads: &str, by_cron_job: bool) -> Value {
    let mut job = json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "nightly-29000000", "namespace": NS, "labels": {"cmset.dev/enabled": "true"}},
        "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [
            {"name": "c", "envFrom": [{"configMapRef": {"name": reads}}]}
        ]}}}
    });
    if by_cron_job {
        job["metadata"]["ownerReferences"] = json!([{
            "apiVersion": "batch/v1", "kind": "CronJob", "name": "nightly", "uid": "uid-nightly",
            "controller": true, "blockOwnerDeletion": true
        }]);
    }
    job
}

/// The admission of `job` being created: the patch the webhook would answer with, decided from the
/// index as the webhook decides it.
fn admit_new_job(world: &World, job: &Value) -> Option<json_patch::Patch> {
    let kind = WorkloadKind::Job;
    let view = cmset_core::admission::admitted_workload(kind, job).expect("opted in");
    let windows = cmset_core::admission::windows_apply(kind, job, true);
    let decided =
        cmset_controller::reconcile::decisions::Gathered::of(&world.index, &world.stores, NS, &view, windows)
            .and_then(|g| g.decide(&view));
    let circumstances = cmset_core::admission::Circumstances {
        creating: true,
        ..Default::default()
    };
    cmset_core::admission::mutate(kind, job, &view, &decided, &circumstances)
}

#[tokio::test]
async fn a_job_its_cron_job_starts_under_a_freeze_runs_what_the_cron_job_runs() {
    let mut world = World::new();
    let set = settle(&mut world, &nginx_set("1"));
    changed_with_revision(&mut world, &set, "2", V2);
    // Without a window, a new Job names the current revision, whoever starts it.
    let moved = admit_new_job(&world, &new_job(V1, true)).expect("moved to the current revision");
    assert!(serde_json::to_string(&moved).unwrap().contains(V2), "{moved:?}");

    // A freeze of the cluster's, open now.
    let freeze: cmset_api::ChangeWindow = serde_json::from_value(json!({
        "apiVersion": "cmset.dev/v1alpha1", "kind": "ChangeWindow", "metadata": {"name": "freeze"},
        "spec": {"windows": [{"kind": "Deny", "schedule": "* * * * *", "duration": "1h"}]}
    }))
    .unwrap();
    world
        .index
        .handle_change_window(&watcher::Event::Apply(freeze.clone()), &[Arc::new(freeze)]);
    // The CronJob is held on V1: the Job it starts runs V1 too.
    assert_eq!(
        admit_new_job(&world, &new_job(V1, true)),
        None,
        "kept on the CronJob's revision"
    );
    // A Job started by hand is a new workload: its first start names the current revision.
    let by_hand = admit_new_job(&world, &new_job(V1, false)).expect("moved");
    assert!(
        serde_json::to_string(&by_hand).unwrap().contains(V2),
        "{by_hand:?}"
    );
}

/// `d` at generation 1, its rollout complete and every replica available.
fn healthy(mut d: Deployment) -> Deployment {
    d.metadata.generation = Some(1);
    d.status = Some(serde_json::from_value(json!({
        "observedGeneration": 1, "replicas": 1, "updatedReplicas": 1, "readyReplicas": 1, "availableReplicas": 1,
        "conditions": [{"type": "Available", "status": "True"}, {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable"}]
    })).unwrap());
    d
}

#[tokio::test]
async fn under_a_full_rollout_budget_a_workload_waits_its_turn_sending_nothing_then_moves() {
    let budget = Arc::new(RolloutBudget::new(1));
    let mut world = World::with_budget(Some(budget.clone()));
    let deployment = healthy(web(V1, true));
    world.add_deployment(&deployment);
    // Another workload is rolling out at the generation cmset's move gave it (its mark): it holds the
    // only slot.
    let mut api = web(V1, true);
    api.metadata.name = Some("api".into());
    api.metadata.uid = Some("uid-api".into());
    api.metadata.generation = Some(1);
    let mut broken = api.clone();
    api.metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert(cmset_api::labels::MOVED.into(), "1".into());
    world.add_deployment(&api);
    assert_eq!(budget.usage().moving, 1);
    let set = settle(&mut world, &nginx_set("1"));
    let changed = changed_with_revision(&mut world, &set, "2", V2);

    let (result, seen) = reconcile_deployment(&world, &changed, &deployment).await;
    assert!(
        matches!(result, Ok(action) if action != Action::await_change()),
        "it looks again later"
    );
    assert_no_requests(&seen);
    let web = (WorkloadKind::Deployment, Key::new(NS, "web"));
    let waiting = budget.position(&web).expect("in line");
    assert_eq!((waiting.position, waiting.moving, waiting.cap), (1, 1, 1));

    // "api" is seen healthy: the slot is free, and "web" moves with one patch that marks its move.
    world.add_deployment(&healthy(api));
    assert_eq!(budget.usage().moving, 0);
    // A workload rolling out that cmset never moved (created broken) takes no slot.
    broken.metadata.name = Some("broken".into());
    broken.metadata.uid = Some("uid-broken".into());
    world.add_deployment(&broken);
    assert_eq!(budget.usage().moving, 0, "sickness is not a move");
    let (result, seen) = reconcile_deployment(&world, &changed, &deployment).await;
    result.unwrap();
    let lines: Vec<String> = seen.iter().map(Seen::line).collect();
    assert_eq!(lines, vec!["PATCH /apis/apps/v1/namespaces/team/deployments/web"]);
    let patch = &seen[0].body;
    let ops = patch.as_array().expect("a JSON patch");
    assert!(
        ops.contains(&json!({"op": "test", "path": "/metadata/generation", "value": 1})),
        "{patch}"
    );
    assert!(
        ops.contains(&json!({"op": "add", "path": "/metadata/labels/cmset.dev~1moved", "value": "2"})),
        "{patch}"
    );
    assert_eq!(budget.position(&web), None);
    assert_eq!(
        budget.usage().moving,
        1,
        "its move holds the slot until the watch shows it"
    );
}

#[tokio::test]
async fn a_moved_workload_healthy_at_its_generation_loses_its_mark_in_one_guarded_patch() {
    let budget = Arc::new(RolloutBudget::new(1));
    let mut world = World::with_budget(Some(budget.clone()));
    let set = settle(&mut world, &nginx_set("1"));
    let mut deployment = healthy(web(V1, true));
    deployment
        .metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert(cmset_api::labels::MOVED.into(), "1".into());
    world.add_deployment(&deployment);
    assert_eq!(budget.usage().moving, 0, "healthy: its move is done");
    let (result, seen) = reconcile_deployment(&world, &set, &deployment).await;
    result.unwrap();
    let lines: Vec<String> = seen.iter().map(Seen::line).collect();
    assert_eq!(lines, vec!["PATCH /apis/apps/v1/namespaces/team/deployments/web"]);
    assert_eq!(
        seen[0].body,
        json!([
            {"op": "test", "path": "/metadata/labels/cmset.dev~1moved", "value": "1"},
            {"op": "remove", "path": "/metadata/labels/cmset.dev~1moved"}
        ])
    );

    // Without the mark, nothing is sent.
    deployment
        .metadata
        .labels
        .as_mut()
        .unwrap()
        .remove(cmset_api::labels::MOVED);
    world.add_deployment(&deployment);
    let (result, seen) = reconcile_deployment(&world, &set, &deployment).await;
    result.unwrap();
    assert_no_requests(&seen);
}

// ------------------------------------------------------------------------------- analysis queries --

/// A Prometheus on 127.0.0.1 that records the decoded query of every request and answers 0 once its
/// gate lets it (at once, when released, or never), counting the queries it holds open.
struct FakePrometheus {
    url: String,
    queries: Arc<std::sync::Mutex<Vec<String>>>,
    /// Permits to answer: one per answer.
    gate: Arc<tokio::sync::Semaphore>,
    open: Arc<std::sync::atomic::AtomicUsize>,
    most_open: Arc<std::sync::atomic::AtomicUsize>,
}

impl FakePrometheus {
    /// Answers every query at once.
    async fn answering() -> Self {
        Self::start(tokio::sync::Semaphore::MAX_PERMITS).await
    }

    /// Holds every query until [`FakePrometheus::release`]: unreachable, as far as a client can tell.
    async fn hanging() -> Self {
        Self::start(0).await
    }

    async fn start(permits: usize) -> Self {
        use std::sync::atomic::Ordering::SeqCst;
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let fake = Self {
            url: format!("http://{address}"),
            queries: Default::default(),
            gate: Arc::new(tokio::sync::Semaphore::new(permits)),
            open: Default::default(),
            most_open: Default::default(),
        };
        let (queries, gate, open, most_open) = (
            fake.queries.clone(),
            fake.gate.clone(),
            fake.open.clone(),
            fake.most_open.clone(),
        );
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let (queries, gate, open, most_open) =
                    (queries.clone(), gate.clone(), open.clone(), most_open.clone());
                tokio::spawn(async move {
                    let mut head = Vec::new();
                    let mut byte = [0u8; 1];
                    while !head.ends_with(b"\r\n\r\n") {
                        if stream.read(&mut byte).await.unwrap_or(0) == 0 {
                            return;
                        }
                        head.push(byte[0]);
                    }
                    let head = String::from_utf8_lossy(&head).into_owned();
                    let target = head.split(' ').nth(1).unwrap_or_default();
                    let encoded = target
                        .split_once("query=")
                        .map(|(_, q)| q.split('&').next().unwrap_or_default())
                        .unwrap_or_default();
                    let query = percent_encoding::percent_decode_str(&encoded.replace('+', " "))
                        .decode_utf8_lossy()
                        .into_owned();
                    queries.lock().unwrap().push(query);
                    let now_open = open.fetch_add(1, SeqCst) + 1;
                    most_open.fetch_max(now_open, SeqCst);
                    // Answer when let, unless the client gave up (closed the connection) first.
                    let answer = tokio::select! {
                        permit = gate.acquire() => permit.map(|p| p.forget()).is_ok(),
                        _ = stream.read(&mut byte) => false,
                    };
                    open.fetch_sub(1, SeqCst);
                    if !answer {
                        return;
                    }
                    let body = r#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1800000000,"0"]}]}}"#;
                    let response = format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = stream.write_all(response.as_bytes()).await;
                    let _ = stream.shutdown().await;
                });
            }
        });
        fake
    }

    fn release(&self, answers: usize) {
        self.gate.add_permits(answers);
    }

    fn queries(&self) -> Vec<String> {
        let mut sent = self.queries.lock().unwrap().clone();
        sent.sort();
        sent
    }

    /// The most queries it held open at once.
    fn most_open(&self) -> usize {
        self.most_open.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// A measurer asking it, `concurrency` queries at a time, each given up after `timeout`.
    fn measurer(
        &self,
        world: &World,
        concurrency: usize,
        timeout: std::time::Duration,
    ) -> Arc<cmset_controller::reconcile::measurer::Measurer> {
        let config = cmset_controller::reconcile::prometheus::PrometheusConfig {
            timeout,
            ..cmset_controller::reconcile::prometheus::PrometheusConfig::new(self.url.clone())
        };
        let prometheus = cmset_controller::reconcile::prometheus::Prometheus::new(config).unwrap();
        cmset_controller::reconcile::measurer::Measurer::new(
            Arc::new(prometheus),
            concurrency,
            world.index.clone(),
            fixed_clock(),
        )
    }
}

/// Waits up to 5 s for `holds`.
async fn eventually(what: &str, holds: impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while !holds() {
        assert!(std::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

/// A context on the mocked API answering with `respond`, measuring with `measurer`.
fn analysis_context(
    world: &World,
    respond: Responder,
    measurer: &Arc<cmset_controller::reconcile::measurer::Measurer>,
) -> (
    Arc<Context>,
    tokio::task::JoinHandle<()>,
    Arc<std::sync::Mutex<Vec<Seen>>>,
) {
    let (client, server, seen) = mock_client(respond, NS);
    let mut ctx = Context::new(EngineContext::new(
        client,
        world.index.clone(),
        world.stores.clone(),
        Arc::new(Metrics::default()),
        fixed_clock(),
        None,
    ));
    ctx.measurer = Some(measurer.clone());
    (Arc::new(ctx), server, seen)
}

/// The set, settled on its first revision with the Deployments `workloads` healthy in wave 0, whose
/// rollout is analysed with `templates` (now in wave 0's stabilization window).
fn analysed_set(world: &mut World, workloads: &[&str], templates: &[&str]) -> ConfigMapSet {
    for name in workloads {
        world.add_deployment(&healthy(waved(name, V1, None)));
    }
    let mut set = nginx_set("1");
    let analysis: Vec<Value> = templates.iter().map(|t| json!({"template": t})).collect();
    set.spec.rollout =
        Some(serde_json::from_value(json!({"stabilizationSeconds": 300, "analysis": analysis})).unwrap());
    let settled = settle(world, &set);
    let rollout = settled.status.as_ref().unwrap().rollout.clone().unwrap();
    assert!(
        rollout.wave_healthy_since.is_some(),
        "wave 0 is in its window: {rollout:?}"
    );
    settled
}

/// The template that measures each workload's restarts.
fn restarts_template() -> Value {
    json!({"query": r#"max(restarts{namespace="{{namespace}}",{{workload.kind}}=~"{{workload.name}}-.*"})"#,
           "successCondition": "result == 0", "intervalSeconds": 10})
}

/// The status `seen` wrote last, as a set with it.
fn with_written_status(set: &ConfigMapSet, seen: &[Seen]) -> ConfigMapSet {
    let patch = seen
        .iter()
        .rfind(|s| s.method == "PATCH" && s.path.ends_with("/status"))
        .expect("the status is written");
    let mut written = set.clone();
    written.status = Some(serde_json::from_value(patch.body["status"].clone()).unwrap());
    written
}

fn no_template_read(seen: &[Seen]) {
    let read: Vec<String> = seen
        .iter()
        .filter(|s| s.path.contains("analysistemplates"))
        .map(Seen::line)
        .collect();
    assert!(read.is_empty(), "templates come from the watch's store: {read:?}");
}

/// A namespace admin can write the set's status: what it says of the workloads (names, kinds, waves)
/// and of the analysis runs (queries, workloads, waves) changes no query the operator sends to
/// Prometheus, and the runs it made up are not written back.
#[tokio::test]
async fn a_status_rewritten_by_the_namespace_changes_no_query_sent_to_prometheus() {
    let mut world = World::new();
    let mut tampered = analysed_set(&mut world, &["first"], &["restarts", "per-wave"]);
    world.add_template("restarts", restarts_template());
    world.add_template(
        "per-wave",
        json!({"query": r#"up{namespace="{{namespace}}",revision="{{revision}}",wave="{{wave}}"}"#,
               "successCondition": "result == 0", "intervalSeconds": 10}),
    );

    let injected = r#"x"} or count(kube_secret_info) or {a=""#;
    let status = tampered.status.as_mut().unwrap();
    for entry in &mut status.workloads {
        entry.name = injected.into();
        entry.kind = "Secret".into();
    }
    let forged = |template: &str, wave: i32, query: &str| cmset_api::AnalysisRunStatus {
        template: template.into(),
        workload_kind: Some("Secret".into()),
        workload: Some(injected.into()),
        wave,
        query: query.into(),
        condition: "result == 0".into(),
        ..Default::default()
    };
    status.rollout.as_mut().unwrap().analysis = vec![
        forged("restarts", 0, "count(kube_secret_info)"),
        forged("per-wave", 0, r#"up{namespace="kube-system"}"#),
        forged("restarts", 1, "kube_secret_info"),
    ];
    world.add_set(&tampered);

    let prometheus = FakePrometheus::answering().await;
    let measurer = prometheus.measurer(&world, 4, std::time::Duration::from_secs(5));
    let (ctx, server, seen) = analysis_context(&world, ok_responder(tampered.clone()), &measurer);
    // The first reconcile hands the due queries over; the second records their answers. The status
    // stays as the namespace rewrote it throughout.
    set_controller::reconcile(Arc::new(tampered.clone()), ctx.clone())
        .await
        .unwrap();
    eventually("both queries answered", || measurer.sizes() == (0, 2)).await;
    set_controller::reconcile(Arc::new(tampered), ctx).await.unwrap();
    server_ends(server).await;

    let derived = vec![
        r#"max(restarts{namespace="team",Deployment=~"first-.*"})"#.to_string(),
        format!(r#"up{{namespace="team",revision="{V1}",wave="0"}}"#),
    ];
    assert_eq!(
        prometheus.queries(),
        derived,
        "only the queries cmset derives reach Prometheus"
    );

    let seen = seen.lock().unwrap().clone();
    no_template_read(&seen);
    let patch = seen
        .iter()
        .rfind(|s| s.method == "PATCH" && s.path.ends_with("/status"))
        .expect("the status is written");
    let runs = patch.body["status"]["rollout"]["analysis"].as_array().unwrap();
    let mut written: Vec<String> = runs
        .iter()
        .map(|r| r["query"].as_str().unwrap().to_string())
        .collect();
    written.sort();
    assert_eq!(written, derived, "the made-up runs are dropped: {runs:?}");
    assert!(runs.iter().all(|r| r["measurements"] == 1), "{runs:?}");
    let entries = patch.body["status"]["workloads"].as_array().unwrap();
    assert_eq!(entries[0]["name"], "first");
    assert_eq!(entries[0]["kind"], "Deployment");
}

/// A reconcile never waits for Prometheus: it hands the due query to the measurer, writes what it
/// knows (the run, not measured yet), and returns. When the answer comes the set is asked to
/// reconcile, and that reconcile records it, at the time it came; the one after drops it from memory.
#[tokio::test]
async fn a_due_query_is_measured_off_the_reconcile_path_and_its_answer_reconciles_the_set() {
    let (mut world, mut triggers) = World::leading();
    let set = analysed_set(&mut world, &["first"], &["restarts"]);
    world.add_template("restarts", restarts_template());
    let prometheus = FakePrometheus::hanging().await;
    let measurer = prometheus.measurer(&world, 4, std::time::Duration::from_secs(30));
    let (ctx, server, seen) = analysis_context(&world, ok_responder(set.clone()), &measurer);

    let started = std::time::Instant::now();
    let action = set_controller::reconcile(Arc::new(set.clone()), ctx.clone())
        .await
        .unwrap();
    let took = started.elapsed();
    eprintln!("a reconcile with a due query, Prometheus not answering: {took:?}");
    assert!(took < std::time::Duration::from_secs(2), "{took:?}");
    assert_eq!(
        action,
        Action::requeue(std::time::Duration::from_secs(30)),
        "its answer (or the query's timeout) brings the set back, not a busy loop"
    );
    eventually("the query reached Prometheus", || prometheus.queries().len() == 1).await;
    assert_eq!(measurer.sizes(), (1, 0));
    let first: Vec<Seen> = seen.lock().unwrap().drain(..).collect();
    assert_eq!(
        first.iter().map(Seen::line).collect::<Vec<_>>(),
        vec!["PATCH /apis/cmset.dev/v1alpha1/namespaces/team/configmapsets/nginx-config/status"],
        "the run is written, not measured yet"
    );
    no_template_read(&first);
    let runs = &first[0].body["status"]["rollout"]["analysis"];
    assert_eq!(runs[0]["measurements"], 0, "{runs}");
    let written = with_written_status(&set, &first);
    world.add_set(&written);

    // A reconcile meanwhile (a watch event) sends the query again no more.
    set_controller::reconcile(Arc::new(written.clone()), ctx.clone())
        .await
        .unwrap();
    assert_no_requests(&seen.lock().unwrap());

    while triggers.sets.try_recv().is_ok() {}
    prometheus.release(1);
    let woken = tokio::time::timeout(std::time::Duration::from_secs(5), triggers.sets.next())
        .await
        .expect("the answer asks for a reconcile")
        .unwrap();
    assert_eq!(woken.name, "nginx-config");
    assert_eq!(woken.namespace.as_deref(), Some(NS));
    assert_eq!(measurer.sizes(), (0, 1));

    set_controller::reconcile(Arc::new(written.clone()), ctx.clone())
        .await
        .unwrap();
    let second: Vec<Seen> = seen.lock().unwrap().drain(..).collect();
    assert_eq!(
        second.iter().map(Seen::line).collect::<Vec<_>>(),
        vec!["PATCH /apis/cmset.dev/v1alpha1/namespaces/team/configmapsets/nginx-config/status"]
    );
    let run = &second[0].body["status"]["rollout"]["analysis"][0];
    assert_eq!(run["measurements"], 1, "{run}");
    assert_eq!(run["lastValue"], "0", "{run}");
    assert_eq!(
        run["lastMeasuredAt"], "2027-01-15T08:00:00Z",
        "when the answer came: {run}"
    );
    assert_eq!(prometheus.queries().len(), 1, "measured once");

    // Written: the next plan finds it counted, and it leaves memory.
    let recorded = with_written_status(&set, &second);
    world.add_set(&recorded);
    set_controller::reconcile(Arc::new(recorded), ctx).await.unwrap();
    assert_no_requests(&seen.lock().unwrap());
    assert_eq!(measurer.sizes(), (0, 0));
    drop(world);
    server_ends(server).await;
}

/// A Prometheus that never answers holds neither the reconcile of the set whose analysis waits on
/// it nor another set's revision, and the measurer never has more queries in flight than its bound:
/// the rest wait their turn, and each turn ends at the query's timeout.
#[tokio::test]
async fn a_hanging_prometheus_delays_no_other_set_and_queries_in_flight_stay_bounded() {
    let mut world = World::new();
    let analysed = analysed_set(&mut world, &["first", "second", "third"], &["restarts"]);
    world.add_template("restarts", restarts_template());
    let mut plain = nginx_set("1");
    plain.metadata.name = Some("plain".into());
    plain.metadata.uid = Some("plain-uid".into());
    world.add_set(&plain);
    let prometheus = FakePrometheus::hanging().await;
    let timeout = std::time::Duration::from_millis(600);
    let measurer = prometheus.measurer(&world, 2, timeout);
    let (ctx, server, seen) = analysis_context(&world, ok_responder(analysed.clone()), &measurer);

    let started = std::time::Instant::now();
    set_controller::reconcile(Arc::new(analysed.clone()), ctx.clone())
        .await
        .unwrap();
    let analysed_took = started.elapsed();
    let started = std::time::Instant::now();
    set_controller::reconcile(Arc::new(plain), ctx.clone())
        .await
        .unwrap();
    let plain_took = started.elapsed();
    eprintln!(
        "Prometheus hanging: reconcile of the analysed set {analysed_took:?}, of the plain set {plain_took:?}"
    );
    assert!(
        analysed_took < std::time::Duration::from_millis(500),
        "{analysed_took:?}"
    );
    assert!(
        plain_took < std::time::Duration::from_millis(500),
        "{plain_took:?}"
    );
    // The plain set's Event goes out from a task of its own, after its status.
    eventually("the plain set's Event", || seen.lock().unwrap().len() == 4).await;
    let lines: Vec<String> = seen.lock().unwrap().iter().map(Seen::line).collect();
    assert_eq!(
        lines,
        vec![
            "PATCH /apis/cmset.dev/v1alpha1/namespaces/team/configmapsets/nginx-config/status",
            "POST /api/v1/namespaces/team/configmaps",
            "PATCH /apis/cmset.dev/v1alpha1/namespaces/team/configmapsets/plain/status",
            "POST /apis/events.k8s.io/v1/namespaces/team/events",
        ],
        "the plain set's revision is made while the analysed set's queries hang"
    );
    eventually("two queries in flight", || prometheus.queries().len() == 2).await;
    assert_eq!(measurer.sizes(), (3, 0), "three due, one waiting for its turn");

    // Each turn ends at the timeout: the third query goes out then, never a third at once.
    eventually("every query given up on", || measurer.sizes() == (0, 3)).await;
    let asked = prometheus.queries();
    assert_eq!(asked.len(), 3, "{asked:?}");
    assert_eq!(
        prometheus.most_open(),
        2,
        "at most --analysis-concurrency queries in flight"
    );
    drop(ctx);
    server_ends(server).await;
}

/// What the measurer keeps of a set stays bounded: a set that no longer asks for analysis, or is being
/// deleted, has nothing kept, and an answer that comes for it afterwards is dropped, waking nothing.
#[tokio::test]
async fn a_set_deleted_or_no_longer_analysed_leaves_no_measurement_behind() {
    let (mut world, mut triggers) = World::leading();
    let set = analysed_set(&mut world, &["first"], &["restarts"]);
    world.add_template("restarts", restarts_template());
    let prometheus = FakePrometheus::hanging().await;
    let measurer = prometheus.measurer(&world, 4, std::time::Duration::from_secs(30));
    let (ctx, server, _seen) = analysis_context(&world, ok_responder(set.clone()), &measurer);

    // Answered, then the spec drops its analysis: the next reconcile forgets the answer.
    set_controller::reconcile(Arc::new(set.clone()), ctx.clone())
        .await
        .unwrap();
    eventually("the query reached Prometheus", || prometheus.queries().len() == 1).await;
    prometheus.release(1);
    eventually("the answer is kept", || measurer.sizes() == (0, 1)).await;
    let mut plain = set.clone();
    plain.spec.rollout.as_mut().unwrap().analysis.clear();
    set_controller::reconcile(Arc::new(plain), ctx.clone())
        .await
        .unwrap();
    assert_eq!(measurer.sizes(), (0, 0));

    // In flight when the set goes: its answer, when it comes, is dropped and reconciles nothing.
    set_controller::reconcile(Arc::new(set.clone()), ctx.clone())
        .await
        .unwrap();
    eventually("the query reached Prometheus again", || {
        prometheus.queries().len() == 2
    })
    .await;
    assert_eq!(measurer.sizes(), (1, 0));
    let mut deleted = set.clone();
    deleted.metadata.deletion_timestamp = Some(fixed_clock()());
    set_controller::reconcile(Arc::new(deleted), ctx.clone())
        .await
        .unwrap();
    assert_eq!(measurer.sizes(), (0, 0));
    while triggers.sets.try_recv().is_ok() {}
    prometheus.release(1);
    eventually("Prometheus answered", || {
        prometheus.gate.available_permits() == 0
            && prometheus.open.load(std::sync::atomic::Ordering::SeqCst) == 0
    })
    .await;
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert_eq!(measurer.sizes(), (0, 0), "the answer is dropped");
    assert!(triggers.sets.try_recv().is_err(), "and wakes nothing");
    drop(ctx);
    server_ends(server).await;
}

/// An answer for a rollout the set has since moved on from (another revision) is recorded on no run
/// of the new one, and dropped.
#[tokio::test]
async fn an_answer_for_a_rollout_that_moved_on_is_dropped_not_recorded() {
    let mut world = World::new();
    let set = analysed_set(&mut world, &["first"], &["restarts"]);
    world.add_template("restarts", restarts_template());
    let prometheus = FakePrometheus::answering().await;
    let measurer = prometheus.measurer(&world, 4, std::time::Duration::from_secs(30));
    let (ctx, server, seen) = analysis_context(&world, ok_responder(set.clone()), &measurer);
    set_controller::reconcile(Arc::new(set.clone()), ctx.clone())
        .await
        .unwrap();
    eventually("the answer is kept", || measurer.sizes() == (0, 1)).await;
    seen.lock().unwrap().clear();

    let mut moved = changed_with_revision(&mut world, &set, "2", V2);
    moved.spec.rollout = set.spec.rollout.clone();
    world.add_set(&moved);
    set_controller::reconcile(Arc::new(moved), ctx.clone())
        .await
        .unwrap();
    assert_eq!(measurer.sizes(), (0, 0), "dropped");
    let seen = seen.lock().unwrap().clone();
    let patch = seen
        .iter()
        .rfind(|s| s.method == "PATCH" && s.path.ends_with("/status"))
        .expect("the new rollout is written");
    let rollout = &patch.body["status"]["rollout"];
    assert_eq!(rollout["revision"], V2, "{rollout}");
    let runs = rollout["analysis"].as_array().cloned().unwrap_or_default();
    assert!(
        runs.iter().all(|r| r["measurements"].as_i64().unwrap_or(0) == 0),
        "nothing of the old rollout's answer: {runs:?}"
    );
    assert_eq!(prometheus.queries().len(), 1);
    drop(ctx);
    server_ends(server).await;
}

// ------------------------------------------------------------------------------- analysis metrics --

/// The `cmset_analysis_` sample lines of `metrics`' scrape.
fn analysis_samples(metrics: &Metrics) -> Vec<String> {
    let mut registry = prometheus_client::registry::Registry::default();
    metrics.register(&mut registry);
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    text.lines()
        .filter(|l| l.starts_with("cmset_analysis_"))
        .map(str::to_string)
        .collect()
}

/// A set whose spec no longer names an analysis loses its series at its next reconcile, even one that
/// has nothing to write: they do not wait for the set's deletion.
#[tokio::test]
async fn the_series_of_an_analysis_the_spec_dropped_go_at_the_next_reconcile() {
    let mut world = World::new();
    world.add_deployment(&web(V1, true));
    let set = settle(&mut world, &nginx_set("1"));
    let held: Arc<std::sync::OnceLock<Arc<Metrics>>> = Arc::default();
    let keep = held.clone();
    let labels = set_controller::set_labels(SetKind::ConfigMapSet, NS, "nginx-config");
    let other = set_controller::set_labels(SetKind::ConfigMapSet, NS, "other");
    let owned = set.clone();
    let (result, seen) = scenario_after(
        &world,
        ok_responder(set.clone()),
        move |ctx| {
            // Measured while the spec named them: a per-wave and a per-workload query.
            ctx.metrics
                .analysis_measured(&labels, "error-rate", "", "passed", Some(0.01));
            ctx.metrics
                .analysis_measured(&labels, "restarts", "web", "passed", Some(0.0));
            ctx.metrics
                .analysis_measured(&other, "error-rate", "", "passed", Some(0.01));
            keep.set(ctx.metrics.clone()).ok();
        },
        |ctx| set_controller::reconcile(Arc::new(owned), ctx),
    )
    .await;
    result.unwrap();
    assert_no_requests(&seen);
    let metrics = held.get().unwrap();
    let left = analysis_samples(metrics);
    assert!(
        left.iter().all(|l| !l.contains(r#"set="nginx-config""#)),
        "{left:?}"
    );
    assert_eq!(left.len(), 2, "the other set's stay: {left:?}");
}

/// The status the set controller wrote in `seen`.
fn written_status(seen: &[Seen]) -> cmset_api::ConfigMapSetStatus {
    let patch = seen
        .iter()
        .find(|s| s.method == "PATCH" && s.path.ends_with("/status"))
        .expect("a status write");
    serde_json::from_value(patch.body["status"].clone()).unwrap()
}

/// A set held by a Deny window open all day (the clock says 08:00 UTC), its Deployment `web` on the old
/// revision: the set as stored, with its status, and the Deployment.
async fn held_by_a_window(world: &mut World) -> (ConfigMapSet, Deployment) {
    let deployment = web(V1, true);
    world.add_deployment(&deployment);
    let rollout: cmset_api::RolloutSpec = serde_json::from_value(
        json!({"windows": [{"kind": "Deny", "schedule": "0 0 * * *", "duration": "24h"}]}),
    )
    .unwrap();
    let mut set = nginx_set("1");
    set.spec.rollout = Some(rollout.clone());
    let settled = settle(world, &set);
    let mut changed = changed_with_revision(world, &settled, "2", V2);
    changed.spec.rollout = Some(rollout);
    world.add_set(&changed);
    let (result, seen) = reconcile_set(world, &changed).await;
    result.unwrap();
    let waiting = written_status(&seen);
    assert_eq!(
        waiting.rollout.as_ref().map(|r| r.phase),
        Some(cmset_api::RolloutPhase::Waiting)
    );
    changed.status = Some(waiting);
    world.add_set(&changed);
    (changed, deployment)
}

/// A WindowOverride of `set`'s rollout under way, for the set of uid `uid`, recorded for `by`.
fn window_override(name: &str, set: &ConfigMapSet, uid: &str, by: Option<&str>) -> cmset_api::WindowOverride {
    let rollout = set.status.as_ref().unwrap().rollout.clone().unwrap();
    let mut object = cmset_api::WindowOverride::new(
        name,
        cmset_api::WindowOverrideSpec {
            set: cmset_api::OverriddenSet {
                kind: cmset_api::OverriddenKind::ConfigMapSet,
                name: "nginx-config".into(),
                uid: uid.into(),
            },
            rollout: cmset_api::OverriddenRollout {
                revision: rollout.revision,
                started_at: rollout.started_at.unwrap(),
            },
            reason: None,
            requested_by: by.map(str::to_string),
        },
    );
    object.metadata.namespace = Some(NS.into());
    object
}

#[tokio::test]
async fn a_window_override_of_the_held_rollout_lets_it_through_once_naming_who() {
    let (mut world, mut receivers) = World::leading();
    let (held, deployment) = held_by_a_window(&mut world).await;
    while receivers.sets.try_recv().is_ok() {}

    // An override for a set of the same name deleted and created again (another uid) counts for
    // nothing: the Deployment stays.
    world
        .index
        .handle_override(&watcher::Event::Apply(window_override(
            "stale",
            &held,
            "an-earlier-set-uid",
            Some("bo"),
        )));
    let (result, seen) = reconcile_deployment(&world, &held, &deployment).await;
    result.unwrap();
    assert_no_requests(&seen);
    while receivers.sets.try_recv().is_ok() {}

    // The WindowOverride appears (its watch's event): the set is woken at once.
    world
        .index
        .handle_override(&watcher::Event::Apply(window_override(
            "nginx-config-break",
            &held,
            "set-uid",
            Some("ana@example.com"),
        )));
    let woken = tokio::time::timeout(std::time::Duration::from_secs(5), receivers.sets.next())
        .await
        .expect("the set is woken")
        .unwrap();
    assert_eq!(woken.name, "nginx-config");

    // The Deployment moves: one guarded patch.
    let (result, seen) = reconcile_deployment(&world, &held, &deployment).await;
    result.unwrap();
    assert_eq!(
        lines(&seen),
        vec!["PATCH /apis/apps/v1/namespaces/team/deployments/web"]
    );
    // The set: its status, and the Warning that names the override and who created it.
    let (result, seen) = reconcile_set(&world, &held).await;
    result.unwrap();
    assert_eq!(
        lines(&seen),
        vec![
            "PATCH /apis/cmset.dev/v1alpha1/namespaces/team/configmapsets/nginx-config/status",
            "POST /apis/events.k8s.io/v1/namespaces/team/events",
            "POST /apis/events.k8s.io/v1/namespaces/team/events",
        ]
    );
    let status = written_status(&seen);
    assert_eq!(
        status.rollout.as_ref().map(|r| r.phase),
        Some(cmset_api::RolloutPhase::Progressing)
    );
    let condition = status
        .conditions
        .iter()
        .find(|c| c.type_ == "WindowOverride")
        .expect("the WindowOverride condition");
    assert_eq!(
        (condition.status.as_str(), condition.reason.as_str()),
        ("True", "Granted")
    );
    assert!(
        condition
            .message
            .starts_with("WindowOverride nginx-config-break lets the rollout "),
        "{}",
        condition.message
    );
    let overridden = seen
        .iter()
        .map(|s| &s.body)
        .find(|e| e["reason"] == "WindowOverridden")
        .expect("the WindowOverridden event");
    assert_eq!(overridden["type"], "Warning");
    let note = overridden["note"].as_str().unwrap();
    assert!(
        note.contains("WindowOverride nginx-config-break (requested by ana@example.com)"),
        "{note}"
    );
    assert!(!note.contains("bo)"), "{note}");

    // Once: the set changes again while its status still names the overridden rollout (the set
    // controller has not written the new one yet). The Deployment, on V2 now, does not move to V3.
    let mut moved = held.clone();
    moved.status = Some(status);
    world.add_set(&moved);
    let on_v2 = web(V2, true);
    world.add_deployment(&on_v2);
    let mut changed = nginx_set("3");
    changed.spec.rollout = held.spec.rollout.clone();
    changed.metadata.generation = Some(3);
    changed.status = moved.status.clone();
    let v3 = cmset_core::revisions::revision::next_revision_name(
        (&changed).into(),
        &Content::of_template(&changed.spec.template),
    );
    world.add_set(&changed);
    world.add_revision(&new_revision(&changed, &v3, 3));
    let (result, seen) = reconcile_deployment(&world, &changed, &on_v2).await;
    result.unwrap();
    assert_no_requests(&seen);
    // The set's next rollout is held as any other.
    let (result, seen) = reconcile_set(&world, &changed).await;
    result.unwrap();
    let next = written_status(&seen);
    let rollout = next.rollout.unwrap();
    assert_eq!(
        (rollout.revision.as_str(), rollout.phase),
        (v3.as_str(), cmset_api::RolloutPhase::Waiting)
    );
    assert!(
        !next.conditions.iter().any(|c| c.type_ == "WindowOverride"),
        "no override for this rollout: {:?}",
        next.conditions
    );
}

#[tokio::test]
async fn the_old_override_annotation_moves_nothing_and_is_warned_about_once() {
    let (mut world, _receivers) = World::leading();
    let (mut held, deployment) = held_by_a_window(&mut world).await;
    let under_way = held.status.as_ref().unwrap().rollout.clone().unwrap();
    // What earlier versions honoured: the override of that very rollout, a record claiming an admin's
    // name, and a proof.
    held.metadata.annotations = Some(BTreeMap::from([
        (
            labels::WINDOW_OVERRIDE.to_string(),
            cmset_core::policy::break_glass::override_value(&under_way).unwrap(),
        ),
        (
            labels::WINDOW_OVERRIDE_BY.to_string(),
            "platform-admin 2027-01-15T07:59:00Z".to_string(),
        ),
        (labels::WINDOW_OVERRIDE_PROOF.to_string(), "cHJvb2Y=".to_string()),
    ]));
    world.add_set(&held);
    let (result, seen) = reconcile_set(&world, &held).await;
    result.unwrap();
    assert_eq!(
        lines(&seen),
        vec![
            "PATCH /apis/cmset.dev/v1alpha1/namespaces/team/configmapsets/nginx-config/status",
            "POST /apis/events.k8s.io/v1/namespaces/team/events",
        ]
    );
    let ignored = written_status(&seen);
    assert_eq!(
        ignored.rollout.as_ref().map(|r| r.phase),
        Some(cmset_api::RolloutPhase::Waiting),
        "still held"
    );
    let condition = ignored
        .conditions
        .iter()
        .find(|c| c.type_ == "WindowOverride")
        .expect("the WindowOverride condition");
    assert_eq!(
        (condition.status.as_str(), condition.reason.as_str()),
        ("False", "AnnotationIgnored")
    );
    let event = &seen[1].body;
    assert_eq!(
        (&event["type"], &event["reason"]),
        (&json!("Warning"), &json!("WindowOverrideIgnored"))
    );
    let note = event["note"].as_str().unwrap();
    assert!(
        note.contains("WindowOverride") && note.contains("kubectl cmset promote --override-window"),
        "{note}"
    );
    assert!(!note.contains("platform-admin") && !condition.message.contains("platform-admin"));

    // The Deployment stays on the old revision.
    let (result, seen) = reconcile_deployment(&world, &held, &deployment).await;
    result.unwrap();
    assert_no_requests(&seen);

    // Once that is written, reconciling again says nothing twice.
    held.status = Some(ignored);
    world.add_set(&held);
    let (result, seen) = reconcile_set(&world, &held).await;
    result.unwrap();
    assert_no_requests(&seen);
}

/// Windows fail closed (issue 36, item 6): an operator that may not list ChangeWindows holds every
/// move, and each set says why, until a list succeeds; then the sets it held are woken and move.
#[tokio::test]
async fn change_windows_that_may_not_be_listed_hold_every_move_and_the_set_says_why_until_they_list() {
    use cmset_core::rollout::window_hold::{UnknownCause, WindowsUnknown};
    let (mut world, mut receivers) = World::leading();
    let deployment = web(V1, true);
    world.add_deployment(&deployment);
    let set = settle(&mut world, &nginx_set("1"));
    world.index.watch_windows();
    world
        .index
        .windows_unavailable(WindowsUnknown {
            cause: UnknownCause::Forbidden,
            detail: "403 Forbidden".to_string(),
        })
        .expect("news");
    let changed = changed_with_revision(&mut world, &set, "2", V2);
    while receivers.sets.try_recv().is_ok() {}

    let (result, seen) = reconcile_deployment(&world, &changed, &deployment).await;
    result.unwrap();
    assert_no_requests(&seen);
    let (result, seen) = reconcile_set(&world, &changed).await;
    result.unwrap();
    let sent = lines(&seen);
    assert_eq!(
        sent[0], "PATCH /apis/cmset.dev/v1alpha1/namespaces/team/configmapsets/nginx-config/status",
        "{sent:?}"
    );
    assert!(
        sent[1..].iter().all(|l| l.ends_with("/events")),
        "no revision, no workload is touched: {sent:?}"
    );
    let status = &seen[0].body["status"];
    let condition = status["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "ChangeWindowsKnown")
        .expect("the set says why");
    assert_eq!(
        (&condition["status"], &condition["reason"]),
        (&json!("False"), &json!("ChangeWindowsForbidden"))
    );
    assert!(
        condition["message"].as_str().unwrap().contains("403 Forbidden"),
        "{condition}"
    );
    assert_eq!(
        (&status["rollout"]["phase"], &status["rollout"]["reason"]),
        (&json!("Waiting"), &json!("ChangeWindowsUnknown"))
    );
    let mut held = changed.clone();
    held.status = Some(serde_json::from_value(status.clone()).unwrap());
    world.add_set(&held);

    // The list succeeds (no window at all): the set is woken, and the workload moves.
    world.index.handle_change_window(&watcher::Event::Init, &[]);
    world.index.handle_change_window(&watcher::Event::InitDone, &[]);
    let woken = tokio::time::timeout(std::time::Duration::from_secs(5), receivers.sets.next())
        .await
        .expect("the held set is woken")
        .unwrap();
    assert_eq!(woken.name, "nginx-config");
    let (result, seen) = reconcile_deployment(&world, &held, &deployment).await;
    result.unwrap();
    assert_eq!(
        lines(&seen)[0],
        "PATCH /apis/apps/v1/namespaces/team/deployments/web"
    );
    let (result, seen) = reconcile_set(&world, &held).await;
    result.unwrap();
    let status = &seen[0].body["status"];
    assert!(
        !status["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["type"] == "ChangeWindowsKnown"),
        "known again, the condition is gone: {status}"
    );
}

// ------------------------------------------------------------------------------------- checks --

/// `nginx_set` with one check, `lint`, whose pod reads the set as a volume.
fn checked_set(version: &str) -> ConfigMapSet {
    let mut set = nginx_set(version);
    set.spec.checks = vec![
        serde_json::from_value(
            json!({"name": "lint", "jobTemplate": {"spec": {"template": {"spec": {
            "containers": [{"name": "lint", "image": "busybox",
                "volumeMounts": [{"name": "conf", "mountPath": "/etc/app"}]}],
            "volumes": [{"name": "conf", "configMap": {"name": "nginx-config"}}]}}}}}),
        )
        .unwrap(),
    ];
    set
}

/// The uid the API server gives the check Job cmset creates, and the revision's.
const JOB_UID: &str = "job-uid-cmset";
const REVISION_UID: &str = "revision-uid-1";

/// `ok_responder`'s answers, and for checks: `job` to a GET of a Job (404 without one), the created Job
/// with [`JOB_UID`] to a create; a create of the NetworkPolicy answered 409 when `policy` exists, which
/// a GET then returns; `set` to a GET of the set (the records are merged into it).
fn checks_responder_with(set: ConfigMapSet, job: Option<Value>, policy: Option<Value>) -> Responder {
    let ok = ok_responder(set.clone());
    let not_found =
        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404});
    Arc::new(move |s: &Seen| match (s.method.as_str(), s.path.as_str()) {
        ("GET", p) if p.contains("/jobs/") => match &job {
            Some(job) => (200, job.clone()),
            None => (404, not_found.clone()),
        },
        ("POST", p) if p.ends_with("/jobs") => {
            let mut job = s.body.clone();
            job["metadata"]["uid"] = json!(JOB_UID);
            (201, job)
        }
        ("POST", p) if p.ends_with("/networkpolicies") => match &policy {
            Some(_) => (
                409,
                json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "AlreadyExists", "code": 409}),
            ),
            None => (201, s.body.clone()),
        },
        ("GET" | "PATCH", p) if p.contains("/networkpolicies/") => match &policy {
            Some(policy) => (200, policy.clone()),
            None => (404, not_found.clone()),
        },
        ("GET", p) if p.ends_with("/configmapsets/nginx-config") => {
            (200, serde_json::to_value(&set).unwrap())
        }
        _ => ok(s),
    })
}

fn checks_responder(set: ConfigMapSet, job: Option<Value>) -> Responder {
    checks_responder_with(set, job, None)
}

async fn reconcile_checked(world: &World, set: &ConfigMapSet, job: Option<Value>) -> Vec<Seen> {
    reconcile_checked_with(world, set, checks_responder(set.clone(), job)).await
}

async fn reconcile_checked_with(world: &World, set: &ConfigMapSet, respond: Responder) -> Vec<Seen> {
    let owned = set.clone();
    let (result, seen) = scenario(world, respond, |ctx| {
        set_controller::reconcile(Arc::new(owned), ctx)
    })
    .await;
    result.expect("reconcile succeeds");
    seen
}

/// A checked set whose revision exists (with [`REVISION_UID`]) and whose rollout is being checked,
/// with `records` in its status; and its check's hash, Job name and Job path.
fn checked_world(records: Value) -> (World, ConfigMapSet, String, String, String) {
    let mut world = World::new();
    let set = checked_set("1");
    world.add_set(&set);
    let mut set = settle(&mut world, &set);
    let mut revision = new_revision(&set, V1, 1);
    revision.metadata.uid = Some(REVISION_UID.into());
    world.add_revision(&revision);
    set.status.as_mut().unwrap().checks = serde_json::from_value(records).unwrap();
    world.add_set(&set);
    let check_hash = cmset_core::content::checks::check_hash(&set.spec.checks[0]);
    let job_name = cmset_core::content::checks::job_name("nginx-config", "d2c65kk9hm", &check_hash);
    let job_path = format!("/apis/batch/v1/namespaces/team/jobs/{job_name}");
    (world, set, check_hash, job_name, job_path)
}

/// The check's Job as the API server answers a GET of it: of uid `uid`, in the state `status` says.
fn job_in(name: &str, uid: &str, status: Value) -> Value {
    json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": NS, "uid": uid},
        "status": status,
    })
}

fn completed() -> Value {
    json!({
        "startTime": "2027-01-15T08:00:00Z", "completionTime": "2027-01-15T08:00:03Z",
        "conditions": [{"type": "Complete", "status": "True"}],
    })
}

/// One record of the check `lint` of revision [`V1`].
fn lint_record(hash: &str, job_uid: &str, passed: Option<bool>, message: Option<&str>) -> Value {
    let mut record = json!({"revision": V1, "revisionUid": REVISION_UID, "name": "lint", "hash": hash});
    if !job_uid.is_empty() {
        record["jobUid"] = json!(job_uid);
    }
    if let Some(passed) = passed {
        record["passed"] = json!(passed);
    }
    if let Some(message) = message {
        record["message"] = json!(message);
    }
    record
}

/// The apply of `status.checks` alone, by the checks' own field manager.
fn assert_records_written(seen: &Seen, records: Value) {
    assert_eq!(
        seen.line(),
        "PATCH /apis/cmset.dev/v1alpha1/namespaces/team/configmapsets/nginx-config/status"
    );
    assert!(seen.query.contains("fieldManager=cmset-checks"), "{}", seen.query);
    assert!(seen.query.contains("force=true"), "{}", seen.query);
    assert_eq!(
        seen.body,
        json!({"apiVersion": "cmset.dev/v1alpha1", "kind": "ConfigMapSet", "status": {"checks": records}})
    );
}

#[tokio::test]
async fn a_checked_revision_starts_its_job_once_it_exists_and_records_the_verdict_when_it_ends() {
    let mut world = World::new();
    let set = checked_set("1");
    world.add_set(&set);

    // The revision, and a status saying it is being checked; no Job before its revision exists.
    let seen = reconcile_checked(&world, &set, None).await;
    let lines: Vec<String> = seen.iter().map(Seen::line).collect();
    assert_eq!(
        lines,
        vec![
            "POST /api/v1/namespaces/team/configmaps",
            "PATCH /apis/cmset.dev/v1alpha1/namespaces/team/configmapsets/nginx-config/status",
            "POST /apis/events.k8s.io/v1/namespaces/team/events",
            "POST /apis/events.k8s.io/v1/namespaces/team/events",
        ]
    );
    let rollout = &seen[1].body["status"]["rollout"];
    assert_eq!(rollout["phase"], "Checking");
    assert_eq!(rollout["message"], "checks: lint starting");
    // The revision's story, and the rollout's phase, which stands alone for whoever selects by reason.
    let mut reasons = vec![seen[2].body["reason"].clone(), seen[3].body["reason"].clone()];
    reasons.sort_by_key(|r| r.to_string());
    assert_eq!(reasons, vec![json!("RevisionCreated"), json!("RolloutChecking")]);

    // The revision exists: its Job is looked for by name, then the namespace's deny-all policy and
    // the Job are created, and the uid the create returned is recorded in the set's status at once,
    // merged into the set as the API server holds it. The rest of the status is as it was.
    let (mut world, set, check_hash, job_name, job_path) = checked_world(json!(null));
    let seen = reconcile_checked(&world, &set, None).await;
    let lines: Vec<String> = seen.iter().map(Seen::line).collect();
    assert_eq!(
        lines,
        vec![
            format!("GET {job_path}"),
            "POST /apis/networking.k8s.io/v1/namespaces/team/networkpolicies".to_string(),
            "POST /apis/batch/v1/namespaces/team/jobs".to_string(),
            "GET /apis/cmset.dev/v1alpha1/namespaces/team/configmapsets/nginx-config".to_string(),
            "PATCH /apis/cmset.dev/v1alpha1/namespaces/team/configmapsets/nginx-config/status".to_string(),
        ]
    );
    assert_eq!(seen[1].body["metadata"]["name"], "cmset-checks-deny-all");
    let job = &seen[2].body;
    assert_eq!(job["metadata"]["name"], job_name.as_str());
    let pod = &job["spec"]["template"]["spec"];
    assert_eq!(pod["automountServiceAccountToken"], false);
    assert_eq!(pod["volumes"][0]["configMap"]["name"], V1);
    assert_eq!(pod["containers"][0]["volumeMounts"][0]["readOnly"], true);
    assert_records_written(&seen[4], json!([lint_record(&check_hash, JOB_UID, None, None)]));

    // A replica that starts now (a restart, a new leader) finds the running Job by its name and, its
    // uid being the one recorded, creates none; only the rollout's message changes, from starting to
    // running.
    let mut set = set;
    set.status.as_mut().unwrap().checks =
        serde_json::from_value(json!([lint_record(&check_hash, JOB_UID, None, None)])).unwrap();
    world.add_set(&set);
    let running = job_in(
        &job_name,
        JOB_UID,
        json!({"startTime": "2027-01-15T08:00:00Z", "active": 1}),
    );
    let seen = reconcile_checked(&world, &set, Some(running)).await;
    let lines: Vec<String> = seen.iter().map(Seen::line).collect();
    assert_eq!(
        lines,
        vec![
            format!("GET {job_path}"),
            "PATCH /apis/cmset.dev/v1alpha1/namespaces/team/configmapsets/nginx-config/status".to_string(),
        ]
    );
    assert_eq!(
        seen[1].body["status"]["rollout"]["message"],
        "checks: lint running"
    );
    assert!(
        seen[1].body["status"].get("checks").is_none(),
        "the set controller's status write never carries the checks' records"
    );

    // The Job completed: its verdict is recorded in the set's status, beside its Job's uid.
    let seen = reconcile_checked(&world, &set, Some(job_in(&job_name, JOB_UID, completed()))).await;
    let lines: Vec<String> = seen.iter().map(Seen::line).collect();
    assert_eq!(
        lines,
        vec![
            format!("GET {job_path}"),
            // The rollout's message: the check is running no more than it was starting.
            "PATCH /apis/cmset.dev/v1alpha1/namespaces/team/configmapsets/nginx-config/status".to_string(),
            "GET /apis/cmset.dev/v1alpha1/namespaces/team/configmapsets/nginx-config".to_string(),
            "PATCH /apis/cmset.dev/v1alpha1/namespaces/team/configmapsets/nginx-config/status".to_string(),
        ]
    );
    let passed = json!([lint_record(&check_hash, JOB_UID, Some(true), None)]);
    assert_records_written(&seen[3], passed.clone());

    // Recorded, the verdict opens the rollout; no Job is read again.
    set.status.as_mut().unwrap().checks = serde_json::from_value(passed).unwrap();
    world.add_set(&set);
    let seen = reconcile_checked(&world, &set, None).await;
    let lines: Vec<String> = seen.iter().map(Seen::line).collect();
    assert_eq!(
        lines,
        vec![
            "PATCH /apis/cmset.dev/v1alpha1/namespaces/team/configmapsets/nginx-config/status",
            "POST /apis/events.k8s.io/v1/namespaces/team/events",
        ],
        "no Job is read: the verdict in the set's status stands"
    );
    assert_eq!(seen[0].body["status"]["rollout"]["phase"], "Complete");
    assert_eq!(seen[1].body["reason"], "RolloutComplete");
}

/// `web` reading the plain ConfigMap `name`, held by admission at the fixed clock's instant.
fn held_web(name: &str) -> Deployment {
    let mut d = web(name, true);
    d.metadata.annotations = Some(BTreeMap::from([(
        cmset_core::rollout::hold::HELD_SINCE.to_string(),
        "2027-01-15T08:00:00Z".to_string(),
    )]));
    d.spec.as_mut().unwrap().paused = Some(true);
    d
}

/// Admission holds a new workload for any name no set claims without asking whether it exists (the
/// answer would tell any caller of the webhook). Stored, the workload controller asks, in the
/// workload's own namespace and for metadata only, and releases it at once when the name exists.
#[tokio::test]
async fn a_held_workload_whose_names_exist_is_released_at_once_and_one_whose_names_do_not_waits() {
    let mut world = World::new();
    let set = settle(&mut world, &nginx_set("1"));
    let exists = |present: bool| -> Responder {
        let ok = ok_responder(set.clone());
        Arc::new(move |s: &Seen| match (s.method.as_str(), present) {
            ("GET", true) => (
                200,
                json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
                       "metadata": {"name": "plain", "namespace": NS}}),
            ),
            ("GET", false) => (
                404,
                json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404}),
            ),
            _ => ok(s),
        })
    };
    let held = held_web("plain");
    world.add_deployment(&held);
    let (result, seen) = scenario(&world, exists(true), |ctx| {
        workload_controller::reconcile(WorkloadKind::Deployment, Arc::new(dynamic(&held)), ctx)
    })
    .await;
    result.unwrap();
    assert_eq!(
        lines(&seen),
        vec![
            "GET /api/v1/namespaces/team/configmaps/plain",
            "PATCH /apis/apps/v1/namespaces/team/deployments/web",
        ]
    );
    assert_eq!(
        seen[1].body,
        json!([
            {"op": "test", "path": "/metadata/uid", "value": "uid-web"},
            {"op": "test", "path": "/metadata/annotations/cmset.dev~1held-since", "value": "2027-01-15T08:00:00Z"},
            {"op": "add", "path": "/spec/paused", "value": false},
            {"op": "remove", "path": "/metadata/annotations/cmset.dev~1held-since"}
        ])
    );
    let (result, seen) = scenario(&world, exists(false), |ctx| {
        workload_controller::reconcile(WorkloadKind::Deployment, Arc::new(dynamic(&held)), ctx)
    })
    .await;
    assert!(result.is_ok());
    assert_eq!(lines(&seen), vec!["GET /api/v1/namespaces/team/configmaps/plain"]);
}

#[tokio::test]
async fn a_verdict_forged_in_the_revisions_annotation_counts_for_nothing() {
    let (mut world, set, check_hash, _, job_path) = checked_world(json!(null));
    // Anyone who may edit the namespace may annotate the revision as if the check had passed.
    let mut revision = new_revision(&set, V1, 1);
    revision.metadata.uid = Some(REVISION_UID.into());
    let forged = format!(r#"{{"{check_hash}":{{"name":"lint","passed":true}}}}"#);
    revision
        .metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert("cmset.dev/check-results".into(), forged);
    world.add_revision(&revision);
    let seen = reconcile_checked(&world, &set, None).await;
    let lines: Vec<String> = seen.iter().map(Seen::line).collect();
    assert_eq!(
        lines,
        vec![
            format!("GET {job_path}"),
            "POST /apis/networking.k8s.io/v1/namespaces/team/networkpolicies".to_string(),
            "POST /apis/batch/v1/namespaces/team/jobs".to_string(),
            "GET /apis/cmset.dev/v1alpha1/namespaces/team/configmapsets/nginx-config".to_string(),
            "PATCH /apis/cmset.dev/v1alpha1/namespaces/team/configmapsets/nginx-config/status".to_string(),
        ],
        "the check runs as if nothing were recorded"
    );
    assert_records_written(&seen[4], json!([lint_record(&check_hash, JOB_UID, None, None)]));
}

#[tokio::test]
async fn a_job_of_the_checks_name_that_cmset_did_not_create_fails_the_check() {
    // A Job pre-created under the check's name, which succeeded; cmset recorded no Job of its own.
    let (mut world, mut set, check_hash, job_name, job_path) = checked_world(json!(null));
    let foreign = job_in(&job_name, "tenant-uid", completed());
    let seen = reconcile_checked(&world, &set, Some(foreign.clone())).await;
    let lines: Vec<String> = seen.iter().map(Seen::line).collect();
    assert_eq!(
        lines,
        vec![
            format!("GET {job_path}"),
            "PATCH /apis/cmset.dev/v1alpha1/namespaces/team/configmapsets/nginx-config/status".to_string(),
            "GET /apis/cmset.dev/v1alpha1/namespaces/team/configmapsets/nginx-config".to_string(),
            "PATCH /apis/cmset.dev/v1alpha1/namespaces/team/configmapsets/nginx-config/status".to_string(),
        ],
        "no Job is created, and its outcome is not read as the check's"
    );
    let message = format!("check lint: Job {job_name} was not created by cmset (uid tenant-uid)");
    let failed = json!([lint_record(&check_hash, "", Some(false), Some(&message))]);
    assert_records_written(&seen[3], failed.clone());

    // Recorded, the failure fails the rollout, saying so.
    set.status.as_mut().unwrap().checks = serde_json::from_value(failed).unwrap();
    world.add_set(&set);
    let seen = reconcile_checked(&world, &set, Some(foreign.clone())).await;
    let status = &seen[0].body["status"];
    assert_eq!(status["rollout"]["phase"], "Failed");
    assert_eq!(status["rollout"]["reason"], "CheckFailed");
    assert_eq!(
        status["rollout"]["message"],
        format!("the checks of {V1} failed: {message}")
    );
    assert!(
        !seen.iter().any(|s| s.path.contains("/jobs")),
        "a recorded verdict reads no Job"
    );

    // A Job of another uid than the one cmset recorded (deleted and made again by someone else) is
    // not cmset's either.
    let hash = cmset_core::content::checks::check_hash(&checked_set("1").spec.checks[0]);
    let (world, set, check_hash, job_name, _) =
        checked_world(json!([lint_record(&hash, JOB_UID, None, None)]));
    let seen = reconcile_checked(&world, &set, Some(job_in(&job_name, "tenant-uid", completed()))).await;
    let written = seen.last().expect("a write");
    let message = format!("check lint: Job {job_name} was not created by cmset (uid tenant-uid)");
    assert_records_written(
        written,
        json!([lint_record(&check_hash, JOB_UID, Some(false), Some(&message))]),
    );
}

#[tokio::test]
async fn a_rewritten_deny_all_policy_is_put_back_before_the_check_runs() {
    let (world, set, check_hash, _, job_path) = checked_world(json!(null));
    // Rewritten by someone who may edit the namespace: it now lets everything in and out.
    let open = json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": {"name": "cmset-checks-deny-all", "namespace": NS},
        "spec": {"podSelector": {}, "ingress": [{}], "egress": [{}], "policyTypes": ["Ingress", "Egress"]},
    });
    let respond = checks_responder_with(set.clone(), None, Some(open));
    let seen = reconcile_checked_with(&world, &set, respond).await;
    let lines: Vec<String> = seen.iter().map(Seen::line).collect();
    let policy_path = "/apis/networking.k8s.io/v1/namespaces/team/networkpolicies/cmset-checks-deny-all";
    assert_eq!(
        lines,
        vec![
            format!("GET {job_path}"),
            "POST /apis/networking.k8s.io/v1/namespaces/team/networkpolicies".to_string(),
            format!("GET {policy_path}"),
            format!("PATCH {policy_path}"),
            "POST /apis/batch/v1/namespaces/team/jobs".to_string(),
            "GET /apis/cmset.dev/v1alpha1/namespaces/team/configmapsets/nginx-config".to_string(),
            "PATCH /apis/cmset.dev/v1alpha1/namespaces/team/configmapsets/nginx-config/status".to_string(),
        ]
    );
    assert_eq!(
        seen[3].body,
        json!([{"op": "replace", "path": "/spec", "value": {
            "podSelector": {"matchExpressions": [{"key": "cmset.dev/check-of", "operator": "Exists"}]},
            "policyTypes": ["Ingress", "Egress"]}}])
    );
    assert!(
        seen[3].query.contains("fieldManager=cmset-controller"),
        "{}",
        seen[3].query
    );
    assert_records_written(&seen[6], json!([lint_record(&check_hash, JOB_UID, None, None)]));

    // An intact one is left alone.
    let intact = serde_json::to_value(cmset_core::content::checks::deny_all_policy(NS)).unwrap();
    let respond = checks_responder_with(set.clone(), None, Some(intact));
    let seen = reconcile_checked_with(&world, &set, respond).await;
    assert!(
        !seen.iter().any(|s| s.method == "PATCH" && s.path == policy_path),
        "{:?}",
        seen.iter().map(Seen::line).collect::<Vec<_>>()
    );
}

#[tokio::test]
async fn a_template_the_restricted_profile_refuses_fails_its_check_without_a_job() {
    let (mut world, mut set, _, _, job_path) = checked_world(json!(null));
    set.spec.checks[0].job_template["spec"]["template"]["spec"]["containers"][0]["securityContext"] =
        json!({"runAsUser": 0});
    world.add_set(&set);
    let check_hash = cmset_core::content::checks::check_hash(&set.spec.checks[0]);
    let seen = reconcile_checked(&world, &set, None).await;
    let lines: Vec<String> = seen.iter().map(Seen::line).collect();
    let job_name = cmset_core::content::checks::job_name("nginx-config", "d2c65kk9hm", &check_hash);
    assert!(!job_path.ends_with(&job_name), "an edited check is another Job");
    assert_eq!(
        lines,
        vec![
            format!("GET /apis/batch/v1/namespaces/team/jobs/{job_name}"),
            "GET /apis/cmset.dev/v1alpha1/namespaces/team/configmapsets/nginx-config".to_string(),
            "PATCH /apis/cmset.dev/v1alpha1/namespaces/team/configmapsets/nginx-config/status".to_string(),
        ],
        "no policy, no Job"
    );
    let message = "check lint cannot run: spec.template.spec.containers[0].securityContext.runAsUser: 0 is not allowed (restricted profile)";
    assert_records_written(
        &seen[2],
        json!([lint_record(&check_hash, "", Some(false), Some(message))]),
    );
}
