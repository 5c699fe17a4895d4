//! A tiny Prometheus exporter for tests: `/metrics` on a free loopback port serves gauges whose values
//! the test sets, so that a real Prometheus (see [`crate::prometheus`]) has something known to scrape.
//!
//! It runs on a thread of its own (not on the test's runtime), answers one request per connection, and
//! stops when dropped.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

/// A metric name and its labels, sorted by name.
type Series = (String, Vec<(String, String)>);

#[derive(Default)]
struct Shared {
    gauges: Mutex<BTreeMap<Series, f64>>,
    stop: AtomicBool,
}

pub struct Exporter {
    address: SocketAddr,
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl Exporter {
    /// Serves at once, on a port the kernel picks.
    pub fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
        let address = listener.local_addr().unwrap();
        let shared = Arc::new(Shared::default());
        let serving = shared.clone();
        let thread = std::thread::spawn(move || {
            for stream in listener.incoming() {
                if serving.stop.load(Ordering::Relaxed) {
                    break;
                }
                if let Ok(stream) = stream {
                    // A client that misbehaves costs this one request, nothing more.
                    let _ = answer(stream, &serving);
                }
            }
        });
        Self {
            address,
            shared,
            thread: Some(thread),
        }
    }

    /// `127.0.0.1:<port>`, the scrape target.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// Sets the gauge `name` with `labels` to `value`, creating it if need be.
    pub fn set(&self, name: &str, labels: &[(&str, &str)], value: f64) {
        self.gauges().insert(series(name, labels), value);
    }

    /// Removes the gauge `name` with exactly `labels`: the next scrape no longer has it.
    pub fn remove(&self, name: &str, labels: &[(&str, &str)]) {
        self.gauges().remove(&series(name, labels));
    }

    /// What `/metrics` answers now (the Prometheus text format, version 0.0.4).
    pub fn render(&self) -> String {
        render(&self.gauges())
    }

    fn gauges(&self) -> std::sync::MutexGuard<'_, BTreeMap<Series, f64>> {
        self.shared.gauges.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        // Wakes the accept loop, which then sees the flag.
        let _ = TcpStream::connect(self.address);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn series(name: &str, labels: &[(&str, &str)]) -> Series {
    let mut labels: Vec<(String, String)> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    labels.sort();
    (name.to_string(), labels)
}

fn render(gauges: &BTreeMap<Series, f64>) -> String {
    let mut out = String::new();
    let mut last_name = None;
    for ((name, labels), value) in gauges {
        if last_name != Some(name) {
            out.push_str(&format!("# TYPE {name} gauge\n"));
            last_name = Some(name);
        }
        out.push_str(name);
        if !labels.is_empty() {
            let labels: Vec<String> = labels
                .iter()
                .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
                .collect();
            out.push_str(&format!("{{{}}}", labels.join(",")));
        }
        out.push_str(&format!(" {}\n", number(*value)));
    }
    out
}

fn escape(value: &str) -> String {
    value
        .replace('\\', r"\\")
        .replace('"', "\\\"")
        .replace('\n', r"\n")
}

/// Rust writes infinities as `inf`; the text format wants `+Inf`.
fn number(v: f64) -> String {
    if v.is_nan() {
        "NaN".to_string()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.to_string()
    } else {
        v.to_string()
    }
}

fn answer(mut stream: TcpStream, shared: &Shared) -> std::io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut request = Vec::new();
    let mut chunk = [0u8; 1024];
    while !request.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            break;
        }
        request.extend_from_slice(&chunk[..n]);
        if request.len() > 64 * 1024 {
            break;
        }
    }
    let request = String::from_utf8_lossy(&request);
    let path = request.split_whitespace().nth(1).unwrap_or_default();
    let (status, body) = if path == "/metrics" || path.starts_with("/metrics?") {
        let gauges = shared.gauges.lock().unwrap_or_else(PoisonError::into_inner);
        ("200 OK", render(&gauges))
    } else {
        ("404 Not Found", String::new())
    };
    write!(
        stream,
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    stream.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gauges_render_in_the_text_format_one_type_line_per_name() {
        let exporter = Exporter::start();
        exporter.set("b_value", &[], f64::INFINITY);
        exporter.set("a_value", &[("set", "web"), ("namespace", "team-a")], 1.5);
        exporter.set(
            "a_value",
            &[("namespace", "team-b"), ("set", "say \"hi\"\\")],
            2.0,
        );
        assert_eq!(
            exporter.render(),
            "# TYPE a_value gauge\n\
             a_value{namespace=\"team-a\",set=\"web\"} 1.5\n\
             a_value{namespace=\"team-b\",set=\"say \\\"hi\\\"\\\\\"} 2\n\
             # TYPE b_value gauge\n\
             b_value +Inf\n"
        );
        exporter.remove("a_value", &[("namespace", "team-a"), ("set", "web")]);
        assert!(!exporter.render().contains("team-a"));
    }

    #[test]
    fn metrics_are_served_over_http_until_dropped() {
        let exporter = Exporter::start();
        exporter.set("cmset_test", &[("case", "served")], 3.0);
        let port = exporter.address().port();
        let (code, body) = crate::http_get(port, "/metrics").expect("an answer");
        assert_eq!(code, 200);
        assert!(body.contains("cmset_test{case=\"served\"} 3"), "{body}");
        assert_eq!(crate::http_get(port, "/other").map(|(c, _)| c), Some(404));
        drop(exporter);
        assert!(crate::http_get(port, "/metrics").is_none(), "still serving");
    }
}
