//! Flags and subcommands.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::style::ColorChoice;

const ABOUT: &str = "Inspect ConfigMapSets (configmapsets.cmset.dev) and SecretSets (secretsets.cmset.dev): \
                     their revisions, what changed between two of them, which revision each workload \
                     runs and why, the change windows that hold their rollouts, and what a change will do before it \
                     is applied.";

const AFTER_HELP: &str = "\
Examples:
  kubectl cmset history app-config            revisions, newest first, and what uses each
  kubectl cmset diff app-config               what the current revision changed
  kubectl cmset diff app-config 1 3           revision 1 against revision 3
  kubectl cmset status app-config             the set and every workload that references it
  kubectl cmset why app-config deploy/web     why one workload runs the revision it runs
  kubectl cmset history app-config -o json    the same, for scripts
  kubectl cmset history secretset/db          a SecretSet's revisions (Secrets)
  kubectl cmset diff secset/db                which keys changed; a Secret's values are never shown
  kubectl cmset pause app-config              hold its rollout; resume lets it go on
  kubectl cmset promote app-config            let the next wave open (spec.rollout.promotion: Manual)
  kubectl cmset windows app-config            the change windows that apply to it, and their next openings
  kubectl cmset promote --override-window app-config
                                              let its current rollout through the change windows
  kustomize build . | kubectl cmset plan -f -  what applying it will do, when, and what would stop it

A set is NAME, or KIND/NAME as kubectl writes it: configmapset/NAME (or cmset/NAME) and
secretset/NAME (or secset/NAME). A bare NAME is the ConfigMapSet of that name if there is one,
else the SecretSet; when both exist, write the kind.

Exit status: 0 on success; 2 on any error (unknown set or revision, API errors, bad flags);
`diff` exits 1 when the revisions differ, as diff(1) and kubectl diff do; `plan` exits 1 when a set
is refused, 3 when one is held (--fail-on-hold) and 4 when one would change (--detailed-exitcode).

Colour: --color=auto colours only when standard output is a terminal and NO_COLOR is not set.
The plugin reads the cluster with your kubeconfig; only pause, resume and promote write (an
annotation on the set; promote --override-window, a WindowOverride). `plan` writes nothing: its
server-side dry run stores nothing.";

const PLAN_ABOUT: &str = "\
Say what applying the files will do to each ConfigMapSet and SecretSet in them, before anything is
applied: the verdict first (rolls out, held until when and by what, refused and why, no change, or a
revert to revision N), then the revision (its name, identical to kustomize's generator; new or
reused; its number; what it prunes), each key's diff against the live revision (key names only for a
SecretSet), the validation messages kubectl apply would give, the checks that would run, and every
workload: WAVE, WORKLOAD, FROM→TO, ACTION, EARLIEST (when it can move) and GATE (what it waits for);
then the holds, what `kubectl rollout undo` would return to, what this mode cannot know, and the
basis (resourceVersions read, current revision, time).

--against cluster (the default when a cluster answers) reads only: GET and LIST, and a server-side
dry run of each set (dryRun=All) for the webhook's own answer where you may. --against files plans
from the files alone: --base DIR gives the live objects exported from the cluster, and what files
cannot tell (the cluster's windows, the budget, pins) is listed under unknown, never guessed.

The cluster-wide rollout budget's cap is an operator setting the cluster does not show: set
CMSET_MAX_MOVING_WORKLOADS to the operator's value to plan with it.

Exit status: 0 nothing refused; 1 a set is refused; 2 an error (bad input names the file and
document); 3 a set is held (only with --fail-on-hold); 4 a set would change (only with
--detailed-exitcode). When several apply: 2, then 1, then 3, then 4.";

/// `kubectl cmset`.
#[derive(Clone, Debug, Parser)]
#[command(
    name = "kubectl cmset",
    bin_name = "kubectl cmset",
    version,
    about = ABOUT,
    after_help = AFTER_HELP,
    propagate_version = true,
    disable_help_subcommand = true
)]
pub struct Cli {
    #[command(flatten)]
    pub global: Global,

    #[command(subcommand)]
    pub command: Command,
}

/// Flags every subcommand accepts, before or after it.
#[derive(Clone, Debug, Args)]
pub struct Global {
    /// Namespace of the set [default: the kubeconfig context's namespace, else "default"]
    #[arg(short = 'n', long, global = true, value_name = "NAMESPACE")]
    pub namespace: Option<String>,

    /// Output format
    #[arg(short = 'o', long, global = true, value_enum, default_value_t = Output::Table)]
    pub output: Output,

    /// When to colour the output
    #[arg(long, global = true, value_enum, value_name = "WHEN", default_value_t = ColorChoice::Auto)]
    pub color: ColorChoice,

    /// Path to the kubeconfig file [default: $KUBECONFIG, else ~/.kube/config]
    #[arg(long, global = true, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,

    /// The kubeconfig context to use [default: its current context]
    #[arg(long, global = true, value_name = "CONTEXT")]
    pub context: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// For people: aligned columns (for diff, the diff text)
    Table,
    /// JSON, with stable camelCase field names
    Json,
    /// YAML, with the same fields as JSON
    Yaml,
    /// Markdown, for a pull-request comment (plan only)
    Markdown,
}

/// What `plan` compares the files with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Against {
    /// The live cluster, read only
    Cluster,
    /// Only files: the -f files and --base
    Files,
}

#[derive(Clone, Debug, Subcommand)]
pub enum Command {
    /// List the set's revisions, newest first, and what uses each
    #[command(long_about = "\
List the revisions of a set, newest first: the ConfigMaps of a ConfigMapSet, the Secrets of a
SecretSet (listed by their metadata only; their content is not read).

Columns: REVISION (its number), CONFIGMAP or SECRET (its name), AGE, CURRENT (* for the set's current
revision) and USED BY: the set's workloads that run it, and the ReplicaSets and ControllerRevisions
that keep it for a rollback (they own it, so it is never pruned while they exist).")]
    History {
        /// The set: NAME, configmapset/NAME or secretset/NAME
        set: String,
    },

    /// Show what changed between two revisions of the set
    #[command(long_about = "\
Show what changed between two revisions of a set, as a unified diff of their data, key by key.

With no revision: the revision before the current one (by number) against the current one.
With one: that revision against the current one. With two: the first against the second.
A revision is a number (3) or a revision's name (app-config-9h2c4kfd8m).

Multi-line values are compared line by line. binaryData values are never printed: a line
\"binary, N bytes, sha256 ...\" stands for each. Control characters are shown escaped (\\x1b).

For a SecretSet, only keys are shown: which were added, removed or changed (\"@@ password: changed @@\"),
and each side's type when it changed. No value, nor its size or a digest of it, is ever shown, in
any output format or error. The two revision Secrets are read with get and compared in memory.

With KUBECTL_EXTERNAL_DIFF set (as for kubectl diff, e.g. \"diff -u -N\" or \"meld\"), a ConfigMapSet's
two revisions are written to two directories, one file per key, and that program compares them; its
output and its exit status 0 or 1 are passed on. Not for a SecretSet: its values never leave.

Exit status: 0 when the revisions are identical, 1 when they differ, 2 on error
(the same convention as diff(1) and kubectl diff).")]
    Diff {
        /// The set: NAME, configmapset/NAME or secretset/NAME
        set: String,
        /// The older side: a revision number or name [default: the one before the current]
        a: Option<String>,
        /// The newer side: a revision number or name [default: the current revision]
        b: Option<String>,
        /// The program (and its flags) that compares the two revisions' directories
        #[arg(long, env = "KUBECTL_EXTERNAL_DIFF", hide = true, value_name = "COMMAND")]
        external_diff: Option<String>,
    },

    /// Check sets in files offline: their spec, and their content against spec.validation
    #[command(long_about = "\
Check every ConfigMapSet and SecretSet in the given files with the checks cmset makes before a set's
content becomes a revision, offline and with the same messages as the webhook and the controller:
its spec (what its status would report as InvalidSpec) and its content against spec.validation (each
key's format, with the line and column where it does not parse, and its JSON Schema, with the JSON
pointer and rule of each mismatch).

-f takes files, directories (every .yaml, .yml and .json below, in name order) or - (standard input),
and may be repeated. ConfigMaps and Secrets in the same files stand for the cluster's: a schemaFrom or
configMapName that names one is read from it, and a SecretSet's source Secret is judged without
quoting any value. A set whose source is not in the files is reported as unchecked. Nothing is sent
to a cluster.

Exit status: 0 when every set is valid (or unchecked), 1 when any is invalid, 2 when a file cannot be
read or is not YAML.")]
    Validate {
        /// A file, a directory or - (standard input); repeatable
        #[arg(short = 'f', long = "filename", required = true, value_name = "PATH")]
        filename: Vec<std::path::PathBuf>,
    },

    /// Say what applying these files will do to each set, when, and what would stop it
    #[command(long_about = PLAN_ABOUT)]
    Plan {
        /// A file, a directory or - (standard input, e.g. `kustomize build | kubectl cmset plan -f -`); repeatable
        #[arg(short = 'f', long = "filename", required = true, value_name = "PATH")]
        filename: Vec<std::path::PathBuf>,
        /// Compare with the live cluster (read only) or only with files [default: cluster when one
        /// answers, else files]
        #[arg(long, value_enum, value_name = "MODE")]
        against: Option<Against>,
        /// Objects exported from the cluster (the live set with its status, its revisions, workloads,
        /// ChangeWindows): the world in files mode, and what the keys are compared with
        #[arg(long, value_name = "DIR")]
        base: Option<std::path::PathBuf>,
        /// Plan as if now were TIME (RFC 3339) [default: now]
        #[arg(long, value_name = "TIME")]
        at: Option<String>,
        /// Assume a moved workload is ready this long after its move (e.g. 30s, 2m) [default: 0s]
        #[arg(long, value_name = "DURATION")]
        assume_ready_after: Option<String>,
        /// Exit 3 when a set is held (by a window, a pause, a promotion, the budget)
        #[arg(long)]
        fail_on_hold: bool,
        /// Exit 4 when a set would change
        #[arg(long)]
        detailed_exitcode: bool,
    },

    /// Explain which revision each workload runs, and why
    #[command(
        visible_alias = "why",
        long_about = "\
Explain the set's state and, for every workload of its namespace that references it (by the set's
name or a revision's name), which revision it runs and why. Workloads are Deployments, StatefulSets,
DaemonSets, CronJobs, Jobs and Argo Rollouts; a kind the cluster does not serve has none. A
ConfigMapSet is referenced through ConfigMap references; a SecretSet through Secret references
(envFrom secretRef, secretKeyRef, secret volumes and projected secrets):

  current        it runs the current revision; cmset updated it
  pinned         a rollback (kubectl rollout undo) chose an older revision; cmset leaves it there
                 until the set's content changes. A Job keeps the revision it was created with (its
                 template cannot change); new Jobs get the current one
  pending        cmset is about to move it to the current revision
  waiting        held on its revision: the waves before its own (label cmset.dev/wave, absent is 0)
                 must complete and stay healthy first, or the rollout failed in an earlier wave, or
                 it is held by a change window (see below)
  rolled back    cmset moved it back to the revision it ran before, because it did not become
                 healthy on the new one (spec.rollout.autoRollback); the reason follows
  not opted in   it lacks the label cmset.dev/enabled=true, so cmset does not manage it

Also shows the set's Ready condition, its current revision, and whether its status has caught up
with its spec (observedGeneration against generation). A set rolled out in waves also shows its
rollout (the wave in progress and its stabilization window, or the wave it failed in and why) and
each workload's wave (a WAVE column), and its strategy when it is Immediate. A rollout waiting
held by a change window (phase Waiting) names the window that holds it (status.rollout.reason and
message), when moves resume (status.rollout.nextWindow, and how far away), and the command that lets
this rollout through: kubectl cmset promote --override-window SET."
    )]
    Status {
        /// The set: NAME, configmapset/NAME or secretset/NAME
        set: String,
        /// Only this workload: NAME, or KIND/NAME (deployment/web, sts/db, ds/agent, cronjob/report,
        /// job/migrate, rollout/web)
        workload: Option<String>,
    },

    /// Hold the set's rollout: nothing more moves to a new revision until resumed
    #[command(long_about = "\
Hold the set's rollout: no workload is moved to a new revision and no wave opens until
`kubectl cmset resume`; workloads already moved stay where they are. Writes the annotation
cmset.dev/paused: \"true\" on the set (not its spec, so a GitOps tool sees no drift); the same as
spec.rollout.paused: true. Needs the right to patch the set.")]
    Pause {
        /// The set: NAME, configmapset/NAME or secretset/NAME
        set: String,
    },

    /// Let a paused rollout go on where it stood
    #[command(long_about = "\
Remove the annotation cmset.dev/paused from the set: its rollout goes on where it stood. A set
paused by its spec (spec.rollout.paused: true) is resumed by changing the spec.")]
    Resume {
        /// The set: NAME, configmapset/NAME or secretset/NAME
        set: String,
    },

    /// Let the next wave open (spec.rollout.promotion: Manual), or the rollout through the windows
    #[command(long_about = "\
For a set whose spec.rollout.promotion is Manual: let the wave after the one in progress open, now
if that wave is done and stable (AwaitingPromotion), else as soon as it is. Writes the annotation
cmset.dev/promoted: <revision>/<wave>@<startedAt> on the set, so the promotion survives an operator
restart and applies to that wave of that rollout only: a later rollout of the same revision needs its
own.

With --override-window (break glass): let the set's current rollout through the change windows, and
do nothing else (no wave is promoted). Creates a WindowOverride (windowoverrides.cmset.dev) in the
set's namespace naming the set (kind, name and uid) and that rollout (revision and startedAt) only:
a later rollout, or a set created again under the same name, is held as usual. Only users the API
server allows to create WindowOverrides may (ClusterRole cmset-break-glass; edit, admin and
cmset-edit do not grant it). cmset's admission webhook records who did (spec.requestedBy: the user
as the API server authenticated them), which this command prints; created while the webhook does not
answer, the override counts all the same and its record says \"not recorded\". Asked again for the
same rollout, it finds the override already there. Refused when no rollout is under way (complete,
failed or none). A set whose strategy is Immediate has a rollout under way only while a window holds
it. Pauses and manual promotions still hold the rollout.")]
    Promote {
        /// The set: NAME, configmapset/NAME or secretset/NAME
        set: String,
        /// Let the current rollout through the change windows instead of promoting a wave
        #[arg(long)]
        override_window: bool,
    },

    /// List the change windows that apply to the set, and whether they hold it now
    #[command(long_about = "\
List every change window that applies to a set: its own (spec.rollout.windows) and those of the
cluster's ChangeWindows (changewindows.cmset.dev, cluster-scoped) whose namespaces and selector
select it. When any Allow window applies, moves happen only inside one; an open Deny window holds
moves whatever the Allows say. A window holds moving workloads to a new revision and opening a wave,
never a rollback, a new workload or a new revision.

Columns: SOURCE (set, or the ChangeWindow's name), NAME, KIND (Allow or Deny), SCHEDULE (cron or
RFC 5545 RRULE), DURATION, TIME ZONE, STATE (open until when, or closed) and NEXT OPENING (RFC 3339,
and how far away; \"never within 10 years\" for a schedule that never fires). A last line gives the
verdict now: moves allowed, or held by which window and when moves resume, or an override in force
(kubectl cmset promote --override-window). A set whose strategy is Immediate is held too, unless a
ChangeWindow exempts the strategy (spec.exemptStrategies); such a ChangeWindow is not listed for it.

The set's WindowOverrides (break glass) follow: WINDOW OVERRIDE (its name), ROLLOUT
(<revision>@<startedAt>), REQUESTED BY (as cmset's webhook recorded it, or \"not recorded\"), CREATED
and STATE: used (the controller let the rollout through by it), unused (it names the rollout under
way), expired (an earlier rollout) or void (an earlier set of the same name).

When the ChangeWindows cannot be listed (their API is not installed, or you may not list them), a
line says so and the set's own windows are shown.")]
    Windows {
        /// The set: NAME, configmapset/NAME or secretset/NAME
        set: String,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cli_is_well_formed() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }

    #[test]
    fn global_flags_go_before_or_after_the_subcommand() {
        // kubectl hands `kubectl cmset -n ns history x` to the plugin as `-n ns history x`.
        for args in [
            &["kubectl-cmset", "-n", "ns", "-o", "json", "history", "app"][..],
            &["kubectl-cmset", "history", "app", "-n", "ns", "--output=json"][..],
        ] {
            let cli = Cli::try_parse_from(args).unwrap();
            assert_eq!(cli.global.namespace.as_deref(), Some("ns"));
            assert_eq!(cli.global.output, Output::Json);
            assert!(matches!(cli.command, Command::History { ref set } if set == "app"));
        }
    }

    #[test]
    fn a_set_may_be_written_with_its_kind() {
        let cli = Cli::try_parse_from(["kubectl-cmset", "diff", "secretset/db", "2"]).unwrap();
        assert!(matches!(cli.command, Command::Diff { ref set, .. } if set == "secretset/db"));
        use clap::CommandFactory;
        let help = Cli::command().render_long_help().to_string();
        assert!(help.contains("secretset/NAME (or secset/NAME)"), "{help}");
    }

    #[test]
    fn why_is_status() {
        let cli =
            Cli::try_parse_from(["kubectl-cmset", "why", "app", "deploy/web", "--color=never"]).unwrap();
        assert_eq!(cli.global.color, ColorChoice::Never);
        assert!(matches!(
            cli.command,
            Command::Status { ref set, workload: Some(ref w) } if set == "app" && w == "deploy/web"
        ));
    }

    #[test]
    fn diff_takes_zero_one_or_two_revisions() {
        for (args, a, b) in [
            (&["x", "diff", "app"][..], None, None),
            (&["x", "diff", "app", "2"][..], Some("2"), None),
            (
                &["x", "diff", "app", "1", "app-abc"][..],
                Some("1"),
                Some("app-abc"),
            ),
        ] {
            let cli = Cli::try_parse_from(args).unwrap();
            let Command::Diff {
                a: got_a, b: got_b, ..
            } = cli.command
            else {
                panic!("not diff")
            };
            assert_eq!((got_a.as_deref(), got_b.as_deref()), (a, b));
        }
        assert!(Cli::try_parse_from(["x", "diff", "app", "1", "2", "3"]).is_err());
        assert!(Cli::try_parse_from(["x", "history"]).is_err());
        assert!(Cli::try_parse_from(["x", "-o", "wide", "history", "app"]).is_err());
    }

    #[test]
    fn plan_takes_files_a_mode_and_ci_flags() {
        let cli = Cli::try_parse_from([
            "x",
            "plan",
            "-f",
            "a.yaml",
            "-f",
            "-",
            "--against",
            "files",
            "--base",
            "live",
            "--at",
            "2026-11-27T18:00:00Z",
            "--assume-ready-after",
            "30s",
            "--fail-on-hold",
            "--detailed-exitcode",
            "-o",
            "markdown",
        ])
        .unwrap();
        assert_eq!(cli.global.output, Output::Markdown);
        let Command::Plan {
            filename,
            against,
            base,
            fail_on_hold,
            detailed_exitcode,
            ..
        } = cli.command
        else {
            panic!("not plan")
        };
        assert_eq!(filename.len(), 2);
        assert_eq!(against, Some(Against::Files));
        assert_eq!(base.as_deref(), Some(std::path::Path::new("live")));
        assert!(fail_on_hold && detailed_exitcode);
        assert!(Cli::try_parse_from(["x", "plan"]).is_err(), "-f is required");
        assert!(Cli::try_parse_from(["x", "plan", "-f", "a", "--against", "git"]).is_err());
    }

    #[test]
    fn promote_may_override_the_windows() {
        let cli = Cli::try_parse_from(["x", "promote", "--override-window", "app"]).unwrap();
        assert!(matches!(
            cli.command,
            Command::Promote { ref set, override_window: true } if set == "app"
        ));
        let cli = Cli::try_parse_from(["x", "promote", "app"]).unwrap();
        assert!(matches!(
            cli.command,
            Command::Promote {
                override_window: false,
                ..
            }
        ));
        let cli = Cli::try_parse_from(["x", "windows", "secset/db", "-o", "yaml"]).unwrap();
        assert!(matches!(cli.command, Command::Windows { ref set } if set == "secset/db"));
    }
}
