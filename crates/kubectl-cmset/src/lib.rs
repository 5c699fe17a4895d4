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
pub mod history;
pub mod output;
pub mod revisions;
pub mod secret_diff;
pub mod status;
pub mod steer;
pub mod style;
pub mod table;

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
    let address = match &cli.command {
        Command::History { set }
        | Command::Diff { set, .. }
        | Command::Status { set, .. }
        | Command::Pause { set }
        | Command::Resume { set }
        | Command::Promote { set } => Address::parse(set).map_err(Error::Usage)?,
    };
    let cluster = Cluster::connect(
        g.kubeconfig.as_deref(),
        g.context.as_deref(),
        g.namespace.as_deref(),
    )
    .await?;
    let set = cluster.set(&address).await?;
    let view = set.view();
    let action = match &cli.command {
        Command::Pause { .. } => Some(steer::Action::Pause),
        Command::Resume { .. } => Some(steer::Action::Resume),
        Command::Promote { .. } => Some(steer::Action::Promote),
        _ => None,
    };
    if let Some(action) = action {
        let id = set.id().to_string();
        let steer = steer::steer(action, view, &id).map_err(Error::Usage)?;
        if let Some(patch) = &steer.patch {
            cluster.patch_set_metadata(&set, patch).await?;
        }
        return Ok(Outcome::print(match output::structured(&steer, g.output)? {
            Some(text) => text,
            None => format!("{}\n", steer.message),
        }));
    }
    let listed = Listed::of(&cluster, view).await?;
    let revisions = listed.revisions(view);
    match &cli.command {
        Command::History { .. } => {
            let rows = history::history_rows(view, &revisions, now);
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
        Command::Diff { a, b, .. } => {
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
                        None => diff::render_text(&report, palette),
                    };
                    (report.identical, stdout)
                }
                Listed::Secrets(_) => {
                    // Read in full, compared, and dropped here: only keys and types leave
                    // `secret_diff::compare`.
                    let old = cluster.secret(&from.name).await?;
                    let new = cluster.secret(&to.name).await?;
                    let report = secret_diff::compare(view.name(), from, &old, to, &new);
                    let stdout = match output::structured(&report, g.output)? {
                        Some(text) => text,
                        None => secret_diff::render_text(&report, palette),
                    };
                    (report.identical, stdout)
                }
            };
            let note = identical.then(|| {
                format!(
                    "{} and {} have the same content",
                    revisions::label(from.number),
                    revisions::label(to.number)
                )
            });
            Ok(Outcome {
                stdout,
                note,
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
        Command::Pause { .. } | Command::Resume { .. } | Command::Promote { .. } => {
            unreachable!("steering commands returned above")
        }
    }
}
