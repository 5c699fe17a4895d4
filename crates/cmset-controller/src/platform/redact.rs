//! Keeping what the API server sends out of logs and error texts.
//!
//! A response body can carry secret values: a Secret's `data`, or an error message that quotes a
//! field's value (`data[password]: Invalid value: "…"`, a proxy's error page echoing the request, an
//! admission webhook's denial). Two routes would put such text into a log line:
//!
//! - kube's own events. `kube_client::client` logs a whole body it could not decode (`Client::request`
//!   and `Client::request_status` at WARN, `request_status` every Status at TRACE) and every failed
//!   response (`handle_api_errors` at DEBUG: the parsed `Status`, or the raw text when it is not
//!   one). `kube_runtime::watcher` logs each watch error with `{err:?}` (the `Status` and its message
//!   or a decode error quoting the body). [`log_filter`] drops these callsites whatever the user's
//!   directives say.
//! - `kube::Error`'s Display and Debug. `Error::Api` prints the `Status` message and its whole Debug
//!   (causes included); when a failed response is not a `Status`, kube makes one whose message is
//!   the raw body. `Error::SerdeError` prints serde's message, which quotes the offending
//!   value (`invalid type: string "…", expected a map`). `Error::FromUtf8`'s Debug holds the body's
//!   bytes. [`api_error`] is what cmset prints instead.
//!
//! A message is never printed, for any request: the server composes it from the request's own
//! content, and nothing in it tells a quoted value from prose. What is left (the HTTP code, the
//! reason when it is one of Kubernetes' own, where a body stopped decoding) says which failure it
//! was; whoever needs the message can repeat the request with kubectl.
//!
//! Request spans carry no body: kube's `HTTP` span has the method and the URL (path and query), and
//! its events ("requesting", "failed with status 500") no response text.

use std::error::Error as StdError;
use std::fmt;

use kube::client::AuthError;
use kube::config::KubeconfigError;
use kube::core::Status;
use kube::runtime::{controller, watcher};
use tracing::{Metadata, Subscriber};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::filter::{FilterExt, LevelFilter};
use tracing_subscriber::layer::{Context, Filter};
use tracing_subscriber::registry::LookupSpan;

/// The filter of the log layer: the user's directives (`CMSET_LOG`; `info` when they do not
/// parse), and in any case without kube's callsites that print response text (see
/// [`NoResponseText`]) and without kube's runner span (see [`crate::platform::quiet_spans`]). All
/// must enable a callsite, so no directive can bring those back.
pub fn log_filter<S>(directives: &str) -> impl Filter<S> + Send + Sync + 'static
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    let user = EnvFilter::try_new(directives).unwrap_or_else(|_| EnvFilter::new("info"));
    user.and(NoResponseText)
        .and(crate::platform::quiet_spans::WithoutRunnerSpan)
}

/// Modules whose events can print response text; all their callsites are dropped but
/// [`HARMLESS`] ones.
const RESPONSE_TEXT_TARGETS: [&str; 2] = ["kube_client::client", "kube_runtime::watcher"];

/// The callsites of [`RESPONSE_TEXT_TARGETS`] that print no response text, by file and line in the
/// kube version cmset is built with (read in its source). The path names the version, so after an
/// upgrade none matches and these are dropped too until someone reads the new source: it fails
/// closed.
const HARMLESS: [(&str, u32); 4] = [
    // "timeout in poll: {io error}": the client's read timeout on a watch.
    ("kube-client-5.0.0/src/client/mod.rs", 400),
    // "eof in poll: {io error:?}": a watch connection cut; the watcher resumes.
    ("kube-client-5.0.0/src/client/mod.rs", 407),
    // "watch stream idle timeout, reconnecting".
    ("kube-runtime-5.0.0/src/watcher.rs", 541),
    // "got deleted event during initial watch. this is a bug".
    ("kube-runtime-5.0.0/src/watcher.rs", 639),
];

/// Drops the events of kube that print a response body, a `Status` or a decode error quoting one:
/// all of `kube_client::client` (the module of `Client::request*` and `handle_api_errors`) and of
/// `kube_runtime::watcher` but the `HARMLESS` callsites. Spans, other kube modules (config,
/// TLS, auth, the HTTP trace layer) and everything else pass.
#[derive(Debug, Clone, Copy)]
pub struct NoResponseText;

impl NoResponseText {
    fn allows(metadata: &Metadata<'_>) -> bool {
        if metadata.is_span() || !RESPONSE_TEXT_TARGETS.contains(&metadata.target()) {
            return true;
        }
        let (Some(file), Some(line)) = (metadata.file(), metadata.line()) else {
            return false;
        };
        HARMLESS.iter().any(|&(path, at)| {
            at == line
                && file
                    .strip_suffix(path)
                    .is_some_and(|dir| dir.is_empty() || dir.ends_with('/'))
        })
    }
}

impl<S> Filter<S> for NoResponseText {
    fn enabled(&self, metadata: &Metadata<'_>, _: &Context<'_, S>) -> bool {
        Self::allows(metadata)
    }

    fn callsite_enabled(&self, metadata: &'static Metadata<'static>) -> tracing::subscriber::Interest {
        if Self::allows(metadata) {
            tracing::subscriber::Interest::always()
        } else {
            tracing::subscriber::Interest::never()
        }
    }

    /// No level is filtered here; saying so keeps the user's level as the global maximum (a `None`
    /// would make every disabled `trace!` pay for a filter call).
    fn max_level_hint(&self) -> Option<LevelFilter> {
        Some(LevelFilter::TRACE)
    }
}

/// A `kube::Error` without what the server or a credential plugin wrote: for an API error the
/// HTTP code and the reason, for an undecodable body where it stopped, for a transport failure
/// what failed. Debug prints the same.
pub fn api_error(error: &kube::Error) -> ApiError<'_> {
    ApiError(error)
}

/// See [`api_error`].
pub struct ApiError<'a>(&'a kube::Error);

impl fmt::Display for ApiError<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use kube::Error as E;
        match self.0 {
            E::Api(status) => write!(f, "{}", self::status(status)),
            E::SerdeError(e) => write!(f, "the response did not decode ({})", decode_position(e)),
            E::FromUtf8(e) => write!(
                f,
                "the response is not UTF-8 (from byte {})",
                e.utf8_error().valid_up_to()
            ),
            E::HyperError(e) => write!(f, "HTTP: {}", chain(e)),
            E::Service(e) => match find::<AuthError>(e.as_ref()) {
                Some(auth) => write!(f, "{}", Auth(auth)),
                None => write!(f, "{}", chain(e.as_ref())),
            },
            E::ReadEvents(e) => write!(f, "reading a watch: {}", chain(e)),
            E::Auth(e) => write!(f, "{}", Auth(e)),
            E::InferConfig(e) => match e.source().and_then(|s| s.downcast_ref::<KubeconfigError>()) {
                Some(kubeconfig) if withheld(kubeconfig) => {
                    write!(
                        f,
                        "failed to infer config: kubeconfig: {}",
                        Kubeconfig(kubeconfig)
                    )
                }
                _ => write!(f, "{e}"),
            },
            E::InferKubeconfig(e) => write!(f, "{}", Kubeconfig(e)),
            // A proxy URL can hold a user and password.
            E::ProxyProtocolUnsupported { .. } => {
                f.write_str("the configured proxy uses an unsupported protocol")
            }
            E::ProxyProtocolDisabled { protocol_feature, .. } => {
                write!(f, "the configured proxy needs kube's feature {protocol_feature}")
            }
            // What is left is about the local request or configuration, not an answer (building
            // the request, TLS setup, discovery of group names, a missing TLS stack); their texts
            // hold no response and no credential.
            other => write!(f, "{other}"),
        }
    }
}

impl fmt::Debug for ApiError<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// A `Status` by its code and, when it is one of Kubernetes' own `StatusReason`s, its reason; never
/// its message or details.
pub fn status(status: &Status) -> impl fmt::Display + '_ {
    StatusCode(status)
}

struct StatusCode<'a>(&'a Status);

/// `metav1.StatusReason` values (k8s.io/apimachinery/pkg/apis/meta/v1/types.go).
const STATUS_REASONS: [&str; 19] = [
    "Unauthorized",
    "Forbidden",
    "NotFound",
    "AlreadyExists",
    "Conflict",
    "Gone",
    "Invalid",
    "ServerTimeout",
    "StoreReadError",
    "Timeout",
    "TooManyRequests",
    "BadRequest",
    "MethodNotAllowed",
    "NotAcceptable",
    "RequestEntityTooLarge",
    "UnsupportedMediaType",
    "InternalError",
    "Expired",
    "ServiceUnavailable",
];

/// The reason kube gives the `Status` it makes up when a failed response's body is not one (its
/// message is then the whole body).
const KUBE_UNPARSED_REASON: &str = "Failed to parse error data";

impl fmt::Display for StatusCode<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Status { code, reason, .. } = self.0;
        write!(f, "the API server answered {code}")?;
        if STATUS_REASONS.contains(&reason.as_str()) {
            write!(f, " {reason}")?;
        } else if reason == KUBE_UNPARSED_REASON {
            f.write_str(" with a body that is not a Status")?;
        }
        Ok(())
    }
}

/// A watcher error with [`api_error`]'s redaction.
pub fn watcher_error(error: &watcher::Error) -> WatcherError<'_> {
    WatcherError(error)
}

/// See [`watcher_error`].
pub struct WatcherError<'a>(&'a watcher::Error);

impl fmt::Display for WatcherError<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use watcher::Error as W;
        match self.0 {
            W::InitialListFailed(e) => write!(f, "failed to perform initial object list: {}", api_error(e)),
            W::WatchStartFailed(e) => write!(f, "failed to start watching object: {}", api_error(e)),
            W::WatchError(s) => write!(f, "error returned by apiserver during watch: {}", status(s)),
            W::WatchFailed(e) => write!(f, "watch stream failed: {}", api_error(e)),
            W::NoResourceVersion => write!(f, "{}", self.0),
        }
    }
}

impl fmt::Debug for WatcherError<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// What a controller's stream yields on failure, with its queue's watch errors redacted (a
/// reconciler's error prints as its own Display, which for cmset's errors is redacted already).
pub fn controller_error<E: fmt::Display + 'static>(
    error: &controller::Error<E, watcher::Error>,
) -> ControllerError<'_, E> {
    ControllerError(error)
}

/// See [`controller_error`].
pub struct ControllerError<'a, E: 'static>(&'a controller::Error<E, watcher::Error>);

impl<E: fmt::Display + 'static> fmt::Display for ControllerError<'_, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            controller::Error::QueueError(e) => write!(f, "event queue error: {}", watcher_error(e)),
            other => write!(f, "{other}"),
        }
    }
}

/// Where serde stopped, without its message (which quotes the value it refused).
fn decode_position(e: &serde_json::Error) -> String {
    use serde_json::error::Category;
    let what = match e.classify() {
        Category::Io => "read error",
        Category::Syntax => "not JSON",
        Category::Data => "unexpected content",
        Category::Eof => "cut short",
    };
    format!("{what} at line {}, column {}", e.line(), e.column())
}

/// An error and its sources, each once (many errors print their source in their own text).
fn chain(error: &(dyn StdError + 'static)) -> String {
    let mut out = error.to_string();
    let mut next = error.source();
    while let Some(e) = next {
        let text = e.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        next = e.source();
    }
    out
}

fn find<'a, T: StdError + 'static>(error: &'a (dyn StdError + 'static)) -> Option<&'a T> {
    let mut next = Some(error);
    while let Some(e) = next {
        if let Some(found) = e.downcast_ref::<T>() {
            return Some(found);
        }
        next = e.source();
    }
    None
}

/// An auth failure. An exec plugin's output, a token file's or a token endpoint's content are
/// credentials: those variants say only what failed.
struct Auth<'a>(&'a AuthError);

impl fmt::Display for Auth<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            AuthError::AuthExecRun { out, .. } => {
                write!(
                    f,
                    "auth exec command failed with {} (output withheld)",
                    out.status
                )
            }
            e @ (AuthError::InvalidBasicAuth(_)
            | AuthError::InvalidBearerToken(_)
            | AuthError::UnrefreshableTokenResponse
            | AuthError::ExecPluginFailed
            | AuthError::AuthExecStart(_)
            | AuthError::ReadTokenFile(..)
            | AuthError::MissingCommand
            | AuthError::ExecMissingClusterInfo
            | AuthError::NoValidNativeRootCA(_)) => write!(f, "auth error: {e}"),
            _ => f.write_str("auth error (details withheld: they can carry credentials)"),
        }
    }
}

/// Whether a kubeconfig error's text can quote the file's content (a YAML error quotes the line,
/// a client key's base64 error a byte of it).
fn withheld(e: &KubeconfigError) -> bool {
    matches!(e, KubeconfigError::Parse(_) | KubeconfigError::LoadClientKey(_))
}

struct Kubeconfig<'a>(&'a KubeconfigError);

impl fmt::Display for Kubeconfig<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            KubeconfigError::Parse(_) => f.write_str("failed to parse kubeconfig YAML (details withheld)"),
            KubeconfigError::LoadClientKey(_) => f.write_str("failed to load client key (details withheld)"),
            other => write!(f, "{other}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::ExitStatusExt;

    use super::*;

    const SECRET: &str = "hunter2-value";

    fn failure(code: u16, reason: &str) -> Status {
        Status {
            code,
            reason: reason.into(),
            ..Status::failure(&format!("Invalid value: \"{SECRET}\""), reason)
        }
    }

    #[test]
    fn a_status_shows_its_code_and_a_kubernetes_reason_only() {
        let api = |status: Status| api_error(&kube::Error::Api(Box::new(status))).to_string();
        assert_eq!(
            api(failure(422, "Invalid")),
            "the API server answered 422 Invalid"
        );
        // Anything in the reason field that is not one of Kubernetes' own could be anything.
        assert_eq!(api(failure(500, SECRET)), "the API server answered 500");
        assert_eq!(
            api(failure(502, KUBE_UNPARSED_REASON)),
            "the API server answered 502 with a body that is not a Status"
        );
    }

    #[test]
    fn an_exec_plugin_s_output_is_withheld_directly_and_inside_a_service_error() {
        let run = || AuthError::AuthExecRun {
            cmd: format!("get-token --secret {SECRET}"),
            out: Box::new(std::process::Output {
                status: std::process::ExitStatus::from_raw(256),
                stdout: SECRET.into(),
                stderr: SECRET.into(),
            }),
        };
        assert!(
            kube::Error::Auth(run()).to_string().contains(SECRET),
            "kube's own text"
        );
        let expected = "auth exec command failed with exit status: 1 (output withheld)";
        assert_eq!(api_error(&kube::Error::Auth(run())).to_string(), expected);
        assert_eq!(
            api_error(&kube::Error::Service(Box::new(run()))).to_string(),
            expected
        );
        assert_eq!(
            api_error(&kube::Error::Auth(AuthError::AuthExec(SECRET.into()))).to_string(),
            "auth error (details withheld: they can carry credentials)"
        );
    }

    #[test]
    fn transport_failures_keep_their_text() {
        // What the leader elector reports when a request outlives its deadline.
        let timeout = kube::Error::Service(Box::new(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "lease request did not finish before its deadline",
        )));
        assert_eq!(
            api_error(&timeout).to_string(),
            "lease request did not finish before its deadline"
        );
    }

    #[test]
    fn a_proxy_url_is_withheld() {
        let e = kube::Error::ProxyProtocolUnsupported {
            proxy_url: Box::new(format!("gopher://user:{SECRET}@proxy").parse().unwrap()),
        };
        assert!(!api_error(&e).to_string().contains(SECRET));
    }

    #[test]
    fn watch_and_controller_queue_errors_are_redacted() {
        let expired = || watcher::Error::WatchError(Box::new(failure(410, "Expired")));
        assert_eq!(
            watcher_error(&expired()).to_string(),
            "error returned by apiserver during watch: the API server answered 410 Expired"
        );
        let queue: controller::Error<crate::platform::error::Error, watcher::Error> =
            controller::Error::QueueError(expired());
        assert!(queue.to_string().contains(SECRET), "kube's own text");
        assert_eq!(
            controller_error(&queue).to_string(),
            "event queue error: error returned by apiserver during watch: the API server answered 410 Expired"
        );
    }
}
