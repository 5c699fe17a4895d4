//! Properties of metric analysis (the tables in `src/analysis/tests.rs` pin each rule):
//! - a run never counts more than `failureLimit + 1` failures, and is `Failed` once it exceeds the limit;
//! - a run whose last measurement is inconclusive is never `Passed`, and `Passed` needs the window over;
//! - a measurement passes only when every sample holds, and fails only on a sample that does not;
//! - no argument reaches `{{namespace}}`, and resolving and rendering are deterministic;
//! - every forbidden character in an argument is rejected, by name, and any other value is rendered
//!   as it is;
//! - any value at all, written into a double-quoted string, reads back as exactly itself and never ends
//!   the string; in a matcher's regular expression it matches exactly itself;
//! - an untyped argument outside a double-quoted string is refused, naming the argument; a value that
//!   passes as a duration or a number holds nothing but letters, digits, `.`, `+` and `-`;
//! - the condition parser accepts exactly what the CRD's pattern does, and shows a condition so that it
//!   parses back the same;
//! - a value shown in status reads back exactly, and no answer from Prometheus makes the parser panic.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use cmset_api::analysis::SUCCESS_CONDITION_PATTERN;
use cmset_api::{AnalysisArg, AnalysisArgType, AnalysisRef, AnalysisTemplateSpec, AnalysisVerdict};
use cmset_core::analysis::query::{
    FORBIDDEN_ARG_CHARACTERS, QueryTemplate, check_template, is_duration, is_number, written,
};
use cmset_core::analysis::{
    Analysis, AnalysisError, Condition, Measurement, Place, QueryError, QueryOutcome, WaveStage, WaveSubject,
    Workload, compact, format_value, known_runs, new_run, parse_query_response, parse_value, plan_runs,
    record, settle, verdict,
};
use cmset_core::workloads::kinds::WorkloadKind;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use proptest::prelude::*;
use regex::Regex;

static CONDITION_PATTERN: LazyLock<Regex> = LazyLock::new(|| Regex::new(SUCCESS_CONDITION_PATTERN).unwrap());

fn at(secs: i64) -> Time {
    Time(Timestamp::from_second(secs).unwrap())
}

fn subject(namespace: &str) -> WaveSubject<'_> {
    WaveSubject {
        namespace,
        revision: "app-5g7bm8k4f2",
        wave: 2,
    }
}

/// Sample values: ordinary ones around the threshold 1, and the odd ones.
fn sample() -> impl Strategy<Value = f64> {
    prop_oneof![
        6 => -3.0..3.0f64,
        1 => Just(f64::NAN),
        1 => Just(f64::INFINITY),
        1 => Just(f64::NEG_INFINITY),
        1 => Just(1.0),
    ]
}

fn outcome() -> impl Strategy<Value = QueryOutcome> {
    prop_oneof![
        6 => prop::collection::vec(sample(), 0..4).prop_map(QueryOutcome::Samples),
        1 => Just(QueryOutcome::NoData),
        1 => "[a-z ]{0,12}".prop_map(QueryOutcome::Error),
    ]
}

fn stage() -> impl Strategy<Value = WaveStage> {
    (any::<bool>(), any::<bool>()).prop_map(|(window_over, deadline_passed)| WaveStage {
        window_over,
        deadline_passed,
    })
}

fn comparison() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec!["<", "<=", ">", ">=", "==", "!="])
}

fn template(
    query: &str,
    args: Vec<AnalysisArg>,
    condition: &str,
    failure_limit: i32,
) -> AnalysisTemplateSpec {
    AnalysisTemplateSpec {
        args,
        query: query.to_string(),
        success_condition: condition.to_string(),
        interval_seconds: 30,
        failure_limit,
        initial_delay_seconds: 0,
        count: None,
        inconclusive_limit: None,
    }
}

fn analysis(comparison: &str, failure_limit: i32) -> Analysis {
    let reference = AnalysisRef {
        template: "t".into(),
        args: BTreeMap::new(),
    };
    let spec = template(
        "vector(1)",
        vec![],
        &format!("result {comparison} 1"),
        failure_limit,
    );
    Analysis::resolve(&reference, &spec).unwrap()
}

fn is_inconclusive(outcome: &QueryOutcome, analysis: &Analysis) -> bool {
    matches!(
        Measurement::judge(outcome, &analysis.condition),
        Measurement::Inconclusive { .. }
    )
}

/// Argument names, `namespace` and the other variables' names among them.
fn arg_name() -> impl Strategy<Value = String> {
    prop_oneof![
        2 => prop::sample::select(vec!["namespace", "revision", "wave", "workload", "args"]).prop_map(str::to_owned),
        3 => "[a-z][a-zA-Z0-9_]{0,8}",
    ]
}

/// Values without a forbidden character: printable text of any script, PromQL's own symbols included.
fn safe_value() -> impl Strategy<Value = String> {
    "[^\"'`\\\\{}\\p{Cc}]{0,16}"
}

fn forbidden_character() -> impl Strategy<Value = char> {
    prop_oneof![
        prop::sample::select(FORBIDDEN_ARG_CHARACTERS.to_vec()),
        prop::char::range('\u{0}', '\u{1f}'),
        prop::char::range('\u{7f}', '\u{9f}'),
    ]
}

/// Text near the condition language: well-formed conditions with odd spacing and numbers (some of them
/// malformed), and its parts shuffled among stray characters.
fn condition_text() -> impl Strategy<Value = String> {
    let space = || prop::sample::select(vec!["", " ", "  ", "\t"]);
    let number = "[-+]?[0-9]{0,3}(\\.[0-9]{0,3})?([eE][-+]?[0-9]{0,2})?";
    let formed = (space(), space(), comparison(), space(), number, space()).prop_map(
        |(lead, middle, comparison, after, number, trail)| {
            format!("{lead}result{middle}{comparison}{after}{number}{trail}")
        },
    );
    let part = prop_oneof![
        3 => Just("result".to_string()),
        3 => comparison().prop_map(str::to_owned),
        3 => number,
        1 => prop::sample::select(vec![" ", "=", "!", "NaN", "inf", "x", ".", "e"]).prop_map(str::to_owned),
    ];
    let shuffled = prop::collection::vec(part, 0..5).prop_map(|parts| parts.concat());
    prop_oneof![formed, shuffled]
}

/// A run as its verdict depends on it: everything but the last value and message, which a group takes
/// from its first member (any of its members' last values passed).
fn decisive(run: &cmset_api::AnalysisRunStatus) -> cmset_api::AnalysisRunStatus {
    cmset_api::AnalysisRunStatus {
        last_value: None,
        message: None,
        ..run.clone()
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// The status may write per-workload runs in groups: planned from what it wrote, every run has
    /// the counts, times and verdict it had, at every stage.
    #[test]
    fn runs_written_in_groups_plan_as_the_runs_themselves(
        comparison in comparison(),
        limit in 0..3i32,
        measured in prop::collection::vec(
            prop::collection::vec((prop_oneof![4 => Just(QueryOutcome::Samples(vec![0.5])), 1 => outcome()], 0..3i64), 0..3),
            0..60,
        ),
        stage in stage(),
    ) {
        let reference = AnalysisRef { template: "t".into(), args: BTreeMap::new() };
        let spec = template(
            r#"max(restarts{pod=~"{{workload.name}}-.*"})"#,
            vec![],
            &format!("result {comparison} 1"),
            limit,
        );
        let analysis = Analysis::resolve(&reference, &spec).unwrap();
        let names: Vec<String> = (0..measured.len()).map(|i| format!("w-{i:02}")).collect();
        let members = BTreeMap::from([(
            2,
            names.iter().map(|name| Workload { kind: WorkloadKind::Deployment, name }).collect(),
        )]);
        let analyses = std::slice::from_ref(&analysis);
        let mut runs = plan_runs(analyses, &subject("shop"), &members, &[]);
        for (run, steps) in runs.iter_mut().zip(&measured) {
            for (i, (outcome, jitter)) in steps.iter().enumerate() {
                record(run, &analysis, outcome, &at(1_000 + 30 * i as i64 + jitter));
                settle(run, &analysis, stage);
            }
        }
        let written = compact(runs.clone());
        prop_assert!(written.len() <= runs.len());
        let planned = plan_runs(analyses, &subject("shop"), &members, &written);
        prop_assert_eq!(planned.len(), runs.len());
        for (again, run) in planned.iter().zip(&runs) {
            prop_assert_eq!(decisive(again), decisive(run));
            for stage in [stage, WaveStage { window_over: true, deadline_passed: false }] {
                prop_assert_eq!(verdict(again, &analysis, stage).verdict, verdict(run, &analysis, stage).verdict);
            }
        }
        prop_assert_eq!(known_runs(analyses, &subject("shop"), &members, &written), written);
    }

    #[test]
    fn failures_never_exceed_the_limit_plus_one(
        comparison in comparison(),
        limit in 0..4i32,
        steps in prop::collection::vec((outcome(), stage(), 0..90i64), 0..24),
    ) {
        let analysis = analysis(comparison, limit);
        let mut run = new_run(&analysis, &subject("shop"), None);
        let mut now = 1_000;
        for (outcome, stage, wait) in steps {
            now += wait;
            record(&mut run, &analysis, &outcome, &at(now));
            settle(&mut run, &analysis, stage);
            prop_assert!(run.failures <= limit + 1, "{run:?}");
            prop_assert!(run.failures <= run.measurements);
            if run.failures > limit {
                prop_assert_eq!(run.verdict, AnalysisVerdict::Failed);
            }
        }
    }

    #[test]
    fn an_inconclusive_run_never_passes(
        comparison in comparison(),
        limit in 0..3i32,
        steps in prop::collection::vec((outcome(), stage()), 1..16),
    ) {
        let analysis = analysis(comparison, limit);
        let mut run = new_run(&analysis, &subject("shop"), None);
        for (i, (outcome, stage)) in steps.into_iter().enumerate() {
            let before = run.measurements;
            record(&mut run, &analysis, &outcome, &at(1_000 + 30 * i as i64));
            settle(&mut run, &analysis, stage);
            let measured = run.measurements > before;
            if measured && is_inconclusive(&outcome, &analysis) {
                prop_assert!(
                    matches!(run.verdict, AnalysisVerdict::Inconclusive | AnalysisVerdict::Failed),
                    "{run:?}"
                );
            }
            if run.verdict == AnalysisVerdict::Passed {
                prop_assert!(stage.window_over);
                prop_assert!(measured, "a Passed run was measured just now in this walk: {run:?}");
                let judged = Measurement::judge(&outcome, &analysis.condition);
                prop_assert!(matches!(judged, Measurement::Passed { .. }), "{judged:?}");
            }
        }
    }

    #[test]
    fn a_measurement_passes_only_when_every_sample_holds(
        comparison in comparison(),
        samples in prop::collection::vec(sample(), 0..6),
    ) {
        let condition = Condition::parse(&format!("result {comparison} 1")).unwrap();
        let outcome = QueryOutcome::Samples(samples.clone());
        let measurement = Measurement::judge(&outcome, &condition);
        let failing = samples.iter().filter(|v| !v.is_nan() && !condition.holds(**v)).count();
        match &measurement {
            Measurement::Passed { value, .. } => {
                let all_hold = !samples.is_empty() && samples.iter().all(|v| condition.holds(*v));
                prop_assert!(all_hold, "{samples:?}");
                prop_assert!(condition.holds(*value));
            }
            Measurement::Failed { value, failing: counted, .. } => {
                prop_assert_eq!(*counted, failing);
                let fails = failing > 0 && !condition.holds(*value) && !value.is_nan();
                prop_assert!(fails, "{value}");
            }
            Measurement::Inconclusive { .. } => prop_assert_eq!(failing, 0),
        }
        // What status shows is judged again the same way after a restart.
        let shown = measurement.value().map(format_value).and_then(|t| parse_value(&t));
        let passed_again = shown.is_some_and(|v| condition.holds(v));
        prop_assert_eq!(passed_again, matches!(measurement, Measurement::Passed { .. }));
    }

    #[test]
    fn no_argument_reaches_the_namespace(
        namespace in "[a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?",
        args in prop::collection::btree_map(arg_name(), safe_value(), 0..5),
        workload in "[a-z]{1,8}",
    ) {
        let mut query = "x{a=\"[{{namespace}}]".to_string();
        for name in args.keys() {
            query.push_str(&format!("{{{{args.{name}}}}}|{{{{ namespace }}}}|"));
        }
        query.push_str("{{workload.name}}\"}");
        let declared: Vec<AnalysisArg> = args
            .keys()
            .map(|name| AnalysisArg { name: name.clone(), ..AnalysisArg::default() })
            .collect();
        let spec = template(&query, declared, "result < 1", 0);
        let reference = AnalysisRef { template: "t".into(), args: args.clone() };
        let analysis = Analysis::resolve(&reference, &spec).unwrap();
        let workload = Workload { kind: WorkloadKind::Deployment, name: &workload };
        let rendered = analysis.render(&subject(&namespace), Some(&workload)).unwrap();
        let mut expected = format!("x{{a=\"[{namespace}]");
        for value in args.values() {
            expected.push_str(&format!("{value}|{namespace}|"));
        }
        expected.push_str(workload.name);
        expected.push_str("\"}");
        prop_assert_eq!(&rendered, &expected);

        // Deterministic: resolved and rendered again, the same query; planned again, the same runs.
        let again = Analysis::resolve(&reference, &spec).unwrap();
        prop_assert_eq!(&again, &analysis);
        prop_assert_eq!(again.render(&subject(&namespace), Some(&workload)).unwrap(), rendered);
        let members = BTreeMap::from([(2, vec![workload])]);
        let runs = plan_runs(std::slice::from_ref(&analysis), &subject(&namespace), &members, &[]);
        let replanned = plan_runs(&[again], &subject(&namespace), &members, &runs);
        prop_assert_eq!(runs, replanned);

        // An argument the template does not declare, `namespace` included, is refused.
        let mut extra = reference.clone();
        extra.args.insert("namespace".into(), "kube-system".into());
        if !args.contains_key("namespace") {
            let error = Analysis::resolve(&extra, &spec).unwrap_err();
            prop_assert_eq!(error, AnalysisError::Query {
                template: "t".into(),
                error: QueryError::NotDeclared("namespace".into()),
            });
        }
    }

    #[test]
    fn every_forbidden_character_is_rejected_by_name(
        before in safe_value(),
        character in forbidden_character(),
        after in "\\PC{0,8}",
    ) {
        let query = "x{a=\"{{args.value}}\"}";
        let declared = vec![AnalysisArg { name: "value".into(), ..AnalysisArg::default() }];
        let spec = template(query, declared, "result < 1", 0);
        let value = format!("{before}{character}{after}");
        let reference = AnalysisRef {
            template: "t".into(),
            args: BTreeMap::from([("value".to_string(), value)]),
        };
        let error = Analysis::resolve(&reference, &spec).unwrap_err();
        prop_assert_eq!(&error, &AnalysisError::Query {
            template: "t".into(),
            error: QueryError::ForbiddenCharacter { arg: "value".into(), character },
        });
        prop_assert!(error.to_string().contains(&format!("{character:?}")), "{error}");
    }

    #[test]
    fn any_other_value_is_rendered_as_it_is(value in safe_value()) {
        let spec = template(
            "x{a=\"{{args.value}}\"}",
            vec![AnalysisArg { name: "value".into(), ..AnalysisArg::default() }],
            "result < 1",
            0,
        );
        let reference = AnalysisRef {
            template: "t".into(),
            args: BTreeMap::from([("value".to_string(), value.clone())]),
        };
        let analysis = Analysis::resolve(&reference, &spec).unwrap();
        prop_assert_eq!(analysis.render(&subject("shop"), None).unwrap(), format!("x{{a=\"{value}\"}}"));
    }

    #[test]
    fn the_condition_parser_accepts_exactly_the_crd_pattern(text in condition_text()) {
        let parsed = Condition::parse(&text);
        prop_assert_eq!(parsed.is_ok(), CONDITION_PATTERN.is_match(&text), "{:?}", text);
        if let Ok(condition) = parsed {
            let shown = condition.to_string();
            prop_assert!(CONDITION_PATTERN.is_match(&shown));
            prop_assert_eq!(Condition::parse(&shown).unwrap(), condition);
        }
    }

    #[test]
    fn a_value_shown_reads_back_exactly(value in any::<f64>()) {
        let shown = format_value(value);
        let back = parse_value(&shown).unwrap();
        prop_assert!(back.to_bits() == value.to_bits() || (back.is_nan() && value.is_nan()), "{value} {shown}");
        prop_assert!(shown.len() <= 26, "{shown}");
    }

    #[test]
    fn no_answer_makes_the_parser_panic(status in 100..600u16, body in prop::collection::vec(any::<u8>(), 0..64)) {
        let _ = parse_query_response(status, &body);
    }

    #[test]
    fn no_json_answer_makes_the_parser_panic(
        status in prop::sample::select(vec!["success", "error", "other"]),
        kind in prop::sample::select(vec!["vector", "scalar", "matrix", "string", ""]),
        result in prop::sample::select(vec![
            "[]", "[1]", "[1,\"2\"]", "[1,2]", "[{\"value\":[1,\"x\"]}]", "[{\"value\":[1,\"1\"]}]",
            "[{\"value\":[]}]", "{}", "null", "\"NaN\"",
        ]),
    ) {
        let body = format!(r#"{{"status":"{status}","data":{{"resultType":"{kind}","result":{result}}}}}"#);
        let _ = parse_query_response(200, body.as_bytes());
    }

    #[test]
    fn any_value_stays_inside_its_double_quoted_string(value in "\\PC{0,24}|.{0,24}|[\"\\\\\n\r\t\u{0}-\u{1f}a]{0,12}") {
        for value_type in [AnalysisArgType::String, AnalysisArgType::Regex] {
            let inside = written(&value, value_type, Place::Quoted);
            let literal = format!("\"{inside}\"");
            let (read, rest) = read_string(&literal).expect("a well-formed string");
            prop_assert_eq!(rest, "", "the string ended early: {}", literal);
            prop_assert_eq!(&read, &value);
        }
    }

    #[test]
    fn a_value_in_a_matcher_matches_exactly_itself(value in "\\PC{0,24}|[.*+?()|\\[\\]{}^$\\\\\"a-]{0,16}") {
        let inside = written(&value, AnalysisArgType::String, Place::Regex);
        let literal = format!("\"{inside}\"");
        let (pattern, rest) = read_string(&literal).expect("a well-formed string");
        prop_assert_eq!(rest, "");
        // Prometheus anchors a matcher's regular expression at both ends.
        let regex = Regex::new(&format!("^(?:{pattern})$")).unwrap();
        prop_assert!(regex.is_match(&value), "{:?} does not match {:?}", pattern, value);
        let longer = format!("{value}x");
        prop_assert!(!regex.is_match(&longer), "{:?} matches {:?}", pattern, longer);
    }

    #[test]
    fn an_untyped_argument_outside_a_double_quoted_string_is_refused_by_name(
        name in "[a-z][a-zA-Z0-9_]{0,8}",
        before in "[a-z0-9 (\\[,+*/<>=-]{0,8}",
        after in "[a-z0-9 )\\],+*/<>=-]{0,8}",
        value_type in prop::sample::select(vec![AnalysisArgType::String, AnalysisArgType::Regex]),
    ) {
        let query = QueryTemplate::parse(&format!("{before}{{{{args.{name}}}}}{after}")).unwrap();
        let declared = [AnalysisArg { name: name.clone(), value_type, ..AnalysisArg::default() }];
        let error = check_template(&query, &declared).unwrap_err();
        prop_assert!(error.to_string().contains(&format!("{name:?}")), "{}", error);
        prop_assert_eq!(error, QueryError::Unquoted { arg: name, value_type });
    }

    #[test]
    fn a_duration_or_a_number_holds_nothing_that_could_leave_its_place(value in "\\PC{0,12}|[0-9a-z.+-]{0,8}") {
        if is_duration(&value) || is_number(&value) {
            prop_assert!(
                value.chars().all(|c| c.is_ascii_alphanumeric() || ".+-".contains(c)),
                "{:?}", value
            );
        }
    }
}

/// Reads a double-quoted PromQL (Go) string at the start of `text`: its value and what follows it.
/// `None` when it is not well formed.
fn read_string(text: &str) -> Option<(String, &str)> {
    let mut chars = text.strip_prefix('"')?.char_indices();
    let mut value = String::new();
    let body = &text[1..];
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return Some((value, &body[i + 1..])),
            '\\' => match chars.next()?.1 {
                '"' => value.push('"'),
                '\\' => value.push('\\'),
                'n' => value.push('\n'),
                'r' => value.push('\r'),
                't' => value.push('\t'),
                'u' => {
                    let hex: String = (0..4)
                        .map(|_| chars.next().map(|(_, c)| c))
                        .collect::<Option<_>>()?;
                    value.push(char::from_u32(u32::from_str_radix(&hex, 16).ok()?)?);
                }
                _ => return None,
            },
            '\n' => return None,
            c => value.push(c),
        }
    }
    None
}
