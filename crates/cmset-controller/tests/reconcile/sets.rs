//! A set's revision, status and Event, created in that order; nothing sent when nothing changed (an
//! unchanged set, a restart, a pinned workload, one not opted in); validation that creates nothing; a
//! workload moved with one guarded patch; a name taken by someone else; a generator's ConfigMap taken over.

use super::*;

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
    // Only the version of the created revision is kept, so its content is not asked back.
    assert_eq!(
        seen[0].accept,
        "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
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
pub(crate) fn validated_set(json: &str, from_configmap: bool) -> ConfigMapSet {
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
    assert_eq!(
        result.unwrap(),
        Action::await_change(),
        "nothing due: back only on a change or the resync of every set, no timer of its own"
    );
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
