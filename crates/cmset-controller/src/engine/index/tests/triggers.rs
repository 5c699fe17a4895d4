//! What a watch event wakes: exactly the workloads that read a set, a set's own echoes, revisions,
//! ReplicaSets, health and waves, and nothing for an event that changes no reference.

use super::*;

#[test]
fn a_set_change_triggers_exactly_the_workloads_that_read_it() {
    let index = index();
    index.handle(&watcher::Event::Apply(set("app", 1)));
    index.handle(&watcher::Event::Apply(set("other", 1)));
    index.handle(&watcher::Event::Apply(deployment("web", &["app"])));
    index.handle(&watcher::Event::Apply(deployment("api", &["app-d2c65kk9hm"])));
    index.handle(&watcher::Event::Apply(deployment("unrelated", &["other"])));
    // New content that no revision holds yet: the readers could only wait for it. The set's own
    // controller plans (and makes the revision, whose arrival wakes the readers).
    let out = index.handle(&watcher::Event::Apply(set("app", 2)));
    assert!(out.workloads.is_empty(), "{:?}", out.workloads);
    assert!(out.own, "the set's own controller plans its change");
    assert!(
        out.sets.is_empty(),
        "the set's own controller is queued by its watch"
    );
    let out = index.handle(&watcher::Event::Apply(revision_of(&set("app", 2))));
    assert_eq!(out.workloads, workloads(&["api", "web"]));
    // Back to content a revision holds (a revert): the readers move at once.
    let mut reverted = set("app", 2);
    reverted.metadata.generation = Some(3);
    let out = index.handle(&watcher::Event::Apply(reverted));
    assert_eq!(out.workloads, workloads(&["api", "web"]));
    // A change of its metadata or another writer's status is news to the set, and to its readers.
    let mut annotated = set("app", 2);
    annotated.metadata.generation = Some(3);
    annotated.metadata.annotations = Some(BTreeMap::from([("note".into(), "x".into())]));
    let out = index.handle(&watcher::Event::Apply(annotated));
    assert!(out.own);
    assert_eq!(out.workloads, workloads(&["api", "web"]));
}

/// `set` as the API server answers a write of it: at `version`, with `status`.
pub(crate) fn written(
    mut set: ConfigMapSet,
    version: &str,
    status: cmset_api::ConfigMapSetStatus,
) -> ConfigMapSet {
    set.metadata.resource_version = Some(version.into());
    set.status = Some(status);
    set
}

#[test]
fn the_echo_of_the_set_controller_s_status_write_wakes_only_what_it_moved() {
    use crate::engine::index::Echo;
    let index = index();
    index.handle(&watcher::Event::Apply(set("app", 1)));
    index.handle(&watcher::Event::Apply(deployment("web", &["app"])));
    let quiet = Echo {
        writer: false,
        readers: false,
    };
    // A status that moved nothing its readers decide from: its echo wakes no one.
    index
        .writing("ConfigMapSet", key("app"))
        .answered(Some("10".into()), quiet);
    let echo = written(set("app", 1), "10", Default::default());
    assert_eq!(index.handle(&watcher::Event::Apply(echo)), Triggers::default());
    // Only once: the same version seen again (a relist's apply, say) is anyone's news.
    let again = written(set("app", 1), "10", Default::default());
    let out = index.handle(&watcher::Event::Apply(again));
    assert!(out.own);
    // A status that opened a wave: its echo wakes the readers, not the writer.
    index.writing("ConfigMapSet", key("app")).answered(
        Some("11".into()),
        Echo {
            readers: true,
            ..quiet
        },
    );
    let out = index.handle(&watcher::Event::Apply(written(
        set("app", 1),
        "11",
        Default::default(),
    )));
    assert!(!out.own);
    assert_eq!(out.workloads, workloads(&["web"]));
    // Someone else's write before the echo arrives is news; the echo after it is still quiet.
    index
        .writing("ConfigMapSet", key("app"))
        .answered(Some("13".into()), quiet);
    let out = index.handle(&watcher::Event::Apply(written(
        set("app", 1),
        "12",
        Default::default(),
    )));
    // (While an echo is awaited, the object's own reconcile goes by the index's queue.)
    assert!(out.sets.contains(&cms("app")), "{out:?}");
    let out = index.handle(&watcher::Event::Apply(written(
        set("app", 1),
        "13",
        Default::default(),
    )));
    assert_eq!(out, Triggers::default());
    // A writer that waits for its store to catch up is woken by the echo.
    index
        .writing("ConfigMapSet", key("app"))
        .answered(Some("14".into()), quiet);
    assert!(index.wake_writer_on_echo("ConfigMapSet", &key("app")));
    let out = index.handle(&watcher::Event::Apply(written(
        set("app", 1),
        "14",
        Default::default(),
    )));
    assert!(out.sets.contains(&cms("app")), "{out:?}");
    assert!(out.workloads.is_empty());
    assert!(
        !index.wake_writer_on_echo("ConfigMapSet", &key("app")),
        "no echo is awaited once it arrived"
    );
    assert_eq!(index.sizes()["echoes awaited"], 0);
}

#[test]
fn an_echo_that_arrives_before_the_write_is_answered_is_still_an_echo() {
    use crate::engine::index::Echo;
    let (senders, mut queues) = crate::engine::index::trigger_channels();
    let index = Index::new(Some(senders));
    for kind in ["ConfigMapSet", "ConfigMap", "Deployment"] {
        index.expect(kind);
    }
    index.settle();
    index.lead();
    let mut queued = || {
        let mut names = Vec::new();
        while let Ok(set) = queues.sets.try_recv() {
            names.push(set.name);
        }
        names
    };
    index.handle(&watcher::Event::Apply(set("app", 1)));
    index.handle(&watcher::Event::Apply(deployment("web", &["app"])));
    queued();
    let quiet = Echo {
        writer: false,
        readers: false,
    };
    // The watch brings the write's echo before the answer arrives: it waits, and the answer says it
    // was the echo.
    let writing = index.writing("ConfigMapSet", key("app"));
    let held = index.handle(&watcher::Event::Apply(written(
        set("app", 1),
        "30",
        Default::default(),
    )));
    assert_eq!(held, Triggers::default(), "held until the answer");
    writing.answered(Some("30".into()), quiet);
    assert_eq!(queued(), Vec::<String>::new(), "the echo reconciles no one");
    assert_eq!(index.sizes()["echoes awaited"], 0, "the echo came already");
    // Someone else's change held behind a write is news once the answer shows it was not the echo.
    let writing = index.writing("ConfigMapSet", key("app"));
    index.handle(&watcher::Event::Apply(written(
        set("app", 1),
        "31",
        Default::default(),
    )));
    assert_eq!(queued(), Vec::<String>::new(), "held");
    writing.answered(Some("32".into()), quiet);
    assert_eq!(queued(), vec!["app".to_string()]);
    // A write that fails sends what waited: it was news.
    let writing = index.writing("ConfigMapSet", key("app"));
    index.handle(&watcher::Event::Apply(written(
        set("app", 1),
        "33",
        Default::default(),
    )));
    assert_eq!(queued(), Vec::<String>::new(), "held");
    drop(writing);
    assert_eq!(queued(), vec!["app".to_string()]);
    assert_eq!(index.sizes()["echoes awaited"], 0);
}

#[test]
fn a_revision_the_set_created_wakes_its_readers_and_not_the_set() {
    use crate::engine::index::Echo;
    let index = index();
    index.handle(&watcher::Event::Apply(set("app", 1)));
    index.handle(&watcher::Event::Apply(deployment("web", &["app"])));
    let mut created = revision_of(&set("app", 1));
    created.metadata.resource_version = Some("20".into());
    let echo = Echo {
        writer: false,
        readers: true,
    };
    let name = created.metadata.name.clone().unwrap();
    index
        .writing("ConfigMap", key(&name))
        .answered(Some("20".into()), echo);
    let out = index.handle(&watcher::Event::Apply(created.clone()));
    assert!(out.sets.is_empty(), "the set planned with it: {:?}", out.sets);
    assert_eq!(out.workloads, workloads(&["web"]));
    // Deleted by someone: the set plans again.
    let out = index.handle(&watcher::Event::Delete(created));
    assert_eq!(out.sets, [cms("app")].into());
}

#[test]
fn a_workload_s_own_controller_hears_only_what_it_plans_from() {
    use crate::engine::index::Echo;
    let index = index();
    index.handle(&watcher::Event::Apply(set("app", 1)));
    let at = |generation: i64, version: &str, reads: &str| {
        let mut d = available(deployment("web", &[reads]));
        d.metadata.generation = Some(generation);
        d.metadata.resource_version = Some(version.into());
        d
    };
    let out = index.handle(&watcher::Event::Apply(at(1, "1", "app")));
    assert!(out.own, "a workload first seen is planned");
    // A status step of its rollout: nothing its plan reads.
    let mut stepping = at(1, "2", "app");
    stepping.status.as_mut().unwrap().ready_replicas = Some(1);
    let out = index.handle(&watcher::Event::Apply(stepping));
    assert!(!out.own);
    // A new spec that names the same things (a restart, a scale, a new image): nothing either.
    let out = index.handle(&watcher::Event::Apply(at(2, "3", "app")));
    assert!(!out.own, "a restart plans nothing");
    // A template naming something else (`kubectl rollout undo`, an edit), a new label: planned again.
    let out = index.handle(&watcher::Event::Apply(at(3, "4", "other")));
    assert!(out.own);
    let out = index.handle(&watcher::Event::Apply(at(4, "5", "app")));
    assert!(out.own);
    let mut relabelled = at(5, "6", "app");
    let template = relabelled
        .spec
        .as_mut()
        .unwrap()
        .template
        .metadata
        .get_or_insert_default();
    template
        .labels
        .get_or_insert_default()
        .insert("tier".into(), "web".into());
    assert!(
        index.handle(&watcher::Event::Apply(relabelled)).own,
        "its template's labels"
    );
    let waved = with_wave(at(5, "7", "app"), "1");
    assert!(index.handle(&watcher::Event::Apply(waved)).own);
    // The echo of cmset's own patch moving it: no news to it, but its set records the move.
    index
        .writing_workload(WorkloadKind::Deployment, key("web"))
        .answered(
            Some("8".into()),
            Echo {
                writer: false,
                readers: true,
            },
        );
    let moved = with_wave(at(6, "8", "app-d2c65kk9hm"), "1");
    let out = index.handle(&watcher::Event::Apply(moved));
    assert!(!out.own);
    assert_eq!(out.sets, [cms("app")].into());
}

/// A ReplicaSet of Deployment `web` (uid `uid-web`) whose template names `reads`.
pub(crate) fn replica_set(name: &str, reads: &[&str]) -> k8s_openapi::api::apps::v1::ReplicaSet {
    let d = deployment("web", reads);
    let mut template = d.spec.unwrap().template;
    template.metadata = Some(ObjectMeta {
        labels: Some(BTreeMap::from([(labels::MANAGED_TEMPLATE.into(), "true".into())])),
        ..ObjectMeta::default()
    });
    k8s_openapi::api::apps::v1::ReplicaSet {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(NS.into()),
            uid: Some(format!("uid-{name}")),
            owner_references: Some(vec![OwnerReference {
                api_version: "apps/v1".into(),
                kind: "Deployment".into(),
                name: "web".into(),
                uid: "uid-web".into(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            }]),
            ..ObjectMeta::default()
        },
        spec: Some(k8s_openapi::api::apps::v1::ReplicaSetSpec {
            template: Some(template),
            ..Default::default()
        }),
        status: None,
    }
}

#[test]
fn a_new_replica_set_is_news_to_its_set_only_when_the_revision_needs_it_as_an_owner() {
    let index = index();
    index.handle(&watcher::Event::Apply(set("app", 1)));
    index.handle(&watcher::Event::Apply(deployment("web", &["app"])));
    let mut owned = revision_of(&set("app", 1));
    let name = owned.metadata.name.clone().unwrap();
    let bare = revision("app", "app-d2c65kk9hm");
    index.handle(&watcher::Event::Apply(bare));
    // The revision was created owned by the Deployment that reads it: its new ReplicaSet needs no
    // patch, and protects a revision that was never prunable (the current one).
    owned
        .metadata
        .owner_references
        .as_mut()
        .unwrap()
        .push(OwnerReference {
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            name: "web".into(),
            uid: "uid-web".into(),
            controller: Some(false),
            block_owner_deletion: Some(false),
        });
    index.handle(&watcher::Event::Apply(owned));
    let out = index.handle(&watcher::Event::Apply(replica_set("web-1", &[&name])));
    assert_eq!(out, Triggers::default());
    // One naming a revision that neither it nor its Deployment owns: the set adds it as an owner.
    let out = index.handle(&watcher::Event::Apply(replica_set("web-0", &["app-d2c65kk9hm"])));
    assert_eq!(out.sets, [cms("app")].into());
    // One that goes may have kept a revision from being pruned.
    let out = index.handle(&watcher::Event::Delete(replica_set("web-1", &[&name])));
    assert_eq!(out.sets, [cms("app")].into());
}

pub(crate) fn with_wave(mut deployment: Deployment, wave: &str) -> Deployment {
    if let Some(labels) = deployment.metadata.labels.as_mut() {
        labels.insert(labels::WAVE.into(), wave.into());
    }
    deployment
}

pub(crate) fn available(mut deployment: Deployment) -> Deployment {
    deployment.metadata.generation = Some(1);
    deployment.status = Some(k8s_openapi::api::apps::v1::DeploymentStatus {
        observed_generation: Some(1),
        replicas: Some(1),
        updated_replicas: Some(1),
        available_replicas: Some(1),
        ..Default::default()
    });
    deployment
}

#[test]
fn health_wakes_only_tracked_sets_and_a_new_wave_wakes_every_set_read() {
    let index = index();
    let mut tracked = set("app", 1);
    tracked.spec.rollout = Some(cmset_api::RolloutSpec::default());
    index.handle(&watcher::Event::Apply(tracked));
    index.handle(&watcher::Event::Apply(set("plain", 1)));
    index.handle(&watcher::Event::Apply(deployment("web", &["app", "plain"])));
    // A status update that makes it healthy matters to the tracked set only.
    let out = index.handle(&watcher::Event::Apply(available(deployment(
        "web",
        &["app", "plain"],
    ))));
    assert_eq!(out.sets, BTreeSet::from([cms("app")]));
    assert!(out.workloads.is_empty());
    // The same health again: nothing.
    let out = index.handle(&watcher::Event::Apply(available(deployment(
        "web",
        &["app", "plain"],
    ))));
    assert_eq!(out, Triggers::default());
    // A wave label matters to both: the plain set starts tracking a rollout.
    let waved = with_wave(available(deployment("web", &["app", "plain"])), "2");
    let out = index.handle(&watcher::Event::Apply(waved));
    assert_eq!(out.sets, BTreeSet::from([cms("app"), cms("plain")]));
}

#[test]
fn the_lowest_wave_of_a_set_s_readers_comes_from_the_index() {
    let index = index();
    index.handle(&watcher::Event::Apply(set("app", 1)));
    assert_eq!(index.lowest_wave(&cms("app")), 0, "no readers");
    index.handle(&watcher::Event::Apply(with_wave(deployment("b", &["app"]), "3")));
    index.handle(&watcher::Event::Apply(with_wave(
        deployment("c", &["app"]),
        "later",
    )));
    index.handle(&watcher::Event::Apply(with_wave(
        deployment("d", &["other"]),
        "1",
    )));
    assert_eq!(
        index.lowest_wave(&cms("app")),
        3,
        "invalid labels and other sets' readers do not count"
    );
    index.handle(&watcher::Event::Apply(with_wave(deployment("a", &["app"]), "2")));
    assert_eq!(index.lowest_wave(&cms("app")), 2);
    index.handle(&watcher::Event::Delete(with_wave(deployment("a", &["app"]), "2")));
    assert_eq!(index.lowest_wave(&cms("app")), 3);
}

#[test]
fn a_workload_that_switches_sets_triggers_the_old_and_the_new_one() {
    let index = index();
    for name in ["a", "b", "c"] {
        index.handle(&watcher::Event::Apply(set(name, 1)));
    }
    let first = index.handle(&watcher::Event::Apply(deployment("web", &["a", "b"])));
    assert_eq!(first.sets, [cms("a"), cms("b")].into());
    let switched = index.handle(&watcher::Event::Apply(deployment("web", &["b-d2c65kk9hm", "c"])));
    assert_eq!(switched.sets, [cms("a"), cms("b"), cms("c")].into());
    assert_eq!(index.readers(&cms("a")).workloads, vec![]);
    assert_eq!(
        index.readers(&cms("c")).workloads,
        vec![(WorkloadKind::Deployment, "web".to_string())]
    );
}

#[test]
fn a_workload_event_that_changes_no_reference_triggers_nothing() {
    let index = index();
    index.handle(&watcher::Event::Apply(set("app", 1)));
    index.handle(&watcher::Event::Apply(deployment("web", &["app"])));
    let mut scaled = deployment("web", &["app"]);
    scaled.spec.as_mut().unwrap().replicas = Some(5);
    assert_eq!(index.handle(&watcher::Event::Apply(scaled)), Triggers::default());
}

#[test]
fn a_revision_triggers_its_set_and_the_set_s_readers() {
    let index = index();
    index.handle(&watcher::Event::Apply(set("app", 1)));
    index.handle(&watcher::Event::Apply(deployment("web", &["app"])));
    let out = index.handle(&watcher::Event::Apply(revision("app", "app-d2c65kk9hm")));
    assert_eq!(out.sets, [cms("app")].into());
    assert_eq!(out.workloads, workloads(&["web"]));
    assert_eq!(index.revisions(SetKind::ConfigMapSet, NS, "app").len(), 1);
    let gone = index.handle(&watcher::Event::Delete(revision("app", "app-d2c65kk9hm")));
    assert_eq!(gone.sets, [cms("app")].into());
    assert!(index.revisions(SetKind::ConfigMapSet, NS, "app").is_empty());
}

#[test]
fn a_revision_gaining_an_owner_that_is_not_its_controller_triggers_its_set_alone() {
    let index = index();
    index.handle(&watcher::Event::Apply(set("app", 1)));
    index.handle(&watcher::Event::Apply(deployment("web", &["app"])));
    let name = "app-d2c65kk9hm";
    index.handle(&watcher::Event::Apply(revision("app", name)));
    let with_owner = |controller: bool, version: &str| {
        let mut r = revision("app", name);
        r.metadata.resource_version = Some(version.into());
        let owners = r.metadata.owner_references.as_mut().unwrap();
        owners.push(OwnerReference {
            api_version: "apps/v1".into(),
            kind: "ReplicaSet".into(),
            name: "web-5d8f".into(),
            uid: "uid-web-5d8f".into(),
            controller: Some(false),
            block_owner_deletion: None,
        });
        if controller {
            owners[0].controller = Some(false);
            owners[1].controller = Some(true);
        }
        r
    };
    // cmset's own patch adding a ReplicaSet as an owner: the set's history changed, no reader's move.
    let owned = index.handle(&watcher::Event::Apply(with_owner(false, "2")));
    assert_eq!(owned.sets, [cms("app")].into());
    assert!(owned.workloads.is_empty(), "{:?}", owned.workloads);
    // Anything else a reader could decide from still reaches the readers: a new controller, a label,
    // an annotation, a deletion under way. Each is applied over the revision as cmset's patch left it.
    let annotated = {
        let mut r = with_owner(false, "4");
        r.metadata.annotations = Some(BTreeMap::from([(labels::REVISION.into(), "2".into())]));
        r
    };
    let relabelled = {
        let mut r = with_owner(false, "4");
        r.metadata
            .labels
            .as_mut()
            .unwrap()
            .insert("team".into(), "a".into());
        r
    };
    let deleting = {
        let mut r = with_owner(false, "4");
        r.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            "2026-11-26T00:00:00Z".parse().unwrap(),
        ));
        r
    };
    for (what, changed) in [
        ("a new controller", with_owner(true, "4")),
        ("an annotation", annotated),
        ("a label", relabelled),
        ("a deletion", deleting),
    ] {
        index.handle(&watcher::Event::Apply(with_owner(false, "3")));
        let out = index.handle(&watcher::Event::Apply(changed));
        assert_eq!(out.workloads, workloads(&["web"]), "{what}");
        assert_eq!(out.sets, [cms("app")].into(), "{what}");
    }
}

#[test]
fn facts_are_computed_once_per_spec_change() {
    let index = index();
    index.handle(&watcher::Event::Apply(set("app", 1)));
    let first = index.set_facts(&cms("app")).unwrap();
    assert_eq!(first.identity.as_deref().map(str::len), Some(10));
    let mut status_only = set("app", 1);
    status_only.status = Some(Default::default());
    index.handle(&watcher::Event::Apply(status_only));
    assert_eq!(
        index.set_facts(&cms("app")).unwrap(),
        first,
        "a status write changes no fact"
    );
    index.handle(&watcher::Event::Apply(set("app", 2)));
    let second = index.set_facts(&cms("app")).unwrap();
    assert_ne!(second.identity, first.identity);
    assert!(second.changed_at >= first.changed_at);
}
