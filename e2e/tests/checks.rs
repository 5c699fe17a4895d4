//! `spec.checks` on a real API server (issue 39): the application's own check runs as a Job against each
//! new revision before any workload moves to it. A check that passes opens the rollout; one that fails
//! keeps every workload on the last good revision, fails the rollout with the check's message and says
//! so in a Warning; a revert to a revision that passed runs no check again; and the Job runs locked
//! down (no token, the restricted profile, a deadline, no retry, the deny-all NetworkPolicy's label).
//! A tenant with `edit` and `cmset-edit` cannot make a failing check pass: not by writing a verdict on
//! the revision, not by creating the check's Job first, not by opening the deny-all NetworkPolicy.
//!
//! The simulated node runs a check pod to its end: it fails when the pod reads a ConfigMap holding the
//! key `CMSET_FAKE_NODE_FAIL` (see e2e/cluster/fake-node.py).

use std::time::Duration;

use cmset_e2e::fixtures::{Reads, deployment_yaml, template_names};
use cmset_e2e::tenant::Tenant;
use cmset_e2e::{Operator, TestNamespace, eventually, eventually_within, stays, warning_event};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::ListParams;

const SET: &str = "app";
/// How long "nothing moves" is watched for.
const STILL: Duration = Duration::from_secs(5);

/// ConfigMapSet `SET` with `data` and one check, `lint`, whose pod mounts the set.
fn set_yaml(data: &[(&str, &str)]) -> String {
    let data: String = data
        .iter()
        .map(|(k, v)| format!("      {k}: \"{v}\"\n"))
        .collect();
    format!(
        r#"
apiVersion: cmset.dev/v1alpha1
kind: ConfigMapSet
metadata:
  name: {SET}
spec:
  template:
    data:
{data}  checks:
    - name: lint
      jobTemplate:
        spec:
          template:
            spec:
              containers:
                - name: lint
                  image: busybox:1.36
                  command: [sh, -c, "test -s /etc/app/app.conf"]
                  volumeMounts: [{{name: conf, mountPath: /etc/app}}]
              volumes: [{{name: conf, configMap: {{name: {SET}}}}}]
"#
    )
}

/// What an admin does in a namespace where sets declare checks (docs/checks.md).
fn bind_checks_role(ns: &TestNamespace) {
    ns.kubectl(&[
        "create",
        "rolebinding",
        "cmset-checks",
        "--clusterrole=cmset-checks",
        "--serviceaccount=cmset-system:cmset-controller",
    ]);
}

async fn check_jobs(ns: &TestNamespace) -> Vec<Job> {
    let params = ListParams::default().labels("cmset.dev/check-of");
    ns.api::<Job>().list(&params).await.expect("the Jobs").items
}

async fn current(ns: &TestNamespace) -> Option<String> {
    ns.set(SET).await.status?.current_revision
}

/// The verdict cmset recorded in the set's status for the check of revision `revision` (of uid `uid`).
async fn passed(ns: &TestNamespace, revision: &str, uid: &str) -> Option<bool> {
    let records = ns.set(SET).await.status?.checks?;
    records
        .iter()
        .find(|r| r.revision == revision && r.revision_uid == uid)?
        .passed
}

async fn rollout_of(ns: &TestNamespace, revision: &str) -> Option<cmset_api::RolloutStatus> {
    ns.set(SET)
        .await
        .status?
        .rollout
        .filter(|r| r.revision == revision)
}

async fn web_runs(ns: &TestNamespace, revision: &str) -> bool {
    template_names(&ns.deployment("web").await).contains(revision)
}

#[tokio::test]
async fn a_check_gates_every_new_revision_and_a_failed_one_keeps_the_workloads_where_they_are() {
    let ns = TestNamespace::new("checks").await;
    bind_checks_role(&ns);
    let _operator = Operator::start(&ns.name).await;
    ns.apply(&set_yaml(&[("app.conf", "v1")]));
    ns.apply(&deployment_yaml("web", &[Reads::Volume(SET)]));
    let first = eventually("web on a first revision that passed its check", || async {
        let current = current(&ns).await?;
        let revision = ns
            .revisions(SET)
            .await
            .into_iter()
            .find(|r| r.metadata.name.as_deref() == Some(&current))?;
        let uid = revision.metadata.uid?;
        (passed(&ns, &current, &uid).await? && web_runs(&ns, &current).await).then_some(current)
    })
    .await;

    // The Job ran against the revision, locked down whatever the template said.
    let jobs = check_jobs(&ns).await;
    assert_eq!(jobs.len(), 1, "one check, one revision: one Job");
    let job = &jobs[0];
    let hash = first.strip_prefix("app-").expect("a revision of app");
    assert!(
        job.metadata
            .name
            .as_deref()
            .is_some_and(|n| n.starts_with(&format!("app-{hash}-"))),
        "{:?}",
        job.metadata.name
    );
    let spec = job.spec.as_ref().expect("a Job spec");
    assert_eq!(spec.backoff_limit, Some(0));
    assert_eq!(spec.active_deadline_seconds, Some(120));
    let pod = spec.template.spec.as_ref().expect("a pod spec");
    assert_eq!(pod.automount_service_account_token, Some(false));
    assert_eq!(
        pod.security_context.as_ref().and_then(|s| s.run_as_non_root),
        Some(true)
    );
    let container = &pod.containers[0];
    let security = container
        .security_context
        .as_ref()
        .expect("a container security context");
    assert_eq!(security.allow_privilege_escalation, Some(false));
    assert_eq!(
        container.volume_mounts.as_ref().expect("mounts")[0].read_only,
        Some(true)
    );
    let volume = &pod.volumes.as_ref().expect("volumes")[0];
    assert_eq!(
        volume.config_map.as_ref().map(|c| c.name.clone()),
        Some(first.clone())
    );
    let labels = spec
        .template
        .metadata
        .as_ref()
        .and_then(|m| m.labels.clone())
        .unwrap_or_default();
    assert_eq!(labels.get("cmset.dev/check-of").map(String::as_str), Some(SET));
    // And the deny-all NetworkPolicy that label puts check pods under exists.
    ns.api::<NetworkPolicy>()
        .get("cmset-checks-deny-all")
        .await
        .expect("the deny-all NetworkPolicy");

    // A change that passes its check rolls out.
    ns.apply(&set_yaml(&[("app.conf", "v2")]));
    let second = eventually("web on the second revision", || async {
        let current = current(&ns).await.filter(|c| *c != first)?;
        web_runs(&ns, &current).await.then_some(current)
    })
    .await;
    assert_eq!(check_jobs(&ns).await.len(), 2);

    // A change that fails it moves nothing, and says why.
    ns.apply(&set_yaml(&[("app.conf", "v3"), ("CMSET_FAKE_NODE_FAIL", "x")]));
    let rollout = eventually("the rollout failed by its check", || async {
        let rollout = ns.set(SET).await.status?.rollout?;
        (rollout.revision != second && rollout.phase.as_str() == "Failed").then_some(rollout)
    })
    .await;
    let failed = rollout.revision.clone();
    assert_eq!(rollout.reason.as_deref(), Some("CheckFailed"));
    let message = rollout.message.unwrap_or_default();
    assert!(
        message.starts_with(&format!(
            "the checks of {failed} failed: check lint failed: CMSET_FAKE_NODE_FAIL: ConfigMap"
        )),
        "{message}"
    );
    stays("web on the second revision", STILL, || async {
        web_runs(&ns, &second).await
    })
    .await;
    let event = warning_event(&ns, "CheckFailed", &format!("ConfigMapSet/{SET}")).await;
    assert!(event.note.unwrap_or_default().contains("check lint failed"));
    let history = ns.set(SET).await.status.expect("a status").history;
    assert!(
        history.iter().any(|h| h.name == failed && h.failed),
        "{history:?}"
    );

    // Back to the content that passed: its verdict is in the set's status, so no Job runs again.
    ns.apply(&set_yaml(&[("app.conf", "v2")]));
    eventually("the rollout of the second revision complete again", || async {
        let rollout = ns.set(SET).await.status?.rollout?;
        (rollout.revision == second && rollout.phase.as_str() == "Complete").then_some(())
    })
    .await;
    assert!(web_runs(&ns, &second).await);
    assert_eq!(check_jobs(&ns).await.len(), 3, "the revert ran no check");
}

#[tokio::test]
async fn without_the_checks_role_nothing_moves_and_the_operator_says_what_to_bind() {
    let ns = TestNamespace::new("checksrbac").await;
    let _operator = Operator::start(&ns.name).await;
    ns.apply(&set_yaml(&[("app.conf", "v1")]));
    ns.apply(&deployment_yaml("web", &[Reads::Volume(SET)]));
    let first = eventually("a first revision", || async { current(&ns).await }).await;
    ns.apply(&set_yaml(&[("app.conf", "v2")]));
    let rollout = eventually("the second revision checking", || async {
        let rollout = ns.set(SET).await.status?.rollout?;
        (rollout.revision != first && rollout.phase.as_str() == "Checking").then_some(rollout)
    })
    .await;
    assert_eq!(rollout.message.as_deref(), Some("checks: lint starting"));
    stays("web off the unchecked revision", STILL, || async {
        !web_runs(&ns, &rollout.revision).await
    })
    .await;
    let warning = warning_event(&ns, "CheckNotStarted", &format!("ConfigMapSet/{SET}")).await;
    let note = warning.note.unwrap_or_default();
    assert!(
        note.contains(&format!(
            "checks need the ClusterRole cmset-checks bound in namespace {} (kubectl -n {} create rolebinding",
            ns.name, ns.name
        )),
        "{note}"
    );

    // Bound, the check runs and the rollout goes on.
    // The failed attempts back off (1 s, 2 s, 4 s, ...), so the next one may be a while.
    bind_checks_role(&ns);
    eventually_within(Duration::from_secs(180), "web on the second revision", || async {
        web_runs(&ns, &rollout.revision).await.then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_tenant_cannot_make_a_failing_check_pass() {
    let ns = TestNamespace::new("checkstenant").await;
    let tenant = Tenant::bind(&ns, "mallory");
    // What the tenant may do: everything in the namespace but the set's status, which only cmset writes.
    for (verb, resource) in [
        ("patch", "configmaps"),
        ("create", "jobs"),
        ("create", "networkpolicies"),
        ("patch", "configmapsets"),
    ] {
        assert!(tenant.can(verb, resource), "the tenant may {verb} {resource}");
    }
    assert!(!tenant.can("patch", "configmapsets/status"));
    let _operator = Operator::start(&ns.name).await;
    let failing = |n: &str| set_yaml(&[("app.conf", n), ("CMSET_FAKE_NODE_FAIL", "x")]);

    // (b) A Job of the check's name, made by the tenant before cmset could make it (the checks role is
    // not bound yet), that succeeds.
    ns.apply(&failing("b"));
    let rollout = eventually("the first revision checking", || async {
        let rollout = ns.set(SET).await.status?.rollout?;
        (rollout.phase.as_str() == "Checking").then_some(rollout)
    })
    .await;
    let first = rollout.revision.clone();
    let check = ns.set(SET).await.spec.checks[0].clone();
    let hash = cmset_core::content::checks::check_hash(&check);
    let job_name =
        cmset_core::content::checks::job_name(SET, first.strip_prefix("app-").expect("app-"), &hash);
    tenant
        .try_kubectl(
            &["apply", "-f", "-"],
            Some(&format!(
                r#"
apiVersion: batch/v1
kind: Job
metadata: {{name: {job_name}, labels: {{cmset.dev/check-of: {SET}, cmset.dev/check: lint}}}}
spec:
  backoffLimit: 0
  template:
    metadata: {{labels: {{cmset.dev/check-of: {SET}, cmset.dev/check: lint}}}}
    spec:
      restartPolicy: Never
      containers: [{{name: lint, image: busybox:1.36, command: ["true"]}}]
"#
            )),
        )
        .expect("the tenant creates the Job");
    eventually("the tenant's Job complete", || async {
        let job = ns.api::<Job>().get(&job_name).await.ok()?;
        let done = job
            .status?
            .conditions?
            .iter()
            .any(|c| c.type_ == "Complete" && c.status == "True");
        done.then_some(())
    })
    .await;
    let tenant_uid = ns
        .api::<Job>()
        .get(&job_name)
        .await
        .expect("the Job")
        .metadata
        .uid
        .expect("a uid");
    bind_checks_role(&ns);
    let rollout = eventually_within(
        Duration::from_secs(180),
        "the check failed: not cmset's Job",
        || async {
            rollout_of(&ns, &first)
                .await
                .filter(|r| r.phase.as_str() == "Failed")
        },
    )
    .await;
    assert_eq!(
        rollout.message.as_deref(),
        Some(
            format!(
                "the checks of {first} failed: check lint: Job {job_name} was not created by cmset (uid {tenant_uid})"
            )
            .as_str()
        )
    );

    // (c) The deny-all NetworkPolicy, rewritten by the tenant to let everything in and out: cmset puts
    // its spec back before the next check runs, and the check fails as it should.
    let open = r#"
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: cmset-checks-deny-all}
spec:
  podSelector: {}
  ingress: [{}]
  egress: [{}]
  policyTypes: [Ingress, Egress]
"#;
    tenant
        .try_kubectl(&["apply", "-f", "-"], Some(open))
        .expect("the tenant opens the policy");
    ns.apply(&failing("c"));
    let second = eventually("the second revision failed by its check", || async {
        let rollout = ns.set(SET).await.status?.rollout?;
        (rollout.revision != first && rollout.phase.as_str() == "Failed").then_some(rollout)
    })
    .await;
    assert!(
        second
            .message
            .as_deref()
            .is_some_and(|m| m.contains("check lint failed: CMSET_FAKE_NODE_FAIL")),
        "{:?}",
        second.message
    );
    let policy = ns
        .api::<NetworkPolicy>()
        .get("cmset-checks-deny-all")
        .await
        .expect("the policy");
    assert_eq!(
        serde_json::to_value(policy.spec).expect("a spec"),
        serde_json::json!({
            "podSelector": {"matchExpressions": [{"key": "cmset.dev/check-of", "operator": "Exists"}]},
            "policyTypes": ["Ingress", "Egress"]
        }),
        "cmset's spec, put back"
    );

    // (a) A verdict written by the tenant on the revision, as soon as it exists.
    ns.apply(&failing("a"));
    let third = eventually("a third revision", || async {
        current(&ns)
            .await
            .filter(|c| *c != first && *c != second.revision)
    })
    .await;
    let forged = format!(r#"cmset.dev/check-results={{"{hash}":{{"name":"lint","passed":true}}}}"#);
    tenant
        .try_kubectl(&["annotate", "--overwrite", "configmap", &third, &forged], None)
        .expect("the tenant annotates the revision");
    let rollout = eventually("the third revision failed by its check", || async {
        rollout_of(&ns, &third)
            .await
            .filter(|r| r.phase.as_str() == "Failed")
    })
    .await;
    assert!(
        rollout
            .message
            .as_deref()
            .is_some_and(|m| m.contains("check lint failed: CMSET_FAKE_NODE_FAIL")),
        "{:?}",
        rollout.message
    );
    let revision = ns
        .revisions(SET)
        .await
        .into_iter()
        .find(|r| r.metadata.name.as_deref() == Some(third.as_str()))
        .expect("the third revision");
    let uid = revision.metadata.uid.expect("a uid");
    assert_eq!(passed(&ns, &third, &uid).await, Some(false), "cmset's own record");
}
