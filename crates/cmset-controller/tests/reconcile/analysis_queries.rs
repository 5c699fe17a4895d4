//! Analysis queries: measured off the reconcile path, bounded when Prometheus hangs, dropped when the
//! rollout moved on or the set went.

use super::*;

/// A Prometheus on 127.0.0.1 that records the decoded query of every request and answers 0 once its
/// gate lets it (at once, when released, or never), counting the queries it holds open.
pub(crate) struct FakePrometheus {
    pub(crate) url: String,
    pub(crate) queries: Arc<std::sync::Mutex<Vec<String>>>,
    /// Permits to answer: one per answer.
    pub(crate) gate: Arc<tokio::sync::Semaphore>,
    pub(crate) open: Arc<std::sync::atomic::AtomicUsize>,
    pub(crate) most_open: Arc<std::sync::atomic::AtomicUsize>,
}

impl FakePrometheus {
    /// Answers every query at once.
    pub(crate) async fn answering() -> Self {
        Self::start(tokio::sync::Semaphore::MAX_PERMITS).await
    }

    /// Holds every query until [`FakePrometheus::release`]: unreachable, as far as a client can tell.
    pub(crate) async fn hanging() -> Self {
        Self::start(0).await
    }

    pub(crate) async fn start(permits: usize) -> Self {
        use std::sync::atomic::Ordering::SeqCst;
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let fake = Self {
            url: format!("http://{address}"),
            queries: Default::default(),
            gate: Arc::new(tokio::sync::Semaphore::new(permits)),
            open: Default::default(),
            most_open: Default::default(),
        };
        let (queries, gate, open, most_open) = (
            fake.queries.clone(),
            fake.gate.clone(),
            fake.open.clone(),
            fake.most_open.clone(),
        );
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let (queries, gate, open, most_open) =
                    (queries.clone(), gate.clone(), open.clone(), most_open.clone());
                tokio::spawn(async move {
                    let mut head = Vec::new();
                    let mut byte = [0u8; 1];
                    while !head.ends_with(b"\r\n\r\n") {
                        if stream.read(&mut byte).await.unwrap_or(0) == 0 {
                            return;
                        }
                        head.push(byte[0]);
                    }
                    let head = String::from_utf8_lossy(&head).into_owned();
                    let target = head.split(' ').nth(1).unwrap_or_default();
                    let encoded = target
                        .split_once("query=")
                        .map(|(_, q)| q.split('&').next().unwrap_or_default())
                        .unwrap_or_default();
                    let query = percent_encoding::percent_decode_str(&encoded.replace('+', " "))
                        .decode_utf8_lossy()
                        .into_owned();
                    queries.lock().unwrap().push(query);
                    let now_open = open.fetch_add(1, SeqCst) + 1;
                    most_open.fetch_max(now_open, SeqCst);
                    // Answer when let, unless the client gave up (closed the connection) first.
                    let answer = tokio::select! {
                        permit = gate.acquire() => permit.map(|p| p.forget()).is_ok(),
                        _ = stream.read(&mut byte) => false,
                    };
                    open.fetch_sub(1, SeqCst);
                    if !answer {
                        return;
                    }
                    let body = r#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1800000000,"0"]}]}}"#;
                    let response = format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = stream.write_all(response.as_bytes()).await;
                    let _ = stream.shutdown().await;
                });
            }
        });
        fake
    }

    pub(crate) fn release(&self, answers: usize) {
        self.gate.add_permits(answers);
    }

    pub(crate) fn queries(&self) -> Vec<String> {
        let mut sent = self.queries.lock().unwrap().clone();
        sent.sort();
        sent
    }

    /// The most queries it held open at once.
    pub(crate) fn most_open(&self) -> usize {
        self.most_open.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// A measurer asking it, `concurrency` queries at a time, each given up after `timeout`.
    pub(crate) fn measurer(
        &self,
        world: &World,
        concurrency: usize,
        timeout: std::time::Duration,
    ) -> Arc<cmset_controller::reconcile::measurer::Measurer> {
        let config = cmset_controller::reconcile::prometheus::PrometheusConfig {
            timeout,
            ..cmset_controller::reconcile::prometheus::PrometheusConfig::new(self.url.clone())
        };
        let prometheus = cmset_controller::reconcile::prometheus::Prometheus::new(config).unwrap();
        cmset_controller::reconcile::measurer::Measurer::new(
            Arc::new(prometheus),
            concurrency,
            world.index.clone(),
            fixed_clock(),
        )
    }
}

/// Waits up to 5 s for `holds`.
pub(crate) async fn eventually(what: &str, holds: impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while !holds() {
        assert!(std::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

/// A context on the mocked API answering with `respond`, measuring with `measurer`.
pub(crate) fn analysis_context(
    world: &World,
    respond: Responder,
    measurer: &Arc<cmset_controller::reconcile::measurer::Measurer>,
) -> (
    Arc<Context>,
    tokio::task::JoinHandle<()>,
    Arc<std::sync::Mutex<Vec<Seen>>>,
) {
    let (client, server, seen) = mock_client(respond, NS);
    let mut ctx = Context::new(EngineContext::new(
        client,
        world.index.clone(),
        world.stores.clone(),
        Arc::new(Metrics::default()),
        fixed_clock(),
        None,
    ));
    ctx.measurer = Some(measurer.clone());
    (Arc::new(ctx), server, seen)
}

/// The set, settled on its first revision with the Deployments `workloads` healthy in wave 0, whose
/// rollout is analysed with `templates` (now in wave 0's stabilization window).
pub(crate) fn analysed_set(world: &mut World, workloads: &[&str], templates: &[&str]) -> ConfigMapSet {
    for name in workloads {
        world.add_deployment(&healthy(waved(name, V1, None)));
    }
    let mut set = nginx_set("1");
    let analysis: Vec<Value> = templates.iter().map(|t| json!({"template": t})).collect();
    set.spec.rollout =
        Some(serde_json::from_value(json!({"stabilizationSeconds": 300, "analysis": analysis})).unwrap());
    let settled = settle(world, &set);
    let rollout = settled.status.as_ref().unwrap().rollout.clone().unwrap();
    assert!(
        rollout.wave_healthy_since.is_some(),
        "wave 0 is in its window: {rollout:?}"
    );
    settled
}

/// The template that measures each workload's restarts.
pub(crate) fn restarts_template() -> Value {
    json!({"query": r#"max(restarts{namespace="{{namespace}}",{{workload.kind}}=~"{{workload.name}}-.*"})"#,
           "successCondition": "result == 0", "intervalSeconds": 10})
}

/// The status `seen` wrote last, as a set with it.
pub(crate) fn with_written_status(set: &ConfigMapSet, seen: &[Seen]) -> ConfigMapSet {
    let patch = seen
        .iter()
        .rfind(|s| s.method == "PATCH" && s.path.ends_with("/status"))
        .expect("the status is written");
    let mut written = set.clone();
    written.status = Some(serde_json::from_value(patch.body["status"].clone()).unwrap());
    written
}

pub(crate) fn no_template_read(seen: &[Seen]) {
    let read: Vec<String> = seen
        .iter()
        .filter(|s| s.path.contains("analysistemplates"))
        .map(Seen::line)
        .collect();
    assert!(read.is_empty(), "templates come from the watch's store: {read:?}");
}

/// A namespace admin can write the set's status: what it says of the workloads (names, kinds, waves)
/// and of the analysis runs (queries, workloads, waves) changes no query the operator sends to
/// Prometheus, and the runs it made up are not written back.
#[tokio::test]
async fn a_status_rewritten_by_the_namespace_changes_no_query_sent_to_prometheus() {
    let mut world = World::new();
    let mut tampered = analysed_set(&mut world, &["first"], &["restarts", "per-wave"]);
    world.add_template("restarts", restarts_template());
    world.add_template(
        "per-wave",
        json!({"query": r#"up{namespace="{{namespace}}",revision="{{revision}}",wave="{{wave}}"}"#,
               "successCondition": "result == 0", "intervalSeconds": 10}),
    );

    let injected = r#"x"} or count(kube_secret_info) or {a=""#;
    let status = tampered.status.as_mut().unwrap();
    for entry in &mut status.workloads {
        entry.name = injected.into();
        entry.kind = "Secret".into();
    }
    let forged = |template: &str, wave: i32, query: &str| cmset_api::AnalysisRunStatus {
        template: template.into(),
        workload_kind: Some("Secret".into()),
        workload: Some(injected.into()),
        wave,
        query: query.into(),
        condition: "result == 0".into(),
        ..Default::default()
    };
    status.rollout.as_mut().unwrap().analysis = vec![
        forged("restarts", 0, "count(kube_secret_info)"),
        forged("per-wave", 0, r#"up{namespace="kube-system"}"#),
        forged("restarts", 1, "kube_secret_info"),
    ];
    world.add_set(&tampered);

    let prometheus = FakePrometheus::answering().await;
    let measurer = prometheus.measurer(&world, 4, std::time::Duration::from_secs(5));
    let (ctx, server, seen) = analysis_context(&world, ok_responder(tampered.clone()), &measurer);
    // The first reconcile hands the due queries over; the second records their answers. The status
    // stays as the namespace rewrote it throughout.
    set_controller::reconcile(Arc::new(tampered.clone()), ctx.clone())
        .await
        .unwrap();
    eventually("both queries answered", || measurer.sizes() == (0, 2)).await;
    set_controller::reconcile(Arc::new(tampered), ctx).await.unwrap();
    server_ends(server).await;

    let derived = vec![
        r#"max(restarts{namespace="team",Deployment=~"first-.*"})"#.to_string(),
        format!(r#"up{{namespace="team",revision="{V1}",wave="0"}}"#),
    ];
    assert_eq!(
        prometheus.queries(),
        derived,
        "only the queries cmset derives reach Prometheus"
    );

    let seen = seen.lock().unwrap().clone();
    no_template_read(&seen);
    let patch = seen
        .iter()
        .rfind(|s| s.method == "PATCH" && s.path.ends_with("/status"))
        .expect("the status is written");
    let runs = patch.body["status"]["rollout"]["analysis"].as_array().unwrap();
    let mut written: Vec<String> = runs
        .iter()
        .map(|r| r["query"].as_str().unwrap().to_string())
        .collect();
    written.sort();
    assert_eq!(written, derived, "the made-up runs are dropped: {runs:?}");
    assert!(runs.iter().all(|r| r["measurements"] == 1), "{runs:?}");
    let entries = patch.body["status"]["workloads"].as_array().unwrap();
    assert_eq!(entries[0]["name"], "first");
    assert_eq!(entries[0]["kind"], "Deployment");
}

/// A reconcile never waits for Prometheus: it hands the due query to the measurer, writes what it
/// knows (the run, not measured yet), and returns. When the answer comes the set is asked to
/// reconcile, and that reconcile records it, at the time it came; the one after drops it from memory.
#[tokio::test]
async fn a_due_query_is_measured_off_the_reconcile_path_and_its_answer_reconciles_the_set() {
    let (mut world, mut triggers) = World::leading();
    let set = analysed_set(&mut world, &["first"], &["restarts"]);
    world.add_template("restarts", restarts_template());
    let prometheus = FakePrometheus::hanging().await;
    let measurer = prometheus.measurer(&world, 4, std::time::Duration::from_secs(30));
    let (ctx, server, seen) = analysis_context(&world, ok_responder(set.clone()), &measurer);

    let started = std::time::Instant::now();
    let action = set_controller::reconcile(Arc::new(set.clone()), ctx.clone())
        .await
        .unwrap();
    let took = started.elapsed();
    eprintln!("a reconcile with a due query, Prometheus not answering: {took:?}");
    assert!(took < std::time::Duration::from_secs(2), "{took:?}");
    assert_eq!(
        action,
        Action::requeue(std::time::Duration::from_secs(30)),
        "its answer (or the query's timeout) brings the set back, not a busy loop"
    );
    eventually("the query reached Prometheus", || prometheus.queries().len() == 1).await;
    assert_eq!(measurer.sizes(), (1, 0));
    let first: Vec<Seen> = seen.lock().unwrap().drain(..).collect();
    assert_eq!(
        first.iter().map(Seen::line).collect::<Vec<_>>(),
        vec!["PATCH /apis/cmset.dev/v1alpha1/namespaces/team/configmapsets/nginx-config/status"],
        "the run is written, not measured yet"
    );
    no_template_read(&first);
    let runs = &first[0].body["status"]["rollout"]["analysis"];
    assert_eq!(runs[0]["measurements"], 0, "{runs}");
    let written = with_written_status(&set, &first);
    world.add_set(&written);

    // A reconcile meanwhile (a watch event) sends the query again no more.
    set_controller::reconcile(Arc::new(written.clone()), ctx.clone())
        .await
        .unwrap();
    assert_no_requests(&seen.lock().unwrap());

    while triggers.sets.try_recv().is_ok() {}
    prometheus.release(1);
    let woken = tokio::time::timeout(std::time::Duration::from_secs(5), triggers.sets.next())
        .await
        .expect("the answer asks for a reconcile")
        .unwrap();
    assert_eq!(woken.name, "nginx-config");
    assert_eq!(woken.namespace.as_deref(), Some(NS));
    assert_eq!(measurer.sizes(), (0, 1));

    set_controller::reconcile(Arc::new(written.clone()), ctx.clone())
        .await
        .unwrap();
    let second: Vec<Seen> = seen.lock().unwrap().drain(..).collect();
    assert_eq!(
        second.iter().map(Seen::line).collect::<Vec<_>>(),
        vec!["PATCH /apis/cmset.dev/v1alpha1/namespaces/team/configmapsets/nginx-config/status"]
    );
    let run = &second[0].body["status"]["rollout"]["analysis"][0];
    assert_eq!(run["measurements"], 1, "{run}");
    assert_eq!(run["lastValue"], "0", "{run}");
    assert_eq!(
        run["lastMeasuredAt"], "2027-01-15T08:00:00Z",
        "when the answer came: {run}"
    );
    assert_eq!(prometheus.queries().len(), 1, "measured once");

    // Written: the next plan finds it counted, and it leaves memory.
    let recorded = with_written_status(&set, &second);
    world.add_set(&recorded);
    set_controller::reconcile(Arc::new(recorded), ctx).await.unwrap();
    assert_no_requests(&seen.lock().unwrap());
    assert_eq!(measurer.sizes(), (0, 0));
    drop(world);
    server_ends(server).await;
}

/// A Prometheus that never answers holds neither the reconcile of the set whose analysis waits on
/// it nor another set's revision, and the measurer never has more queries in flight than its bound:
/// the rest wait their turn, and each turn ends at the query's timeout.
#[tokio::test]
async fn a_hanging_prometheus_delays_no_other_set_and_queries_in_flight_stay_bounded() {
    let mut world = World::new();
    let analysed = analysed_set(&mut world, &["first", "second", "third"], &["restarts"]);
    world.add_template("restarts", restarts_template());
    let mut plain = nginx_set("1");
    plain.metadata.name = Some("plain".into());
    plain.metadata.uid = Some("plain-uid".into());
    world.add_set(&plain);
    let prometheus = FakePrometheus::hanging().await;
    let timeout = std::time::Duration::from_millis(600);
    let measurer = prometheus.measurer(&world, 2, timeout);
    let (ctx, server, seen) = analysis_context(&world, ok_responder(analysed.clone()), &measurer);

    let started = std::time::Instant::now();
    set_controller::reconcile(Arc::new(analysed.clone()), ctx.clone())
        .await
        .unwrap();
    let analysed_took = started.elapsed();
    let started = std::time::Instant::now();
    set_controller::reconcile(Arc::new(plain), ctx.clone())
        .await
        .unwrap();
    let plain_took = started.elapsed();
    eprintln!(
        "Prometheus hanging: reconcile of the analysed set {analysed_took:?}, of the plain set {plain_took:?}"
    );
    assert!(
        analysed_took < std::time::Duration::from_millis(500),
        "{analysed_took:?}"
    );
    assert!(
        plain_took < std::time::Duration::from_millis(500),
        "{plain_took:?}"
    );
    // The plain set's Event goes out from a task of its own, after its status.
    eventually("the plain set's Event", || seen.lock().unwrap().len() == 4).await;
    let lines: Vec<String> = seen.lock().unwrap().iter().map(Seen::line).collect();
    assert_eq!(
        lines,
        vec![
            "PATCH /apis/cmset.dev/v1alpha1/namespaces/team/configmapsets/nginx-config/status",
            "POST /api/v1/namespaces/team/configmaps",
            "PATCH /apis/cmset.dev/v1alpha1/namespaces/team/configmapsets/plain/status",
            "POST /apis/events.k8s.io/v1/namespaces/team/events",
        ],
        "the plain set's revision is made while the analysed set's queries hang"
    );
    eventually("two queries in flight", || prometheus.queries().len() == 2).await;
    assert_eq!(measurer.sizes(), (3, 0), "three due, one waiting for its turn");

    // Each turn ends at the timeout: the third query goes out then, never a third at once.
    eventually("every query given up on", || measurer.sizes() == (0, 3)).await;
    let asked = prometheus.queries();
    assert_eq!(asked.len(), 3, "{asked:?}");
    assert_eq!(
        prometheus.most_open(),
        2,
        "at most --analysis-concurrency queries in flight"
    );
    drop(ctx);
    server_ends(server).await;
}

/// What the measurer keeps of a set stays bounded: a set that no longer asks for analysis, or is being
/// deleted, has nothing kept, and an answer that comes for it afterwards is dropped, waking nothing.
#[tokio::test]
async fn a_set_deleted_or_no_longer_analysed_leaves_no_measurement_behind() {
    let (mut world, mut triggers) = World::leading();
    let set = analysed_set(&mut world, &["first"], &["restarts"]);
    world.add_template("restarts", restarts_template());
    let prometheus = FakePrometheus::hanging().await;
    let measurer = prometheus.measurer(&world, 4, std::time::Duration::from_secs(30));
    let (ctx, server, _seen) = analysis_context(&world, ok_responder(set.clone()), &measurer);

    // Answered, then the spec drops its analysis: the next reconcile forgets the answer.
    set_controller::reconcile(Arc::new(set.clone()), ctx.clone())
        .await
        .unwrap();
    eventually("the query reached Prometheus", || prometheus.queries().len() == 1).await;
    prometheus.release(1);
    eventually("the answer is kept", || measurer.sizes() == (0, 1)).await;
    let mut plain = set.clone();
    plain.spec.rollout.as_mut().unwrap().analysis.clear();
    set_controller::reconcile(Arc::new(plain), ctx.clone())
        .await
        .unwrap();
    assert_eq!(measurer.sizes(), (0, 0));

    // In flight when the set goes: its answer, when it comes, is dropped and reconciles nothing.
    set_controller::reconcile(Arc::new(set.clone()), ctx.clone())
        .await
        .unwrap();
    eventually("the query reached Prometheus again", || {
        prometheus.queries().len() == 2
    })
    .await;
    assert_eq!(measurer.sizes(), (1, 0));
    let mut deleted = set.clone();
    deleted.metadata.deletion_timestamp = Some(fixed_clock()());
    set_controller::reconcile(Arc::new(deleted), ctx.clone())
        .await
        .unwrap();
    assert_eq!(measurer.sizes(), (0, 0));
    while triggers.sets.try_recv().is_ok() {}
    prometheus.release(1);
    eventually("Prometheus answered", || {
        prometheus.gate.available_permits() == 0
            && prometheus.open.load(std::sync::atomic::Ordering::SeqCst) == 0
    })
    .await;
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert_eq!(measurer.sizes(), (0, 0), "the answer is dropped");
    assert!(triggers.sets.try_recv().is_err(), "and wakes nothing");
    drop(ctx);
    server_ends(server).await;
}

/// An answer for a rollout the set has since moved on from (another revision) is recorded on no run
/// of the new one, and dropped.
#[tokio::test]
async fn an_answer_for_a_rollout_that_moved_on_is_dropped_not_recorded() {
    let mut world = World::new();
    let set = analysed_set(&mut world, &["first"], &["restarts"]);
    world.add_template("restarts", restarts_template());
    let prometheus = FakePrometheus::answering().await;
    let measurer = prometheus.measurer(&world, 4, std::time::Duration::from_secs(30));
    let (ctx, server, seen) = analysis_context(&world, ok_responder(set.clone()), &measurer);
    set_controller::reconcile(Arc::new(set.clone()), ctx.clone())
        .await
        .unwrap();
    eventually("the answer is kept", || measurer.sizes() == (0, 1)).await;
    seen.lock().unwrap().clear();

    let mut moved = changed_with_revision(&mut world, &set, "2", V2);
    moved.spec.rollout = set.spec.rollout.clone();
    world.add_set(&moved);
    set_controller::reconcile(Arc::new(moved), ctx.clone())
        .await
        .unwrap();
    assert_eq!(measurer.sizes(), (0, 0), "dropped");
    let seen = seen.lock().unwrap().clone();
    let patch = seen
        .iter()
        .rfind(|s| s.method == "PATCH" && s.path.ends_with("/status"))
        .expect("the new rollout is written");
    let rollout = &patch.body["status"]["rollout"];
    assert_eq!(rollout["revision"], V2, "{rollout}");
    let runs = rollout["analysis"].as_array().cloned().unwrap_or_default();
    assert!(
        runs.iter().all(|r| r["measurements"].as_i64().unwrap_or(0) == 0),
        "nothing of the old rollout's answer: {runs:?}"
    );
    assert_eq!(prometheus.queries().len(), 1);
    drop(ctx);
    server_ends(server).await;
}
