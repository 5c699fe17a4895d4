//! A long judgement of a set's content does not hold the engine: on the current-thread runtime the
//! engine runs on (and on a multi-thread one), other tasks go on while a reconcile judges.

use super::*;

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// `nginx_set` whose `config.json` lists 200 services, each of whose names must match one of
/// `patterns` (the last is theirs): with 300, compiling the schema and judging the content against it
/// take about half a second in a debug build, well within the controller's budget of 5 s (a plan
/// compiles the schema twice: checking the spec, then judging).
fn costly_set(patterns: usize) -> ConfigMapSet {
    let services: Vec<Value> = (0..200)
        .map(|i| json!({"name": format!("svc-{i:06}"), "port": 1024 + i}))
        .collect();
    let mut set = nginx_set("1");
    set.spec.template.data = Some(BTreeMap::from([(
        "config.json".to_string(),
        json!({ "services": services }).to_string(),
    )]));
    let mut names: Vec<Value> = (0..patterns - 1)
        .map(|n| json!({"properties": {"name": {"pattern": format!("^other{n}-[0-9]+$")}}, "required": ["name"]}))
        .collect();
    names.push(json!({"properties": {"name": {"pattern": "^svc-[0-9]{6}$"}}}));
    let rule: cmset_api::KeyValidation = serde_json::from_value(json!({"schema": {
        "type": "object",
        "properties": {"services": {"type": "array", "items": {
            "type": "object",
            "required": ["name", "port"],
            "properties": {"port": {"type": "integer", "minimum": 1, "maximum": 65535}},
            "anyOf": names
        }}}
    }}))
    .unwrap();
    set.spec.validation.keys.insert("*.json".into(), rule);
    set
}

/// How long judging `set`'s content takes by itself (its schema compiled).
fn judging_alone(set: &ConfigMapSet) -> Duration {
    let started = Instant::now();
    let content = cmset_core::set::Content::of_template(&set.spec.template);
    let judged =
        cmset_core::content::content_check::check(&set.spec.validation, &content, &Default::default(), false);
    assert!(judged.is_ok(), "{judged:?}");
    started.elapsed()
}

/// A `costly_set` whose judging takes at least 200 ms here (an optimized build judges faster), and
/// how long.
fn long_enough() -> (ConfigMapSet, Duration) {
    let mut patterns = 300;
    loop {
        let set = costly_set(patterns);
        let judging = judging_alone(&set);
        if judging >= Duration::from_millis(200) || patterns >= 10_000 {
            return (set, judging);
        }
        patterns *= 2;
    }
}

/// Reconciles `costly_set` while another task ticks every 5 ms, and asserts that the ticker went
/// on meanwhile: no gap between its ticks (or the reconcile's start and end) near the judgement's
/// length, and most of the ticks it was due.
async fn judge_while_ticking() {
    let (set, judging) = long_enough();
    // Otherwise the test proves nothing.
    assert!(
        judging >= Duration::from_millis(200),
        "the judgement took only {judging:?}"
    );
    let mut world = World::new();
    world.add_set(&set);
    let ticks = Arc::new(Mutex::new(Vec::new()));
    let ticker = tokio::spawn({
        let ticks = ticks.clone();
        async move {
            let mut every = tokio::time::interval(Duration::from_millis(5));
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                every.tick().await;
                ticks.lock().unwrap().push(Instant::now());
            }
        }
    });
    let owned = set.clone();
    let ((result, started, ended), seen) = scenario(&world, ok_responder(set.clone()), |ctx| async move {
        let started = Instant::now();
        let result = set_controller::reconcile(Arc::new(owned), ctx).await;
        (result, started, Instant::now())
    })
    .await;
    ticker.abort();
    result.expect("reconcile succeeds");
    assert_eq!(
        seen[0].line(),
        "POST /api/v1/namespaces/team/configmaps",
        "the content was judged valid, and its revision made"
    );

    let mut times: Vec<Instant> = ticks
        .lock()
        .unwrap()
        .iter()
        .copied()
        .filter(|t| (started..ended).contains(t))
        .collect();
    let ticked = times.len();
    times.insert(0, started);
    times.push(ended);
    let longest = times.windows(2).map(|w| w[1] - w[0]).max().unwrap();
    let took = ended - started;
    eprintln!(
        "judging alone {judging:?}; the reconcile took {took:?}, ticked {ticked} times, waited {longest:?} at most"
    );
    assert!(
        longest < judging / 2,
        "the ticker waited {longest:?} (judging takes {judging:?})"
    );
    let due = (took.as_millis() / 5) as usize;
    assert!(ticked >= due / 4, "ticked {ticked} times of {due} in {took:?}");
}

#[tokio::test(flavor = "current_thread")]
async fn a_long_judgement_does_not_hold_a_current_thread_runtime() {
    judge_while_ticking().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_judgement_does_not_hold_a_multi_thread_runtime() {
    judge_while_ticking().await;
}
