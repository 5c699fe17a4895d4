//! The sets of both kinds: kept whole in a store; the index keeps their facts and follows their
//! sources.

use cmset_api::{ConfigMapSet, SecretSet};
use cmset_core::set::{SetKind, SetRef};

use super::Indexed;
use crate::engine::index::{Key, State, Triggers};
use crate::engine::wire::{WireConfigMapSet, WireSecretSet};

impl Indexed for ConfigMapSet {
    type Wire = WireConfigMapSet;
    const NAME: &'static str = "ConfigMapSet";

    fn selector() -> Option<String> {
        None
    }

    fn index(&self, key: &Key, state: &mut State, out: &mut Triggers) {
        index(SetRef::from(self), key, state, out);
    }

    fn unindex(key: &Key, state: &mut State, out: &mut Triggers) {
        unindex(SetKind::ConfigMapSet, key, state, out);
    }

    fn indexed_keys(state: &State) -> Vec<Key> {
        state.sets.keys(SetKind::ConfigMapSet)
    }
}

impl Indexed for SecretSet {
    type Wire = WireSecretSet;
    const NAME: &'static str = "SecretSet";

    fn selector() -> Option<String> {
        None
    }

    fn index(&self, key: &Key, state: &mut State, out: &mut Triggers) {
        index(SetRef::from(self), key, state, out);
    }

    fn unindex(key: &Key, state: &mut State, out: &mut Triggers) {
        unindex(SetKind::SecretSet, key, state, out);
    }

    fn indexed_keys(state: &State) -> Vec<Key> {
        state.sets.keys(SetKind::SecretSet)
    }
}

/// A set changed: its readers reconcile (the set's own controller sees the change itself), unless its
/// spec moved to content no revision holds yet: the readers could only wait for that revision, and its
/// creation wakes them (see `metadata.rs`).
fn index(set: SetRef<'_>, key: &Key, state: &mut State, out: &mut Triggers) {
    let id = (set.kind(), key.clone());
    let spec_before = state.sets.get(&id).map(|f| (f.generation, f.uid.clone()));
    let old_source = state.sets.record(&id, set);
    let facts = state.sets.get(&id);
    let spec_moved = spec_before != facts.map(|f| (f.generation, f.uid.clone()));
    let awaits_revision = spec_moved
        && facts.is_some_and(|f| {
            f.identity.as_deref().is_some_and(|content| {
                !state
                    .revisions
                    .holds_content(set.kind(), &key.namespace, &f.label, set.name(), content)
            })
        });
    let source = state.sets.get(&id).and_then(|f| f.source.as_deref());
    state.sources.follow(&id, old_source.as_deref(), source);
    let templates = set.rollout().into_iter().flat_map(|r| &r.analysis);
    state
        .templates
        .follow(&id, templates.map(|a| a.template.clone()).collect());
    if !awaits_revision {
        state.graph.trigger_readers(&id, out);
    }
    // Any change of a set may alter its plan (its spec, an annotation, another writer's status),
    // unless it is the echo of the set controller's own write (see `echoes.rs`).
    out.own = true;
}

fn unindex(kind: SetKind, key: &Key, state: &mut State, out: &mut Triggers) {
    let id = (kind, key.clone());
    if let Some(facts) = state.sets.remove(&id) {
        state.sources.follow(&id, facts.source.as_deref(), None);
    }
    state.templates.follow(&id, Default::default());
    state.graph.trigger_readers(&id, out);
}
