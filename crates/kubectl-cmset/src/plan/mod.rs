//! `kubectl cmset plan -f PATH...`: what applying these files will do to each ConfigMapSet and
//! SecretSet in them, when, and what would stop it, before anything is applied.
//!
//! - [`objects`]: the files (and folders, and standard input) as objects;
//! - [`gather`]: the world they land in, read from the cluster (GET and LIST, and a server-side dry
//!   run of each set for the webhook's answer: nothing is written);
//! - [`forecast`]: one set's plan from objects, by `cmset_core`'s own decisions;
//! - [`keys`]: the key diffs, as `kubectl cmset diff` prints them (key names only for a SecretSet);
//! - [`report`] and [`render`]: the plan as data (JSON, YAML) and for people (table, Markdown);
//! - [`exit_code`]: what CI reads.

pub mod forecast;
pub mod gather;
pub mod keys;
pub mod objects;
pub mod render;
pub mod report;

use std::path::PathBuf;
use std::time::Duration;

use jiff::Timestamp;

use crate::Outcome;
use crate::cli::{Against, Global, Output};
use crate::cluster::Cluster;
use crate::error::Error;
use forecast::{BudgetKnown, Known, Options, WindowsKnown};
use objects::{Object, Objects};
use report::{API_VERSION, KIND, PlanDocument};

/// The flags of `plan`.
#[derive(Clone, Debug)]
pub struct PlanArgs {
    pub filename: Vec<PathBuf>,
    pub against: Option<Against>,
    pub base: Option<PathBuf>,
    pub at: Option<String>,
    pub assume_ready_after: Option<String>,
    pub fail_on_hold: bool,
    pub detailed_exitcode: bool,
}

/// How far ahead a plan looks: a freeze of a few weeks is still seen to end.
const HORIZON: Duration = Duration::from_secs(90 * 24 * 3600);
/// How long the cluster has to answer before the plan goes on against files.
const REACH_TIMEOUT: Duration = Duration::from_secs(5);

fn parse_at(at: Option<&str>, now: Timestamp) -> Result<Timestamp, Error> {
    match at {
        // Whole seconds: what the status records, and what a person reads.
        None => Ok(Timestamp::from_second(now.as_second()).unwrap_or(now)),
        Some(text) => text
            .parse::<Timestamp>()
            .map_err(|e| Error::Usage(format!("--at {text:?}: not an RFC 3339 time ({e})"))),
    }
}

fn parse_ready_after(text: Option<&str>) -> Result<Duration, Error> {
    match text.map(str::trim) {
        None | Some("0") | Some("0s") => Ok(Duration::ZERO),
        Some(text) => cmset_core::policy::windows::duration::parse(text)
            .ok()
            .and_then(|d| Duration::try_from(d).ok())
            .ok_or_else(|| {
                Error::Usage(format!(
                    "--assume-ready-after {text:?}: write a duration such as 30s, 2m or 1h30m"
                ))
            }),
    }
}

/// Exit status of a plan: 0 nothing refused, 1 refused, 3 held (only with `--fail-on-hold`), 4
/// would change (only with `--detailed-exitcode`); 1 before 3 before 4. (2, an error, is any
/// [`Error`].)
pub fn exit_code(doc: &PlanDocument, fail_on_hold: bool, detailed: bool) -> u8 {
    let any = |result: &str| doc.plans.iter().any(|p| p.verdict.result == result);
    if any("refused") {
        1
    } else if fail_on_hold && any("held") {
        3
    } else if detailed && doc.plans.iter().any(|p| p.verdict.result != "noChange") {
        4
    } else {
        0
    }
}

/// The namespace of a set from the files: its own, else the one the command runs in.
fn namespace_of<'a>(object: &'a Object, default: &'a str) -> &'a str {
    object.namespace().unwrap_or(default)
}

/// Runs `plan`. `stdin` is standard input's text when a path is `-`.
pub async fn run(
    args: &PlanArgs,
    global: &Global,
    stdin: Option<&str>,
    now: Timestamp,
) -> Result<Outcome, Error> {
    let desired = objects::read(&args.filename, stdin)?;
    let base = match &args.base {
        Some(dir) => Some(objects::read(std::slice::from_ref(dir), None)?),
        None => None,
    };
    let options = Options {
        at: parse_at(args.at.as_deref(), now)?,
        ready_after: parse_ready_after(args.assume_ready_after.as_deref())?,
        horizon: HORIZON,
    };
    // The mode: asked for, or the cluster when it answers.
    let connected = match args.against {
        Some(Against::Files) => Err("--against files".to_string()),
        _ => match Cluster::connect(
            global.kubeconfig.as_deref(),
            global.context.as_deref(),
            global.namespace.as_deref(),
        )
        .await
        {
            Ok(cluster) => match gather::reachable(cluster.client(), REACH_TIMEOUT).await {
                Ok(()) => Ok(cluster),
                Err(e) => Err(format!("no cluster reachable ({e})")),
            },
            Err(e) => Err(format!("no cluster reachable ({e})")),
        },
    };
    let doc = match connected {
        Ok(cluster) => plan_against_cluster(&cluster, &desired, base.as_deref(), &options).await?,
        Err(why) if args.against == Some(Against::Cluster) => {
            return Err(Error::Usage(format!("--against cluster: {why}")));
        }
        Err(why) => {
            let namespace = global.namespace.clone().unwrap_or_else(|| "default".into());
            plan_against_files(&desired, base.as_deref(), &namespace, &options, &why)
        }
    };
    let code = exit_code(&doc, args.fail_on_hold, args.detailed_exitcode);
    Ok(Outcome {
        stdout: render_doc(&doc, global.output)?,
        note: None,
        code,
    })
}

/// The plan in the format asked for.
pub fn render_doc(doc: &PlanDocument, format: Output) -> Result<String, Error> {
    Ok(match format {
        Output::Table => render::table(doc),
        Output::Markdown => render::markdown(doc),
        Output::Json | Output::Yaml => crate::output::structured(doc, format)?.unwrap_or_default(),
    })
}

fn sets(desired: &[Object]) -> Vec<&Object> {
    desired.iter().filter(|o| o.is_set()).collect()
}

/// Files mode: the world is `--base` and the other objects of the files; what only the cluster
/// knows is listed as unknown.
pub fn plan_against_files(
    desired: &[Object],
    base: Option<&[Object]>,
    namespace: &str,
    options: &Options,
    why: &str,
) -> PlanDocument {
    let mut world = Objects::new(base.unwrap_or_default().iter().cloned(), namespace);
    for o in desired.iter().filter(|o| !o.is_set()) {
        world.insert(o.clone(), namespace);
    }
    let windows = if world.has_kind("ChangeWindow") {
        WindowsKnown::Listed
    } else {
        WindowsKnown::Unknown {
            why: "not in the files (files mode cannot list them)".into(),
            forbidden: false,
        }
    };
    let plans = sets(desired)
        .into_iter()
        .map(|set| {
            let ns = namespace_of(set, namespace);
            let mut unknown = vec![
                "the cluster-wide rollout budget (an operator setting): not known in files mode".to_string(),
            ];
            let live = world.get(set.kind(), ns, set.name());
            if live.and_then(|l| l.value.get("status")).is_none() {
                unknown.push(
                    "pins and rollouts under way: the live set's status is not in the files (give it with --base)"
                        .to_string(),
                );
            }
            let known = Known {
                windows: windows.clone(),
                budget: BudgetKnown::None,
                pods: None,
                webhook: None,
                unknown,
                content_unreadable: None,
            };
            forecast::plan_one(set, ns, &world, None, &known, options)
        })
        .collect();
    PlanDocument {
        api_version: API_VERSION,
        kind: KIND,
        against: "files",
        mode_note: format!("plan against files ({why}): nothing is read from a cluster"),
        plans,
    }
}

/// Cluster mode: every set's world read from the cluster (nothing written), with the webhook's
/// answer by a server-side dry run where the user may.
pub async fn plan_against_cluster(
    cluster: &Cluster,
    desired: &[Object],
    base: Option<&[Object]>,
    options: &Options,
) -> Result<PlanDocument, Error> {
    let base = base.map(|b| Objects::new(b.iter().cloned(), &cluster.namespace));
    let mut plans = Vec::new();
    let all = sets(desired);
    let mut namespaces: Vec<&str> = all.iter().map(|s| namespace_of(s, &cluster.namespace)).collect();
    namespaces.sort();
    namespaces.dedup();
    for namespace in namespaces {
        let here: Vec<&Object> = all
            .iter()
            .copied()
            .filter(|s| namespace_of(s, &cluster.namespace) == namespace)
            .collect();
        let gathered = gather::gather(cluster.client(), namespace, &here).await?;
        let mut world = gathered.world;
        // New objects of the files (a workload not created yet) join the world as they will be.
        for o in desired.iter().filter(|o| !o.is_set()) {
            let ns = o.namespace().unwrap_or(namespace);
            if ns == namespace && world.get(o.kind(), ns, o.name()).is_none() {
                world.insert(o.clone(), namespace);
            }
        }
        for set in here {
            let exists = world.get(set.kind(), namespace, set.name()).is_some();
            let mut body = set.value.clone();
            body["metadata"]["namespace"] = serde_json::Value::from(namespace);
            let webhook = gather::dry_run(cluster.client(), namespace, &body, exists).await;
            let mut known = gathered.known.clone();
            if webhook.is_none() {
                known.unknown.push(
                    "the webhook's own answer: a server-side dry run was not allowed (it needs the right to \
                     create or patch the set)"
                        .to_string(),
                );
            }
            known.webhook = webhook;
            plans.push(forecast::plan_one(
                set,
                namespace,
                &world,
                base.as_ref(),
                &known,
                options,
            ));
        }
    }
    Ok(PlanDocument {
        api_version: API_VERSION,
        kind: KIND,
        against: "cluster",
        mode_note: format!(
            "plan against the cluster (namespace {}): read only, nothing is written",
            cluster.namespace
        ),
        plans,
    })
}

#[cfg(test)]
mod tests;
