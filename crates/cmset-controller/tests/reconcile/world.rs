//! The mocked API's world: the objects it holds, the index and stores fed from them, and the
//! scenario runners that reconcile against it and return the requests sent.

use super::*;

pub(crate) const NS: &str = "team";
pub(crate) const V1: &str = "nginx-config-d2c65kk9hm";
pub(crate) const V2: &str = "nginx-config-tc2kg4m444";

/// The answer to a create whose name is taken.
pub(crate) fn already_exists() -> (u16, Value) {
    (
        409,
        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "AlreadyExists", "code": 409}),
    )
}

/// The answers of a well-behaved API server: creates and patches echo an object, events succeed.
pub(crate) fn ok_responder(set: ConfigMapSet) -> Responder {
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
pub(crate) struct World {
    pub(crate) sets: Writer<ConfigMapSet>,
    pub(crate) secret_sets: Writer<SecretSet>,
    pub(crate) deployments: Writer<StoredWorkload>,
    pub(crate) templates: Writer<AnalysisTemplate>,
    pub(crate) index: Arc<Index>,
    pub(crate) stores: Stores,
}

/// Deployments as the workload watch keeps them: dynamic objects of the table's kind.
pub(crate) fn deployment_resource() -> ApiResource {
    ApiResource::erase::<Deployment>(&())
}

/// A Deployment as its watch stores it: decoded by its wire type, slimmed.
pub(crate) fn dynamic(d: &Deployment) -> StoredWorkload {
    let object: cmset_controller::engine::wire::WireWorkload =
        serde_json::from_value(serde_json::to_value(d).unwrap()).unwrap();
    StoredWorkload::slim(WorkloadKind::Deployment, object)
}

impl World {
    pub(crate) fn new() -> Self {
        Self::with_budget(None)
    }

    /// A world whose index feeds the cluster-wide rollout budget `budget`.
    pub(crate) fn with_budget(budget: Option<Arc<RolloutBudget>>) -> Self {
        let world = Self::build(budget, None);
        world.list_history();
        world
    }

    /// A world as a replica that has just taken the lease sees it: its history watches have not
    /// listed yet.
    pub(crate) fn before_history_lists() -> Self {
        Self::build(None, None)
    }

    /// The history watches deliver their first lists (nothing).
    pub(crate) fn list_history(&self) {
        self.index.handle::<ReplicaSet>(&watcher::Event::InitDone);
        self.index.handle::<ControllerRevision>(&watcher::Event::InitDone);
        self.index.handle::<Job>(&watcher::Event::InitDone);
    }

    /// A world whose index sends the reconciles it triggers to the returned queues, as a leader's does.
    pub(crate) fn leading() -> (Self, TriggerReceivers) {
        let (senders, receivers) = trigger_channels();
        let world = Self::build(None, Some(senders));
        world.index.lead();
        world.list_history();
        (world, receivers)
    }

    pub(crate) fn build(budget: Option<Arc<RolloutBudget>>, senders: Option<TriggerSenders>) -> Self {
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
    pub(crate) fn add_template(&mut self, name: &str, spec: Value) {
        let template: AnalysisTemplate = serde_json::from_value(json!({
            "apiVersion": "cmset.dev/v1alpha1", "kind": "AnalysisTemplate",
            "metadata": {"name": name}, "spec": spec,
        }))
        .unwrap();
        let event = watcher::Event::Apply(template);
        self.templates.apply_watcher_event(&event);
        self.index.handle_template(&event);
    }

    pub(crate) fn add_set(&mut self, set: &ConfigMapSet) {
        let event = watcher::Event::Apply(set.clone());
        self.sets.apply_watcher_event(&event);
        self.index.handle(&event);
    }

    pub(crate) fn add_secret_set(&mut self, set: &SecretSet) {
        let event = watcher::Event::Apply(set.clone());
        self.secret_sets.apply_watcher_event(&event);
        self.index.handle(&event);
    }

    /// A Secret as the metadata-only watch sees it: a source's new version, or a revision.
    pub(crate) fn see_secret(&mut self, secret: &Secret) {
        let meta = PartialObjectMeta::<Secret> {
            types: None,
            metadata: secret.metadata.clone(),
            _phantom: Default::default(),
        };
        self.index.handle(&watcher::Event::Apply(meta));
    }

    pub(crate) fn add_revision(&mut self, cm: &ConfigMap) {
        let meta = PartialObjectMeta::<ConfigMap> {
            types: None,
            metadata: cm.metadata.clone(),
            _phantom: Default::default(),
        };
        self.index.handle(&watcher::Event::Apply(meta));
    }

    pub(crate) fn add_deployment(&mut self, d: &Deployment) {
        let event = watcher::Event::Apply(dynamic(d));
        self.deployments.apply_watcher_event(&event);
        self.index.handle_workload(WorkloadKind::Deployment, &event);
    }

    pub(crate) fn add_replica_set(&mut self, rs: &ReplicaSet) {
        self.index.handle(&watcher::Event::Apply(rs.clone()));
    }

    pub(crate) fn revisions(&self) -> Vec<cmset_core::workloads::observe::RevisionView> {
        self.index.revisions(SetKind::ConfigMapSet, NS, "nginx-config")
    }
}

pub(crate) fn fixed_clock() -> Clock {
    Arc::new(|| Time(Timestamp::from_second(1_800_000_000).unwrap()))
}

/// Runs `f` against a mocked API answering with `respond`; returns what `f` returned and every request.
pub(crate) async fn scenario<F, Fut, T>(world: &World, respond: Responder, f: F) -> (T, Vec<Seen>)
where
    F: FnOnce(Arc<Context>) -> Fut,
    Fut: std::future::Future<Output = T>,
{
    scenario_after(world, respond, |_| {}, f).await
}

/// [`scenario`], with the context prepared first (as earlier reconciles would have left it).
pub(crate) async fn scenario_after<F, Fut, T>(
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
pub(crate) async fn scenario_in<F, Fut, T>(
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
pub(crate) async fn reconcile_set(
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
pub(crate) async fn reconcile_deployment(
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

pub(crate) fn assert_no_requests(seen: &[Seen]) {
    assert!(
        seen.is_empty(),
        "expected no request, got: {:?}",
        seen.iter().map(Seen::line).collect::<Vec<_>>()
    );
}

pub(crate) fn nginx_set(version: &str) -> ConfigMapSet {
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

pub(crate) fn web(configmap: &str, opted_in: bool) -> Deployment {
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
pub(crate) fn new_revision(set: &ConfigMapSet, name: &str, number: i64) -> ConfigMap {
    let content = Content::of_template(&set.spec.template);
    cmset_core::revisions::revision::new_revision(set.into(), &content, name, number)
        .config_map()
        .expect("a ConfigMapSet's revision is a ConfigMap")
        .clone()
}

/// Brings `set` and its revisions to what the controller would have written, planning from the world.
pub(crate) fn settle(world: &mut World, set: &ConfigMapSet) -> ConfigMapSet {
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
