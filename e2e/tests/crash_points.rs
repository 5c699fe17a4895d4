//! Crash points: beyond random SIGKILLs (crash.rs), the operator is aborted at each write of a config
//! change in turn, just before it is sent and just after it was answered, then restarted. Every time
//! the cluster converges: the workloads on the new revision, one revision per content, nothing naming a
//! missing ConfigMap, history within its limit, the set Ready, and a rollback elsewhere still pinned.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use cmset_e2e::cmset_api::WorkloadState;
use cmset_e2e::fixtures::{
    DeploymentYaml, Reads, app_config_revision, app_config_yaml, rollout_status, set_yaml,
};
use cmset_e2e::invariants::{
    history_within_limit, nothing_names_a_missing_configmap, one_revision_per_content, ready_on,
    workload_state,
};
use cmset_e2e::{Operator, TestNamespace, eventually, kustomize_name};

const LIMIT: i32 = 2;

/// Writes of state so far, events aside.
fn state_writes(operator: &Operator) -> f64 {
    operator
        .writes_by_operation()
        .iter()
        .filter(|(op, _)| op.as_str() != "publish_event")
        .map(|(_, n)| n)
        .sum()
}

/// Waits until the operator's write count stops moving (the owner patch of new ReplicaSets is batched for
/// up to a second after the rest).
async fn writes_settle(operator: &Operator) -> f64 {
    let mut last = state_writes(operator);
    loop {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let now = state_writes(operator);
        if now == last {
            return now;
        }
        last = now;
    }
}

/// Waits for `version` everywhere, then checks the invariants; returns how long convergence took.
async fn converged(ns: &TestNamespace, version: u32) -> Duration {
    let started = Instant::now();
    let revision = app_config_revision(&version.to_string());
    eventually(&format!("the set to be Ready on version {version}"), || async {
        ready_on(&ns.set("app-config").await, &revision).then_some(())
    })
    .await;
    for d in ["web", "api"] {
        eventually(&format!("{d} to name version {version}"), || async {
            let names = cmset_e2e::fixtures::template_names(&ns.deployment(d).await);
            (names.len() == 1 && names.contains(&revision)).then_some(())
        })
        .await;
    }
    let took = started.elapsed();
    rollout_status(ns, "deployment/web").await;
    one_revision_per_content(ns, "app-config").await;
    nothing_names_a_missing_configmap(ns).await;
    history_within_limit(ns, "app-config").await;
    // The rollback of another set's workload survives every crash.
    let other = ns.set("other").await;
    assert_eq!(
        workload_state(&other, "pinned").map(|(state, _)| state),
        Some(WorkloadState::Pinned),
        "the rollback stays pinned"
    );
    took
}

fn other_yaml(version: &str) -> String {
    set_yaml("other", &[("OTHER", version)], None)
}

#[tokio::test]
async fn aborted_at_every_write_of_a_change_the_operator_converges_after_a_restart() {
    let ns = TestNamespace::new("crashpoints").await;
    let mut operator = Operator::start_without_webhook(&ns.name, &[]).await;
    ns.apply(&app_config_yaml("1", Some(LIMIT)));
    for d in ["web", "api"] {
        ns.apply(
            &DeploymentYaml::new(d, &[Reads::EnvFrom("app-config"), Reads::Volume("app-config")])
                .replicas(2)
                .yaml(),
        );
    }
    // A workload of another set, rolled back: it must stay pinned through everything below.
    ns.apply(&other_yaml("1"));
    ns.apply(&DeploymentYaml::new("pinned", &[Reads::EnvFrom("other")]).yaml());
    rollout_status(&ns, "deployment/pinned").await;
    ns.apply(&other_yaml("2"));
    let other_v2 = kustomize_name("other", &[("OTHER", "2")]);
    eventually("pinned to move to other's second version", || async {
        cmset_e2e::fixtures::template_names(&ns.deployment("pinned").await)
            .contains(&other_v2)
            .then_some(())
    })
    .await;
    rollout_status(&ns, "deployment/pinned").await;
    ns.kubectl(&["rollout", "undo", "deployment/pinned"]);
    eventually("the rollback to be pinned", || async {
        (workload_state(&ns.set("other").await, "pinned").map(|(s, _)| s) == Some(WorkloadState::Pinned))
            .then_some(())
    })
    .await;

    // Past the history limit, so that every change also prunes: its writes are then the same each time.
    let mut version = 1;
    while version < 4 {
        version += 1;
        ns.apply(&app_config_yaml(&version.to_string(), Some(LIMIT)));
        converged(&ns, version).await;
    }
    let before = writes_settle(&operator).await;
    version += 1;
    ns.apply(&app_config_yaml(&version.to_string(), Some(LIMIT)));
    converged(&ns, version).await;
    let per_change = (writes_settle(&operator).await - before) as u64;
    eprintln!(
        "one change costs {per_change} writes of state: {:?}",
        operator.writes_by_operation()
    );
    assert!(per_change >= 4, "a revision, two workloads and a status at least");
    operator.stop().await;

    let mut report = BTreeMap::new();
    for write in 1..=per_change {
        for when in ["before", "after"] {
            version += 1;
            ns.apply(&app_config_yaml(&version.to_string(), Some(LIMIT)));
            let mut crashing = Operator::start_crashing(&ns.name, &format!("{write}:{when}")).await;
            let status = crashing.wait_exit(Duration::from_secs(60)).await;
            let aborted = status.is_some_and(|s| !s.success());
            if !aborted {
                // The change needed fewer writes this time (nothing left to prune, say): nothing to test.
                crashing.kill().await;
            }
            let log = std::fs::read_to_string(crashing.log_path()).unwrap_or_default();
            let at = log
                .lines()
                .rev()
                .find_map(|l| l.split_once("aborting ").map(|(_, rest)| rest.to_string()))
                .unwrap_or_else(|| "no abort".to_string());
            let mut restarted = Operator::start_without_webhook(&ns.name, &[]).await;
            let took = converged(&ns, version).await;
            restarted.stop().await;
            eprintln!("crash {write}:{when} ({at}): converged {took:?} after the restart");
            report.insert((write, when), (aborted, at, took));
        }
    }
    let aborted = report.values().filter(|(a, _, _)| *a).count();
    eprintln!("{aborted} of {} crash points reached", report.len());
    assert!(
        aborted as u64 >= per_change,
        "most crash points must be reached: {report:?}"
    );
}
