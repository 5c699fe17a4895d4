//! `kubectl cmset`: a kubectl plugin for people who inspect ConfigMapSets.
//!
//! The pure parts (history rows, choosing and diffing revisions, explaining workloads, tables, colour)
//! are plain functions over plain data in their own modules, tested from literal objects; [`cluster`] is
//! the only module that talks to the API server, and [`run`] ties the two together.
#![forbid(unsafe_code)]

pub mod age;
pub mod cli;
pub mod cluster;
pub mod diff;
pub mod error;
pub mod history;
pub mod output;
pub mod revisions;
pub mod status;
pub mod style;
pub mod table;

use jiff::Timestamp;

use crate::cli::{Cli, Command};
use crate::cluster::Cluster;
use crate::error::Error;
use crate::revisions::{current_name, revisions_of};
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

/// Runs one command against the cluster. `palette` says whether text output is coloured.
pub async fn run(cli: Cli, palette: Palette, now: Timestamp) -> Result<Outcome, Error> {
    let g = &cli.global;
    let cluster = Cluster::connect(
        g.kubeconfig.as_deref(),
        g.context.as_deref(),
        g.namespace.as_deref(),
    )
    .await?;
    match &cli.command {
        Command::History { set } => {
            let set = cluster.set(set).await?;
            let config_maps = cluster.labelled_config_maps(&set).await?;
            let rows = history::history_rows(&set, &config_maps, now);
            if let Some(text) = output::structured(&rows, g.output)? {
                return Ok(Outcome::print(text));
            }
            if rows.is_empty() {
                return Ok(Outcome {
                    note: Some(format!(
                        "configmapset {:?} in namespace {:?} has no revisions yet",
                        kube::ResourceExt::name_any(&set),
                        cluster.namespace
                    )),
                    ..Outcome::default()
                });
            }
            Ok(Outcome::print(history::render_table(&rows, palette)))
        }
        Command::Diff { set: name, a, b } => {
            let set = cluster.set(name).await?;
            let config_maps = cluster.labelled_config_maps(&set).await?;
            let revisions = revisions_of(&set, &config_maps);
            let (from, to) = diff::resolve(name, current_name(&set), &revisions, a.as_deref(), b.as_deref())?;
            let report = diff::compare(name, &revisions[from], &revisions[to]);
            let code = if report.identical { 0 } else { 1 };
            let note = report.identical.then(|| {
                format!(
                    "{} and {} have the same content",
                    revisions::label(report.from.revision),
                    revisions::label(report.to.revision)
                )
            });
            let stdout = match output::structured(&report, g.output)? {
                Some(text) => text,
                None => diff::render_text(&report, palette),
            };
            Ok(Outcome { stdout, note, code })
        }
        Command::Status { set, workload } => {
            let set = cluster.set(set).await?;
            let config_maps = cluster.labelled_config_maps(&set).await?;
            let revisions = revisions_of(&set, &config_maps);
            let workloads = cluster.workloads().await?;
            let mut report = status::status_report(&set, &revisions, &workloads);
            if let Some(selector) = workload {
                status::select(&mut report, selector).map_err(Error::Usage)?;
            }
            Ok(Outcome::print(match output::structured(&report, g.output)? {
                Some(text) => text,
                None => status::render_text(&report, palette),
            }))
        }
    }
}
