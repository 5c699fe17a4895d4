//! What a change asks to reconcile ([`Triggers`]), and the queues that carry it to the controllers.
//! The index fills a `Triggers` per change and sends it while this replica leads.

use std::collections::BTreeSet;

use cmset_api::{ConfigMapSet, SecretSet};
use cmset_core::observe::WorkloadKind;
use cmset_core::set::SetKind;
use futures::channel::mpsc::{UnboundedReceiver, UnboundedSender, unbounded};
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use kube::Resource;
use kube::runtime::reflector::ObjectRef;

use super::{Key, SetId};

/// Reconciles a change asks for.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Triggers {
    pub sets: BTreeSet<SetId>,
    pub workloads: BTreeSet<(WorkloadKind, Key)>,
}

fn send_to<K: Resource<DynamicType = ()>>(queue: &UnboundedSender<ObjectRef<K>>, key: &Key) -> bool {
    queue
        .unbounded_send(ObjectRef::new(&key.name).within(&key.namespace))
        .is_ok()
}

/// Where triggered reconciles go: one queue per controller.
#[derive(Clone)]
pub struct TriggerSenders {
    pub sets: UnboundedSender<ObjectRef<ConfigMapSet>>,
    pub secret_sets: UnboundedSender<ObjectRef<SecretSet>>,
    pub deployments: UnboundedSender<ObjectRef<Deployment>>,
    pub statefulsets: UnboundedSender<ObjectRef<StatefulSet>>,
    pub daemonsets: UnboundedSender<ObjectRef<DaemonSet>>,
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
        for (kind, key) in &out.workloads {
            // A closed queue means its controller stopped (shutdown): nothing left to trigger.
            let sent = match kind {
                WorkloadKind::Deployment => send_to(&self.deployments, key),
                WorkloadKind::StatefulSet => send_to(&self.statefulsets, key),
                WorkloadKind::DaemonSet => send_to(&self.daemonsets, key),
            };
            if !sent {
                tracing::debug!(%kind, "trigger queue closed");
            }
        }
    }
}

/// The receiving ends, for [`kube::runtime::Controller::reconcile_on`].
pub struct TriggerReceivers {
    pub sets: UnboundedReceiver<ObjectRef<ConfigMapSet>>,
    pub secret_sets: UnboundedReceiver<ObjectRef<SecretSet>>,
    pub deployments: UnboundedReceiver<ObjectRef<Deployment>>,
    pub statefulsets: UnboundedReceiver<ObjectRef<StatefulSet>>,
    pub daemonsets: UnboundedReceiver<ObjectRef<DaemonSet>>,
}

pub fn trigger_channels() -> (TriggerSenders, TriggerReceivers) {
    let (sets, sets_rx) = unbounded();
    let (secret_sets, secret_sets_rx) = unbounded();
    let (deployments, deployments_rx) = unbounded();
    let (statefulsets, statefulsets_rx) = unbounded();
    let (daemonsets, daemonsets_rx) = unbounded();
    (
        TriggerSenders {
            sets,
            secret_sets,
            deployments,
            statefulsets,
            daemonsets,
        },
        TriggerReceivers {
            sets: sets_rx,
            secret_sets: secret_sets_rx,
            deployments: deployments_rx,
            statefulsets: statefulsets_rx,
            daemonsets: daemonsets_rx,
        },
    )
}
