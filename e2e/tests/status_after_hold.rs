//! A set that once had a rollout record keeps taking changes (issue 48, item 6). A set without
//! `spec.rollout` has no rollout record while nothing holds it; a change window that holds it gives it
//! one. Changed twice while and after it was held, its status must follow each change
//! (observedGeneration, the current revision), on the v1.20 API server too, whose server-side apply
//! treats a field dropped from the applied status differently from newer servers.

use std::time::Duration;

use cmset_e2e::cmset_api::{ConfigMapSet, RolloutPhase};
use cmset_e2e::fixtures::wave_deployment_yaml;
use cmset_e2e::kube::Api;
use cmset_e2e::kube::api::DeleteParams;
use cmset_e2e::rollout_wait::wait_reads;
use cmset_e2e::{Operator, TestNamespace, eventually_within, kustomize_name};

const SET: &str = "plain";
const WAIT: Duration = Duration::from_secs(120);

/// Set `SET` without `spec.rollout`, with content `value`; its revision's name.
fn write_set(ns: &TestNamespace, value: &str) -> String {
    ns.apply(&format!(
        "apiVersion: cmset.dev/v1alpha1\nkind: ConfigMapSet\nmetadata:\n  name: {SET}\nspec:\n  template:\n    data:\n      MODE: \"{value}\"\n"
    ));
    kustomize_name(SET, &[("MODE", value)])
}

/// Waits until the set's status has observed its generation and names `revision` as current.
async fn observed(ns: &TestNamespace, revision: &str) -> ConfigMapSet {
    eventually_within(WAIT, &format!("the status to observe {revision}"), || async {
        let set = ns.set(SET).await;
        let generation = set.metadata.generation;
        let status = set.status.as_ref()?;
        (status.observed_generation == generation && status.current_revision.as_deref() == Some(revision))
            .then_some(set)
    })
    .await
}

#[tokio::test]
async fn a_set_without_a_rollout_spec_held_by_a_window_takes_two_later_changes() {
    let ns = TestNamespace::new("heldtwice").await;
    let _operator = Operator::start(&ns.name).await;
    let v1 = write_set(&ns, "one");
    ns.apply(&wave_deployment_yaml("web", 0, SET));
    wait_reads(&ns, "web", &v1).await;
    let before = observed(&ns, &v1).await;
    assert!(
        before.status.as_ref().unwrap().rollout.is_none(),
        "no rollout record while nothing holds it"
    );

    // A cluster Deny window, open all day, for this namespace only.
    let window = format!("{}-freeze", ns.name);
    ns.apply(&format!(
        "apiVersion: cmset.dev/v1alpha1\nkind: ChangeWindow\nmetadata:\n  name: {window}\nspec:\n  namespaces: [\"{}\"]\n  windows:\n  - kind: Deny\n    schedule: \"0 0 * * *\"\n    duration: 24h\n",
        ns.name
    ));
    let v2 = write_set(&ns, "two");
    let held = observed(&ns, &v2).await;
    let rollout = held.status.as_ref().unwrap().rollout.clone();
    assert_eq!(
        rollout.as_ref().map(|r| r.phase),
        Some(RolloutPhase::Waiting),
        "held by the window: {rollout:?}"
    );

    // Changed again while held, then once more after the window is gone: the status follows each.
    let v3 = write_set(&ns, "three");
    observed(&ns, &v3).await;
    let api: Api<cmset_e2e::cmset_api::ChangeWindow> = Api::all(ns.client.clone());
    api.delete(&window, &DeleteParams::default()).await.unwrap();
    wait_reads(&ns, "web", &v3).await;
    let v4 = write_set(&ns, "four");
    observed(&ns, &v4).await;
    wait_reads(&ns, "web", &v4).await;
}
