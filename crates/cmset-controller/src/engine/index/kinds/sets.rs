//! The sets of both kinds: kept whole in a store; the index keeps their facts and follows their
//! sources.

use cmset_api::{ConfigMapSet, SecretSet};
use cmset_core::set::{SetKind, SetRef};

use super::Indexed;
use crate::engine::index::{Key, State, Triggers};

impl Indexed for ConfigMapSet {
    type Wire = Self;
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
    type Wire = Self;
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

/// A set changed: its readers reconcile (the set's own controller sees the change itself).
fn index(set: SetRef<'_>, key: &Key, state: &mut State, out: &mut Triggers) {
    let id = (set.kind(), key.clone());
    let old_source = state.sets.record(&id, set);
    let source = state.sets.get(&id).and_then(|f| f.source.as_deref());
    state.sources.follow(&id, old_source.as_deref(), source);
    let templates = set.rollout().into_iter().flat_map(|r| &r.analysis);
    state
        .templates
        .follow(&id, templates.map(|a| a.template.clone()).collect());
    state.graph.trigger_readers(&id, out);
}

fn unindex(kind: SetKind, key: &Key, state: &mut State, out: &mut Triggers) {
    let id = (kind, key.clone());
    if let Some(facts) = state.sets.remove(&id) {
        state.sources.follow(&id, facts.source.as_deref(), None);
    }
    state.templates.follow(&id, Default::default());
    state.graph.trigger_readers(&id, out);
}
