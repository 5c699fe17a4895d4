//! The revisions (ConfigMaps and Secrets labelled `cmset.dev/set`), by the set their label names, and
//! which set a revision belongs to.
//!
//! Written only by the ConfigMap and Secret watches ([`Revisions::insert`], [`Revisions::remove`]).

use std::collections::{BTreeMap, HashMap};

use cmset_core::set::SetKind;
use cmset_core::workloads::observe::RevisionView;
use cmset_core::workloads::refs::Referenced;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

use crate::engine::sparse::ShrinkIfSparse;

use super::sets::Sets;
use super::{Key, SetId};

#[derive(Default)]
pub(super) struct Revisions {
    /// By (set kind, namespace, value of the `cmset.dev/set` label): its revisions, sorted by name. A
    /// set has at most its history limit and a few more, so a sorted `Vec` is found in as few steps as
    /// a `BTreeMap` and holds no 400-byte node for a set's one revision.
    by_label: HashMap<SetId, Vec<KeptRevision>>,
    /// The label each revision was indexed under, by its kind and key.
    labels: HashMap<(Referenced, Key), String>,
}

impl Revisions {
    /// Indexes revision `key` of `kind` under `label`; returns the existing set it belongs to.
    pub(super) fn insert(
        &mut self,
        kind: Referenced,
        key: &Key,
        view: RevisionView,
        label: String,
        sets: &Sets,
    ) -> Option<SetId> {
        let set_kind = SetKind::of_revisions(kind);
        let set = set_of_revision(sets, set_kind, &key.namespace, &view, &label);
        let revisions = self
            .by_label
            .entry((set_kind, Key::new(&key.namespace, &label)))
            .or_default();
        let kept = KeptRevision::new(view);
        match find(revisions, &key.name) {
            Ok(at) => revisions[at] = kept,
            Err(at) => {
                revisions.insert(at, kept);
                // Room for the revisions there are: most sets keep one or two.
                revisions.shrink_to_fit();
            }
        }
        self.labels.insert((kind, key.clone()), label);
        set
    }

    /// Revision `key` of `kind` as indexed: the label it was indexed under, and what is kept of it.
    pub(super) fn get(&self, kind: Referenced, key: &Key) -> Option<(&String, &KeptRevision)> {
        let label = self.labels.get(&(kind, key.clone()))?;
        let set_kind = SetKind::of_revisions(kind);
        let revisions = self.by_label.get(&(set_kind, Key::new(&key.namespace, label)))?;
        let at = find(revisions, &key.name).ok()?;
        Some((label, &revisions[at]))
    }

    /// Drops revision `key` of `kind`, if indexed; returns the existing set it belonged to.
    pub(super) fn remove(&mut self, kind: Referenced, key: &Key, sets: &Sets) -> Option<SetId> {
        let label = self.labels.remove(&(kind, key.clone()))?;
        let set_kind = SetKind::of_revisions(kind);
        let by_label = (set_kind, Key::new(&key.namespace, &label));
        let revisions = self.by_label.get_mut(&by_label)?;
        let removed = find(revisions, &key.name).ok().map(|at| revisions.remove(at));
        if revisions.is_empty() {
            self.by_label.remove(&by_label);
            self.by_label.shrink_if_sparse();
        }
        self.labels.shrink_if_sparse();
        removed.and_then(|kept| set_of_revision(sets, set_kind, &key.namespace, &kept.rest, &label))
    }

    /// The revisions labelled for the set of `kind` whose label value is `label`.
    pub(super) fn labelled(&self, kind: SetKind, namespace: &str, label: &str) -> Vec<RevisionView> {
        self.by_label
            .get(&(kind, Key::new(namespace, label)))
            .map(|r| r.iter().map(KeptRevision::view).collect())
            .unwrap_or_default()
    }

    /// Whether a live revision labelled for the set `name` of `kind` holds `content`: by its content
    /// mark, or by the plain name of that content (a revision made before marks).
    pub(super) fn holds_content(
        &self,
        kind: SetKind,
        namespace: &str,
        label: &str,
        name: &str,
        content: &str,
    ) -> bool {
        let plain_name = cmset_core::revisions::naming::revision_name(name, content);
        self.by_label
            .get(&(kind, Key::new(namespace, label)))
            .is_some_and(|revisions| {
                revisions.iter().any(|kept| {
                    !kept.rest.being_deleted
                        && (kept.annotation(cmset_api::labels::CONTENT_HASH) == Some(content)
                            || kept.rest.name == plain_name)
                })
            })
    }

    /// The keys of every revision of `kind`.
    pub(super) fn keys(&self, kind: Referenced) -> impl Iterator<Item = Key> + '_ {
        self.labels
            .keys()
            .filter(move |(k, _)| *k == kind)
            .map(|(_, key)| key.clone())
    }

    pub(super) fn len(&self) -> usize {
        self.labels.len()
    }
}

/// Where revision `name` is in `revisions`, or where it would go.
fn find(revisions: &[KeptRevision], name: &str) -> Result<usize, usize> {
    revisions.binary_search_by(|kept| kept.rest.name.as_str().cmp(name))
}

/// A revision as the index keeps it: its view, with its labels and annotations as sorted pairs in
/// exactly the room they take. As `BTreeMap`s they were two 544-byte nodes for a revision's two or
/// three entries each, 1.1 KiB per set (`examples/index_footprint.rs`); the planners get the view
/// back whole, maps and all, from [`KeptRevision::view`].
pub(super) struct KeptRevision {
    /// The view without its labels and annotations (empty maps hold no heap).
    rest: RevisionView,
    labels: Box<[(String, String)]>,
    annotations: Box<[(String, String)]>,
}

impl KeptRevision {
    fn new(mut view: RevisionView) -> Self {
        // A BTreeMap iterates in key order, so the pairs come sorted.
        let labels = std::mem::take(&mut view.labels).into_iter().collect();
        let annotations = std::mem::take(&mut view.annotations).into_iter().collect();
        KeptRevision {
            rest: view,
            labels,
            annotations,
        }
    }

    /// The view it was kept from.
    pub(super) fn view(&self) -> RevisionView {
        RevisionView {
            labels: self.labels.iter().cloned().collect(),
            annotations: self.annotations.iter().cloned().collect(),
            ..self.rest.clone()
        }
    }

    pub(super) fn owner_references(&self) -> &[OwnerReference] {
        &self.rest.owner_references
    }

    fn annotation(&self, key: &str) -> Option<&str> {
        let at = self
            .annotations
            .binary_search_by(|(k, _)| k.as_str().cmp(key))
            .ok()?;
        Some(&self.annotations[at].1)
    }

    /// Whether `now`, a later view of this revision, differs at most in owners that are not its
    /// controller (and in the resourceVersion such a change brings).
    pub(super) fn same_but_other_owners(&self, now: &RevisionView) -> bool {
        let controllers = |owners: &[OwnerReference]| -> Vec<OwnerReference> {
            let controller = |o: &&OwnerReference| o.controller == Some(true);
            owners.iter().filter(controller).cloned().collect()
        };
        let bare = |v: &RevisionView| RevisionView {
            labels: BTreeMap::new(),
            annotations: BTreeMap::new(),
            owner_references: Vec::new(),
            resource_version: None,
            ..v.clone()
        };
        let same_pairs = |kept: &[(String, String)], now: &BTreeMap<String, String>| {
            kept.iter().map(|(k, v)| (k, v)).eq(now)
        };
        controllers(&self.rest.owner_references) == controllers(&now.owner_references)
            && bare(&self.rest) == bare(now)
            && same_pairs(&self.labels, &now.labels)
            && same_pairs(&self.annotations, &now.annotations)
    }
}

/// The set a revision belongs to: its controller if that is a set of the revision's kind, else the set
/// named by its label; `None` if that set does not exist.
fn set_of_revision(
    sets: &Sets,
    kind: SetKind,
    namespace: &str,
    revision: &RevisionView,
    label: &str,
) -> Option<SetId> {
    let controller = revision
        .owner_references
        .iter()
        .find(|o| o.controller == Some(true) && o.kind == kind.as_str())
        .map(|o| o.name.as_str());
    let id = (kind, Key::new(namespace, controller.unwrap_or(label)));
    sets.contains(&id).then_some(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(name: &str, labels: &[(&str, &str)], annotations: &[(&str, &str)]) -> RevisionView {
        let map = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        RevisionView {
            name: name.into(),
            uid: format!("uid-{name}"),
            labels: map(labels),
            annotations: map(annotations),
            owner_references: Vec::new(),
            being_deleted: false,
            created: Some(1_764_000_000),
            resource_version: Some("7".into()),
        }
    }

    #[test]
    fn a_kept_revision_gives_back_the_view_it_was_kept_from() {
        let many: Vec<(String, String)> = (0..30).map(|i| (format!("k{i:02}"), format!("v{i}"))).collect();
        let many: Vec<(&str, &str)> = many.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        for original in [
            view("app-1", &[], &[]),
            view(
                "app-2",
                &[("cmset.dev/set", "app")],
                &[("cmset.dev/revision", "2"), ("z", "")],
            ),
            view("app-3", &many, &many),
        ] {
            let kept = KeptRevision::new(original.clone());
            assert_eq!(kept.view(), original);
            assert!(kept.same_but_other_owners(&original));
            for (key, value) in &original.annotations {
                assert_eq!(kept.annotation(key), Some(value.as_str()));
            }
            assert_eq!(kept.annotation("absent"), None);
        }
    }

    #[test]
    fn a_kept_revision_is_the_same_but_for_other_owners_only_when_labels_and_annotations_are_too() {
        let kept = KeptRevision::new(view("app-1", &[("a", "1")], &[("b", "2")]));
        let mut owned = view("app-1", &[("a", "1")], &[("b", "2")]);
        owned.owner_references.push(OwnerReference {
            kind: "ReplicaSet".into(),
            uid: "uid-rs".into(),
            controller: Some(false),
            ..OwnerReference::default()
        });
        owned.resource_version = Some("8".into());
        assert!(kept.same_but_other_owners(&owned));
        let relabelled = view("app-1", &[("a", "2")], &[("b", "2")]);
        let more = view("app-1", &[("a", "1")], &[("b", "2"), ("c", "3")]);
        let fewer = view("app-1", &[("a", "1")], &[]);
        for now in [relabelled, more, fewer] {
            assert!(!kept.same_but_other_owners(&now), "{now:?}");
        }
    }

    #[test]
    fn a_set_s_revisions_come_back_sorted_by_name_and_go_one_by_one() {
        let mut revisions = Revisions::default();
        let sets = Sets::default();
        let key = |name: &str| Key::new("team", name);
        for name in ["app-c", "app-a", "app-b", "app-a"] {
            let view = view(name, &[("cmset.dev/set", "app")], &[]);
            revisions.insert(Referenced::ConfigMap, &key(name), view, "app".into(), &sets);
        }
        let names = |revisions: &Revisions| -> Vec<String> {
            revisions
                .labelled(SetKind::ConfigMapSet, "team", "app")
                .into_iter()
                .map(|v| v.name)
                .collect()
        };
        assert_eq!(names(&revisions), ["app-a", "app-b", "app-c"]);
        assert_eq!(revisions.len(), 3);
        let (label, kept) = revisions.get(Referenced::ConfigMap, &key("app-b")).unwrap();
        assert_eq!((label.as_str(), kept.rest.name.as_str()), ("app", "app-b"));
        revisions.remove(Referenced::ConfigMap, &key("app-b"), &sets);
        assert_eq!(names(&revisions), ["app-a", "app-c"]);
        revisions.remove(Referenced::ConfigMap, &key("app-a"), &sets);
        revisions.remove(Referenced::ConfigMap, &key("app-c"), &sets);
        assert!(names(&revisions).is_empty());
        assert!(revisions.by_label.is_empty());
    }
}
