//! Readiness and relists: what a relist drops, which kinds hold readiness and planning, waiters, a kind
//! no longer served, the slim template kept.

use super::*;

#[test]
fn a_relist_drops_what_it_did_not_see_and_counts_as_listed() {
    let index = index();
    index.handle(&watcher::Event::Apply(set("app", 1)));
    index.handle(&watcher::Event::Apply(deployment("web", &["app"])));
    index.handle(&watcher::Event::Apply(deployment("gone", &["app"])));
    index.handle::<Deployment>(&watcher::Event::Init);
    index.handle(&watcher::Event::InitApply(deployment("web", &["app"])));
    let out = index.handle::<Deployment>(&watcher::Event::InitDone);
    assert_eq!(out.sets, [cms("app")].into(), "the set learns that `gone` went");
    assert_eq!(
        index.readers(&cms("app")).workloads,
        vec![(WorkloadKind::Deployment, "web".to_string())]
    );
    assert!(!index.is_ready(), "only one of six kinds has listed");
}

#[test]
fn readiness_waits_for_the_kinds_of_start_up_and_completeness_for_every_kind_watched() {
    let index = Index::new(None);
    index.expect("ConfigMapSet");
    index.handle::<ConfigMapSet>(&watcher::Event::InitDone);
    assert!(
        !index.is_ready(),
        "not settled: more kinds may be found at start-up"
    );
    index.expect("Deployment");
    index.settle();
    assert!(!index.is_ready());
    index.handle::<Deployment>(&watcher::Event::InitDone);
    assert!(index.is_ready() && index.is_complete());
    // A kind installed later: readiness stays, completeness waits for its list.
    index.expect("Rollout");
    assert!(index.is_ready());
    assert!(!index.is_complete());
    index.handle_workload(WorkloadKind::Rollout, &watcher::Event::InitDone);
    assert!(index.is_complete());
    // A kind removed: what its objects named is dropped and nothing waits for it.
    index.expect("CronJob");
    assert!(!index.is_complete());
    index.forget_workloads(WorkloadKind::CronJob);
    assert!(index.is_ready() && index.is_complete());
}

#[test]
fn the_history_kinds_hold_neither_readiness_nor_planning_until_they_list_only_history() {
    use k8s_openapi::api::apps::v1::{ControllerRevision, ReplicaSet};
    use k8s_openapi::api::batch::v1::Job;
    let index = Index::new(None);
    index.expect("ConfigMapSet");
    index.expect("Deployment");
    index.settle();
    index.handle::<ConfigMapSet>(&watcher::Event::InitDone);
    index.handle::<Deployment>(&watcher::Event::InitDone);
    assert!(index.is_ready() && index.is_complete());
    assert!(
        !index.history_listed(),
        "not watched yet: history is unknown, not empty"
    );
    // This replica takes the lease: the history watches start.
    for kind in ["ReplicaSet", "ControllerRevision", "Job"] {
        index.expect(kind);
    }
    assert!(index.is_ready(), "admission never waits for history");
    assert!(index.is_complete_but_history(), "nor do a set's moves");
    assert!(!index.is_complete());
    index.handle::<ReplicaSet>(&watcher::Event::InitDone);
    index.handle::<ControllerRevision>(&watcher::Event::InitDone);
    assert!(!index.history_listed(), "Jobs have not listed yet");
    index.handle::<Job>(&watcher::Event::InitDone);
    assert!(index.history_listed() && index.is_complete());

    // A replica that leads from the start (no leader election) watches history before it settles:
    // readiness still does not wait for it.
    let index = Index::new(None);
    for kind in ["ConfigMapSet", "ReplicaSet", "ControllerRevision", "Job"] {
        index.expect(kind);
    }
    index.settle();
    index.handle::<ConfigMapSet>(&watcher::Event::InitDone);
    assert!(index.is_ready() && index.is_complete_but_history());
    assert!(!index.is_complete() && !index.history_listed());
}

#[test]
fn every_set_plans_again_once_the_history_kinds_have_each_listed_once() {
    use k8s_openapi::api::apps::v1::{ControllerRevision, ReplicaSet};
    use k8s_openapi::api::batch::v1::Job;
    let index = index();
    index.expect("Job");
    index.handle(&watcher::Event::Apply(set("app", 1)));
    index.handle(&watcher::Event::Apply(set("other", 1)));
    assert_eq!(
        index.handle::<ReplicaSet>(&watcher::Event::InitDone),
        Triggers::default()
    );
    assert_eq!(
        index.handle::<ControllerRevision>(&watcher::Event::InitDone),
        Triggers::default()
    );
    let listed = index.handle::<Job>(&watcher::Event::InitDone);
    assert_eq!(
        listed.sets,
        [cms("app"), cms("other")].into(),
        "the sets prune now"
    );
    // A relist later (a watch expired) is no news.
    index.handle::<Job>(&watcher::Event::Init);
    assert_eq!(
        index.handle::<Job>(&watcher::Event::InitDone),
        Triggers::default()
    );
}

#[tokio::test(start_paused = true)]
async fn a_waiter_wakes_when_the_last_list_ends_or_settling_makes_the_index_ready() {
    use std::time::Duration;
    let index = Arc::new(Index::new(None));
    index.expect("ConfigMapSet");
    index.expect("Deployment");
    index.settle();
    // Nothing lists: the wait ends at its timeout, not ready.
    assert!(!index.wait_until(Duration::from_millis(50), Index::is_ready).await);

    let waiting = tokio::spawn({
        let index = index.clone();
        async move {
            let start = tokio::time::Instant::now();
            let ready = index.wait_until(Duration::from_secs(5), Index::is_complete).await;
            (ready, start.elapsed())
        }
    });
    tokio::time::sleep(Duration::from_millis(10)).await;
    index.handle::<ConfigMapSet>(&watcher::Event::InitDone);
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert!(!waiting.is_finished(), "one of two kinds has listed");
    index.handle::<Deployment>(&watcher::Event::InitDone);
    let (ready, after) = waiting.await.unwrap();
    assert!(ready);
    assert_eq!(
        after,
        Duration::from_millis(20),
        "woken by the list's end, not by a poll"
    );

    // Every list ended before the replica settled: settling alone wakes the waiter.
    let index = Arc::new(Index::new(None));
    index.expect("ConfigMapSet");
    index.handle::<ConfigMapSet>(&watcher::Event::InitDone);
    let waiting = tokio::spawn({
        let index = index.clone();
        async move { index.wait_until(Duration::from_secs(5), Index::is_ready).await }
    });
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert!(!waiting.is_finished());
    index.settle();
    assert!(waiting.await.unwrap());
}

#[test]
fn a_kind_no_longer_served_drops_its_readers_and_tells_their_sets() {
    let index = index();
    index.handle(&watcher::Event::Apply(set("app", 1)));
    let rollout: crate::engine::wire::WireWorkload = serde_json::from_value(serde_json::json!({
        "apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout",
        "metadata": {"name": "canary", "namespace": NS, "uid": "u-r", "labels": {"cmset.dev/enabled": "true"}},
        "spec": {"template": {"spec": {"containers": [{"name": "c", "envFrom": [{"configMapRef": {"name": "app"}}]}]}}}
    }))
    .unwrap();
    let rollout = StoredWorkload::slim(WorkloadKind::Rollout, rollout);
    let out = index.handle_workload(WorkloadKind::Rollout, &watcher::Event::Apply(rollout));
    assert_eq!(out.sets, [cms("app")].into());
    assert_eq!(
        index.readers(&cms("app")).workloads,
        vec![(WorkloadKind::Rollout, "canary".to_string())]
    );
    let out = index.forget_workloads(WorkloadKind::Rollout);
    assert_eq!(
        out.sets,
        [cms("app")].into(),
        "the set may now prune what it named"
    );
    assert!(index.readers(&cms("app")).workloads.is_empty());
}

#[test]
fn a_workload_s_cached_template_keeps_only_its_references() {
    let mut d = deployment("web", &["app"]);
    d.spec
        .as_mut()
        .unwrap()
        .template
        .spec
        .as_mut()
        .unwrap()
        .containers[0]
        .image = Some("big".into());
    d.metadata.annotations = Some(BTreeMap::from([("note".into(), "x".into())]));
    let mut held = d.clone();
    d.slim();
    assert_eq!(d.metadata.annotations, None);
    // cmset's hold is the one annotation a decision reads.
    held.annotations_mut()
        .insert(cmset_core::rollout::hold::HELD_SINCE.into(), "t".into());
    held.slim();
    assert_eq!(
        held.metadata.annotations,
        Some(BTreeMap::from([(
            cmset_core::rollout::hold::HELD_SINCE.into(),
            "t".into()
        )]))
    );
    let container = &d.spec.unwrap().template.spec.unwrap().containers[0];
    assert_eq!(container.image, None);
    assert_eq!(container.env_from.as_ref().map(Vec::len), Some(1));
}
