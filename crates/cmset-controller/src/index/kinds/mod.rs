//! The watched kinds: what the operator watches, and how one object of each kind enters and leaves the
//! index. One [`Indexed`] impl per kind, one file per family of kinds; a kind writes only its own part
//! of the [`State`] (through that part's methods), reads the rest, and says which reconciles its change
//! triggers.
//!
//! | kind | file | writes |
//! |---|---|---|
//! | ConfigMapSet, SecretSet | `sets.rs` | set facts and tracking; which sets version which source |
//! | ConfigMap, Secret (metadata only) | `metadata.rs` | revisions; the versions seen of sources |
//! | Deployment, StatefulSet, DaemonSet | `workloads.rs` | their reader names; their waves and health |
//! | ReplicaSet, ControllerRevision | `history.rs` | their reader names; their history views |
//! | Pod | `pods.rs` | its reader names |

use k8s_openapi::NamespaceResourceScope;
use kube::Resource;
use serde::de::DeserializeOwned;

use super::{Key, State, Triggers};

mod history;
mod metadata;
mod pods;
mod sets;
mod workloads;

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

/// The selector of the objects made from templates cmset rewrote (history objects, Pods).
fn managed_selector() -> Option<String> {
    Some(format!("{}=true", cmset_api::labels::MANAGED_TEMPLATE))
}
