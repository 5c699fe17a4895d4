//! Writes in time: the status apply carries the resourceVersion it was planned from; a conflict retried
//! quietly; a store behind its own write; nothing sent once the term as leader ended; backoff.

use super::*;

pub(crate) const SET_STATUS: &str =
    "PATCH /apis/cmset.dev/v1alpha1/namespaces/team/configmapsets/nginx-config/status";

/// A set whose revision exists and whose status is still to be written, as the store shows it at
/// resourceVersion 41.
pub(crate) fn set_at_41(world: &mut World) -> ConfigMapSet {
    let mut set = nginx_set("1");
    set.metadata.resource_version = Some("41".into());
    world.add_revision(&new_revision(&set, V1, 1));
    world.add_set(&set);
    set
}

/// The API server's answer to a write whose resourceVersion precondition failed.
pub(crate) fn conflict() -> (u16, Value) {
    (
        409,
        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Conflict", "code": 409,
            "message": "Operation cannot be fulfilled on configmapsets.cmset.dev \"nginx-config\": the object has been modified; please apply your changes to the latest version and try again"}),
    )
}

pub(crate) fn lines(seen: &[Seen]) -> Vec<String> {
    seen.iter().map(Seen::line).collect()
}

#[tokio::test]
async fn the_status_apply_carries_the_resource_version_it_was_planned_from() {
    let mut world = World::new();
    let set = set_at_41(&mut world);
    let (result, seen) = reconcile_set(&world, &set).await;
    result.unwrap();
    let status = seen
        .iter()
        .find(|s| s.line() == SET_STATUS)
        .expect("a status write");
    assert_eq!(status.body["metadata"], json!({"resourceVersion": "41"}));
    assert_eq!(status.body["kind"], "ConfigMapSet");
    assert_eq!(status.body["status"]["currentRevision"], V1);
    assert!(
        status.query.contains("fieldManager=cmset-controller"),
        "{}",
        status.query
    );
}

#[tokio::test]
async fn a_conflict_on_the_status_write_is_retried_quietly_with_backoff_and_sends_nothing_else() {
    use cmset_controller::engine::context::Reconciled;
    use cmset_controller::platform::backoff::{self, Failure};
    let mut world = World::new();
    let set = set_at_41(&mut world);
    let ok = ok_responder(set.clone());
    let respond: Responder = Arc::new(
        move |s: &Seen| {
            if s.line() == SET_STATUS { conflict() } else { ok(s) }
        },
    );
    let owned = Arc::new(set.clone());
    let id = (SetKind::ConfigMapSet, Key::new(NS, "nginx-config"));
    let ((result, retries, after), seen) = scenario(&world, respond, |ctx| async move {
        let result = set_controller::reconcile(owned.clone(), ctx.clone()).await;
        // The controller hands the error to its error policy; a writer fighting cmset would make it
        // conflict again and again.
        let retries: Vec<Action> = match &result {
            Err(error) => (0..2)
                .map(|_| set_controller::error_policy(owned.clone(), error, ctx.clone()))
                .collect(),
            Ok(_) => Vec::new(),
        };
        let label = |operation| cmset_controller::platform::metrics::WriteLabel { operation };
        let after = (
            ctx.metrics.writes.get_or_create(&label("write_status")).get(),
            ctx.metrics
                .write_conflicts
                .get_or_create(&label("write_status"))
                .get(),
            ctx.metrics
                .errors
                .get_or_create(&cmset_controller::platform::metrics::ErrorLabels {
                    controller: set_controller::NAME,
                    category: "WriteStatus",
                })
                .get(),
            // Nothing remembered of a write that did not happen: the next plan writes.
            ctx.behind_own_write(&id, (&*owned).into()),
        );
        (result, retries, after)
    })
    .await;
    let error = result.expect_err("a conflict");
    assert!(error.is_conflict(), "{error}");
    assert_eq!(
        lines(&seen),
        vec![SET_STATUS],
        "no event for a plan that was refused"
    );
    assert_eq!(
        after,
        (1, 1, 0, false),
        "(writes sent, conflicts, reconcile errors, behind)"
    );
    // Retried soon (the set's watch event plans again at once anyway), then later and later.
    let key = Reconciled::Set((SetKind::ConfigMapSet, Key::new(NS, "nginx-config")));
    let expected: Vec<Action> = (1..=2)
        .map(|count| {
            let failure = Failure {
                count,
                conflict: true,
                unreachable: false,
                retry_after: None,
            };
            Action::requeue(backoff::delay(failure, backoff::seed(&key, count)))
        })
        .collect();
    assert_eq!(retries, expected);
}

#[tokio::test]
async fn a_store_behind_its_own_status_write_plans_again_before_writing_status() {
    let mut world = World::new();
    let set = set_at_41(&mut world);
    let id = (SetKind::ConfigMapSet, Key::new(NS, "nginx-config"));
    // This process wrote another status planned from version 41, which the API server answered with
    // version 42; the store still shows 41.
    let earlier = cmset_api::ConfigMapSetStatus {
        observed_generation: Some(1),
        ..Default::default()
    };
    let wrote_earlier =
        |ctx: &EngineContext| ctx.remember_written(&id, (&set).into(), &earlier, Some("42".into()));
    let (result, seen) = scenario_after(&world, ok_responder(set.clone()), wrote_earlier, |ctx| {
        set_controller::reconcile(Arc::new(set.clone()), ctx)
    })
    .await;
    assert_eq!(
        result.unwrap(),
        Action::requeue(std::time::Duration::from_secs(1))
    );
    assert_no_requests(&seen);
    // Once the store shows version 42, the status planned from it is written, carrying 42.
    let mut caught_up = set.clone();
    caught_up.metadata.resource_version = Some("42".into());
    caught_up.status = Some(earlier.clone());
    world.add_set(&caught_up);
    let wrote_earlier =
        |ctx: &EngineContext| ctx.remember_written(&id, (&set).into(), &earlier, Some("42".into()));
    let (result, seen) = scenario_after(&world, ok_responder(caught_up.clone()), wrote_earlier, |ctx| {
        set_controller::reconcile(Arc::new(caught_up.clone()), ctx)
    })
    .await;
    result.unwrap();
    let status = seen
        .iter()
        .find(|s| s.line() == SET_STATUS)
        .expect("a status write");
    assert_eq!(status.body["metadata"]["resourceVersion"], "42");
}

#[tokio::test]
async fn nothing_is_sent_once_the_term_as_leader_has_ended() {
    use cmset_controller::platform::leader::Term;
    let mut world = World::new();
    let set = nginx_set("1");
    world.add_set(&set);
    world.add_deployment(&web("nginx-config", true));
    let ended = tokio::time::Instant::now() - std::time::Duration::from_millis(1);
    for term in [Term::until(Some(ended)), Term::until(None)] {
        let owned = set.clone();
        let ((result, counted), seen) = scenario_in(
            &world,
            ok_responder(set.clone()),
            |ctx| ctx.term = Some(term.clone()),
            |ctx| async move {
                let result = set_controller::reconcile(Arc::new(owned), ctx.clone()).await;
                let label = cmset_controller::platform::metrics::WriteLabel {
                    operation: "create_revision",
                };
                (result, ctx.metrics.writes.get_or_create(&label).get())
            },
        )
        .await;
        let error = result.expect_err("the revision cannot be created");
        assert!(error.is_term_ended(), "{error}");
        assert_no_requests(&seen);
        assert_eq!(counted, 0, "not sent, not counted");
    }
    // Nor does the workload controller move a Deployment it would move with the term running (see
    // a_workload_naming_the_bare_set_is_moved_with_one_guarded_json_patch).
    let mut world = World::new();
    let deployment = web("nginx-config", true);
    world.add_deployment(&deployment);
    let set = settle(&mut world, &nginx_set("1"));
    for term in [Term::until(Some(ended)), Term::until(None)] {
        let (result, seen) = scenario_in(
            &world,
            ok_responder(set.clone()),
            |ctx| ctx.term = Some(term),
            |ctx| {
                workload_controller::reconcile(WorkloadKind::Deployment, Arc::new(dynamic(&deployment)), ctx)
            },
        )
        .await;
        let error = result.expect_err("the Deployment cannot be patched");
        assert!(error.is_term_ended(), "{error}");
        assert_no_requests(&seen);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_in_flight_when_the_term_ends_is_cut_off() {
    use cmset_controller::platform::leader::Term;
    use std::time::Duration;
    let mut world = World::new();
    let set = set_at_41(&mut world);
    // The API server takes three seconds to answer the status write; the term ends in 300 ms.
    let ok = ok_responder(set.clone());
    let respond: Responder = Arc::new(move |s: &Seen| {
        if s.line() == SET_STATUS {
            std::thread::sleep(Duration::from_secs(3));
        }
        ok(s)
    });
    let end = tokio::time::Instant::now() + Duration::from_millis(300);
    let started = std::time::Instant::now();
    let (result, seen) = scenario_in(
        &world,
        respond,
        |ctx| ctx.term = Some(Term::until(Some(end))),
        |ctx| async move {
            let result = set_controller::reconcile(Arc::new(set.clone()), ctx).await;
            (result, started.elapsed())
        },
    )
    .await;
    let (result, took) = result;
    let error = result.expect_err("cut off");
    assert!(error.is_term_ended(), "{error}");
    assert!(
        took < Duration::from_secs(2),
        "returned at the end of the term, not with the answer: {took:?}"
    );
    assert_eq!(lines(&seen), vec![SET_STATUS], "no event after it");
}

#[tokio::test]
async fn a_failing_set_backs_off_exponentially_honours_retry_after_and_resets_on_success() {
    use cmset_controller::engine::context::Reconciled;
    use cmset_controller::platform::backoff::{self, Failure};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    let mut world = World::new();
    let set = nginx_set("1");
    world.add_set(&set);
    // Creates of the revision: three 500s, one 429 asking for 30 s, one success, then 500 again.
    let creates = Arc::new(AtomicUsize::new(0));
    let ok = ok_responder(set.clone());
    let counter = creates.clone();
    let respond: Responder = Arc::new(move |s: &Seen| {
        if s.method == "POST" && s.path.ends_with("/configmaps") {
            let failure = |code: u16, reason: &str, details: Value| {
                let status = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                    "reason": reason, "message": "injected", "code": code, "details": details});
                (code, status)
            };
            match counter.fetch_add(1, Ordering::SeqCst) {
                0..=2 | 5 => return failure(500, "InternalError", json!({})),
                3 => return failure(429, "TooManyRequests", json!({"retryAfterSeconds": 30})),
                _ => {}
            }
        }
        ok(s)
    });
    let object = Reconciled::Set((SetKind::ConfigMapSet, Key::new(NS, "nginx-config")));
    let expected = |count: u32, retry_after: Option<Duration>| {
        let failure = Failure {
            count,
            conflict: false,
            unreachable: false,
            retry_after,
        };
        Action::requeue(backoff::delay(failure, backoff::seed(&object, count)))
    };
    let counted = object.clone();
    let ((actions, counts), _seen) = scenario(&world, respond, |ctx| async move {
        let mut actions = Vec::new();
        let mut counts = Vec::new();
        for _ in 0..6 {
            let set = Arc::new(set.clone());
            let action = match set_controller::reconcile(set.clone(), ctx.clone()).await {
                Ok(action) => action,
                Err(e) => set_controller::error_policy(set, &e, ctx.clone()),
            };
            actions.push(action);
            counts.push(ctx.failures.count(&counted));
        }
        (actions, counts)
    })
    .await;
    assert_eq!(creates.load(Ordering::SeqCst), 6);
    assert_eq!(
        counts,
        vec![1, 2, 3, 4, 0, 1],
        "counted per failure, forgotten on success"
    );
    assert_eq!(actions[0], expected(1, None));
    assert_eq!(actions[1], expected(2, None));
    assert_eq!(actions[2], expected(3, None));
    assert_eq!(
        actions[3],
        Action::requeue(Duration::from_secs(30)),
        "the server's 30 s wins over 8 s"
    );
    assert_eq!(actions[5], expected(1, None), "back to the base after a success");
    // (The jitter's bounds, 80–100% of the doubled delay, are table-tested in `backoff`.)
    assert_ne!(actions[0], actions[1]);
}
