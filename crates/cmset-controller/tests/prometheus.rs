//! The Prometheus client against a tiny HTTP server in the test that answers canned responses: a value,
//! an empty vector, an API error, an HTTP error, an unreachable server, one that never answers, the
//! bearer token (sent, re-read when it changes, never in a message), and https with a CA file.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cmset_controller::reconcile::prometheus::{Prometheus, PrometheusConfig};
use cmset_controller::serving::webhook_certs::{self, Policy};
use cmset_core::analysis::QueryOutcome;
use k8s_openapi::jiff::Timestamp;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;

const QUERY: &str = r#"sum(rate(http_errors_total{namespace="shop",service="checkout"}[5m])) / 2 > 0.5"#;

/// One canned answer: status line and body.
#[derive(Clone)]
struct Answer {
    status: &'static str,
    body: String,
}

fn ok(body: &str) -> Answer {
    Answer {
        status: "200 OK",
        body: body.to_string(),
    }
}

/// Request heads the server received, lowercased header names as sent.
type Seen = Arc<Mutex<Vec<String>>>;

/// Serves `answer` to every connection (one request each) on 127.0.0.1; `None` never answers.
async fn serve(answer: Option<Answer>) -> (String, Seen) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let seen = Seen::default();
    let recorded = seen.clone();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let (answer, recorded) = (answer.clone(), recorded.clone());
            tokio::spawn(async move { respond(stream, answer, recorded).await });
        }
    });
    (format!("http://{address}"), seen)
}

async fn respond(mut stream: impl AsyncRead + AsyncWrite + Unpin, answer: Option<Answer>, seen: Seen) {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if stream.read(&mut byte).await.unwrap_or(0) == 0 {
            return;
        }
        head.push(byte[0]);
    }
    seen.lock()
        .unwrap()
        .push(String::from_utf8_lossy(&head).into_owned());
    let Some(answer) = answer else {
        // Hold the connection open and never answer: the client must give up at its own timeout. The
        // task ends with the test's runtime.
        std::future::pending::<()>().await;
        return;
    };
    let response = format!(
        "HTTP/1.1 {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{}",
        answer.status,
        answer.body.len(),
        answer.body
    );
    let _ = stream.write_all(response.as_bytes()).await;
    let _ = stream.shutdown().await;
}

fn client(config: PrometheusConfig) -> Prometheus {
    Prometheus::new(config).unwrap()
}

fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        key.eq_ignore_ascii_case(name).then(|| value.trim())
    })
}

fn temp_file(name: &str, content: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("cmset-prometheus-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, content).unwrap();
    path
}

#[tokio::test]
async fn a_value_is_read_from_the_query_sent_whole() {
    let body = r#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{"service":"checkout"},"value":[1700000000.1,"0.0123"]}]}}"#;
    let (url, seen) = serve(Some(ok(body))).await;
    let prometheus = client(PrometheusConfig::new(format!("{url}/prom/")));
    assert_eq!(prometheus.query(QUERY).await, QueryOutcome::Samples(vec![0.0123]));

    let head = seen.lock().unwrap()[0].clone();
    let target = head.split(' ').nth(1).unwrap();
    let encoded = target.strip_prefix("/prom/api/v1/query?query=").expect(target);
    let decoded = percent_encoding::percent_decode_str(encoded)
        .decode_utf8()
        .unwrap();
    assert_eq!(decoded, QUERY);
    assert!(head.starts_with("GET "), "{head}");
    assert_eq!(header(&head, "accept"), Some("application/json"));
    assert_eq!(header(&head, "authorization"), None);
}

#[tokio::test]
async fn an_empty_vector_is_no_data() {
    let (url, _) = serve(Some(ok(
        r#"{"status":"success","data":{"resultType":"vector","result":[]}}"#,
    )))
    .await;
    assert_eq!(
        client(PrometheusConfig::new(url)).query("up").await,
        QueryOutcome::NoData
    );
}

#[tokio::test]
async fn errors_of_the_api_and_of_http_are_outcomes() {
    let api_error = Answer {
        status: "400 Bad Request",
        body:
            r#"{"status":"error","errorType":"bad_data","error":"1:5: parse error: unexpected end of input"}"#
                .into(),
    };
    let (url, _) = serve(Some(api_error)).await;
    assert_eq!(
        client(PrometheusConfig::new(url)).query("sum(").await,
        QueryOutcome::Error("bad_data: 1:5: parse error: unexpected end of input".into())
    );
    let gateway = Answer {
        status: "502 Bad Gateway",
        body: "<html>bad gateway</html>".into(),
    };
    let (url, _) = serve(Some(gateway)).await;
    assert_eq!(
        client(PrometheusConfig::new(url)).query("up").await,
        QueryOutcome::Error("HTTP 502".into())
    );
}

#[tokio::test]
async fn an_unreachable_prometheus_is_an_outcome_with_a_short_message() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    drop(listener);
    let outcome = client(PrometheusConfig::new(format!("http://{address}")))
        .query("up")
        .await;
    let QueryOutcome::Error(message) = outcome else {
        panic!("{outcome:?}");
    };
    assert!(message.to_lowercase().contains("connect"), "{message}");
    assert!(message.len() <= 200, "{message}");
}

#[tokio::test]
async fn a_prometheus_that_does_not_answer_times_out() {
    let (url, seen) = serve(None).await;
    let config = PrometheusConfig {
        timeout: Duration::from_millis(300),
        ..PrometheusConfig::new(url)
    };
    let started = std::time::Instant::now();
    let outcome = client(config).query("up").await;
    assert_eq!(outcome, QueryOutcome::Error("no answer within 300ms".into()));
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(seen.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn the_bearer_token_is_read_at_each_query_and_never_shown() {
    let denied = Answer {
        status: "401 Unauthorized",
        body: "Unauthorized".into(),
    };
    let (url, seen) = serve(Some(denied)).await;
    let token_file = temp_file("token", "s3cret-one\n");
    let prometheus = client(PrometheusConfig {
        bearer_token_file: Some(token_file.clone()),
        ..PrometheusConfig::new(url)
    });
    let first = prometheus.query("up").await;
    assert_eq!(first, QueryOutcome::Error("HTTP 401".into()));
    std::fs::write(&token_file, "s3cret-two").unwrap();
    prometheus.query("up").await;
    let heads = seen.lock().unwrap().clone();
    let tokens: Vec<Option<&str>> = heads.iter().map(|h| header(h, "authorization")).collect();
    assert_eq!(tokens, [Some("Bearer s3cret-one"), Some("Bearer s3cret-two")]);

    // A token file that is gone: nothing is sent, and the message says so without a token.
    std::fs::remove_file(&token_file).unwrap();
    let QueryOutcome::Error(message) = prometheus.query("up").await else {
        panic!()
    };
    assert!(message.starts_with("reading the bearer token file:"), "{message}");
    assert_eq!(seen.lock().unwrap().len(), 2);
    std::fs::write(&token_file, "bad\ntoken").unwrap();
    let QueryOutcome::Error(message) = prometheus.query("up").await else {
        panic!()
    };
    assert!(
        !message.contains("bad") && !message.contains("token\n"),
        "{message}"
    );
    assert!(!format!("{prometheus:?}").contains("s3cret"));
}

#[tokio::test]
async fn https_is_verified_against_the_ca_file() {
    let policy = Policy {
        validity: Duration::from_secs(3600),
        names: vec![],
    };
    let pair = webhook_certs::issue(&policy, Timestamp::now(), None).unwrap();
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(pair.cert.as_bytes())
        .collect::<Result<_, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_slice(pair.key.as_bytes()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let server = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let seen = Seen::default();
    let recorded = seen.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let Ok(tls) = acceptor.accept(stream).await else {
                continue;
            };
            let body = r#"{"status":"success","data":{"resultType":"scalar","result":[1700000000,"1"]}}"#;
            respond(tls, Some(ok(body)), recorded.clone()).await;
        }
    });

    let ca_file = temp_file("ca.crt", &pair.ca);
    let url = format!("https://localhost:{}", address.port());
    let trusted = client(PrometheusConfig {
        ca_file: Some(ca_file),
        ..PrometheusConfig::new(url.clone())
    });
    assert_eq!(trusted.query("vector(1)").await, QueryOutcome::Samples(vec![1.0]));
    assert_eq!(seen.lock().unwrap().len(), 1);

    // Trusting another CA, the handshake fails and nothing is asked.
    let other = webhook_certs::issue(&policy, Timestamp::now(), None).unwrap();
    let untrusted = client(PrometheusConfig {
        ca_file: Some(temp_file("other-ca.crt", &other.ca)),
        ..PrometheusConfig::new(url)
    });
    let outcome = untrusted.query("vector(1)").await;
    assert!(matches!(outcome, QueryOutcome::Error(_)), "{outcome:?}");
    assert_eq!(seen.lock().unwrap().len(), 1);

    let error = Prometheus::new(PrometheusConfig {
        ca_file: Some(temp_file("empty.crt", "")),
        ..PrometheusConfig::new("https://localhost")
    })
    .unwrap_err();
    assert!(error.to_string().ends_with("holds no PEM certificate"), "{error}");
}
