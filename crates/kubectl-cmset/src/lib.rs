//! `kubectl cmset`: a kubectl plugin for people who inspect ConfigMapSets and SecretSets.
//!
//! The pure parts (history rows, choosing and diffing revisions, explaining workloads, tables, colour)
//! are plain functions over plain data in their own modules, tested from literal objects; [`cluster`] is
//! the only module that talks to the API server, and [`run`] ties the two together. A SecretSet's
//! values stay inside [`secret_diff`]: every other module sees its revisions' metadata only.
#![forbid(unsafe_code)]

pub mod address;
pub mod age;
pub mod cli;
pub mod cluster;
pub mod diff;
pub mod error;
pub mod external_diff;
pub mod history;
pub mod output;
pub mod plan;
pub mod revisions;
pub mod secret_diff;
#[cfg(test)]
mod stand_in;
pub mod status;
pub mod steer;
pub mod style;
pub mod table;
pub mod validate;
pub mod windows;

use cmset_core::set::SetRef;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::PartialObjectMeta;

use crate::address::Address;
use crate::cli::{Cli, Command};
use crate::cluster::Cluster;
use crate::error::Error;
use crate::revisions::{Revision, current_name, revisions_of};
use crate::style::Palette;

/// What a command produced: text for standard output, an optional note for standard error, and the
/// exit status.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    pub stdout: String,
    pub note: Option<String>,
    pub code: u8,
}

impl Outcome {
    fn print(stdout: String) -> Self {
        Self {
            stdout,
            ..Self::default()
        }
    }
}

/// The objects a set's revisions are chosen from: a ConfigMapSet's ConfigMaps in full, a SecretSet's
/// Secrets by their metadata only.
enum Listed {
    ConfigMaps(Vec<ConfigMap>),
    Secrets(Vec<PartialObjectMeta<Secret>>),
}

impl Listed {
    async fn of(cluster: &Cluster, set: SetRef<'_>) -> Result<Self, Error> {
        Ok(match set {
            SetRef::ConfigMap(_) => Self::ConfigMaps(cluster.labelled_config_maps(set.name()).await?),
            SetRef::Secret(_) => Self::Secrets(cluster.labelled_secrets(set.name()).await?),
        })
    }

    fn revisions(&self, set: SetRef<'_>) -> Vec<Revision<'_>> {
        match self {
            Self::ConfigMaps(config_maps) => revisions_of(set, config_maps),
            Self::Secrets(secrets) => revisions_of(set, secrets),
        }
    }
}

/// Runs one command against the cluster. `palette` says whether text output is coloured.
pub async fn run(cli: Cli, palette: Palette, now: Timestamp) -> Result<Outcome, Error> {
    let g = &cli.global;
    if let Command::Validate { filename } = &cli.command {
        return validate_offline(filename, g.output);
    }
    if let Command::Plan {
        filename,
        against,
        base,
        at,
        assume_ready_after,
        fail_on_hold,
        detailed_exitcode,
    } = &cli.command
    {
        let stdin = read_stdin(filename)?;
        let args = plan::PlanArgs {
            filename: filename.clone(),
            against: *against,
            base: base.clone(),
            at: at.clone(),
            assume_ready_after: assume_ready_after.clone(),
            fail_on_hold: *fail_on_hold,
            detailed_exitcode: *detailed_exitcode,
        };
        return plan::run(&args, g, stdin.as_deref(), now).await;
    }
    let address = match &cli.command {
        Command::History { set }
        | Command::Diff { set, .. }
        | Command::Status { set, .. }
        | Command::Pause { set }
        | Command::Resume { set }
        | Command::Promote { set, .. }
        | Command::Windows { set } => Address::parse(set).map_err(Error::Usage)?,
        Command::Validate { .. } | Command::Plan { .. } => unreachable!("answered above"),
    };
    let cluster = Cluster::connect(
        g.kubeconfig.as_deref(),
        g.context.as_deref(),
        g.namespace.as_deref(),
    )
    .await?;
    run_on(&cluster, &cli, &address, palette, now).await
}

/// Standard input's text, when one of `paths` is `-`.
fn read_stdin(paths: &[std::path::PathBuf]) -> Result<Option<String>, Error> {
    if paths.iter().any(|p| p.as_os_str() == "-") {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)
            .map_err(|e| Error::Usage(format!("reading standard input: {e}")))?;
        Ok(Some(text))
    } else {
        Ok(None)
    }
}

/// `kubectl cmset validate`: no cluster, only the files.
fn validate_offline(paths: &[std::path::PathBuf], format: cli::Output) -> Result<Outcome, Error> {
    let stdin = read_stdin(paths)?;
    let files = validate::read_documents(paths, stdin.as_deref())?;
    let reports = validate::validate_files(&files)?;
    let stdout = match output::structured(&reports, format)? {
        Some(text) => text,
        None => validate::render_text(&reports),
    };
    Ok(Outcome {
        stdout,
        note: None,
        code: validate::exit_code(&reports),
    })
}

/// Runs one command, about the set at `address`, against `cluster`.
async fn run_on(
    cluster: &Cluster,
    cli: &Cli,
    address: &Address,
    palette: Palette,
    now: Timestamp,
) -> Result<Outcome, Error> {
    let g = &cli.global;
    let set = cluster.set(address).await?;
    let view = set.view();
    let action = match &cli.command {
        Command::Pause { .. } => Some(steer::Action::Pause),
        Command::Resume { .. } => Some(steer::Action::Resume),
        Command::Promote {
            override_window: true,
            ..
        } => Some(steer::Action::OverrideWindow),
        Command::Promote { .. } => Some(steer::Action::Promote),
        _ => None,
    };
    if let Some(action) = action {
        // `configmapset/app`: its messages suggest commands, and this is how a command names the set.
        let id = set.id();
        let id = format!("{}/{}", address::resource(id.kind), id.name);
        let mut steer = steer::steer(action, view, &id).map_err(Error::Usage)?;
        if let Some(patch) = &steer.patch {
            cluster.patch_set_metadata(&set, patch).await?;
        }
        if let Some(wanted) = steer.create.take() {
            // Who broke the glass is what cmset's webhook recorded, not what this client says.
            steer = match cluster.create_window_override(&wanted).await? {
                cluster::Created::New(stored) => steer::recorded(steer, &stored, false),
                cluster::Created::Exists(stored) => steer::recorded(steer, &stored, true),
            };
        }
        return Ok(Outcome::print(match output::structured(&steer, g.output)? {
            Some(text) => text,
            None => format!("{}\n", steer.message),
        }));
    }
    if let Command::Windows { .. } = &cli.command {
        // The cluster's windows are optional: when they cannot be listed the report says why.
        let change_windows = cluster.change_windows().await;
        let change_windows = change_windows.as_deref().map_err(String::as_str);
        let overrides = cluster.window_overrides().await;
        let overrides = overrides.as_deref().map_err(String::as_str);
        let report = windows::windows_report_with_overrides(view, change_windows, overrides, now);
        return Ok(Outcome::print(match output::structured(&report, g.output)? {
            Some(text) => text,
            None => windows::render_text(&report, palette),
        }));
    }
    let listed = Listed::of(cluster, view).await?;
    let revisions = listed.revisions(view);
    match &cli.command {
        Command::History { .. } => {
            let history_objects = cluster.history_objects().await;
            let rows = history::history_rows(view, &revisions, &history_objects, now);
            if let Some(text) = output::structured(&rows, g.output)? {
                return Ok(Outcome::print(text));
            }
            if rows.is_empty() {
                return Ok(Outcome {
                    note: Some(format!(
                        "{} in namespace {:?} has no revisions yet",
                        set.id(),
                        cluster.namespace
                    )),
                    ..Outcome::default()
                });
            }
            let kind = view.kind().revision_kind();
            Ok(Outcome::print(history::render_table(&rows, kind, palette)))
        }
        Command::Diff {
            a, b, external_diff, ..
        } => {
            let external = external_diff.as_deref().unwrap_or_default();
            let mut notes = vec![];
            let (from, to) = diff::resolve(
                &set.id(),
                current_name(view),
                &revisions,
                a.as_deref(),
                b.as_deref(),
            )?;
            let (from, to) = (&revisions[from], &revisions[to]);
            let (identical, stdout) = match &listed {
                Listed::ConfigMaps(config_maps) => {
                    let report = diff::compare(view.name(), from, to, config_maps);
                    let stdout = match output::structured(&report, g.output)? {
                        Some(text) => text,
                        None => match external_diff::command(external).map_err(Error::Usage)? {
                            // As `kubectl diff` does: the user's program compares the two sides.
                            Some(command) => {
                                let dir = external_diff::scratch_dir().map_err(Error::Usage)?;
                                let ran = external_diff::run(
                                    &command,
                                    &dir,
                                    (&from.name, &config_maps[from.index]),
                                    (&to.name, &config_maps[to.index]),
                                );
                                let _ = std::fs::remove_dir_all(&dir);
                                let ran = ran.map_err(Error::Usage)?;
                                return Ok(Outcome {
                                    stdout: ran.stdout,
                                    note: None,
                                    code: ran.code,
                                });
                            }
                            None => diff::render_text(&report, palette),
                        },
                    };
                    (report.identical, stdout)
                }
                Listed::Secrets(_) => {
                    // Read in full, compared, and dropped here: only keys and types leave
                    // `secret_diff::compare`.
                    let old = cluster.secret(&from.name).await?;
                    let new = cluster.secret(&to.name).await?;
                    if !external.trim().is_empty() {
                        notes.push(
                            "KUBECTL_EXTERNAL_DIFF is not used for a SecretSet: its values never leave kubectl cmset"
                                .to_string(),
                        );
                    }
                    let report = secret_diff::compare(view.name(), from, &old, to, &new);
                    let stdout = match output::structured(&report, g.output)? {
                        Some(text) => text,
                        None => secret_diff::render_text(&report, palette),
                    };
                    (report.identical, stdout)
                }
            };
            if identical {
                notes.push(format!(
                    "{} and {} have the same content",
                    revisions::label(from.number),
                    revisions::label(to.number)
                ));
            }
            Ok(Outcome {
                stdout,
                note: (!notes.is_empty()).then(|| notes.join("\n")),
                code: if identical { 0 } else { 1 },
            })
        }
        Command::Status { workload, .. } => {
            let workloads = cluster.workloads().await?;
            let mut report = status::status_report_at(view, &revisions, &workloads, now);
            if let Some(selector) = workload {
                status::select(&mut report, selector).map_err(Error::Usage)?;
            }
            Ok(Outcome::print(match output::structured(&report, g.output)? {
                Some(text) => text,
                None => status::render_text(&report, palette),
            }))
        }
        Command::Pause { .. }
        | Command::Resume { .. }
        | Command::Promote { .. }
        | Command::Windows { .. }
        | Command::Validate { .. }
        | Command::Plan { .. } => {
            unreachable!("steering commands, windows and validate returned above")
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;
    use cmset_api::WorkloadState;
    use serde_json::json;

    use super::*;
    use crate::revisions::fixtures::{holding_the_spec, revision, set, workload};
    use crate::stand_in::{self, DEPLOYMENTS, at, kubernetes_1_20, with};

    const SET_PATH: &str = "/apis/cmset.dev/v1alpha1/namespaces/demo/configmapsets/app";

    /// ConfigMapSet `app` at revision 2, its two revisions, and Deployment `web` running the current
    /// one, on Kubernetes 1.20 without Argo Rollouts.
    fn without_rollouts() -> (Cluster, stand_in::Asked) {
        let (one, two) = ("app-1111111111", "app-2222222222");
        let set = set(
            Some(two),
            Some(2),
            vec![workload("Deployment", "web", two, WorkloadState::Current)],
        );
        let revisions = [
            revision(one, Some(1), "2026-11-01T00:00:00Z", &[("K", "1")]),
            holding_the_spec(revision(two, Some(2), "2026-11-02T00:00:00Z", &[("K", "2")])),
        ];
        let web = json!({
            "metadata": {"name": "web", "namespace": "demo", "uid": "web-uid",
                         "labels": {"cmset.dev/enabled": "true"}},
            "spec": {"template": {"spec": {"containers": [
                {"name": "c", "envFrom": [{"configMapRef": {"name": two}}]}]}}},
        });
        let missing_secret_set = stand_in::object_not_found("secretsets", "cmset.dev", "app");
        let answers = vec![
            (SET_PATH.to_string(), stand_in::json(200, &json!(set))),
            (
                SET_PATH.replace("configmapsets", "secretsets"),
                missing_secret_set,
            ),
            (
                stand_in::collection("v1", "configmaps"),
                stand_in::list("v1", revisions.iter().map(|r| json!(r)).collect()),
            ),
        ];
        let workloads = vec![at(DEPLOYMENTS, stand_in::list("apps/v1", vec![web]))];
        stand_in::start(with(kubernetes_1_20(), [answers, workloads].concat()))
    }

    /// `kubectl cmset <args>` (its second word the set) against `cluster`.
    async fn cmset(cluster: &Cluster, args: &[&str]) -> Result<Outcome, Error> {
        let cli = Cli::try_parse_from([&["kubectl-cmset"], args].concat()).expect("valid arguments");
        let address = Address::parse(args[1]).expect("a set");
        let now = "2026-11-25T00:00:00Z".parse().unwrap();
        run_on(cluster, &cli, &address, Palette::PLAIN, now).await
    }

    #[tokio::test]
    async fn every_command_works_on_a_server_without_argo_rollouts() {
        let (cluster, asked) = without_rollouts();

        let history = cmset(&cluster, &["history", "app"]).await.unwrap();
        assert_eq!(history.code, 0);
        assert!(history.stdout.contains("app-2222222222"), "{}", history.stdout);

        // Through an external program, as KUBECTL_EXTERNAL_DIFF names it (`--external-diff` is the
        // same setting, which tests can give without touching the process's environment).
        let external = cmset(&cluster, &["diff", "app", "--external-diff", "diff -r -u"])
            .await
            .unwrap();
        assert_eq!(external.code, 1);
        assert!(
            external.stdout.contains("app-1111111111/K"),
            "{}",
            external.stdout
        );
        assert!(
            external.stdout.contains("\n-1\n") && external.stdout.contains("\n+2"),
            "{}",
            external.stdout
        );
        let refused = cmset(&cluster, &["diff", "app", "--external-diff", "diff ; rm"]).await;
        assert!(
            matches!(refused, Err(Error::Usage(ref m)) if m.contains("is not a flag")),
            "{refused:?}"
        );

        let diff = cmset(&cluster, &["diff", "app"]).await.unwrap();
        assert_eq!(diff.code, 1);
        assert!(
            diff.stdout.contains("@@ K: changed @@\n-1\n+2\n"),
            "{}",
            diff.stdout
        );

        let status = cmset(&cluster, &["status", "app"]).await.unwrap().stdout;
        let table = status.split("\n\n").nth(1).expect("a table of workloads");
        assert_eq!(
            table,
            "WORKLOAD         REVISION   CONFIGMAP        WHY\n\
             Deployment/web   2          app-2222222222   current (updated by cmset)\n"
        );
        let why = cmset(&cluster, &["why", "app", "deploy/web", "-o", "json"])
            .await
            .unwrap();
        let why: serde_json::Value = serde_json::from_str(&why.stdout).unwrap();
        assert_eq!(why["workloads"][0]["state"], "current", "{why}");

        let pause = cmset(&cluster, &["pause", "app"]).await.unwrap();
        assert!(
            pause.stdout.starts_with("configmapset/app paused: "),
            "{}",
            pause.stdout
        );
        let resume = cmset(&cluster, &["resume", "app"]).await.unwrap();
        assert_eq!(resume.stdout, "configmapset/app is not paused\n");
        let promote = cmset(&cluster, &["promote", "app"]).await.unwrap_err();
        assert!(matches!(promote, Error::Usage(_)), "{promote}");
        let promote = cmset(&cluster, &["promote", "app", "--override-window"])
            .await
            .unwrap_err();
        assert!(promote.to_string().contains("no rollout under way"), "{promote}");

        // No ChangeWindow CRD on this server: a line says so, and the set's own windows are shown.
        let windows = cmset(&cluster, &["windows", "app"]).await.unwrap();
        assert_eq!(windows.code, 0);
        assert!(
            windows.stdout.ends_with(
                "moves allowed: no change window applies
note: the ChangeWindow API \
                 (changewindows.cmset.dev) is not installed: only the set's own windows are shown\n"
            ),
            "{}",
            windows.stdout
        );
        let windows = cmset(&cluster, &["windows", "app", "-o", "json"]).await.unwrap();
        let windows: serde_json::Value = serde_json::from_str(&windows.stdout).unwrap();
        assert_eq!(windows["verdict"]["movesAllowed"], true, "{windows}");

        let asked = asked.lock().unwrap();
        let rollouts = "GET /apis/argoproj.io/v1alpha1/namespaces/demo/rollouts";
        assert_eq!(
            asked.iter().filter(|r| *r == rollouts).count(),
            2,
            "status and why asked for Rollouts: {asked:?}"
        );
        assert!(asked.contains(&format!("PATCH {SET_PATH}")), "{asked:?}");
        assert!(
            asked.contains(&"GET /apis/cmset.dev/v1alpha1/changewindows".to_string()),
            "{asked:?}"
        );
    }
}
