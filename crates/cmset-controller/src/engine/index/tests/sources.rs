//! Sources: a source's new version wakes the set that versions it, and a read stays fresh until the
//! watch sees another version.

use super::*;

pub(crate) fn secret_set(name: &str, source: &str) -> SecretSet {
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

pub(crate) fn secret_meta(name: &str, version: &str) -> PartialObjectMeta<Secret> {
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

pub(crate) fn sec(name: &str) -> SetId {
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
