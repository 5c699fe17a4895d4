//! What one instant query returned, read from Prometheus' `/api/v1/query` answer, and the text a value
//! is shown as.

use serde::Deserialize;

/// Longest error text kept from Prometheus: it often repeats the whole query.
const MAX_ERROR_LEN: usize = 200;

/// What one instant query returned.
#[derive(Clone, Debug, PartialEq)]
pub enum QueryOutcome {
    /// The samples of an instant vector (one per series), or the value of a scalar.
    Samples(Vec<f64>),
    /// An empty vector: no series matched.
    NoData,
    /// Prometheus could not be asked, or answered with an error: what went wrong, briefly.
    Error(String),
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Answer {
    status: String,
    #[serde(default)]
    data: Option<Data>,
    #[serde(default)]
    error_type: Option<String>,
    #[serde(default)]
    error: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Data {
    result_type: String,
    result: serde_json::Value,
}

#[derive(Deserialize)]
struct Series {
    value: (serde_json::Value, String),
}

/// Reads the answer of `GET /api/v1/query` (HTTP status `http_status`, body `body`). An answer that is
/// not Prometheus' JSON becomes an error outcome naming the HTTP status when it was not a success.
pub fn parse_query_response(http_status: u16, body: &[u8]) -> QueryOutcome {
    let Ok(answer) = serde_json::from_slice::<Answer>(body) else {
        return QueryOutcome::Error(if (200..300).contains(&http_status) {
            "the answer is not a Prometheus API response".to_string()
        } else {
            format!("HTTP {http_status}")
        });
    };
    if answer.status != "success" {
        let kind = answer.error_type.unwrap_or_else(|| "error".to_string());
        let error = answer.error.unwrap_or_default();
        return QueryOutcome::Error(cap(&format!("{kind}: {error}")));
    }
    let Some(data) = answer.data else {
        return QueryOutcome::Error("the answer has no data".to_string());
    };
    match data.result_type.as_str() {
        "vector" => {
            let Ok(series) = serde_json::from_value::<Vec<Series>>(data.result) else {
                return QueryOutcome::Error("the answer's vector is malformed".to_string());
            };
            if series.is_empty() {
                return QueryOutcome::NoData;
            }
            series
                .iter()
                .map(|s| sample(&s.value.1))
                .collect::<Result<Vec<f64>, QueryOutcome>>()
                .map_or_else(|bad| bad, QueryOutcome::Samples)
        }
        "scalar" => match serde_json::from_value::<(serde_json::Value, String)>(data.result) {
            Ok((_, value)) => sample(&value).map_or_else(|bad| bad, |v| QueryOutcome::Samples(vec![v])),
            Err(_) => QueryOutcome::Error("the answer's scalar is malformed".to_string()),
        },
        other => QueryOutcome::Error(cap(&format!(
            "the query returns a {other}; it must return an instant vector or a scalar"
        ))),
    }
}

fn sample(text: &str) -> Result<f64, QueryOutcome> {
    parse_value(text).ok_or_else(|| QueryOutcome::Error(cap(&format!("the sample {text:?} is not a number"))))
}

/// A sample value as Prometheus writes it (`1.5`, `NaN`, `+Inf`, `-Inf`), or as [`format_value`] does.
pub fn parse_value(text: &str) -> Option<f64> {
    match text {
        "NaN" => Some(f64::NAN),
        "+Inf" | "Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        _ => text.parse::<f64>().ok(),
    }
}

/// `value` as shown in status: Prometheus' spelling of NaN and infinities, plain decimals for ordinary
/// magnitudes and an exponent for the others, so a value is never hundreds of digits long. Always read
/// back exactly by [`parse_value`].
pub fn format_value(value: f64) -> String {
    if value.is_nan() {
        "NaN".to_string()
    } else if value.is_infinite() {
        if value > 0.0 { "+Inf" } else { "-Inf" }.to_string()
    } else if value == 0.0 || (1e-6..1e16).contains(&value.abs()) {
        value.to_string()
    } else {
        format!("{value:e}")
    }
}

fn cap(text: &str) -> String {
    crate::status::message::join_capped(&[text.to_string()], MAX_ERROR_LEN)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(status: u16, body: &str) -> QueryOutcome {
        parse_query_response(status, body.as_bytes())
    }

    #[test]
    fn reads_vectors_and_scalars() {
        let vector = r#"{"status":"success","data":{"resultType":"vector","result":[
            {"metric":{"service":"a"},"value":[1700000000.5,"0.0123"]},
            {"metric":{"service":"b"},"value":[1700000000.5,"NaN"]},
            {"metric":{},"value":[1700000000.5,"+Inf"]}]}}"#;
        let QueryOutcome::Samples(samples) = parse(200, vector) else {
            panic!("{:?}", parse(200, vector));
        };
        assert_eq!(samples.len(), 3);
        assert_eq!(samples[0], 0.0123);
        assert!(samples[1].is_nan());
        assert_eq!(samples[2], f64::INFINITY);

        let scalar = r#"{"status":"success","data":{"resultType":"scalar","result":[1700000000,"-2"]}}"#;
        assert_eq!(parse(200, scalar), QueryOutcome::Samples(vec![-2.0]));
        let empty = r#"{"status":"success","data":{"resultType":"vector","result":[]},"warnings":["w"]}"#;
        assert_eq!(parse(200, empty), QueryOutcome::NoData);
    }

    #[test]
    fn errors_say_what_went_wrong_briefly() {
        let bad = r#"{"status":"error","errorType":"bad_data","error":"invalid parameter \"query\": 1:5: parse error"}"#;
        assert_eq!(
            parse(400, bad),
            QueryOutcome::Error(r#"bad_data: invalid parameter "query": 1:5: parse error"#.into())
        );
        let long = format!(
            r#"{{"status":"error","errorType":"execution","error":"{}"}}"#,
            "x".repeat(5000)
        );
        let QueryOutcome::Error(message) = parse(422, &long) else {
            panic!()
        };
        assert!(message.len() <= MAX_ERROR_LEN, "{}", message.len());
        assert_eq!(
            parse(503, "Service Unavailable"),
            QueryOutcome::Error("HTTP 503".into())
        );
        assert_eq!(
            parse(200, "<html>"),
            QueryOutcome::Error("the answer is not a Prometheus API response".into())
        );
        let matrix = r#"{"status":"success","data":{"resultType":"matrix","result":[]}}"#;
        assert_eq!(
            parse(200, matrix),
            QueryOutcome::Error(
                "the query returns a matrix; it must return an instant vector or a scalar".into()
            )
        );
        let not_number = r#"{"status":"success","data":{"resultType":"scalar","result":[1,"abc"]}}"#;
        assert_eq!(
            parse(200, not_number),
            QueryOutcome::Error(r#"the sample "abc" is not a number"#.into())
        );
        let no_value = r#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{}}]}}"#;
        assert_eq!(
            parse(200, no_value),
            QueryOutcome::Error("the answer's vector is malformed".into())
        );
    }

    #[test]
    fn values_are_shown_briefly_and_read_back() {
        let table = [
            (0.0123, "0.0123"),
            (0.0, "0"),
            (-3.0, "-3"),
            (1e-7, "1e-7"),
            (2.5e20, "2.5e20"),
            (f64::NAN, "NaN"),
            (f64::INFINITY, "+Inf"),
            (f64::NEG_INFINITY, "-Inf"),
        ];
        for (value, text) in table {
            assert_eq!(format_value(value), text);
            let back = parse_value(text).unwrap();
            assert!(back == value || (back.is_nan() && value.is_nan()), "{text}");
        }
    }
}
