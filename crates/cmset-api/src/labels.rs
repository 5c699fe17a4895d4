//! Labels, annotations and names that form part of cmset's contract with users and tools.

/// On a Deployment, StatefulSet or DaemonSet: `"true"` opts the workload in to having its references to
/// ConfigMapSets (and SecretSets) managed.
pub const ENABLED: &str = "cmset.dev/enabled";
/// The value of [`ENABLED`] that opts in.
pub const ENABLED_VALUE: &str = "true";
/// On every revision (a ConfigMap of a ConfigMapSet, a Secret of a SecretSet): the name of the set it
/// belongs to (see `cmset_core::revisions::naming::set_label_value` for names longer than a label value may be).
pub const SET: &str = "cmset.dev/set";
/// On every revision (ConfigMap or Secret): its revision number, as a decimal string.
pub const REVISION: &str = "cmset.dev/revision";
/// On the pod template of a workload cmset has rewritten, so that the ReplicaSets, ControllerRevisions
/// and Pods made from that template can be watched and listed by label instead of all of them.
pub const MANAGED_TEMPLATE: &str = "cmset.dev/managed";
/// Field manager of every write cmset makes, visible in `managedFields` (GitOps tools ignore it by name).
pub const FIELD_MANAGER: &str = "cmset-controller";
/// On every revision ConfigMap: the kustomize hash of its content (without any collision count), so the
/// revision holding some content is found again even when a collision gave it a different name.
pub const CONTENT_HASH: &str = "cmset.dev/content-hash";
/// Prefix of every label and annotation key cmset owns; templates may not set keys under it.
pub const RESERVED_PREFIX: &str = "cmset.dev/";
/// On a Deployment, StatefulSet or DaemonSet: its rollout wave, a small non-negative integer (absent
/// means 0). A new revision reaches the workloads of a set wave by wave, lowest first.
pub const WAVE: &str = "cmset.dev/wave";
/// Highest wave accepted. A workload whose label is not a number from 0 to this one is held where it
/// is (state `Waiting`, with a message saying why) until the label is fixed.
pub const MAX_WAVE: i32 = 1000;
/// On a Deployment cmset's webhook created paused because a set it reads had no revision yet (or did
/// not exist yet): when the hold began, RFC 3339. The controller unpauses it in the patch that points it
/// at the revisions, or after [`HOLD_LIMIT_SECONDS`] whatever happens, and removes the annotation.
pub const HELD_SINCE: &str = "cmset.dev/held-since";
/// On a set: `"true"` holds its rollout as `spec.rollout.paused` does, without changing the spec (so a
/// GitOps tool sees no drift). `kubectl cmset pause` sets it, `kubectl cmset resume` removes it.
pub const PAUSED: &str = "cmset.dev/paused";
/// On a set whose `spec.rollout.promotion` is `Manual`: `<revision>/<wave>@<startedAt>`, the wave of
/// that rollout after which the next wave may open (see `cmset_core::set::Promoted`). `kubectl cmset
/// promote` writes it.
pub const PROMOTED: &str = "cmset.dev/promoted";
/// On a set, in earlier versions: `<revision>@<startedAt>`, a rollout the change windows may not hold.
/// Ignored now (break glass is a `WindowOverride`, which the API server authorizes): a set carrying it
/// gets a Warning Event saying so, and nothing goes through by it.
pub const WINDOW_OVERRIDE: &str = "cmset.dev/window-override";
/// Beside [`WINDOW_OVERRIDE`], in earlier versions: the webhook's record of who asked. Ignored now.
pub const WINDOW_OVERRIDE_BY: &str = "cmset.dev/window-override-by";
/// Beside [`WINDOW_OVERRIDE`], in earlier versions: the webhook's HMAC proof. Ignored now; cmset issues
/// and checks no proofs.
pub const WINDOW_OVERRIDE_PROOF: &str = "cmset.dev/window-override-proof";
/// Label on a workload cmset moved to a new revision while a cluster-wide rollout budget is set: the
/// generation the move gave it, as a decimal string. The workload holds a budget slot while it rolls out
/// at that generation; the controller removes the mark once it is healthy there. A workload cmset never
/// moved, or moved on since (a rollback, someone else's edit), has no slot whatever its health.
pub const MOVED: &str = "cmset.dev/moved";
/// Beside [`MOVED`]: the cap of the budget the move was granted under (`--max-moving-workloads`), as a
/// decimal string, so that `kubectl cmset plan` can tell where a change would stand in line from what
/// the cluster shows. Removed with the mark.
pub const BUDGET_CAP: &str = "cmset.dev/budget-cap";
/// How long a new Deployment is held at most.
pub const HOLD_LIMIT_SECONDS: i64 = 30;
