//! The watched kinds: what the operator watches, and how one object of each kind enters and leaves the
//! index. One [`Indexed`] impl per kind with a Rust type, one file per family of kinds (the workload
//! kinds, typed or not, are watched as dynamic objects and indexed by their table entry); a kind writes only its own part
//! of the [`State`] (through that part's methods), reads the rest, and says which reconciles its change
//! triggers.
//!
//! | kind | file | writes |
//! |---|---|---|
//! | ConfigMapSet, SecretSet | `sets.rs` | set facts and tracking; which sets version which source |
//! | ConfigMap, Secret (metadata only) | `metadata.rs` | revisions; the versions seen of sources |
//! | every workload kind of the table (`cmset_core::workloads::kinds`) | `workloads.rs` | their reader names; their waves and health |
//! | ReplicaSet, ControllerRevision, Job (of CronJobs) | `history.rs` | their reader names; their history views |
//! | Pod | `pods.rs` | its reader names |

use k8s_openapi::NamespaceResourceScope;
use kube::Resource;
use serde::de::DeserializeOwned;

use super::{Key, State, Triggers};

mod history;
mod metadata;
mod sets;
pub mod workloads;

/// A kind the operator watches: its watch, and how its objects enter and leave the index.
pub trait Indexed:
    Resource<DynamicType = (), Scope = NamespaceResourceScope>
    + Clone
    + DeserializeOwned
    + std::fmt::Debug
    + Send
    + Sync
    + 'static
{
    /// Names the kind in logs and relist bookkeeping.
    const NAME: &'static str;

    /// The label selector of its watch: as narrow as cmset's job allows.
    fn selector() -> Option<String>;

    /// What its watch decodes, then turns into `Self` for the index: `Self` itself, or a wire type
    /// that decodes only what the index reads (see [`crate::engine::wire`]).
    type Wire: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + 'static
        + Into<Self>;

    /// Drops what no decision reads, before the object is cached or indexed.
    fn slim(&mut self) {
        self.meta_mut().managed_fields = None;
        if let Some(a) = self.meta_mut().annotations.as_mut() {
            a.remove("kubectl.kubernetes.io/last-applied-configuration");
        }
    }

    fn index(&self, key: &Key, state: &mut State, out: &mut Triggers);
    fn unindex(key: &Key, state: &mut State, out: &mut Triggers);
    /// Every key of this kind in the index (read only when a watch relists).
    fn indexed_keys(state: &State) -> Vec<Key>;
}

/// How one object of a watched kind enters and leaves the index: an [`Indexed`] type, or a workload
/// kind of the table (see `workloads.rs`).
pub(super) trait Ops<O> {
    fn index(&self, obj: &O, key: &Key, state: &mut State, out: &mut Triggers);
    fn unindex(&self, key: &Key, state: &mut State, out: &mut Triggers);
    fn keys(&self, state: &State) -> Vec<Key>;
}

/// The [`Ops`] of an [`Indexed`] type.
pub(super) struct Static<K>(std::marker::PhantomData<K>);

impl<K> Default for Static<K> {
    fn default() -> Self {
        Self(std::marker::PhantomData)
    }
}

impl<K: Indexed> Ops<K> for Static<K> {
    fn index(&self, obj: &K, key: &Key, state: &mut State, out: &mut Triggers) {
        obj.index(key, state, out);
    }

    fn unindex(&self, key: &Key, state: &mut State, out: &mut Triggers) {
        K::unindex(key, state, out);
    }

    fn keys(&self, state: &State) -> Vec<Key> {
        K::indexed_keys(state)
    }
}

/// The selector of the objects made from templates cmset rewrote (history objects).
fn managed_selector() -> Option<String> {
    Some(format!("{}=true", cmset_api::labels::MANAGED_TEMPLATE))
}
