//! ConfigMaps and Secrets, watched metadata-only and without a selector: a revision is recognised by
//! its `cmset.dev/set` label, a source by its name (sources are other tools' objects, which cmset
//! never labels). Nothing is stored: the index keeps the revisions' metadata and the versions of the
//! sources some set versions, and lets every other object pass.

use std::collections::BTreeSet;

use cmset_api::labels;
use cmset_core::workloads::refs::Referenced;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::core::PartialObjectMeta;
use kube::{Resource, ResourceExt};

use super::Indexed;
use crate::engine::index::{Key, SetId, State, Triggers};
use crate::engine::views;
use crate::engine::wire::WireMeta;

impl Indexed for PartialObjectMeta<ConfigMap> {
    type Wire = WireMeta<ConfigMap>;
    const NAME: &'static str = "ConfigMap";

    fn selector() -> Option<String> {
        None
    }

    fn index(&self, key: &Key, state: &mut State, out: &mut Triggers) {
        index(Referenced::ConfigMap, self, key, state, out);
    }

    fn unindex(key: &Key, state: &mut State, out: &mut Triggers) {
        unindex(Referenced::ConfigMap, key, state, out);
    }

    fn indexed_keys(state: &State) -> Vec<Key> {
        indexed_keys(Referenced::ConfigMap, state)
    }
}

impl Indexed for PartialObjectMeta<Secret> {
    type Wire = WireMeta<Secret>;
    const NAME: &'static str = "Secret";

    fn selector() -> Option<String> {
        None
    }

    fn index(&self, key: &Key, state: &mut State, out: &mut Triggers) {
        index(Referenced::Secret, self, key, state, out);
    }

    fn unindex(key: &Key, state: &mut State, out: &mut Triggers) {
        unindex(Referenced::Secret, key, state, out);
    }

    fn indexed_keys(state: &State) -> Vec<Key> {
        indexed_keys(Referenced::Secret, state)
    }
}

fn index<K>(kind: Referenced, object: &PartialObjectMeta<K>, key: &Key, state: &mut State, out: &mut Triggers)
where
    PartialObjectMeta<K>: Resource,
{
    let label = object.labels().get(labels::SET).cloned();
    let view = label.as_ref().map(|_| views::revision_view(object));
    // A revision whose only news is an owner that is not its controller (cmset's own patch adding a
    // ReplicaSet, say) matters to its set's history, and to no reader's decision.
    let readers_concerned = match (state.revisions.get(kind, key), &label, &view) {
        (Some((was_label, was)), Some(label), Some(view)) => {
            was_label != label || !was.same_but_other_owners(view)
        }
        _ => true,
    };
    // Out from under the label it had (which may have changed), then in under the one it has now.
    if let Some(set) = state.revisions.remove(kind, key, &state.sets) {
        revision_changed(set, readers_concerned, state, out);
    }
    if let (Some(label), Some(view)) = (label, view)
        && let Some(set) = state.revisions.insert(kind, key, view, label, &state.sets)
    {
        revision_changed(set, readers_concerned, state, out);
    }
    state.sources.seen(kind, key, object.resource_version(), out);
}

fn unindex(kind: Referenced, key: &Key, state: &mut State, out: &mut Triggers) {
    if let Some(set) = state.revisions.remove(kind, key, &state.sets) {
        revision_changed(set, true, state, out);
    }
    state.sources.seen(kind, key, None, out);
}

/// A revision of `set` came, changed or went: the set reconciles, and the workloads that read it
/// when `readers_concerned`.
fn revision_changed(set: SetId, readers_concerned: bool, state: &State, out: &mut Triggers) {
    if readers_concerned {
        state.graph.trigger_readers(&set, out);
    }
    out.sets.insert(set);
}

/// The revisions of `kind`, and the sources of `kind` the watch has seen.
fn indexed_keys(kind: Referenced, state: &State) -> Vec<Key> {
    state
        .revisions
        .keys(kind)
        .chain(state.sources.keys(kind))
        .collect::<BTreeSet<Key>>()
        .into_iter()
        .collect()
}
