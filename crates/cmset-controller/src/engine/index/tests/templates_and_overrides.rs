//! AnalysisTemplates and WindowOverrides: a change wakes exactly the sets that name them; templates that
//! cannot be listed hold only those sets; events counted by kind.

use super::*;

/// A set naming the AnalysisTemplates `templates` in its rollout's analysis.
pub(crate) fn analysed(name: &str, generation: i64, templates: &[&str]) -> ConfigMapSet {
    let mut set = set(name, generation);
    let analysis: Vec<_> = templates
        .iter()
        .map(|t| serde_json::json!({"template": t}))
        .collect();
    set.spec.rollout = Some(serde_json::from_value(serde_json::json!({"analysis": analysis})).unwrap());
    set
}

pub(crate) fn template(name: &str) -> cmset_api::AnalysisTemplate {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "cmset.dev/v1alpha1", "kind": "AnalysisTemplate", "metadata": {"name": name},
        "spec": {"query": "up", "successCondition": "result == 1"},
    }))
    .unwrap()
}

pub(crate) fn sets(names: &[&str]) -> BTreeSet<SetId> {
    names.iter().map(|n| cms(n)).collect()
}

#[test]
fn a_template_change_triggers_exactly_the_sets_that_name_it_as_their_specs_say_now() {
    let index = index();
    index.handle(&watcher::Event::Apply(analysed(
        "web",
        1,
        &["restarts", "errors"],
    )));
    index.handle(&watcher::Event::Apply(analysed("api", 1, &["errors"])));
    index.handle(&watcher::Event::Apply(set("plain", 1)));
    let changed = |name: &str| index.handle_template(&watcher::Event::Apply(template(name))).sets;
    assert_eq!(changed("restarts"), sets(&["web"]));
    assert_eq!(changed("errors"), sets(&["api", "web"]));
    assert_eq!(changed("unnamed"), sets(&[]));
    let deleted = index.handle_template(&watcher::Event::Delete(template("errors")));
    assert_eq!(deleted.sets, sets(&["api", "web"]));

    // The set watch keeps the index current: a spec that drops a template, or a set deleted, is no
    // longer woken by it.
    index.handle(&watcher::Event::Apply(analysed("web", 2, &["restarts"])));
    index.handle(&watcher::Event::Delete(analysed("api", 1, &["errors"])));
    assert_eq!(changed("errors"), sets(&[]));
    assert_eq!(changed("restarts"), sets(&["web"]));

    // A relist wakes the sets of the templates it holds, and of those it no longer holds (deleted
    // while the watch was down); the templates watch counts as listed.
    index.expect(crate::engine::index::TEMPLATES);
    index.handle_template(&watcher::Event::Init);
    let listed = index.handle_template(&watcher::Event::InitApply(template("other")));
    assert_eq!(listed.sets, sets(&[]));
    let done = index.handle_template(&watcher::Event::InitDone);
    assert_eq!(done.sets, sets(&["web"]), "restarts was not listed: gone");
    assert_eq!(index.sizes()["templates named"], 1);
}

#[test]
fn templates_that_cannot_be_listed_hold_only_the_sets_that_name_them() {
    let index = Index::new(None);
    index.expect("ConfigMapSet");
    index.expect(crate::engine::index::TEMPLATES);
    index.settle();
    index.handle::<ConfigMapSet>(&watcher::Event::InitDone);
    assert!(!index.is_ready(), "the templates' first list is awaited");
    index.handle(&watcher::Event::Apply(analysed("web", 1, &["restarts"])));
    index.handle(&watcher::Event::Apply(set("plain", 1)));

    // Refused: the replica is ready, no set holds as for an unobserved reader, and only the analysis
    // of the sets that name a template has a reason to hold.
    index.templates_unavailable("their list failed: 403 Forbidden".to_string());
    assert!(index.is_ready() && index.is_complete());
    assert_eq!(
        index.unobserved_readers(&cms("plain")),
        Vec::<(String, String)>::new()
    );
    assert_eq!(
        index.unobserved_readers(&cms("web")),
        Vec::<(String, String)>::new()
    );
    assert_eq!(
        index.templates_unlisted().as_deref(),
        Some("their list failed: 403 Forbidden")
    );

    // Listed at last: nothing holds, and the sets that name a template plan again.
    index.handle_template(&watcher::Event::Init);
    index.handle_template(&watcher::Event::InitApply(template("restarts")));
    let done = index.handle_template(&watcher::Event::InitDone);
    assert_eq!(done.sets, sets(&["web"]));
    assert_eq!(index.templates_unlisted(), None);

    // A later refusal leaves the templates as listed in use.
    index.templates_unavailable("their list failed: 403 Forbidden".to_string());
    assert_eq!(index.templates_unlisted(), None);
}

#[test]
fn every_watch_event_is_counted_by_kind_and_event_once_counting_is_on() {
    use crate::platform::metrics::WatchEventLabels;
    let index = index();
    index.handle(&watcher::Event::Apply(set("before", 1)));
    let counters = crate::engine::index::WatchEvents::default();
    index.count_watch_events(counters.clone());
    index.handle(&watcher::Event::Apply(set("app", 1)));
    index.handle(&watcher::Event::Apply(set("app", 2)));
    index.handle(&watcher::Event::Delete(set("app", 2)));
    index.handle::<Deployment>(&watcher::Event::Init);
    index.handle(&watcher::Event::InitApply(deployment("web", &["app"])));
    index.handle::<Deployment>(&watcher::Event::InitDone);
    let count = |kind, event| counters.get_or_create(&WatchEventLabels { kind, event }).get();
    assert_eq!(
        count("ConfigMapSet", "apply"),
        2,
        "the event before counting began is not counted"
    );
    assert_eq!(count("ConfigMapSet", "delete"), 1);
    assert_eq!(
        count("Deployment", "listed"),
        1,
        "a list's start and end are no objects"
    );
    assert_eq!(count("Deployment", "apply"), 0);
}

pub(crate) fn window_override(name: &str, set: &str, uid: &str) -> cmset_api::WindowOverride {
    let mut o = cmset_api::WindowOverride::new(
        name,
        cmset_api::WindowOverrideSpec {
            set: cmset_api::OverriddenSet {
                kind: cmset_api::OverriddenKind::ConfigMapSet,
                name: set.into(),
                uid: uid.into(),
            },
            rollout: cmset_api::OverriddenRollout {
                revision: format!("{set}-7c9f5d6b8d"),
                started_at: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    "2026-11-27T17:20:00Z".parse().unwrap(),
                ),
            },
            reason: None,
            requested_by: Some("ana".into()),
        },
    );
    o.metadata.namespace = Some(NS.into());
    o
}

#[test]
fn a_window_override_wakes_the_set_it_names_and_is_found_by_that_set_only() {
    let index = index();
    let mut app = set("app", 1);
    app.metadata.uid = Some("app-uid".into());
    let mut other = set("other", 1);
    other.metadata.uid = Some("other-uid".into());
    let apply = |o: cmset_api::WindowOverride| index.handle_override(&watcher::Event::Apply(o));
    assert_eq!(
        apply(window_override("break", "app", "app-uid")).sets,
        BTreeSet::from([cms("app")])
    );
    let found = index.window_override((&app).into());
    assert_eq!(found.grants.len(), 1);
    assert_eq!(found.grants[0].name, "break");
    assert!(index.window_override((&other).into()).grants.is_empty());
    // Another uid under the same name is indexed under that name, and judged out.
    apply(window_override("stale", "app", "an-earlier-uid"));
    assert_eq!(index.window_override((&app).into()).grants.len(), 1);
    // An override edited to name another set (by someone allowed to) moves: both sets wake.
    assert_eq!(
        apply(window_override("break", "other", "other-uid")).sets,
        BTreeSet::from([cms("app"), cms("other")])
    );
    assert!(index.window_override((&app).into()).grants.is_empty());
    assert_eq!(index.window_override((&other).into()).grants.len(), 1);
    // Deleted: its set wakes, and it counts no more.
    let deleted = index.handle_override(&watcher::Event::Delete(window_override(
        "break",
        "other",
        "other-uid",
    )));
    assert_eq!(deleted.sets, BTreeSet::from([cms("other")]));
    assert!(index.window_override((&other).into()).grants.is_empty());
    // A relist that no longer holds one (deleted while the watch was down) drops it.
    index.handle_override(&watcher::Event::Init);
    let relisted = index.handle_override(&watcher::Event::InitDone);
    assert_eq!(
        relisted.sets,
        BTreeSet::from([cms("app")]),
        "the set of `stale` wakes"
    );
    assert_eq!(index.sizes()["window overrides"], 0);
}
