//! Break glass: which `WindowOverride` lets a set's rollout through the change windows.
//!
//! A `WindowOverride` (`windowoverrides.cmset.dev`, see `cmset_api::overrides`) names a set by kind,
//! name and uid, and one rollout by revision and start. The API server decides who may create one
//! (ClusterRole `cmset-break-glass`): cmset trusts the object's existence, never a claim in a request
//! body. It counts only for the set it names (the same uid: a set deleted and created again under the
//! same name is another set) and only for the rollout it names, so it lets that rollout through once
//! and a later rollout is held again.
//!
//! The annotation `cmset.dev/window-override` that earlier versions honoured (with a record and an HMAC
//! proof the webhook wrote) lets nothing through any more: the controller says so on the set.
//!
//! Pure: the overrides are passed in, read from the index.

use cmset_api::overrides::NOT_RECORDED;
use cmset_api::{OverriddenKind, RolloutStatus, WindowOverride};
use k8s_openapi::jiff::Timestamp;

use crate::set::{SetKind, SetRef, rollout_id};

/// A `WindowOverride` as the controller reads it: what it names, and its record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OverrideView {
    /// The WindowOverride's name (in the set's namespace).
    pub name: String,
    pub set_kind: SetKind,
    pub set_name: String,
    pub set_uid: String,
    pub revision: String,
    pub started_at: Timestamp,
    /// Who created it, as cmset's admission webhook recorded it; `None`: not recorded.
    pub requested_by: Option<String>,
}

impl OverrideView {
    /// The view of `object` (`None` without a name).
    pub fn of(object: &WindowOverride) -> Option<Self> {
        let spec = &object.spec;
        Some(Self {
            name: object.metadata.name.clone()?,
            set_kind: match spec.set.kind {
                OverriddenKind::ConfigMapSet => SetKind::ConfigMapSet,
                OverriddenKind::SecretSet => SetKind::SecretSet,
            },
            set_name: spec.set.name.clone(),
            set_uid: spec.set.uid.clone(),
            revision: spec.rollout.revision.clone(),
            started_at: spec.rollout.started_at.0,
            requested_by: spec.requested_by.clone().filter(|by| !by.is_empty()),
        })
    }

    /// Whether it is for `set`: the same kind, name and uid (a set without a uid matches nothing).
    pub fn is_for(&self, set: SetRef<'_>) -> bool {
        let uid = set.uid();
        !uid.is_empty() && self.set_uid == uid && self.set_kind == set.kind() && self.set_name == set.name()
    }

    /// Whether it names `rollout`: the same revision, started at the same instant.
    pub fn names(&self, rollout: &RolloutStatus) -> bool {
        self.revision == rollout.revision
            && rollout
                .started_at
                .as_ref()
                .is_some_and(|t| t.0 == self.started_at)
    }

    /// Who created it, or "not recorded".
    pub fn by(&self) -> &str {
        self.requested_by.as_deref().unwrap_or(NOT_RECORDED)
    }

    /// The rollout it names, as people read it: `<revision>@<startedAt>`.
    pub fn rollout(&self) -> String {
        format!("{}@{}", self.revision, self.started_at)
    }
}

/// What the controller makes of a set's break glass.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BreakGlass {
    /// The WindowOverrides for this very set (kind, name and uid), by name.
    pub grants: Vec<OverrideView>,
    /// The set carries the annotation `cmset.dev/window-override`, which lets nothing through now.
    pub legacy_annotation: bool,
}

impl BreakGlass {
    /// The override that lets `rollout` through, if one does (the first by name when several do).
    pub fn for_rollout(&self, rollout: &RolloutStatus) -> Option<&OverrideView> {
        self.grants.iter().find(|g| g.names(rollout))
    }
}

/// The break glass of `set`: of `overrides` (the WindowOverrides of its namespace that name its kind
/// and name), those for this very set; and whether it carries the old annotation.
pub fn judge(set: SetRef<'_>, overrides: &[OverrideView]) -> BreakGlass {
    let mut grants: Vec<OverrideView> = overrides.iter().filter(|o| o.is_for(set)).cloned().collect();
    grants.sort_by(|a, b| a.name.cmp(&b.name));
    BreakGlass {
        grants,
        legacy_annotation: set.window_override().is_some(),
    }
}

/// Condition type on a set saying what its break glass does: `True` (reason [`GRANTED`]) when a
/// WindowOverride lets the current rollout through, `False` (reason [`ANNOTATION_IGNORED`]) when the
/// set carries only the old annotation. Absent otherwise.
pub const CONDITION: &str = "WindowOverride";
/// Reason of the `True` condition.
pub const GRANTED: &str = "Granted";
/// Reason of the `False` condition, and of the Warning Event that tells it once.
pub const ANNOTATION_IGNORED: &str = "AnnotationIgnored";
/// The Warning Event's reason.
pub const IGNORED_EVENT: &str = "WindowOverrideIgnored";

/// The message of the `True` condition: it names the WindowOverride, so a reader (the plugin) can tell
/// which override was used.
pub fn granted_message(grant: &OverrideView) -> String {
    format!(
        "WindowOverride {} lets the rollout {} through the change windows (requested by {})",
        grant.name,
        grant.rollout(),
        grant.by()
    )
}

/// The name of the WindowOverride a set's `True` condition says it used, if its message is one.
pub fn used_override(message: &str) -> Option<&str> {
    granted_record(message).map(|(name, _)| name)
}

/// The WindowOverride and who created it ("not recorded" included), from a set's `True` condition's
/// message ([`granted_message`]).
pub fn granted_record(message: &str) -> Option<(&str, &str)> {
    let (name, rest) = message
        .strip_prefix("WindowOverride ")?
        .split_once(" lets the rollout ")?;
    let by = rest.rsplit_once("(requested by ")?.1.strip_suffix(')')?;
    Some((name, by))
}

/// Who let the set's current rollout through, and by which WindowOverride, as the controller recorded
/// it in the set's status (condition [`CONDITION`], `True`).
pub fn granted(set: SetRef<'_>) -> Option<(&str, &str)> {
    let condition = set.status()?.condition(CONDITION)?;
    (condition.status == "True")
        .then(|| granted_record(&condition.message))
        .flatten()
}

/// Why the old annotation lets nothing through, and what to do instead. Repeats nothing the set's
/// writer wrote.
pub const ANNOTATION_IGNORED_MESSAGE: &str = "The annotation cmset.dev/window-override is ignored: it lets \
     nothing through the change windows. Break glass is a WindowOverride now: someone with ClusterRole \
     cmset-break-glass runs kubectl cmset promote --override-window; remove the annotation";

/// The rollout the old annotation would name: `<revision>@<startedAt>` (kept for people reading old sets).
pub fn override_value(rollout: &RolloutStatus) -> Option<String> {
    let started = rollout.started_at.as_ref()?;
    Some(format!("{}@{}", rollout.revision, rollout_id(started)))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use cmset_api::{ConfigMapSet, OverriddenRollout, OverriddenSet, SecretSet, WindowOverrideSpec, labels};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

    use super::*;

    const UID: &str = "6f1c0000-0000-0000-0000-000000000001";

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    fn rollout(revision: &str, started: &str) -> RolloutStatus {
        RolloutStatus {
            revision: revision.into(),
            started_at: Some(Time(at(started))),
            ..RolloutStatus::default()
        }
    }

    fn object(name: &str, kind: OverriddenKind, set: &str, uid: &str, by: Option<&str>) -> WindowOverride {
        let mut o = WindowOverride::new(
            name,
            WindowOverrideSpec {
                set: OverriddenSet {
                    kind,
                    name: set.into(),
                    uid: uid.into(),
                },
                rollout: OverriddenRollout {
                    revision: "app-7c9f5d6b8d".into(),
                    started_at: Time(at("2026-11-27T17:20:00Z")),
                },
                reason: None,
                requested_by: by.map(str::to_string),
            },
        );
        o.metadata.namespace = Some("team".into());
        o
    }

    fn view(name: &str, kind: OverriddenKind, set: &str, uid: &str) -> OverrideView {
        OverrideView::of(&object(name, kind, set, uid, Some("ana@example.com"))).unwrap()
    }

    fn set(uid: &str, annotations: &[(&str, &str)]) -> ConfigMapSet {
        let mut set = ConfigMapSet::new("app", Default::default());
        set.metadata = ObjectMeta {
            name: Some("app".into()),
            namespace: Some("team".into()),
            uid: Some(uid.into()),
            annotations: Some(
                annotations
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect::<BTreeMap<_, _>>(),
            ),
            ..ObjectMeta::default()
        };
        set
    }

    #[test]
    fn an_override_lets_through_its_set_and_its_rollout_only() {
        let set = set(UID, &[]);
        let good = view("app-break", OverriddenKind::ConfigMapSet, "app", UID);
        let judged = judge((&set).into(), std::slice::from_ref(&good));
        assert_eq!(judged.grants, vec![good.clone()]);
        assert!(!judged.legacy_annotation);
        let named = rollout("app-7c9f5d6b8d", "2026-11-27T17:20:00Z");
        assert_eq!(judged.for_rollout(&named), Some(&good));
        assert_eq!(good.by(), "ana@example.com");
        // Once: a later rollout (the same revision started again, or another revision) is held again.
        for later in [
            rollout("app-7c9f5d6b8d", "2026-11-27T18:00:00Z"),
            rollout("app-5b8d7c9f6d", "2026-11-27T17:20:00Z"),
            RolloutStatus {
                started_at: None,
                ..named.clone()
            },
        ] {
            assert_eq!(judged.for_rollout(&later), None, "{later:?}");
        }
    }

    #[test]
    fn an_override_for_another_set_counts_for_nothing() {
        let set = set(UID, &[]);
        let others = [
            (
                "a set deleted and created again (another uid)",
                view(
                    "a",
                    OverriddenKind::ConfigMapSet,
                    "app",
                    "6f1c0000-0000-0000-0000-000000000002",
                ),
            ),
            ("another kind", view("b", OverriddenKind::SecretSet, "app", UID)),
            (
                "another name",
                view("c", OverriddenKind::ConfigMapSet, "app2", UID),
            ),
            ("no uid", view("d", OverriddenKind::ConfigMapSet, "app", "")),
        ];
        for (what, other) in others {
            assert_eq!(judge((&set).into(), &[other]), BreakGlass::default(), "{what}");
        }
        // A set without a uid (not stored yet) matches nothing, not even an override without one.
        let unstored = self::set("", &[]);
        let blank = view("e", OverriddenKind::ConfigMapSet, "app", "");
        assert!(judge((&unstored).into(), &[blank]).grants.is_empty());
        // Kinds are told apart: a SecretSet of the same name and uid is not the ConfigMapSet.
        let mut secret_set = SecretSet::new("app", Default::default());
        secret_set.metadata = set.metadata.clone();
        let for_cms = view("f", OverriddenKind::ConfigMapSet, "app", UID);
        assert!(judge((&secret_set).into(), &[for_cms]).grants.is_empty());
    }

    #[test]
    fn the_old_annotation_lets_nothing_through_and_is_reported() {
        let named = rollout("app-7c9f5d6b8d", "2026-11-27T17:20:00Z");
        let value = override_value(&named).unwrap();
        let annotated = set(
            UID,
            &[
                (labels::WINDOW_OVERRIDE, &value),
                (labels::WINDOW_OVERRIDE_BY, "root 2026-11-27T17:21:00Z"),
                (labels::WINDOW_OVERRIDE_PROOF, "c2lnbmVk"),
            ],
        );
        let judged = judge((&annotated).into(), &[]);
        assert!(judged.legacy_annotation);
        assert_eq!(judged.for_rollout(&named), None);
        assert!(ANNOTATION_IGNORED_MESSAGE.contains("WindowOverride"));
        assert!(ANNOTATION_IGNORED_MESSAGE.contains("kubectl cmset promote --override-window"));
        assert!(!ANNOTATION_IGNORED_MESSAGE.contains("root"));
    }

    #[test]
    fn an_unrecorded_override_still_counts_and_says_so() {
        let set = set(UID, &[]);
        let unrecorded =
            OverrideView::of(&object("x", OverriddenKind::ConfigMapSet, "app", UID, None)).unwrap();
        let blank =
            OverrideView::of(&object("y", OverriddenKind::ConfigMapSet, "app", UID, Some(""))).unwrap();
        assert_eq!(unrecorded.by(), "not recorded");
        assert_eq!(blank.by(), "not recorded");
        let judged = judge((&set).into(), &[blank, unrecorded]);
        let named = rollout("app-7c9f5d6b8d", "2026-11-27T17:20:00Z");
        // Several for one rollout: the first by name.
        assert_eq!(judged.for_rollout(&named).map(|g| g.name.as_str()), Some("x"));
    }

    #[test]
    fn the_granted_message_names_the_override() {
        let grant = view("app-break", OverriddenKind::ConfigMapSet, "app", UID);
        let message = granted_message(&grant);
        assert_eq!(
            message,
            "WindowOverride app-break lets the rollout app-7c9f5d6b8d@2026-11-27T17:20:00Z through the change \
             windows (requested by ana@example.com)"
        );
        assert_eq!(used_override(&message), Some("app-break"));
        assert_eq!(granted_record(&message), Some(("app-break", "ana@example.com")));
        let unrecorded = granted_message(&OverrideView {
            requested_by: None,
            ..grant
        });
        assert_eq!(granted_record(&unrecorded), Some(("app-break", "not recorded")));
        assert_eq!(used_override("something else"), None);
    }
}
