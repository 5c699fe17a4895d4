//! Reading and waiting on a set's rollout and on what its readers run, as the rollout tests do: which
//! revisions a Deployment's template names, the set's status, and waits for a phase or a revision.

use std::collections::BTreeSet;
use std::time::Duration;

use cmset_api::{ConfigMapSet, ConfigMapSetStatus, RolloutPhase, RolloutStatus};

use crate::fixtures::template_names;
use crate::{TestNamespace, eventually_within};

/// How long a rollout on the slow local cluster may take to reach what a test waits for.
pub const ROLLOUT_WAIT: Duration = Duration::from_secs(150);

/// The set of one name.
pub fn only(name: &str) -> BTreeSet<String> {
    BTreeSet::from([name.to_string()])
}

/// The revisions Deployment `name`'s template names.
pub async fn reads(ns: &TestNamespace, name: &str) -> BTreeSet<String> {
    template_names(&ns.deployment(name).await)
}

/// The status of ConfigMapSet `set`, if it has one.
pub async fn status(ns: &TestNamespace, set: &str) -> Option<ConfigMapSetStatus> {
    ns.api::<ConfigMapSet>().get(set).await.ok()?.status
}

/// Waits until `set` records the rollout of `revision` in `phase`; that record.
pub async fn wait_phase(ns: &TestNamespace, set: &str, revision: &str, phase: RolloutPhase) -> RolloutStatus {
    eventually_within(
        ROLLOUT_WAIT,
        &format!("the rollout of {revision} is {phase:?}"),
        || async {
            status(ns, set)
                .await?
                .rollout
                .filter(|r| r.revision == revision && r.phase == phase)
        },
    )
    .await
}

/// Waits until Deployment `name` names `revision` and nothing else.
pub async fn wait_reads(ns: &TestNamespace, name: &str, revision: &str) {
    eventually_within(ROLLOUT_WAIT, &format!("{name} reads {revision}"), || async {
        (reads(ns, name).await == only(revision)).then_some(())
    })
    .await;
}
