//! The I/O of `spec.checks`: reads the check Jobs of the revision being checked, starts the ones due
//! (and puts the namespace's deny-all NetworkPolicy in place before), and records in the set's status
//! the uid of each Job cmset created and each finished Job's verdict. What is due and what a verdict
//! does to the rollout is the core's ([`cmset_core::content::checks`], [`cmset_core::rollout::check_gate`]).
//!
//! Jobs are read by their names, which the revision and the check determine, only while a rollout is
//! being checked: no watch, no list, and nothing for a set without checks. A Job of that name counts
//! only if its uid is the one cmset's create returned and recorded, since anyone who may edit the
//! namespace may create it first. Verdicts are kept in the set's status (`status.checks`), which only
//! cmset writes, so a restart or a new leader finds them and starts no Job twice.

use std::collections::BTreeMap;

use cmset_core::content::checks::{self, CheckState, CheckTarget, JobOutcome, Learnt, Verdict};
use cmset_core::rollout::check_gate::CheckRun;
use cmset_core::set::SetRef;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;
use tracing::{info, warn};

use crate::platform::error::{Error, Result, api_code};
use crate::platform::metadata_answers;
use crate::platform::metrics::CheckLabels;
use crate::reconcile::context::Context;
use crate::reconcile::set_controller::{SetObject, set_labels};

/// The field manager of `status.checks`: the set controller's own status writes never carry it, so
/// they can neither drop nor turn back a record.
pub const FIELD_MANAGER: &str = "cmset-checks";

/// Times a record is merged again into a set that changed meanwhile (409) before giving up until the
/// next reconcile.
const RECORD_ATTEMPTS: usize = 3;

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

/// How each of `jobs` stands, for the plan: a Job whose uid is not the one cmset recorded for its check
/// (`run.started`) is not ours, whatever it says.
pub fn outcomes(jobs: &BTreeMap<String, Job>, run: &CheckRun) -> BTreeMap<String, JobOutcome> {
    jobs.iter()
        .map(|(hash, job)| {
            let ours = run.started.get(hash).map(String::as_str);
            (hash.clone(), checks::judge_job(job, ours))
        })
        .collect()
}

/// Starts the checks `run` finds due and records, in the set's status, the uid of each Job started and
/// the verdict of each that finished. Returns whether anything was recorded (its watch event plans the
/// set again).
pub async fn carry_out<S: SetObject>(
    ctx: &Context,
    object: &S,
    namespace: &str,
    run: &CheckRun,
    jobs: &BTreeMap<String, Job>,
) -> Result<bool> {
    let set = object.as_set();
    let kind = set.kind().revision_kind();
    let target = CheckTarget {
        set_name: set.name(),
        namespace,
        kind,
        revision_hash: &run.revision_hash,
    };
    let mut learnt = Vec::new();
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
                    // Recorded at once: a Job of this name whose uid is not recorded is not counted.
                    if let Some(job_uid) = start(ctx, namespace, name, &job).await? {
                        learnt.push(Learnt::Started {
                            hash: hash.clone(),
                            name: name.clone(),
                            job_uid,
                        });
                    }
                }
                // A template that cannot run fails its check, saying why.
                Err(why) => learnt.push(Learnt::Verdict {
                    hash: hash.clone(),
                    job_uid: String::new(),
                    verdict: failed(name, format!("check {name} cannot run: {why}")),
                }),
            },
            CheckState::Finished(JobOutcome::NotOurs(job_uid)) => {
                let job_name = checks::job_name(set.name(), &run.revision_hash, hash);
                let message = checks::not_ours_message(name, &job_name, job_uid);
                warn!(check = %name, job = %job_name, uid = %job_uid, "a check Job cmset did not create");
                learnt.push(Learnt::NotOurs {
                    hash: hash.clone(),
                    name: name.clone(),
                    job_uid: job_uid.clone(),
                    message,
                });
            }
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
                learnt.push(Learnt::Verdict {
                    hash: hash.clone(),
                    job_uid: job.metadata.uid.clone().unwrap_or_default(),
                    verdict,
                });
            }
            CheckState::Running | CheckState::Passed | CheckState::Failed(_) => {}
        }
    }
    if learnt.is_empty() {
        return Ok(false);
    }
    record(ctx, object, run, &learnt).await?;
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

/// Puts the namespace's deny-all NetworkPolicy for check pods in place: creates it, or puts back its
/// spec when someone changed it (anyone who may edit the namespace may), telling so in the log.
async fn ensure_policy(ctx: &Context, namespace: &str, check: &str) -> Result<()> {
    let api: Api<NetworkPolicy> = Api::namespaced(ctx.client.clone(), namespace);
    let policy = checks::deny_all_policy(namespace);
    match ctx
        .write("create_check_policy", api.create(&post_params(), &policy))
        .await
    {
        Ok(_) => return Ok(()),
        Err(e) if api_code(&e) == Some(409) => {}
        Err(source) => return Err(checks_error(namespace, check, source)),
    }
    let existing = api
        .get(checks::NETWORK_POLICY_NAME)
        .await
        .map_err(|source| checks_error(namespace, check, source))?;
    let Some(patch) = checks::policy_restore(&existing) else {
        return Ok(());
    };
    warn!(
        policy = checks::NETWORK_POLICY_NAME,
        namespace, "the deny-all NetworkPolicy of check pods was changed; putting its spec back"
    );
    let patch: json_patch::Patch = serde_json::from_value(patch).expect("a JSON patch");
    let params = PatchParams {
        field_manager: Some(cmset_api::labels::FIELD_MANAGER.to_string()),
        ..PatchParams::default()
    };
    ctx.write(
        "restore_check_policy",
        api.patch(checks::NETWORK_POLICY_NAME, &params, &Patch::<()>::Json(patch)),
    )
    .await
    .map(drop)
    .map_err(|source| checks_error(namespace, check, source))
}

/// Creates a check's Job and returns the uid the API server gave it; `None` when a Job of that name
/// exists already (it is judged by its uid at the next reconcile).
async fn start(ctx: &Context, namespace: &str, check: &str, job: &Job) -> Result<Option<String>> {
    let api: Api<Job> = Api::namespaced(ctx.client.clone(), namespace);
    match ctx
        .write("create_check_job", api.create(&post_params(), job))
        .await
    {
        Ok(created) => {
            info!(
                check,
                job = job.metadata.name.as_deref().unwrap_or_default(),
                "check started"
            );
            Ok(created.metadata.uid)
        }
        Err(e) if api_code(&e) == Some(409) => Ok(None),
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

/// Merges what was `learnt` into the set's `status.checks`, read fresh from the API server (the
/// store may not have seen this process's last record yet), and writes it with a server-side apply of
/// that list alone under [`FIELD_MANAGER`], on the version read: a set that changed meanwhile is read
/// and merged again. Not announced as an echo: its watch event is news to the set, whose gate it opens
/// or fails, and to its readers.
async fn record<S: SetObject>(ctx: &Context, object: &S, run: &CheckRun, learnt: &[Learnt]) -> Result<()> {
    let name = object.name_any();
    let api: Api<S> = Api::namespaced(ctx.client.clone(), &object.namespace().unwrap_or_default());
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let error = |source| Error::WriteStatus {
        name: name.clone(),
        source,
    };
    let mut attempt = 0;
    loop {
        attempt += 1;
        let fresh = api.get(&name).await.map_err(error)?;
        let status = fresh.as_set().status().cloned().unwrap_or_default();
        let history: Vec<String> = status.history.iter().map(|h| h.name.clone()).collect();
        let before = status.checks.unwrap_or_default();
        let records = checks::merge_records(&before, &run.revision, &run.revision_uid, learnt, &history);
        if records == before {
            return Ok(());
        }
        let mut body = json!({
            "apiVersion": S::api_version(&()),
            "kind": S::kind(&()),
            "status": {"checks": records},
        });
        // On the version read: a record written meanwhile is merged, not overwritten.
        if let Some(version) = &fresh.meta().resource_version {
            body["metadata"] = json!({ "resourceVersion": version });
        }
        let namespace = object.namespace().unwrap_or_default();
        let patch = Patch::Apply(&body);
        match ctx
            .write(
                "record_checks",
                metadata_answers::patch_status::<S, _>(&ctx.client, &namespace, &name, &params, &patch),
            )
            .await
        {
            Ok(_) => return Ok(()),
            Err(e) if api_code(&e) == Some(409) && attempt < RECORD_ATTEMPTS => continue,
            Err(source) => return Err(error(source)),
        }
    }
}
