//! What `spec.validation` costs a reconcile: judging a 900 KiB JSON key against a schema, beside the
//! floor of merely parsing it (which any check of its content pays) and a set that declares no
//! validation. Prints the median of each over many runs, and the ratio to the floor measured in the same
//! run (the machines are shared and noisy: compare ratios, not milliseconds across runs).
//!
//! `cargo bench -p cmset-core --bench content_check` (or `make bench-validation`).

use std::collections::BTreeMap;
use std::hint::black_box;
use std::time::{Duration, Instant};

use cmset_api::{KeyValidation, ValidationSpec};
use cmset_core::content::content_check::{self, SchemaTexts};
use cmset_core::set::Content;
use serde_json::{Value, json};

const RUNS: usize = 41;

/// About 900 KiB of pretty-printed JSON: a list of service entries, each with a few typed fields.
fn document() -> String {
    let entries: Vec<Value> = (0..3_200)
        .map(|i| {
            json!({
                "name": format!("service-{i:05}"),
                "port": 1024 + i % 50_000,
                "tls": i % 2 == 0,
                "weight": (i % 100) as f64 / 100.0,
                "tags": ["edge", "internal", format!("zone-{}", i % 7)],
                "upstream": {"host": format!("backend-{i}.svc.cluster.local"), "timeoutSeconds": 30},
            })
        })
        .collect();
    serde_json::to_string_pretty(&json!({"version": 3, "services": entries})).unwrap()
}

fn schema() -> Value {
    json!({
        "type": "object",
        "required": ["version", "services"],
        "properties": {
            "version": {"type": "integer", "minimum": 1},
            "services": {"type": "array", "items": {
                "type": "object",
                "required": ["name", "port"],
                "additionalProperties": false,
                "properties": {
                    "name": {"type": "string", "pattern": "^[a-z0-9-]+$"},
                    "port": {"type": "integer", "minimum": 1, "maximum": 65535},
                    "tls": {"type": "boolean"},
                    "weight": {"type": "number", "minimum": 0, "maximum": 1},
                    "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": true},
                    "upstream": {"type": "object", "required": ["host"], "properties": {
                        "host": {"type": "string", "format": "hostname"},
                        "timeoutSeconds": {"type": "integer"},
                    }},
                },
            }},
        },
    })
}

fn median(mut f: impl FnMut()) -> Duration {
    f(); // warm up
    let mut times: Vec<Duration> = (0..RUNS)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed()
        })
        .collect();
    times.sort();
    times[RUNS / 2]
}

fn main() {
    let text = document();
    let data = BTreeMap::from([("services.json".to_string(), text.clone())]);
    let content = Content::ConfigMap {
        data: Some(&data),
        binary_data: None,
    };
    let spec = |schema: Option<Value>| ValidationSpec {
        keys: BTreeMap::from([(
            "*.json".to_string(),
            KeyValidation {
                schema,
                ..KeyValidation::default()
            },
        )]),
    };
    let with_schema = spec(Some(schema()));
    let format_only = spec(None);
    let none = ValidationSpec::default();
    let schemas = SchemaTexts::new();
    assert!(content_check::check(&with_schema, &content, &schemas, false).is_ok());

    let floor = median(|| {
        black_box(serde_json::from_str::<Value>(black_box(&text)).unwrap());
    });
    let cases = [
        (
            "no spec.validation",
            median(|| {
                black_box(content_check::check(&none, &content, &schemas, false)).unwrap();
            }),
        ),
        (
            "format json only",
            median(|| {
                black_box(content_check::check(&format_only, &content, &schemas, false)).unwrap();
            }),
        ),
        (
            "format json and schema",
            median(|| {
                black_box(content_check::check(&with_schema, &content, &schemas, false)).unwrap();
            }),
        ),
    ];
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "content_check: one {} KiB JSON key, median of {RUNS} runs (commit {}, release profile)",
        text.len() / 1024,
        option_env!("CMSET_COMMIT").unwrap_or("working tree"),
    );
    println!(
        "  {:<28} {:>9.3} ms  (floor: serde_json parse alone)",
        "floor",
        ms(floor)
    );
    for (name, time) in cases {
        if time < Duration::from_micros(1) {
            println!(
                "  {:<28} {:>9} ns  (returns before reading the content)",
                name,
                time.as_nanos()
            );
            continue;
        }
        println!(
            "  {:<28} {:>9.3} ms  {:>6.3}x floor",
            name,
            ms(time),
            time.as_secs_f64() / floor.as_secs_f64()
        );
    }
}
