//! The I/O of `spec.checks`: reads the check Jobs of the revision being checked, starts the ones due
//! (and the namespace's deny-all NetworkPolicy before the first), and records each finished Job's
//! verdict on the revision. What is due and what a verdict does to the rollout is the core's
//! ([`cmset_core::checks`], [`cmset_core::check_gate`]).
//!
//! Jobs are read by their names, which the revision and the check determine, only while a rollout is
//! being checked: no watch, no list, and nothing for a set without checks. A verdict recorded on the
//! revision is final, so a restart or a new leader finds it and starts no Job twice; a Job started
//! before a restart is found again by its name.

use std::collections::BTreeMap;

use cmset_core::check_gate::CheckRun;
use cmset_core::checks::{self, CheckState, CheckTarget, JobOutcome, Verdict};
use cmset_core::refs::Referenced;
use cmset_core::set::SetRef;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use tracing::{info, warn};

use crate::platform::error::{Error, Result, api_code};
use crate::platform::metrics::CheckLabels;
use crate::reconcile::context::Context;
use crate::reconcile::set_controller::set_labels;

/// The check Jobs of `run`'s revision that exist, by check hash. Checks with a verdict are not read.
pub async fn jobs(
    ctx: &Context,
    set: SetRef<'_>,
    namespace: &str,
    run: &CheckRun,
) -> Result<BTreeMap<String, Job>> {
    let api: Api<Job> = Api::namespaced(ctx.client.clone(), namespace);
    let mut found = BTreeMap::new();
    for (name, hash, state) in &run.plan.checks {
        if matches!(state, CheckState::Passed | CheckState::Failed(_)) {
            continue;
        }
        let job_name = checks::job_name(set.name(), &run.revision_hash, hash);
        match api.get_opt(&job_name).await {
            Ok(Some(job)) => {
                found.insert(hash.clone(), job);
            }
            Ok(None) => {}
            Err(source) => return Err(checks_error(namespace, name, source)),
        }
    }
    Ok(found)
}

/// How each of `jobs` stands, for the plan.
pub fn outcomes(jobs: &BTreeMap<String, Job>) -> BTreeMap<String, JobOutcome> {
    jobs.iter()
        .map(|(hash, job)| (hash.clone(), checks::job_outcome(job)))
        .collect()
}

/// Starts the checks `run` finds due and records the verdicts of the Jobs that finished. Returns
/// whether a verdict was recorded (its watch event plans the set again).
pub async fn carry_out(
    ctx: &Context,
    set: SetRef<'_>,
    namespace: &str,
    run: &CheckRun,
    jobs: &BTreeMap<String, Job>,
) -> Result<bool> {
    let kind = set.kind().revision_kind();
    let target = CheckTarget {
        set_name: set.name(),
        namespace,
        kind,
        revision_hash: &run.revision_hash,
    };
    let mut verdicts = run.recorded.clone();
    let mut policy_ensured = false;
    for (name, hash, state) in &run.plan.checks {
        let Some(check) = set.checks().iter().find(|c| &c.name == name) else {
            continue;
        };
        match state {
            CheckState::Due => match checks::build_job(check, target) {
                Ok(job) => {
                    if !policy_ensured {
                        ensure_policy(ctx, namespace, name).await?;
                        policy_ensured = true;
                    }
                    start(ctx, namespace, name, &job).await?;
                }
                // A template that cannot run fails its check, saying why.
                Err(why) => {
                    verdicts.insert(
                        hash.clone(),
                        failed(name, format!("check {name} cannot run: {why}")),
                    );
                }
            },
            CheckState::Finished(outcome) => {
                let Some(job) = jobs.get(hash) else { continue };
                let passed = *outcome == JobOutcome::Succeeded;
                let verdict = if passed {
                    Verdict {
                        name: name.clone(),
                        passed: true,
                        message: None,
                    }
                } else {
                    let termination = termination(ctx, namespace, job).await;
                    failed(name, checks::failure_message(name, kind, termination))
                };
                observe_duration(ctx, set, namespace, name, job, passed);
                info!(check = %name, revision = %run.revision, passed, "check finished");
                verdicts.insert(hash.clone(), verdict);
            }
            CheckState::Running | CheckState::Passed | CheckState::Failed(_) => {}
        }
    }
    if verdicts == run.recorded {
        return Ok(false);
    }
    record(ctx, kind, namespace, &run.revision, &verdicts).await?;
    Ok(true)
}

fn failed(name: &str, message: String) -> Verdict {
    Verdict {
        name: name.to_string(),
        passed: false,
        message: Some(message),
    }
}

fn checks_error(namespace: &str, check: &str, source: kube::Error) -> Error {
    Error::Check {
        namespace: namespace.to_string(),
        check: check.to_string(),
        source,
    }
}

/// Creates the namespace's deny-all NetworkPolicy for check pods, unless it exists.
async fn ensure_policy(ctx: &Context, namespace: &str, check: &str) -> Result<()> {
    let api: Api<NetworkPolicy> = Api::namespaced(ctx.client.clone(), namespace);
    let policy = checks::deny_all_policy(namespace);
    match ctx
        .write("create_check_policy", api.create(&post_params(), &policy))
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if api_code(&e) == Some(409) => Ok(()),
        Err(source) => Err(checks_error(namespace, check, source)),
    }
}

/// Creates a check's Job; one of that name (started before a restart, or by the last leader) counts.
async fn start(ctx: &Context, namespace: &str, check: &str, job: &Job) -> Result<()> {
    let api: Api<Job> = Api::namespaced(ctx.client.clone(), namespace);
    match ctx
        .write("create_check_job", api.create(&post_params(), job))
        .await
    {
        Ok(_) => {
            info!(
                check,
                job = job.metadata.name.as_deref().unwrap_or_default(),
                "check started"
            );
            Ok(())
        }
        Err(e) if api_code(&e) == Some(409) => Ok(()),
        Err(source) => Err(checks_error(namespace, check, source)),
    }
}

fn post_params() -> PostParams {
    PostParams {
        field_manager: Some(cmset_api::labels::FIELD_MANAGER.to_string()),
        ..PostParams::default()
    }
}

/// The failed container's exit code and termination message, from the Job's pods (`job-name` is the
/// label the Job controller gives them). Unreadable pods leave only "its Job failed".
async fn termination(ctx: &Context, namespace: &str, job: &Job) -> Option<(i32, Option<String>)> {
    let name = job.metadata.name.as_deref()?;
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), namespace);
    let params = ListParams::default().labels(&format!("job-name={name}"));
    match api.list(&params).await {
        Ok(pods) => pods.items.iter().find_map(checks::termination),
        Err(e) => {
            warn!(job = name, error = %crate::platform::redact::api_error(&e), "reading a failed check's pods");
            None
        }
    }
}

fn observe_duration(ctx: &Context, set: SetRef<'_>, namespace: &str, check: &str, job: &Job, passed: bool) {
    let Some(status) = &job.status else { return };
    let (Some(start), Some(end)) = (
        status.start_time.as_ref(),
        status.completion_time.as_ref().or_else(|| {
            // A failed Job records no completion time: its Failed condition's transition is its end.
            status
                .conditions
                .iter()
                .flatten()
                .find(|c| c.type_ == "Failed" && c.status == "True")
                .and_then(|c| c.last_transition_time.as_ref())
        }),
    ) else {
        return;
    };
    let seconds = end.0.duration_since(start.0).as_secs_f64().max(0.0);
    ctx.metrics
        .check_duration
        .get_or_create(&CheckLabels {
            set: set_labels(set.kind(), namespace, set.name()),
            check: check.to_string(),
            result: if passed { "passed" } else { "failed" },
        })
        .observe(seconds);
}

/// Records `verdicts` on the revision (its metadata; its data stays as it is). Not announced as an
/// echo: its watch event is news to the set, whose gate it opens or fails, and to its readers.
async fn record(
    ctx: &Context,
    kind: Referenced,
    namespace: &str,
    revision: &str,
    verdicts: &BTreeMap<String, Verdict>,
) -> Result<()> {
    let patch =
        json!({"metadata": {"annotations": {checks::RESULTS_ANNOTATION: checks::results_value(verdicts)}}});
    let params = PatchParams {
        field_manager: Some(cmset_api::labels::FIELD_MANAGER.to_string()),
        ..PatchParams::default()
    };
    let patch = Patch::Merge(&patch);
    let written = match kind {
        Referenced::ConfigMap => {
            let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), namespace);
            ctx.write(
                "record_check_verdicts",
                api.patch_metadata(revision, &params, &patch),
            )
            .await
            .map(drop)
        }
        Referenced::Secret => {
            let api: Api<Secret> = Api::namespaced(ctx.client.clone(), namespace);
            ctx.write(
                "record_check_verdicts",
                api.patch_metadata(revision, &params, &patch),
            )
            .await
            .map(drop)
        }
    };
    written.map_err(|source| Error::PatchRevision {
        name: revision.to_string(),
        source,
    })
}
