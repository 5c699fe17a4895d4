//! A tenant cannot stall a bystander with costly sets (issue 48, item 3). A tenant with `edit` and
//! `cmset-edit` keeps applying sets whose content is large and whose schemas are built to hurt a
//! backtracking engine (nested quantifiers over tens of thousands of strings), and sets whose patterns
//! need backtracking (refused at once, by name). Meanwhile a bystander's set, itself validated, is
//! changed: its apply is answered, its change rolls out, and the operator stays ready throughout.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use cmset_e2e::fixtures::{DeploymentYaml, Reads};
use cmset_e2e::rollout_wait::wait_reads;
use cmset_e2e::tenant::Tenant;
use cmset_e2e::{Operator, TestNamespace, http_get, kustomize_name};

/// A set whose content is `count` strings of letters and digits, and whose schema matches each with a
/// nested quantifier: exponential for a backtracking engine on the one string that fails at its end.
fn costly_set(name: &str, round: usize, count: usize) -> String {
    let mut items: Vec<String> = (0..count)
        .map(|i| format!("\"{}{i}\"", "abcdefghij".repeat(2)))
        .collect();
    items.push(format!("\"{}!{round}\"", "a".repeat(40)));
    let json = format!("[{}]", items.join(","));
    format!(
        "apiVersion: cmset.dev/v1alpha1\nkind: ConfigMapSet\nmetadata:\n  name: {name}\nspec:\n  validation:\n    keys:\n      big.json:\n        schema: {{items: {{type: string, pattern: '^([a-z]+[0-9]*)+$'}}}}\n  template:\n    data:\n      big.json: '{json}'\n"
    )
}

fn backtracking_set(name: &str) -> String {
    format!(
        "apiVersion: cmset.dev/v1alpha1\nkind: ConfigMapSet\nmetadata:\n  name: {name}\nspec:\n  validation:\n    keys:\n      a.json:\n        schema: {{pattern: '^(a+)\\1$'}}\n  template:\n    data:\n      a.json: '\"aa\"'\n"
    )
}

/// The bystander's set, validated too (so its admission needs a judge), at `version`.
fn bystander(version: &str) -> String {
    format!(
        "apiVersion: cmset.dev/v1alpha1\nkind: ConfigMapSet\nmetadata:\n  name: app-config\nspec:\n  validation:\n    keys:\n      app.properties:\n        schema: {{required: [version]}}\n  template:\n    data:\n      app.properties: 'version={version}'\n"
    )
}

fn bystander_revision(version: &str) -> String {
    kustomize_name("app-config", &[("app.properties", &format!("version={version}"))])
}

#[tokio::test]
async fn a_tenants_costly_sets_do_not_stall_a_bystanders_change() {
    let ns = TestNamespace::new("flood").await;
    // Sets are sent to the webhook for validation, as in the default install.
    let operator = Operator::start_validating_windows(&ns.name, &[]).await;
    let tenant = Tenant::bind(&ns, "mallory");
    ns.apply(&bystander("1"));
    ns.apply(&DeploymentYaml::new("web", &[Reads::EnvFrom("app-config")]).yaml());
    wait_reads(&ns, "web", &bystander_revision("1")).await;

    // A backtracking pattern is refused at apply, naming it.
    let refused = tenant
        .try_kubectl(&["apply", "-f", "-"], Some(&backtracking_set("bad")))
        .expect_err("refused");
    assert!(
        refused.contains("pattern at /pattern uses a backreference"),
        "{refused}"
    );

    // The flood: three writers, each re-applying a costly set with new content, as fast as they can.
    let flooding = Arc::new(AtomicBool::new(true));
    let mut writers = Vec::new();
    for writer in 0..3 {
        let (flooding, tenant) = (flooding.clone(), Tenant::bind(&ns, "mallory"));
        writers.push(std::thread::spawn(move || {
            let mut applies = 0;
            while flooding.load(Ordering::SeqCst) {
                let set = costly_set(&format!("costly-{writer}"), applies, 15_000);
                let _ = tenant.try_kubectl(&["apply", "-f", "-"], Some(&set));
                applies += 1;
            }
            applies
        }));
    }
    tokio::time::sleep(Duration::from_secs(3)).await;

    // The bystander's change, during the flood: answered, rolled out; the operator stays ready.
    let mut answered = Vec::new();
    for version in ["2", "3", "4"] {
        let started = Instant::now();
        ns.apply(&bystander(version));
        answered.push(started.elapsed());
        let moved = Instant::now();
        wait_reads(&ns, "web", &bystander_revision(version)).await;
        let ready = http_get(operator.metrics_port, "/readyz").map(|(code, _)| code);
        assert_eq!(ready, Some(200), "the operator stays ready");
        eprintln!(
            "bystander v{version}: apply answered in {:?}, rolled out {:?} later",
            answered.last().unwrap(),
            moved.elapsed()
        );
    }
    flooding.store(false, Ordering::SeqCst);
    let applies: usize = writers.into_iter().map(|w| w.join().unwrap()).sum();
    eprintln!("the tenant applied {applies} costly sets meanwhile");
    assert!(applies >= 3, "the flood ran: {applies}");
    let slowest = answered.iter().max().unwrap();
    assert!(
        *slowest < Duration::from_secs(3),
        "a bystander's apply waited {slowest:?}: {answered:?}"
    );
}
