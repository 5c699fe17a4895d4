//! What a change asks to reconcile ([`Triggers`]), and the queues that carry it to the controllers.
//! The index fills a `Triggers` per change and sends it while this replica leads.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, RwLock};

use cmset_api::{ConfigMapSet, SecretSet};
use cmset_core::set::SetKind;
use cmset_core::workloads::observe::WorkloadKind;
use futures::channel::mpsc::{UnboundedReceiver, UnboundedSender, unbounded};
use kube::Resource;
use kube::api::ApiResource;
use kube::runtime::reflector::ObjectRef;

use super::{Key, SetId};
use crate::engine::stored_workload::StoredWorkload;

/// Reconciles a change asks for.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Triggers {
    pub sets: BTreeSet<SetId>,
    pub workloads: BTreeSet<(WorkloadKind, Key)>,
    /// The changed object's own controller reconciles it (for the kinds a controller is keyed by: the
    /// sets and the workloads). Its watch sends that, from the store it fills.
    pub own: bool,
}

fn send_to<K: Resource<DynamicType = ()>>(queue: &UnboundedSender<ObjectRef<K>>, key: &Key) -> bool {
    queue
        .unbounded_send(ObjectRef::new(&key.name).within(&key.namespace))
        .is_ok()
}

/// The queue of one served workload kind's controller, with the resource its object references carry.
#[derive(Clone)]
pub struct WorkloadQueue {
    pub resource: ApiResource,
    pub sender: UnboundedSender<ObjectRef<StoredWorkload>>,
}

impl WorkloadQueue {
    pub fn send(&self, key: &Key) -> bool {
        let object = ObjectRef::new_with(&key.name, self.resource.clone()).within(&key.namespace);
        self.sender.unbounded_send(object).is_ok()
    }
}

/// Where triggered reconciles go: one queue per controller. The workload kinds' queues come and go
/// with the kinds the server serves.
#[derive(Clone)]
pub struct TriggerSenders {
    pub sets: UnboundedSender<ObjectRef<ConfigMapSet>>,
    pub secret_sets: UnboundedSender<ObjectRef<SecretSet>>,
    pub workloads: Arc<RwLock<HashMap<WorkloadKind, WorkloadQueue>>>,
}

impl TriggerSenders {
    /// Sends each reconcile `out` asks for to its controller's queue.
    pub(super) fn send(&self, out: &Triggers) {
        for (kind, key) in &out.sets {
            match kind {
                SetKind::ConfigMapSet => send_to(&self.sets, key),
                SetKind::SecretSet => send_to(&self.secret_sets, key),
            };
        }
        if out.workloads.is_empty() {
            return;
        }
        let queues = self.workloads.read().unwrap_or_else(|e| e.into_inner());
        for (kind, key) in &out.workloads {
            // No queue: the kind is not served (any more). A closed queue means its controller stopped
            // (shutdown): nothing left to trigger.
            if !queues.get(kind).is_some_and(|q| q.send(key)) {
                tracing::debug!(%kind, "no open trigger queue");
            }
        }
    }
}

/// The receiving ends, for [`kube::runtime::Controller::reconcile_on`]. (Each workload kind's
/// receiver is made with its queue, when the kind is served.)
pub struct TriggerReceivers {
    pub sets: UnboundedReceiver<ObjectRef<ConfigMapSet>>,
    pub secret_sets: UnboundedReceiver<ObjectRef<SecretSet>>,
}

pub fn trigger_channels() -> (TriggerSenders, TriggerReceivers) {
    let (sets, sets_rx) = unbounded();
    let (secret_sets, secret_sets_rx) = unbounded();
    (
        TriggerSenders {
            sets,
            secret_sets,
            workloads: Default::default(),
        },
        TriggerReceivers {
            sets: sets_rx,
            secret_sets: secret_sets_rx,
        },
    )
}
