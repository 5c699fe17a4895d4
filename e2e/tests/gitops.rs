//! Living with a GitOps tool. Its manifest names the bare set and it re-applies that manifest on every
//! sync, with server-side apply under its own field manager. With cmset's admission webhook the object is
//! stored already rewritten, so a re-apply changes nothing: no ping-pong, no extra rollout, and a new
//! Deployment never gets a ReplicaSet for the bare name.

use std::collections::BTreeSet;
use std::time::Duration;

use cmset_e2e::fixtures::{
    Reads, app_config_revision, app_config_yaml, deployment_yaml, rollout_status, template_names, wait_names,
};
use cmset_e2e::{Operator, TestNamespace, eventually, stays};

/// The manifest as it is in Git: it names the set, never a revision.
fn manifest() -> String {
    deployment_yaml("web", &[Reads::EnvFrom("app-config")])
}

/// A sync as Argo CD and Flux do it: server-side apply under their own manager, forcing ownership.
fn gitops_apply(ns: &TestNamespace) {
    ns.try_kubectl(
        &[
            "apply",
            "--server-side",
            "--force-conflicts",
            "--field-manager=gitops",
            "-f",
            "-",
        ],
        Some(&manifest()),
    )
    .unwrap_or_else(|e| panic!("the GitOps re-apply must succeed: {e}"));
}

#[tokio::test]
async fn a_gitops_tool_reapplying_its_manifest_converges_without_ping_pong() {
    let ns = TestNamespace::new("gitops").await;
    // Serves the webhook, registered for this namespace (see `cmset_e2e::webhook`).
    let operator = Operator::start(&ns.name).await;

    ns.apply(&app_config_yaml("1", None));
    let v1 = app_config_revision("1");
    eventually("the set to be ready", || async {
        let ready = ns
            .set("app-config")
            .await
            .status?
            .conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        ready.then_some(())
    })
    .await;

    // Created through the webhook: stored already naming the revision, so the first ReplicaSet does too.
    gitops_apply(&ns);
    let created = ns.deployment("web").await;
    assert_eq!(
        template_names(&created),
        BTreeSet::from([v1.clone()]),
        "rewritten at admission"
    );
    assert_eq!(created.metadata.generation, Some(1));
    rollout_status(&ns, "deployment/web").await;
    let replica_sets = ns.replica_sets().await;
    assert_eq!(replica_sets.len(), 1, "no ReplicaSet for the bare name");

    // A sync re-applies the same manifest: nothing changes.
    gitops_apply(&ns);
    let after = ns.deployment("web").await;
    assert_eq!(
        after.metadata.generation,
        Some(1),
        "no new generation, no rollout"
    );
    assert_eq!(template_names(&after), BTreeSet::from([v1.clone()]));
    assert_eq!(ns.replica_sets().await.len(), 1);

    // The config changes; cmset rolls the Deployment once; the next sync changes nothing again.
    ns.apply(&app_config_yaml("2", None));
    let v2 = app_config_revision("2");
    wait_names(&ns, "web", &[&v2]).await;
    rollout_status(&ns, "deployment/web").await;
    let rolled = ns.deployment("web").await.metadata.generation;
    // An applier that does not force is told that cmset now manages that list, and nothing changes.
    let refused = ns
        .try_kubectl(
            &["apply", "--server-side", "--field-manager=gitops", "-f", "-"],
            Some(&manifest()),
        )
        .expect_err("an unforced apply of a field cmset manages is a conflict");
    assert!(
        refused.contains("cmset-controller") && refused.contains("envFrom"),
        "{refused}"
    );
    assert_eq!(ns.deployment("web").await.metadata.generation, rolled);
    // Several syncs. (One apply style, as a GitOps tool has: alternating client-side and server-side
    // apply would add and remove kubectl's last-applied annotation, and a Deployment's generation moves
    // with its annotations; that would be the two appliers' doing, not cmset's.)
    for _ in 0..3 {
        gitops_apply(&ns);
    }
    stays(
        "no ping-pong between the GitOps tool and cmset",
        Duration::from_secs(3),
        || async {
            let d = ns.deployment("web").await;
            d.metadata.generation == rolled && template_names(&d) == BTreeSet::from([v2.clone()])
        },
    )
    .await;
    assert_eq!(
        ns.replica_sets().await.len(),
        2,
        "exactly one rollout per config change"
    );
    assert!(operator.metric("cmset_admissions_total") >= 1.0);
}
