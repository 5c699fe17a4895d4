//! History: a due prune lists the pods once and spares a revision a pod still runs; nothing listed
//! when nothing is due; nothing pruned until history has listed.

use super::*;

/// A revision older than V1, for the pruning scenarios.
pub(crate) const V0: &str = "nginx-config-5b8c7x2vhq";

/// Revisions V0 (1), V1 (2) and V2 (3, current) of a set that keeps no unused old revision: V0 and V1
/// are both due to be pruned.
pub(crate) fn three_revisions(world: &mut World) -> ConfigMapSet {
    let mut set = nginx_set("2");
    set.spec.revision_history_limit = 0;
    for (content, name, number) in [("0", V0, 1), ("1", V1, 2)] {
        let mut old = new_revision(&nginx_set(content), name, number);
        old.metadata.uid = Some(format!("uid-{number}"));
        old.metadata.resource_version = Some(format!("4{number}"));
        world.add_revision(&old);
    }
    world.add_revision(&new_revision(&set, V2, 3));
    set.status = Some(cmset_api::ConfigMapSetStatus {
        revision: Some(3),
        ..Default::default()
    });
    world.add_set(&set);
    set
}

/// [`ok_responder`], whose Pods are the named ones, each reading the ConfigMap it is paired with.
pub(crate) fn pods_responder(set: ConfigMapSet, pods: &[(&str, &str)]) -> Responder {
    let items: Vec<Value> = pods
        .iter()
        .map(|(name, reads)| {
            json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": NS, "labels": {"cmset.dev/managed": "true"}},
                "spec": {"containers": [{"name": "app", "envFrom": [{"configMapRef": {"name": reads}}]}]},
                "status": {"phase": "Running"}
            })
        })
        .collect();
    let others = ok_responder(set);
    Arc::new(move |s: &Seen| match (s.method.as_str(), s.path.as_str()) {
        ("GET", "/api/v1/namespaces/team/pods") => (
            200,
            json!({"apiVersion": "v1", "kind": "PodList", "metadata": {"resourceVersion": "77"}, "items": items}),
        ),
        _ => others(s),
    })
}

#[tokio::test]
async fn a_due_prune_lists_the_managed_pods_once_and_spares_a_revision_a_pod_still_runs() {
    let mut world = World::new();
    let set = three_revisions(&mut world);
    // Deployment web was deleted with `--cascade=orphan`: its ReplicaSet is gone from the index, and
    // its orphaned Pod still runs V1.
    let respond = pods_responder(set.clone(), &[("web-7d4b9c-x2x9q", V1)]);
    let (result, seen) = scenario(&world, respond, |ctx| {
        set_controller::reconcile(Arc::new(set.clone()), ctx)
    })
    .await;
    result.unwrap();
    let lines: Vec<String> = seen.iter().map(Seen::line).collect();
    assert_eq!(
        lines,
        vec![
            "GET /api/v1/namespaces/team/pods".to_string(),
            format!("DELETE /api/v1/namespaces/team/configmaps/{V0}"),
            "PATCH /apis/cmset.dev/v1alpha1/namespaces/team/configmapsets/nginx-config/status".to_string(),
            "POST /apis/events.k8s.io/v1/namespaces/team/events".to_string(),
        ],
        "V1, which the orphaned Pod runs, is not deleted"
    );
    let query: BTreeMap<String, String> = url_query(&seen[0].query);
    assert_eq!(
        query,
        BTreeMap::from([
            ("labelSelector".to_string(), "cmset.dev/managed=true".to_string()),
            ("resourceVersion".to_string(), "0".to_string()),
        ]),
        "only the Pods of rewritten templates, from the API server's cache"
    );
    assert_eq!(seen[1].body["preconditions"]["uid"], "uid-1");
    // The version the plan saw: a revision changed since (an owner added by a ReplicaSet that names
    // it) is not deleted from a store that has not seen the change.
    assert_eq!(seen[1].body["preconditions"]["resourceVersion"], "41");
    assert_eq!(seen[3].body["reason"], "RevisionPruned");
    assert!(
        seen[3].body["note"].as_str().unwrap().contains(V0),
        "{}",
        seen[3].body
    );
}

#[tokio::test]
async fn a_set_with_nothing_to_prune_lists_no_pods() {
    let mut world = World::new();
    let mut set = three_revisions(&mut world);
    set.spec.revision_history_limit = 2;
    world.add_set(&set);
    let respond = pods_responder(set.clone(), &[]);
    let (result, seen) = scenario(&world, respond, |ctx| {
        set_controller::reconcile(Arc::new(set.clone()), ctx)
    })
    .await;
    result.unwrap();
    assert!(
        seen.iter()
            .all(|s| s.method != "DELETE" && !s.path.ends_with("/pods")),
        "{:?}",
        seen.iter().map(Seen::line).collect::<Vec<_>>()
    );
}

#[tokio::test]
async fn a_failed_list_of_pods_fails_the_reconcile_and_prunes_nothing() {
    let mut world = World::new();
    let set = three_revisions(&mut world);
    let others = ok_responder(set.clone());
    let respond: Responder = Arc::new(move |s: &Seen| {
        if s.path.ends_with("/pods") {
            (
                403,
                json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Forbidden", "code": 403}),
            )
        } else {
            others(s)
        }
    });
    let (result, seen) = scenario(&world, respond, |ctx| {
        set_controller::reconcile(Arc::new(set.clone()), ctx)
    })
    .await;
    let error = result.unwrap_err();
    assert_eq!(error.category(), "ListPods", "{error}");
    assert_eq!(
        seen.iter().map(Seen::line).collect::<Vec<_>>(),
        vec!["GET /api/v1/namespaces/team/pods"],
        "no delete, and no status that would claim the revisions pruned"
    );
}

#[tokio::test]
async fn until_history_has_listed_a_set_plans_but_prunes_nothing_and_keeps_what_was_in_use() {
    let mut world = World::before_history_lists();
    let mut set = three_revisions(&mut world);
    // The previous leader saw a ReplicaSet naming V1.
    let in_use = |name: &str, revision, in_use| cmset_api::RevisionStatus {
        name: name.to_string(),
        revision,
        in_use,
        failed: false,
    };
    set.status.as_mut().unwrap().history = vec![in_use(V1, 2, true)];
    world.add_set(&set);
    let (result, seen) = reconcile_set(&world, &set).await;
    result.unwrap();
    assert_eq!(
        seen.iter().map(Seen::line).collect::<Vec<_>>(),
        vec!["PATCH /apis/cmset.dev/v1alpha1/namespaces/team/configmapsets/nginx-config/status"],
        "no Pod list, no delete: history is not known yet"
    );
    let history = &seen[0].body["status"]["history"];
    assert_eq!(
        history,
        &json!([
            {"name": V2, "revision": 3, "inUse": false},
            {"name": V1, "revision": 2, "inUse": true},
            {"name": V0, "revision": 1, "inUse": false},
        ]),
        "V1 stays in use until history says otherwise"
    );

    // The history kinds list (nothing names V0 or V1): the set prunes.
    world.list_history();
    let (result, seen) = reconcile_set(&world, &set).await;
    result.unwrap();
    assert_eq!(
        seen.iter().map(Seen::line).collect::<Vec<_>>()[..3],
        [
            "GET /api/v1/namespaces/team/pods".to_string(),
            format!("DELETE /api/v1/namespaces/team/configmaps/{V0}"),
            format!("DELETE /api/v1/namespaces/team/configmaps/{V1}"),
        ]
    );
}

/// The pairs of a URL's query string, percent-decoded.
pub(crate) fn url_query(query: &str) -> BTreeMap<String, String> {
    let decode = |text: &str| {
        let mut bytes = Vec::new();
        let mut rest = text.as_bytes();
        while let Some((&b, tail)) = rest.split_first() {
            match (b, tail.get(..2)) {
                (b'%', Some(hex)) => {
                    let hex = std::str::from_utf8(hex).unwrap();
                    bytes.push(u8::from_str_radix(hex, 16).unwrap());
                    rest = &tail[2..];
                }
                _ => {
                    bytes.push(if b == b'+' { b' ' } else { b });
                    rest = tail;
                }
            }
        }
        String::from_utf8(bytes).unwrap()
    };
    query
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (decode(k), decode(v))
        })
        .collect()
}
