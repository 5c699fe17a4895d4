//! The cluster's change windows bind every set in their scope, whatever its tenant writes (issue 36):
//! a tenant (`edit` + `cmset-edit` in one namespace, impersonated) whose set has `strategy: Immediate`
//! stays put under a cluster Deny, until the admin's ChangeWindow exempts `Immediate`; and a set's own
//! always-open Allow window does not open the cluster's Allow window.
//!
//! Every ChangeWindow a test creates selects its own namespace only (the suite's other tests run
//! beside it), and is deleted at the end. Windows are cron schedules with minute precision: a window
//! "open for the next 600 s" opens at the start of the current minute.

use std::collections::BTreeSet;
use std::time::Duration;

use cmset_e2e::cmset_api::{ChangeWindow, ConfigMapSet, RolloutPhase, RolloutStatus};
use cmset_e2e::fixtures::{template_names, wave_deployment_yaml};
use cmset_e2e::k8s_openapi::jiff::tz::TimeZone;
use cmset_e2e::k8s_openapi::jiff::{SignedDuration, Timestamp};
use cmset_e2e::kube::Api;
use cmset_e2e::kube::api::DeleteParams;
use cmset_e2e::tenant::Tenant;
use cmset_e2e::{Operator, TestNamespace, eventually_within, kustomize_name, stays};

const SET: &str = "app-config";
const FIRST: &str = "first";
const SECOND: &str = "second";
/// How long "nothing moves" is watched for.
const STILL: Duration = Duration::from_secs(5);
/// Long enough for a window to open and the rollout to go on.
const WAIT: Duration = Duration::from_secs(150);

/// A UTC cron schedule at `at`'s minute, every day.
fn daily_at(at: Timestamp) -> String {
    let civil = at.to_zoned(TimeZone::UTC);
    format!("{} {} * * *", civil.minute(), civil.hour())
}

/// A window open from the start of this minute until `seconds` from now: schedule and duration.
fn open_for(seconds: i64) -> (String, String) {
    let now = Timestamp::now().as_second();
    let minute = now - now.rem_euclid(60);
    let start = Timestamp::from_second(minute).unwrap();
    (daily_at(start), format!("{}s", now + seconds - minute))
}

/// The next whole minute at least 20 s away.
fn opening_soon() -> Timestamp {
    let now = Timestamp::now().as_second();
    let mut next = now - now.rem_euclid(60) + 60;
    if next - now < 20 {
        next += 60;
    }
    Timestamp::from_second(next).unwrap()
}

/// The tenant applies `yaml` in its namespace; what the API server said.
fn tenant_applies(tenant: &Tenant, yaml: &str) -> String {
    tenant
        .try_kubectl(&["apply", "-f", "-"], Some(yaml))
        .unwrap_or_else(|e| panic!("the tenant may apply this: {e}\n{yaml}"))
}

/// The tenant writes set `SET` with content `value` and `rollout` (lines under `spec.rollout`); the
/// name of its revision.
fn tenant_writes_set(tenant: &Tenant, value: &str, rollout: &str) -> String {
    tenant_applies(
        tenant,
        &format!(
            r#"
apiVersion: cmset.dev/v1alpha1
kind: ConfigMapSet
metadata:
  name: {SET}
spec:
  rollout:
    stabilizationSeconds: 0{rollout}
  template:
    data:
      MODE: "{value}"
"#
        ),
    );
    kustomize_name(SET, &[("MODE", value)])
}

/// The admin's ChangeWindow named after the namespace, selecting it only: `windows` are YAML list
/// items, `extra` more lines under `spec`.
fn admin_change_window(ns: &TestNamespace, windows: &str, extra: &str) -> String {
    let name = format!("{}-rules", ns.name);
    ns.apply(&format!(
        r#"
apiVersion: cmset.dev/v1alpha1
kind: ChangeWindow
metadata:
  name: {name}
spec:
  namespaces: ["{}"]{extra}
  windows:
    - kind: {windows}
"#,
        ns.name
    ));
    name
}

async fn delete_change_window(ns: &TestNamespace, name: &str) {
    let api: Api<ChangeWindow> = Api::all(ns.client.clone());
    let _ = api.delete(name, &DeleteParams::default()).await;
}

fn only(name: &str) -> BTreeSet<String> {
    BTreeSet::from([name.to_string()])
}

async fn reads(ns: &TestNamespace, name: &str) -> BTreeSet<String> {
    template_names(&ns.deployment(name).await)
}

async fn both_read(ns: &TestNamespace, revision: &str) -> bool {
    reads(ns, FIRST).await == only(revision) && reads(ns, SECOND).await == only(revision)
}

async fn wait_both_read(ns: &TestNamespace, revision: &str) {
    eventually_within(WAIT, &format!("both readers read {revision}"), || async {
        both_read(ns, revision).await.then_some(())
    })
    .await;
}

async fn rollout(ns: &TestNamespace) -> Option<RolloutStatus> {
    ns.api::<ConfigMapSet>().get(SET).await.ok()?.status?.rollout
}

async fn wait_waiting(ns: &TestNamespace, revision: &str) -> RolloutStatus {
    eventually_within(WAIT, &format!("the rollout of {revision} waits"), || async {
        rollout(ns)
            .await
            .filter(|r| r.revision == revision && r.phase == RolloutPhase::Waiting)
    })
    .await
}

/// The tenant's set and two readers (waves 0 and 1), on revision one; its revision.
async fn tenant_set_with_readers(ns: &TestNamespace, tenant: &Tenant, rollout: &str) -> String {
    let v1 = tenant_writes_set(tenant, "one", rollout);
    tenant_applies(tenant, &wave_deployment_yaml(FIRST, 0, SET));
    tenant_applies(tenant, &wave_deployment_yaml(SECOND, 1, SET));
    wait_both_read(ns, &v1).await;
    v1
}

#[tokio::test]
async fn an_immediate_set_under_a_cluster_deny_stays_put_until_the_changewindow_exempts_immediate() {
    let ns = TestNamespace::new("scopeimmediate").await;
    let tenant = Tenant::bind(&ns, "alice");
    let _operator = Operator::start(&ns.name).await;
    let immediate = "\n    strategy: Immediate";
    let v1 = tenant_set_with_readers(&ns, &tenant, immediate).await;
    assert!(
        !tenant.can("patch", "changewindows.cmset.dev"),
        "the freeze is the admin's"
    );

    let (schedule, duration) = open_for(600);
    let freeze = admin_change_window(
        &ns,
        &format!("Deny\n      name: freeze\n      schedule: \"{schedule}\"\n      duration: {duration}"),
        "",
    );
    // The tenant rotates its content: Immediate no longer skips the cluster's freeze.
    let v2 = tenant_writes_set(&tenant, "two", immediate);
    let held = wait_waiting(&ns, &v2).await;
    assert_eq!(held.reason.as_deref(), Some("freeze"), "{held:?}");
    stays("both readers keep the old revision", STILL, || async {
        both_read(&ns, &v1).await
    })
    .await;

    // The admin exempts Immediate: the rotation goes through, to every reader at once.
    admin_change_window(
        &ns,
        &format!("Deny\n      name: freeze\n      schedule: \"{schedule}\"\n      duration: {duration}"),
        "\n  exemptStrategies: [Immediate]",
    );
    wait_both_read(&ns, &v2).await;
    delete_change_window(&ns, &freeze).await;
}

#[tokio::test]
async fn a_sets_always_open_allow_outside_the_clusters_allow_stays_put() {
    let ns = TestNamespace::new("scopeallow").await;
    let tenant = Tenant::bind(&ns, "alice");
    let _operator = Operator::start(&ns.name).await;
    // The tenant allows moves at any time.
    let always = "\n    windows:\n      - kind: Allow\n        schedule: \"* * * * *\"\n        duration: 1h";
    let v1 = tenant_set_with_readers(&ns, &tenant, always).await;

    // The admin allows moves only from the next minute on.
    let opens = opening_soon();
    let rules = admin_change_window(
        &ns,
        &format!(
            "Allow\n      schedule: \"{}\"\n      duration: 10m",
            daily_at(opens)
        ),
        "",
    );
    let v2 = tenant_writes_set(&tenant, "two", always);
    let held = wait_waiting(&ns, &v2).await;
    assert_eq!(held.reason.as_deref(), Some("OutsideWindow"), "{held:?}");
    assert_eq!(held.next_window.as_ref().map(|t| t.0), Some(opens));
    let before = opens.checked_sub(SignedDuration::from_secs(2)).unwrap();
    while Timestamp::now() < before {
        assert!(both_read(&ns, &v1).await, "nothing moves before {opens}");
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    wait_both_read(&ns, &v2).await;
    delete_change_window(&ns, &rules).await;
}
