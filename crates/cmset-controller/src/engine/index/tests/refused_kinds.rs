//! Kinds the operator may not watch: their readers and budget slots kept, only the sets they read held.

use super::*;

pub(crate) const FORBIDDEN: &str = "403 Forbidden: cmset's service account may not list or watch it";

pub(crate) fn unobserved(kind: &str) -> Vec<(String, String)> {
    vec![(kind.to_string(), FORBIDDEN.to_string())]
}

#[test]
fn a_refused_kind_keeps_its_readers_and_budget_slots_and_holds_only_the_sets_they_read() {
    let budget = Arc::new(crate::engine::rollout_budget::RolloutBudget::new(1));
    let index = index().with_budget(Some(budget.clone()));
    index.handle(&watcher::Event::Apply(set("app", 1)));
    index.handle(&watcher::Event::Apply(set("other", 1)));
    index.handle::<Deployment>(&watcher::Event::Init);
    // Rolling out the generation cmset's move gave it (its controller has not observed it yet): it
    // holds the budget's one slot.
    let mut web = deployment("web", &["app"]);
    web.metadata.generation = Some(2);
    web.metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert(cmset_api::labels::MOVED.into(), "2".into());
    index.handle(&watcher::Event::InitApply(web));
    index.handle::<Deployment>(&watcher::Event::InitDone);
    assert_eq!(budget.usage().moving, 1, "web moves");

    // Its list is refused: nothing is dropped, every set is told, and only `app` holds.
    let out = index
        .unavailable(WorkloadKind::Deployment, FORBIDDEN.to_string())
        .expect("news");
    assert_eq!(out.sets, [cms("app"), cms("other")].into());
    assert!(
        index
            .unavailable(WorkloadKind::Deployment, FORBIDDEN.to_string())
            .is_none(),
        "the same refusal again is no news"
    );
    assert_eq!(
        index.readers(&cms("app")).workloads,
        vec![(WorkloadKind::Deployment, "web".to_string())],
        "a refusal is not a removal"
    );
    assert_eq!(budget.usage().moving, 1, "its slot is not freed");
    assert_eq!(index.unobserved_readers(&cms("app")), unobserved("Deployment"));
    assert_eq!(
        index.unobserved_readers(&cms("other")),
        vec![],
        "no Deployment reads it"
    );

    // It lists again: the fresh list replaces what it held, and every set plans again.
    index.handle::<Deployment>(&watcher::Event::Init);
    index.handle(&watcher::Event::InitApply(available(deployment(
        "api",
        &["other"],
    ))));
    let out = index.handle::<Deployment>(&watcher::Event::InitDone);
    assert_eq!(out.sets, [cms("app"), cms("other")].into());
    assert_eq!(index.unobserved_readers(&cms("app")), vec![]);
    assert!(index.readers(&cms("app")).workloads.is_empty(), "web is gone");
    assert_eq!(budget.usage().moving, 0, "gone, it frees its slot");
}

#[test]
fn a_kind_refused_before_its_first_list_holds_every_set_but_not_readiness_until_discovery_drops_it() {
    let index = Index::new(None);
    index.expect("ConfigMapSet");
    index.expect("Deployment");
    index.settle();
    index.handle::<ConfigMapSet>(&watcher::Event::InitDone);
    assert!(!index.is_ready());
    index.handle(&watcher::Event::Apply(set("app", 1)));
    index.unavailable(WorkloadKind::Deployment, FORBIDDEN.to_string());
    assert!(
        index.is_ready() && index.is_complete(),
        "nothing more is coming from it for now"
    );
    assert_eq!(
        index.unobserved_readers(&cms("app")),
        unobserved("Deployment"),
        "any of its objects may read any set"
    );
    // A list that fails for another reason says so instead.
    index.unavailable(WorkloadKind::Deployment, "its list failed: 500".to_string());
    assert_eq!(
        index.unobserved_readers(&cms("app")),
        vec![("Deployment".to_string(), "its list failed: 500".to_string())]
    );
    // Discovery answers that it is gone: then, and only then, it is removed.
    index.forget_workloads(WorkloadKind::Deployment);
    assert_eq!(index.unobserved_readers(&cms("app")), vec![]);
    assert!(index.is_ready() && index.is_complete());
}
