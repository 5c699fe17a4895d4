//! Checks and holds: a check's Job and its recorded verdict, a forged verdict and a foreign Job, the
//! deny-all policy put back, templates the restricted profile refuses; a held workload released when its
//! names exist.

use super::*;

/// `nginx_set` with one check, `lint`, whose pod reads the set as a volume.
pub(crate) fn checked_set(version: &str) -> ConfigMapSet {
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
pub(crate) const JOB_UID: &str = "job-uid-cmset";
pub(crate) const REVISION_UID: &str = "revision-uid-1";

/// `ok_responder`'s answers, and for checks: `job` to a GET of a Job (404 without one), the created Job
/// with [`JOB_UID`] to a create; a create of the NetworkPolicy answered 409 when `policy` exists, which
/// a GET then returns; `set` to a GET of the set (the records are merged into it).
pub(crate) fn checks_responder_with(
    set: ConfigMapSet,
    job: Option<Value>,
    policy: Option<Value>,
) -> Responder {
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

pub(crate) fn checks_responder(set: ConfigMapSet, job: Option<Value>) -> Responder {
    checks_responder_with(set, job, None)
}

pub(crate) async fn reconcile_checked(world: &World, set: &ConfigMapSet, job: Option<Value>) -> Vec<Seen> {
    reconcile_checked_with(world, set, checks_responder(set.clone(), job)).await
}

pub(crate) async fn reconcile_checked_with(
    world: &World,
    set: &ConfigMapSet,
    respond: Responder,
) -> Vec<Seen> {
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
pub(crate) fn checked_world(records: Value) -> (World, ConfigMapSet, String, String, String) {
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
pub(crate) fn job_in(name: &str, uid: &str, status: Value) -> Value {
    json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": NS, "uid": uid},
        "status": status,
    })
}

pub(crate) fn completed() -> Value {
    json!({
        "startTime": "2027-01-15T08:00:00Z", "completionTime": "2027-01-15T08:00:03Z",
        "conditions": [{"type": "Complete", "status": "True"}],
    })
}

/// One record of the check `lint` of revision [`V1`].
pub(crate) fn lint_record(hash: &str, job_uid: &str, passed: Option<bool>, message: Option<&str>) -> Value {
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
pub(crate) fn assert_records_written(seen: &Seen, records: Value) {
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
    // Nothing of the answer is read: only the set's metadata is asked back.
    assert_eq!(
        seen[3].accept,
        "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
    );

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
pub(crate) fn held_web(name: &str) -> Deployment {
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
