//! SecretSets: the source read once and an immutable Secret stamped; nothing sent once its version is
//! known.

use super::*;

pub(crate) const DB_V1: &str = "db-9k5ddchd8d";

pub(crate) fn db_set() -> SecretSet {
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

/// The source: Opaque, password=s3cret, user=app (the vector), at `version`.
pub(crate) fn db_source(version: &str) -> Secret {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "db-credentials", "namespace": NS, "resourceVersion": version},
        "type": "Opaque", "data": {"password": "czNjcmV0", "user": "YXBw"}
    }))
    .unwrap()
}

pub(crate) fn secret_responder(set: SecretSet, source: Secret) -> Responder {
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
    // The values are not sent back either: the answer is the Secret's metadata only.
    assert_eq!(
        seen[1].accept,
        "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
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
