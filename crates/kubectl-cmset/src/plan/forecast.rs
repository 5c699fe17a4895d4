//! One set's plan, from objects: what will be stored, the world it lands in, and what is known of the
//! cluster. The decisions are all `cmset_core`'s: the validation the webhook and `validate` make, and
//! the forecast that steps the set planner and the one decision of where each workload points
//! ([`cmset_core::rollout::forecast`]). This module only turns objects into their inputs and their answers into
//! a [`SetPlan`](super::report::SetPlan).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use cmset_api::{ChangeWindow, ConfigMapSet, SecretSet, WindowOverride, WorkloadState, labels};
use cmset_core::content::content_check::{self, SchemaText, SchemaTexts};
use cmset_core::content::validate::summary;
use cmset_core::policy::break_glass::OverrideView;
use cmset_core::policy::windows::{self, WindowSource};
use cmset_core::revisions::naming::{refers_to_set, set_label_value};
use cmset_core::rollout::forecast::{self, BudgetView, Clock, End, Forecast, SetObject, Verdict};
use cmset_core::rollout::window_hold::{ClusterView, UnknownCause, WindowsUnknown, cluster_windows_for};
use cmset_core::set::{Content, SetRef, SourceState};
use cmset_core::workloads::observe::{RevisionView, WorkloadKind, WorkloadView, opted_in};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::Value;

use super::keys;
use super::objects::{Object, Objects};
use super::report::{
    Basis, Checks, Hold, Revision, Rollback, SetName, SetPlan, Validation, VerdictReport, WorkloadRow,
};

/// What is known of the cluster beyond its objects.
#[derive(Clone, Debug)]
pub enum WindowsKnown {
    /// Listed (the ChangeWindows among the objects are all there are).
    Listed,
    /// Not listed; `forbidden`: the user may not, so windows fail closed ("may be held").
    Unknown { why: String, forbidden: bool },
}

#[derive(Clone, Debug)]
pub enum BudgetKnown {
    /// No cap (no workload carries a budget's move mark, and none was said).
    None,
    Known(BudgetView),
    Unknown(String),
}

/// What the gatherer knows besides the objects.
#[derive(Clone, Debug)]
pub struct Known {
    pub windows: WindowsKnown,
    pub budget: BudgetKnown,
    /// Names the Pods of the set's namespace reference, when listed.
    pub pods: Option<BTreeSet<String>>,
    /// The webhook's answer to a server-side dry run of the set: `Ok(())` admitted, `Err(message)`.
    pub webhook: Option<Result<(), String>>,
    /// What this mode cannot know, said in the plan.
    pub unknown: Vec<String>,
    /// Why a source's content (a SecretSet's Secret) could not be read, when it could not.
    pub content_unreadable: Option<String>,
}

/// How the plan looks ahead.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    pub at: Timestamp,
    pub ready_after: Duration,
    pub horizon: Duration,
}

/// The set as it is stored once `desired` is applied over `live`: the live object's identity, status
/// and generation (moved on when the spec changes), the desired spec and labels.
fn stored(desired: &Value, live: Option<&Value>) -> Value {
    let Some(live) = live else {
        let mut new = desired.clone();
        new["metadata"]["uid"] = Value::from("planned");
        new["metadata"]["generation"] = Value::from(1);
        if let Some(m) = new["metadata"].as_object_mut() {
            m.remove("resourceVersion");
        }
        if let Some(o) = new.as_object_mut() {
            o.remove("status");
        }
        return new;
    };
    let mut stored = live.clone();
    let changed = live.get("spec") != desired.get("spec");
    stored["spec"] = desired.get("spec").cloned().unwrap_or(Value::Null);
    for field in ["labels", "annotations"] {
        if let Some(wanted) = desired
            .pointer(&format!("/metadata/{field}"))
            .and_then(Value::as_object)
        {
            let mut merged = stored["metadata"][field].as_object().cloned().unwrap_or_default();
            merged.extend(wanted.clone());
            stored["metadata"][field] = Value::Object(merged);
        }
    }
    if changed {
        let generation = live
            .pointer("/metadata/generation")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        stored["metadata"]["generation"] = Value::from(generation + 1);
    }
    stored
}

fn set_object(value: &Value) -> Result<SetObject, String> {
    match value["kind"].as_str() {
        Some("SecretSet") => serde_json::from_value::<SecretSet>(value.clone())
            .map(SetObject::Secret)
            .map_err(|e| e.to_string()),
        _ => serde_json::from_value::<ConfigMapSet>(value.clone())
            .map(SetObject::ConfigMap)
            .map_err(|e| e.to_string()),
    }
}

fn meta_of(value: &Value) -> ObjectMeta {
    value
        .get("metadata")
        .and_then(|m| serde_json::from_value(m.clone()).ok())
        .unwrap_or_default()
}

fn revision_view(value: &Value) -> RevisionView {
    let meta = meta_of(value);
    RevisionView {
        name: meta.name.clone().unwrap_or_default(),
        uid: meta.uid.clone().unwrap_or_default(),
        labels: meta.labels.clone().unwrap_or_default(),
        annotations: meta.annotations.clone().unwrap_or_default(),
        owner_references: meta.owner_references.clone().unwrap_or_default(),
        being_deleted: meta.deletion_timestamp.is_some(),
        created: meta.creation_timestamp.as_ref().map(|t| t.0.as_second()),
        resource_version: meta.resource_version.clone(),
    }
}

/// A Secret as the API server stores it: `stringData` folded into `data`.
pub fn secret_of(value: &Value) -> Option<Secret> {
    let mut secret: Secret = serde_json::from_value(value.clone()).ok()?;
    if let Some(strings) = secret.string_data.take() {
        let data = secret.data.get_or_insert_with(BTreeMap::new);
        for (k, v) in strings {
            data.insert(k, k8s_openapi::ByteString(v.into_bytes()));
        }
    }
    Some(secret)
}

/// The validation messages `kubectl apply` would give for `set`, made by the webhook's checks (the
/// set's windows and `spec.validation`, then its inline content), and those the set's status would
/// give (`Valid=False`), in the webhook's words.
fn validation_messages(set: SetRef<'_>, content: Option<&Content<'_>>, schemas: &SchemaTexts) -> Vec<String> {
    let kind = set.kind().as_str();
    let name = set.name();
    let mut problems = Vec::new();
    if let Some(rollout) = set.rollout()
        && let Err(found) = windows::parse_all(&rollout.windows, &WindowSource::Set, "spec.rollout.windows")
    {
        problems.extend(found);
    }
    problems.extend(content_check::spec_problems(set.validation()));
    let mut messages = Vec::new();
    if !problems.is_empty() {
        messages.push(format!("{kind} {name:?}: {}", summary(&problems)));
        return messages;
    }
    if let Err(found) = set.validate() {
        messages.push(format!("{kind} {name:?}: {}", summary(&found)));
    }
    if let Some(content) = content
        && let Err(refusal) = content_check::check(set.validation(), content, schemas, set.is_secret())
    {
        messages.push(format!(
            "{kind} {name:?}: content fails spec.validation: {}",
            refusal.summary()
        ));
    }
    messages
}

fn stamp(t: Timestamp) -> String {
    t.to_string()
}

/// The plan of one set: `desired` (from `-f`), in `world`, with what else is `known`. `base`, when
/// given, is what its keys are compared with instead of the live revision.
pub fn plan_one(
    desired: &Object,
    namespace: &str,
    world: &Objects,
    base: Option<&Objects>,
    known: &Known,
    options: &Options,
) -> SetPlan {
    let kind = desired.kind().to_string();
    let name = desired.name().to_string();
    let mut unknown = known.unknown.clone();
    let live = world.get(&kind, namespace, &name).map(|o| &o.value);
    let mut value = stored(&desired.value, live);
    value["metadata"]["namespace"] = Value::from(namespace);
    let set_name = SetName {
        kind: kind.clone(),
        namespace: namespace.to_string(),
        name: name.clone(),
    };
    let mut basis = Basis {
        at: stamp(options.at),
        current_revision: live
            .and_then(|l| l.pointer("/status/currentRevision"))
            .and_then(Value::as_str)
            .map(str::to_string),
        resource_versions: BTreeMap::new(),
    };
    let set = match set_object(&value) {
        Ok(set) => set,
        Err(e) => {
            return SetPlan::refused(
                set_name,
                desired.origin.clone(),
                vec![format!("{kind} {name:?}: does not decode: {e}")],
                basis,
            );
        }
    };
    let view = set.as_set();
    let mut record = |o: &Object| {
        if let Some(rv) = o.resource_version() {
            basis
                .resource_versions
                .insert(format!("{}/{}", o.kind(), o.name()), rv.to_string());
        }
    };
    if let Some(live) = world.get(&kind, namespace, &name) {
        record(live);
    }
    // The source of its content, for a set in source mode.
    let source_kind = if view.is_secret() { "Secret" } else { "ConfigMap" };
    let source_object = view
        .source_name()
        .and_then(|source| world.get(source_kind, namespace, source).inspect(|o| record(o)));
    let source_cm: Option<ConfigMap> = (!view.is_secret())
        .then(|| source_object.and_then(|o| serde_json::from_value(o.value.clone()).ok()))
        .flatten();
    let source_secret: Option<Secret> = view
        .is_secret()
        .then(|| source_object.and_then(|o| secret_of(&o.value)))
        .flatten();
    let content: Option<Content<'_>> = match (view.source_name(), &source_cm, &source_secret) {
        (None, _, _) => match view {
            SetRef::ConfigMap(s) => Some(Content::of_template(&s.spec.template)),
            SetRef::Secret(_) => None,
        },
        (Some(_), Some(cm), _) => Some(Content::of_config_map(cm)),
        (Some(_), _, Some(secret)) => Some(Content::of_secret(secret)),
        _ => None,
    };
    // A source whose content cannot be read: the plan cannot tell what changes.
    let unreadable = match (view.source_name(), &content) {
        (Some(source), None) => Some(match &known.content_unreadable {
            Some(why) => format!("its source {source_kind} {source:?} cannot be read ({why})"),
            None => format!("its source {source_kind} {source:?} was not found"),
        }),
        _ => None,
    };
    if let Some(why) = &unreadable {
        unknown.push(format!("the content: {why}"));
    }
    // Schemas kept in ConfigMaps, as the controller reads them.
    let mut schemas = SchemaTexts::new();
    for reference in content_check::schema_refs(view.validation()) {
        let text = match world.get("ConfigMap", namespace, &reference.name) {
            Some(o) => match o.value.pointer("/data").and_then(|d| d.get(&reference.key)) {
                Some(Value::String(text)) => SchemaText::Found(text.clone()),
                _ => SchemaText::Missing(format!("the ConfigMap has no data key {:?}", reference.key)),
            },
            None => SchemaText::Missing("the ConfigMap was not found".into()),
        };
        schemas.insert(reference.clone(), text);
    }
    let mut messages = validation_messages(view, content.as_ref(), &schemas);
    let webhook = known.webhook.clone();
    if let Some(Err(answer)) = &webhook
        && !messages.iter().any(|m| answer.contains(m.as_str()))
    {
        messages.push(answer.clone());
    }
    let validation = Validation {
        messages: messages.clone(),
        webhook: webhook.as_ref().map(|w| match w {
            Ok(()) => "admitted".to_string(),
            Err(message) => format!("refused: {message}"),
        }),
    };

    // Revisions of the set, as labelled.
    let revision_kind = source_kind;
    let label = set_label_value(&name);
    let revision_objects: Vec<&Object> = world
        .of_kind(revision_kind, Some(namespace))
        .filter(|o| {
            o.value
                .pointer("/metadata/labels")
                .and_then(|l| l.get(labels::SET))
                == Some(&Value::from(label.clone()))
        })
        .collect();
    let revisions: Vec<RevisionView> = revision_objects.iter().map(|o| revision_view(&o.value)).collect();
    for o in &revision_objects {
        record(o);
    }

    // Workloads of the namespace: the opted-in ones go into the forecast; those that read the set
    // without opting in are left alone, and said so.
    let reads = |view: &WorkloadView| {
        view.referenced_names_of(set.as_set().kind().revision_kind())
            .iter()
            .any(|n| refers_to_set(&name, n))
    };
    let mut workloads = Vec::new();
    let mut not_opted_in = Vec::new();
    let mut generations = BTreeMap::new();
    let mut on_delete = BTreeSet::new();
    for kind in WorkloadKind::BUILT_IN {
        for o in world.of_kind(kind.as_str(), Some(namespace)) {
            let Some(w) = WorkloadView::of(kind, &o.value) else {
                continue;
            };
            if !reads(&w) {
                continue;
            }
            record(o);
            generations.insert(
                w.uid.clone(),
                o.value.pointer("/metadata/generation").and_then(Value::as_i64),
            );
            if o.value
                .pointer("/spec/updateStrategy/type")
                .and_then(Value::as_str)
                == Some("OnDelete")
            {
                on_delete.insert(w.uid.clone());
            }
            if opted_in(&o.value) {
                workloads.push(w);
            } else {
                not_opted_in.push(w);
            }
        }
    }

    // Windows: the set's own, and the cluster's that select it.
    let change_windows: Vec<ChangeWindow> = world
        .of_kind("ChangeWindow", None)
        .filter_map(|o| serde_json::from_value(o.value.clone()).ok())
        .collect();
    let cluster = match &known.windows {
        WindowsKnown::Listed => ClusterView::Known(cluster_windows_for(view, &change_windows)),
        WindowsKnown::Unknown { why, forbidden: true } => {
            unknown.push(format!(
                "the cluster's ChangeWindows: {why}; windows fail closed, so moves may be held"
            ));
            ClusterView::Unknown(WindowsUnknown {
                cause: UnknownCause::Forbidden,
                detail: why.clone(),
            })
        }
        WindowsKnown::Unknown {
            why,
            forbidden: false,
        } => {
            unknown.push(format!("the cluster's ChangeWindows: {why}"));
            ClusterView::Known(Vec::new())
        }
    };
    let overrides: Vec<OverrideView> = world
        .of_kind("WindowOverride", Some(namespace))
        .filter_map(|o| serde_json::from_value::<WindowOverride>(o.value.clone()).ok())
        .filter_map(|o| OverrideView::of(&o))
        .collect();
    let budget = match &known.budget {
        BudgetKnown::None => None,
        BudgetKnown::Known(view) => Some(*view),
        BudgetKnown::Unknown(why) => {
            unknown.push(why.clone());
            None
        }
    };
    if known.pods.is_none() {
        unknown.push("Pods still running an old revision (a revision one runs is not pruned)".to_string());
    }
    if view.rollout().is_some_and(|r| !r.analysis.is_empty()) {
        unknown.push(
            "the metric analysis' results (Prometheus): the plan takes each wave's analysis to pass as soon \
             as it is measured"
                .to_string(),
        );
    }
    if !view.checks().is_empty() {
        unknown.push(format!(
            "whether cmset may create the check Jobs in namespace {namespace} (the operator's rights)"
        ));
    }
    let source = match (view.source_name(), &content) {
        (None, _) => SourceState::Inline,
        (Some(_), Some(content)) => SourceState::Read(*content),
        (Some(_), None) => SourceState::Missing,
    };

    // Keys: against the live revision, or `--base`.
    let live_revision = basis.current_revision.clone();
    let (keys, keys_against) = keys::compare(
        view,
        content.as_ref(),
        live_revision.as_deref(),
        world,
        base,
        namespace,
    );

    let refused = !messages.is_empty() || matches!(webhook, Some(Err(_)));
    let pods = known.pods.clone();
    let result = forecast::forecast(
        forecast::World {
            set: set.clone(),
            source,
            revisions: revisions.clone(),
            workloads: workloads.clone(),
            history: &[],
            pod_refs: pods.as_ref(),
            cluster,
            overrides: &overrides,
            budget,
            schemas: &schemas,
        },
        Clock {
            start: options.at,
            ready_after: options.ready_after,
            horizon: options.horizon,
        },
    );
    let mut verdict = verdict_report(&result, refused, &messages, live_revision.as_deref(), &revisions);
    if let Some(why) = unreadable.as_ref().filter(|_| !refused) {
        verdict = VerdictReport {
            result: "held".into(),
            summary: format!("held: {why}, so the plan cannot tell what changes"),
            by: Some(why.clone()),
            ..VerdictReport::default()
        };
    } else if let WindowsKnown::Unknown { why, forbidden: true } = &known.windows
        && verdict.result == "held"
    {
        // Windows fail closed: what holds it may be a freeze, or nothing; the plan cannot tell.
        verdict.summary =
            format!("may be held: the cluster's ChangeWindows are unknown ({why}), and windows fail closed");
    }
    let revision = (!refused).then(|| revision_report(&result, &revisions)).flatten();
    let rows = workload_rows(&result, &workloads, &not_opted_in, &on_delete, options);
    let holds = holds_of(&result);
    let listed = match &known.windows {
        WindowsKnown::Listed => Ok(change_windows.as_slice()),
        WindowsKnown::Unknown { why, .. } => Err(why.as_str()),
    };
    let windows = crate::windows::windows_report(view, listed, options.at).windows;
    let rollback = rollback_of(&result);
    let checks = Checks::of(view, revision.as_ref().map(|r| r.name.as_str()));
    let _ = generations;
    SetPlan {
        set: set_name,
        from: desired.origin.clone(),
        verdict,
        revision,
        keys_against,
        keys,
        validation,
        checks,
        workloads: rows,
        holds,
        windows,
        rollback,
        unknown,
        basis,
    }
}

fn verdict_report(
    f: &Forecast,
    refused: bool,
    messages: &[String],
    live: Option<&str>,
    revisions: &[RevisionView],
) -> VerdictReport {
    if refused {
        return VerdictReport::refused(messages.to_vec());
    }
    match &f.verdict {
        Verdict::Refused { messages } => VerdictReport::refused(messages.clone()),
        Verdict::NoChange => VerdictReport {
            result: "noChange".into(),
            summary: format!(
                "no change: the content is the current revision's ({})",
                live.unwrap_or("?")
            ),
            ..VerdictReport::default()
        },
        Verdict::Revert { revision, number } => {
            let n = number.map_or("?".to_string(), |n| n.to_string());
            let _ = revisions;
            VerdictReport {
                result: "revert".into(),
                summary: format!("a revert to revision {n} ({revision}): no new revision is made"),
                revision: *number,
                ..VerdictReport::default()
            }
        }
        Verdict::Held { until, by } => VerdictReport {
            result: "held".into(),
            summary: match until {
                Some(t) => format!("held until {t} by {by}"),
                None => format!("held by {by}, with no end the plan can see"),
            },
            until: until.map(stamp),
            by: Some(by.clone()),
            ..VerdictReport::default()
        },
        Verdict::RollsOut => VerdictReport {
            result: "rollsOut".into(),
            summary: match &f.end {
                End::Settled { at } => format!("rolls out; every workload moved by {at}"),
                End::Stuck { message, .. } => format!("rolls out, then waits: {message}"),
                End::Horizon { .. } => "rolls out (beyond the plan's horizon)".to_string(),
            },
            ..VerdictReport::default()
        },
    }
}

fn revision_report(f: &Forecast, revisions: &[RevisionView]) -> Option<Revision> {
    let name = f.first_status.current_revision.clone()?;
    Some(Revision {
        new: f.first.create.is_some(),
        number: f.first_status.revision,
        previous_number: revisions
            .iter()
            .find(|r| r.name == name)
            .and_then(RevisionView::number),
        prunes: f.first.prune.iter().map(|p| p.name.clone()).collect(),
        name,
    })
}

fn workload_rows(
    f: &Forecast,
    workloads: &[WorkloadView],
    not_opted_in: &[WorkloadView],
    on_delete: &BTreeSet<String>,
    options: &Options,
) -> Vec<WorkloadRow> {
    let entries: BTreeMap<&str, &cmset_api::WorkloadStatus> =
        f.status.workloads.iter().map(|w| (w.uid.as_str(), w)).collect();
    let reads = |w: &WorkloadView| -> String { w.referenced_names().into_iter().next().unwrap_or_default() };
    let mut rows = Vec::new();
    for w in workloads {
        let moved = f.moves.iter().find(|m| m.uid == w.uid);
        let entry = entries.get(w.uid.as_str());
        let wave = w.wave.number();
        let (from, to, action, earliest, gate) = match (moved, entry) {
            (Some(m), _) => {
                let action = if !w.kind.is_mutable() {
                    "a Job (runs what it was created with)"
                } else if w.kind == WorkloadKind::CronJob {
                    "a CronJob's next run"
                } else if on_delete.contains(&w.uid) {
                    "OnDelete (no pod restarts until deleted)"
                } else {
                    "restart"
                };
                let gate = m
                    .waited_for
                    .clone()
                    .or_else(|| (m.at > options.at).then(|| "the rollout's earlier waves".to_string()));
                (
                    m.from.clone(),
                    m.to.clone(),
                    action.to_string(),
                    Some(stamp(m.at)),
                    gate,
                )
            }
            (None, Some(e)) => {
                let current = f.status.current_revision.clone().unwrap_or_default();
                match e.state {
                    WorkloadState::Current => (
                        e.revision.clone(),
                        e.revision.clone(),
                        "none (runs it already)".into(),
                        None,
                        None,
                    ),
                    WorkloadState::Pinned if !w.kind.is_mutable() => (
                        e.revision.clone(),
                        e.revision.clone(),
                        "a Job (runs what it was created with; the next one names the current revision)"
                            .into(),
                        None,
                        None,
                    ),
                    WorkloadState::Pinned => (
                        e.revision.clone(),
                        e.revision.clone(),
                        "pinned by a rollback".into(),
                        None,
                        None,
                    ),
                    WorkloadState::Waiting | WorkloadState::Pending => (
                        e.revision.clone(),
                        current,
                        "restart".into(),
                        None,
                        Some(e.message.clone().unwrap_or_else(|| "waits".into())),
                    ),
                    WorkloadState::RolledBack => (
                        e.revision.clone(),
                        e.revision.clone(),
                        "rolled back".into(),
                        None,
                        None,
                    ),
                }
            }
            (None, None) => {
                let r = reads(w);
                (r.clone(), r, "none".into(), None, None)
            }
        };
        rows.push(WorkloadRow {
            wave,
            kind: w.kind.to_string(),
            name: w.name.clone(),
            from,
            to,
            action,
            earliest,
            gate,
        });
    }
    for w in not_opted_in {
        let r = reads(w);
        rows.push(WorkloadRow {
            wave: None,
            kind: w.kind.to_string(),
            name: w.name.clone(),
            from: r.clone(),
            to: r,
            action: "not opted in (left alone)".into(),
            earliest: None,
            gate: None,
        });
    }
    rows.sort_by(|a, b| {
        (a.wave.unwrap_or(i32::MAX), &a.kind, &a.name).cmp(&(b.wave.unwrap_or(i32::MAX), &b.kind, &b.name))
    });
    rows
}

fn holds_of(f: &Forecast) -> Vec<Hold> {
    let mut holds = Vec::new();
    for (i, m) in f.timeline.iter().enumerate() {
        use cmset_api::RolloutPhase as P;
        if !matches!(
            m.phase,
            P::Waiting | P::Paused | P::AwaitingPromotion | P::Checking
        ) {
            continue;
        }
        let until = f.timeline.get(i + 1).map(|n| n.at).or(m.next_window);
        holds.push(Hold {
            phase: m.phase.as_str().to_string(),
            by: m.reason.clone().unwrap_or_else(|| m.phase.as_str().to_string()),
            from: stamp(m.at),
            until: until.map(stamp),
            message: m.message.clone(),
        });
    }
    for e in f
        .status
        .workloads
        .iter()
        .filter(|e| e.state == WorkloadState::Waiting)
    {
        if let Some(message) = e.message.as_deref().filter(|m| m.contains("rollout budget")) {
            holds.push(Hold {
                phase: "Waiting".into(),
                by: "budget".into(),
                from: stamp(f.timeline.first().map_or(Timestamp::UNIX_EPOCH, |m| m.at)),
                until: None,
                message: Some(format!("{} {}: {message}", e.kind, e.name)),
            });
        }
    }
    holds
}

fn rollback_of(f: &Forecast) -> Vec<Rollback> {
    let kept: BTreeSet<&str> = f.status.history.iter().map(|h| h.name.as_str()).collect();
    let mut seen = BTreeSet::new();
    f.moves
        .iter()
        .filter(|m| seen.insert(m.uid.clone()))
        .map(|m| Rollback {
            workload: format!("{}/{}", m.kind, m.name),
            undo_to: m.from.clone(),
            kept: kept.contains(m.from.as_str()),
        })
        .collect()
}
