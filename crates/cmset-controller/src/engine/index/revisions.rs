//! The revisions (ConfigMaps and Secrets labelled `cmset.dev/set`), by the set their label names, and
//! which set a revision belongs to.
//!
//! Written only by the ConfigMap and Secret watches ([`Revisions::insert`], [`Revisions::remove`]).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use cmset_core::set::SetKind;
use cmset_core::workloads::observe::RevisionView;
use cmset_core::workloads::refs::Referenced;

use crate::engine::sparse::ShrinkIfSparse;

use super::sets::Sets;
use super::{Key, SetId};

#[derive(Default)]
pub(super) struct Revisions {
    /// By (set kind, namespace, value of the `cmset.dev/set` label), then by revision name.
    by_label: HashMap<SetId, BTreeMap<String, Arc<RevisionView>>>,
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
        self.by_label
            .entry((set_kind, Key::new(&key.namespace, &label)))
            .or_default()
            .insert(key.name.clone(), Arc::new(view));
        self.labels.insert((kind, key.clone()), label);
        set
    }

    /// Revision `key` of `kind` as indexed: the label it was indexed under, and its view.
    pub(super) fn get(&self, kind: Referenced, key: &Key) -> Option<(&String, &RevisionView)> {
        let label = self.labels.get(&(kind, key.clone()))?;
        let set_kind = SetKind::of_revisions(kind);
        let view = self
            .by_label
            .get(&(set_kind, Key::new(&key.namespace, label)))?
            .get(&key.name)?;
        Some((label, view.as_ref()))
    }

    /// Drops revision `key` of `kind`, if indexed; returns the existing set it belonged to.
    pub(super) fn remove(&mut self, kind: Referenced, key: &Key, sets: &Sets) -> Option<SetId> {
        let label = self.labels.remove(&(kind, key.clone()))?;
        let set_kind = SetKind::of_revisions(kind);
        let by_label = (set_kind, Key::new(&key.namespace, &label));
        let revisions = self.by_label.get_mut(&by_label)?;
        let removed = revisions.remove(&key.name);
        if revisions.is_empty() {
            self.by_label.remove(&by_label);
            self.by_label.shrink_if_sparse();
        }
        self.labels.shrink_if_sparse();
        removed.and_then(|view| set_of_revision(sets, set_kind, &key.namespace, &view, &label))
    }

    /// The revisions labelled for the set of `kind` whose label value is `label`.
    pub(super) fn labelled(&self, kind: SetKind, namespace: &str, label: &str) -> Vec<RevisionView> {
        self.by_label
            .get(&(kind, Key::new(namespace, label)))
            .map(|r| r.values().map(|v| v.as_ref().clone()).collect())
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
                revisions.iter().any(|(revision, view)| {
                    !view.being_deleted
                        && (view
                            .annotations
                            .get(cmset_api::labels::CONTENT_HASH)
                            .map(String::as_str)
                            == Some(content)
                            || *revision == plain_name)
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
