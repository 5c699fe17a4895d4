//! The index's tests: watch events in, triggered reconciles and query answers out.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use cmset_api::{ConfigMapSet, ConfigMapSetSpec, ConfigMapTemplate, SecretSet, labels};
use cmset_core::set::SetKind;
use cmset_core::workloads::observe::WorkloadKind;
use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{
    ConfigMap, ConfigMapEnvSource, Container, EnvFromSource, PodSpec, PodTemplateSpec, Secret,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::ResourceExt;
use kube::core::PartialObjectMeta;
use kube::runtime::watcher;

use cmset_core::rollout::window_hold::{ClusterView, UnknownCause, WindowsUnknown};

use super::{Index, Indexed, Key, SetId, SourceLookup, Triggers};
use crate::engine::stored_workload::StoredWorkload;

const NS: &str = "team";

fn index() -> Index {
    let index = Index::new(None);
    for kind in [
        "ConfigMapSet",
        "SecretSet",
        "ConfigMap",
        "Deployment",
        "ReplicaSet",
        "ControllerRevision",
    ] {
        index.expect(kind);
    }
    index.settle();
    index
}

/// Deployments reach the index as the workload watch delivers them: dynamic objects of the table's
/// kind, slimmed. (A test-only impl, so that the scenarios below read as typed objects.)
impl Indexed for Deployment {
    type Wire = Self;
    const NAME: &'static str = "Deployment";

    fn selector() -> Option<String> {
        Some(super::workloads::selector())
    }

    fn slim(&mut self) {
        let stored = stored(self);
        let mut object = stored.body();
        object["metadata"] = serde_json::to_value(&stored.metadata).unwrap();
        *self = serde_json::from_value(object).unwrap();
    }

    fn index(&self, key: &Key, state: &mut super::State, out: &mut Triggers) {
        let ops: &dyn super::kinds::Ops<StoredWorkload> = &WorkloadKind::Deployment;
        ops.index(&stored(self), key, state, out);
    }

    fn unindex(key: &Key, state: &mut super::State, out: &mut Triggers) {
        let ops: &dyn super::kinds::Ops<StoredWorkload> = &WorkloadKind::Deployment;
        ops.unindex(key, state, out);
    }

    fn indexed_keys(state: &super::State) -> Vec<Key> {
        let ops: &dyn super::kinds::Ops<StoredWorkload> = &WorkloadKind::Deployment;
        ops.keys(state)
    }
}

/// A Deployment as its watch stores it.
fn stored(d: &Deployment) -> StoredWorkload {
    let object = serde_json::from_value(serde_json::to_value(d).unwrap()).unwrap();
    StoredWorkload::slim(WorkloadKind::Deployment, object)
}

fn set(name: &str, generation: i64) -> ConfigMapSet {
    let mut set = ConfigMapSet::new(
        name,
        ConfigMapSetSpec {
            template: ConfigMapTemplate {
                data: Some(BTreeMap::from([("K".to_string(), generation.to_string())])),
                ..ConfigMapTemplate::default()
            },
            revision_history_limit: 10,
            rollout: None,
            config_map_name: None,
            ..ConfigMapSetSpec::default()
        },
    );
    set.metadata.namespace = Some(NS.into());
    set.metadata.uid = Some(format!("uid-{name}"));
    set.metadata.generation = Some(generation);
    set
}

fn deployment(name: &str, reads: &[&str]) -> Deployment {
    Deployment {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(NS.into()),
            uid: Some(format!("uid-{name}")),
            labels: Some(BTreeMap::from([(labels::ENABLED.into(), "true".into())])),
            ..ObjectMeta::default()
        },
        spec: Some(DeploymentSpec {
            template: PodTemplateSpec {
                metadata: None,
                spec: Some(PodSpec {
                    containers: vec![Container {
                        name: "app".into(),
                        env_from: Some(
                            reads
                                .iter()
                                .map(|r| EnvFromSource {
                                    config_map_ref: Some(ConfigMapEnvSource {
                                        name: r.to_string(),
                                        optional: None,
                                    }),
                                    ..EnvFromSource::default()
                                })
                                .collect(),
                        ),
                        ..Container::default()
                    }],
                    ..PodSpec::default()
                }),
            },
            ..DeploymentSpec::default()
        }),
        status: None,
    }
}

fn revision(set: &str, name: &str) -> PartialObjectMeta<ConfigMap> {
    PartialObjectMeta {
        types: None,
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(NS.into()),
            labels: Some(BTreeMap::from([(labels::SET.into(), set.into())])),
            owner_references: Some(vec![OwnerReference {
                api_version: "cmset.dev/v1alpha1".into(),
                kind: "ConfigMapSet".into(),
                name: set.into(),
                uid: format!("uid-{set}"),
                controller: Some(true),
                block_owner_deletion: Some(true),
            }]),
            ..ObjectMeta::default()
        },
        _phantom: Default::default(),
    }
}

fn key(name: &str) -> Key {
    Key::new(NS, name)
}

fn cms(name: &str) -> SetId {
    (SetKind::ConfigMapSet, key(name))
}

fn workloads(keys: &[&str]) -> BTreeSet<(WorkloadKind, Key)> {
    keys.iter().map(|k| (WorkloadKind::Deployment, key(k))).collect()
}

/// The revision of `set`'s content, named and marked as the set controller makes it.
fn revision_of(set: &ConfigMapSet) -> PartialObjectMeta<ConfigMap> {
    let content = cmset_core::revisions::revision::inline_identity(set.into()).unwrap();
    let name = set.metadata.name.clone().unwrap();
    let mut r = revision(
        &name,
        &cmset_core::revisions::naming::revision_name(&name, &content),
    );
    r.metadata.annotations = Some(BTreeMap::from([(labels::CONTENT_HASH.into(), content)]));
    r
}

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
fn written(mut set: ConfigMapSet, version: &str, status: cmset_api::ConfigMapSetStatus) -> ConfigMapSet {
    set.metadata.resource_version = Some(version.into());
    set.status = Some(status);
    set
}

#[test]
fn the_echo_of_the_set_controller_s_status_write_wakes_only_what_it_moved() {
    use super::Echo;
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
    use super::Echo;
    let (senders, mut queues) = super::trigger_channels();
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
    use super::Echo;
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
    use super::Echo;
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
fn replica_set(name: &str, reads: &[&str]) -> k8s_openapi::api::apps::v1::ReplicaSet {
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

fn with_wave(mut deployment: Deployment, wave: &str) -> Deployment {
    if let Some(labels) = deployment.metadata.labels.as_mut() {
        labels.insert(labels::WAVE.into(), wave.into());
    }
    deployment
}

fn available(mut deployment: Deployment) -> Deployment {
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

fn secret_set(name: &str, source: &str) -> SecretSet {
    let mut set = SecretSet::new(
        name,
        cmset_api::SecretSetSpec {
            secret_name: source.into(),
            revision_history_limit: 10,
            rollout: None,
            ..cmset_api::SecretSetSpec::default()
        },
    );
    set.metadata.namespace = Some(NS.into());
    set.metadata.uid = Some(format!("uid-{name}"));
    set.metadata.generation = Some(1);
    set
}

fn secret_meta(name: &str, version: &str) -> PartialObjectMeta<Secret> {
    PartialObjectMeta {
        types: None,
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(NS.into()),
            resource_version: Some(version.into()),
            ..ObjectMeta::default()
        },
        _phantom: Default::default(),
    }
}

fn sec(name: &str) -> SetId {
    (SetKind::SecretSet, key(name))
}

#[test]
fn a_source_s_new_version_triggers_the_set_that_versions_it_and_nothing_else_does() {
    let index = index();
    index.handle(&watcher::Event::Apply(secret_set("db", "db-credentials")));
    let out = index.handle(&watcher::Event::Apply(secret_meta("db-credentials", "7")));
    assert_eq!(out.sets, [sec("db")].into());
    // The same version again (a relist), and an unrelated Secret: nothing.
    assert_eq!(
        index.handle(&watcher::Event::Apply(secret_meta("db-credentials", "7"))),
        Triggers::default()
    );
    assert_eq!(
        index.handle(&watcher::Event::Apply(secret_meta("unrelated", "1"))),
        Triggers::default()
    );
    // A ConfigMap of the source's name is not the source.
    let mut cm = revision("x", "db-credentials");
    cm.metadata.labels = None;
    cm.metadata.owner_references = None;
    assert_eq!(index.handle(&watcher::Event::Apply(cm)).sets, BTreeSet::new());
    // Deleted: the set learns it.
    assert_eq!(
        index
            .handle(&watcher::Event::Delete(secret_meta("db-credentials", "7")))
            .sets,
        [sec("db")].into()
    );
}

#[test]
fn a_read_is_fresh_until_the_watch_sees_another_version() {
    let index = index();
    index.handle(&watcher::Event::Apply(secret_set("db", "db-credentials")));
    let lookup = || index.source(SetKind::SecretSet, NS, "db-credentials");
    assert_eq!(lookup(), SourceLookup::Stale, "never read");
    index.record_source(
        SetKind::SecretSet,
        NS,
        "db-credentials",
        Some("7".into()),
        Some("9k5ddchd8d".into()),
    );
    assert_eq!(
        lookup(),
        SourceLookup::Fresh(Some("9k5ddchd8d".into())),
        "read, the watch silent so far"
    );
    index.handle(&watcher::Event::Apply(secret_meta("db-credentials", "7")));
    assert_eq!(
        lookup(),
        SourceLookup::Fresh(Some("9k5ddchd8d".into())),
        "seen at the version read"
    );
    index.handle(&watcher::Event::Apply(secret_meta("db-credentials", "8")));
    assert_eq!(lookup(), SourceLookup::Stale, "moved since the read");
    index.record_source(SetKind::SecretSet, NS, "db-credentials", None, None);
    index.handle(&watcher::Event::Delete(secret_meta("db-credentials", "8")));
    assert_eq!(lookup(), SourceLookup::Fresh(None), "gone, and read as gone");
}

#[test]
fn a_read_of_a_new_version_wakes_the_readers_even_when_the_content_is_the_same() {
    let index = index();
    index.handle(&watcher::Event::Apply(secret_set("db", "db-credentials")));
    let mut web = deployment("web", &[]);
    let container = &mut web
        .spec
        .as_mut()
        .unwrap()
        .template
        .spec
        .as_mut()
        .unwrap()
        .containers[0];
    container.env_from = Some(vec![k8s_openapi::api::core::v1::EnvFromSource {
        secret_ref: Some(k8s_openapi::api::core::v1::SecretEnvSource {
            name: "db".into(),
            optional: None,
        }),
        ..Default::default()
    }]);
    index.handle(&watcher::Event::Apply(web));
    let record = |version: &str, identity: &str| {
        index.record_source(
            SetKind::SecretSet,
            NS,
            "db-credentials",
            Some(version.into()),
            Some(identity.into()),
        )
    };
    let first = record("7", "aaaaaaaaaa");
    assert_eq!(first.workloads, workloads(&["web"]));
    let changed_at = index.set_facts(&sec("db")).unwrap().changed_at;
    // Rewritten with the same content (a refreshed annotation): the waiting workload moves on, and
    // the set does not count as changed.
    assert_eq!(record("8", "aaaaaaaaaa").workloads, workloads(&["web"]));
    assert_eq!(index.set_facts(&sec("db")).unwrap().changed_at, changed_at);
    // The same read again: nothing.
    assert_eq!(record("8", "aaaaaaaaaa"), Triggers::default());
    // A set switching to another source stops following the old one.
    let mut moved = secret_set("db", "other");
    moved.metadata.generation = Some(2);
    index.handle(&watcher::Event::Apply(moved));
    assert_eq!(
        index.handle(&watcher::Event::Apply(secret_meta("db-credentials", "9"))),
        Triggers::default()
    );
    assert_eq!(
        index
            .handle(&watcher::Event::Apply(secret_meta("other", "1")))
            .sets,
        [sec("db")].into()
    );
}

const FORBIDDEN: &str = "403 Forbidden: cmset's service account may not list or watch it";

fn unobserved(kind: &str) -> Vec<(String, String)> {
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

/// An index whose ChangeWindow watch has started and that holds set `app`.
fn watching_windows() -> Index {
    let index = Index::new(None);
    index.expect("ConfigMapSet");
    index.watch_windows();
    index.settle();
    index.handle::<ConfigMapSet>(&watcher::Event::InitDone);
    index.handle(&watcher::Event::Apply(set("app", 1)));
    index
}

fn windows_unknown(cause: UnknownCause) -> WindowsUnknown {
    WindowsUnknown {
        cause,
        detail: FORBIDDEN.to_string(),
    }
}

fn unknown_cause(index: &Index) -> Option<UnknownCause> {
    match index.cluster_windows_for((&set("app", 1)).into()) {
        ClusterView::Unknown(unknown) => Some(unknown.cause),
        ClusterView::Known(_) => None,
    }
}

#[test]
fn change_windows_not_listed_yet_are_unknown_and_a_refusal_holds_every_set_until_a_list() {
    let index = watching_windows();
    assert!(!index.is_ready(), "the windows have not listed yet");
    assert_eq!(
        unknown_cause(&index),
        Some(UnknownCause::NotListed),
        "until the first list, any freeze may be in force"
    );
    let triggered = index
        .windows_unavailable(windows_unknown(UnknownCause::Forbidden))
        .expect("news");
    assert_eq!(triggered.sets, sets(&["app"]), "every set says why");
    assert!(
        index.is_ready() && index.is_complete(),
        "nothing more is coming for now"
    );
    assert_eq!(unknown_cause(&index), Some(UnknownCause::Forbidden));
    assert_eq!(
        index.unobserved_readers(&cms("app")),
        vec![],
        "a ChangeWindow reads no set: the set plans, and holds its moves only"
    );
    assert!(
        index
            .windows_unavailable(windows_unknown(UnknownCause::Forbidden))
            .is_none(),
        "the same refusal again is no news"
    );
    // Listed at last: known, and the sets held for it reconcile.
    index.handle_change_window(&watcher::Event::Init, &[]);
    let released = index.handle_change_window(&watcher::Event::InitDone, &[]);
    assert_eq!(released.sets, sets(&["app"]));
    assert_eq!(unknown_cause(&index), None);
    // A later failed list makes them unknown again: the last list may be stale.
    index
        .windows_unavailable(windows_unknown(UnknownCause::ListFailed))
        .expect("news");
    assert_eq!(unknown_cause(&index), Some(UnknownCause::ListFailed));
}

#[test]
fn change_windows_whose_crd_is_absent_or_that_are_not_watched_are_none() {
    let index = watching_windows();
    index
        .windows_unavailable(windows_unknown(UnknownCause::Forbidden))
        .expect("news");
    let released = index.windows_absent();
    assert_eq!(released.sets, sets(&["app"]), "the held sets move again");
    assert!(index.is_ready() && index.is_complete());
    assert!(matches!(
        index.cluster_windows_for((&set("app", 1)).into()),
        ClusterView::Known(windows) if windows.is_empty()
    ));
    // --change-windows=false: no watch, no window, nothing unknown.
    assert_eq!(unknown_cause(&index_not_watching_windows()), None);
}

fn index_not_watching_windows() -> Index {
    let index = index();
    index.handle(&watcher::Event::Apply(set("app", 1)));
    index
}

#[test]
fn a_first_list_that_does_not_answer_in_time_is_reported_and_one_that_did_is_not() {
    let patience = std::time::Duration::from_secs(30);
    let late = watching_windows();
    late.windows_not_listed_within(patience);
    assert!(late.is_complete(), "the sets plan, and say why they hold");
    let unknown = late.windows_unknown().expect("still unknown");
    assert_eq!(unknown.cause, UnknownCause::NotListed);
    assert!(unknown.detail.contains("30s"), "{}", unknown.detail);

    let listed = watching_windows();
    listed.handle_change_window(&watcher::Event::InitDone, &[]);
    listed.windows_not_listed_within(patience);
    assert_eq!(listed.windows_unknown(), None);
}

#[test]
fn the_unknown_windows_gauge_counts_this_index_under_its_current_cause() {
    use crate::platform::metrics::WindowsUnknownLabels;
    let gauge = super::WindowsUnknownGauge::default();
    let value = |cause| gauge.get_or_create(&WindowsUnknownLabels { cause }).get();
    let index = watching_windows();
    index.count_windows_unknown(gauge.clone());
    assert_eq!(value("not_listed"), 1, "counted from the start");
    let _ = index.windows_unavailable(windows_unknown(UnknownCause::Forbidden));
    assert_eq!((value("not_listed"), value("forbidden")), (0, 1));
    index.handle_change_window(&watcher::Event::InitDone, &[]);
    assert_eq!(
        (value("not_listed"), value("forbidden"), value("list_failed")),
        (0, 0, 0)
    );
}

/// A set naming the AnalysisTemplates `templates` in its rollout's analysis.
fn analysed(name: &str, generation: i64, templates: &[&str]) -> ConfigMapSet {
    let mut set = set(name, generation);
    let analysis: Vec<_> = templates
        .iter()
        .map(|t| serde_json::json!({"template": t}))
        .collect();
    set.spec.rollout = Some(serde_json::from_value(serde_json::json!({"analysis": analysis})).unwrap());
    set
}

fn template(name: &str) -> cmset_api::AnalysisTemplate {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "cmset.dev/v1alpha1", "kind": "AnalysisTemplate", "metadata": {"name": name},
        "spec": {"query": "up", "successCondition": "result == 1"},
    }))
    .unwrap()
}

fn sets(names: &[&str]) -> BTreeSet<SetId> {
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
    index.expect(super::TEMPLATES);
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
    index.expect(super::TEMPLATES);
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
    let counters = super::WatchEvents::default();
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

fn window_override(name: &str, set: &str, uid: &str) -> cmset_api::WindowOverride {
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
