//! One error variant per operation that can fail, each naming the object, with a bounded `category()`
//! for metric labels and event reasons.
//!
//! Display and Debug print a kube error through [`redact::api_error`]: its own texts can quote what
//! the API server sent back (a Secret's values among them). The error itself stays the `source`, for
//! code that asks what failed ([`Error::is_conflict`], [`api_code`]).

use std::fmt;

use kube::runtime::reflector::ObjectRef;

use crate::platform::redact;

#[derive(thiserror::Error)]
pub enum Error {
    #[error("ConfigMapSet {0} has no namespace")]
    MissingNamespace(String),

    #[error("creating revision {name}: {}", redact::api_error(.source))]
    CreateRevision { name: String, source: kube::Error },

    #[error("reading {name}, whose name a new revision needs: {}", redact::api_error(.source))]
    ReadExisting { name: String, source: kube::Error },

    #[error("patching metadata of revision {name}: {}", redact::api_error(.source))]
    PatchRevision { name: String, source: kube::Error },

    #[error("deleting revision {name}: {}", redact::api_error(.source))]
    DeleteRevision { name: String, source: kube::Error },

    #[error("reading source {name}: {}", redact::api_error(.source))]
    ReadSource { name: String, source: kube::Error },

    #[error("listing Pods of namespace {namespace}: {}", redact::api_error(.source))]
    ListPods { namespace: String, source: kube::Error },

    #[error("writing status of ConfigMapSet {name}: {}", redact::api_error(.source))]
    WriteStatus { name: String, source: kube::Error },

    #[error("patching {workload}: {}", redact::api_error(.source))]
    PatchWorkload { workload: String, source: kube::Error },

    #[error("workload kind {0} is not served by the API server (any more)")]
    KindNotServed(String),

    /// A check Job could not be read or started. A 403 means the ClusterRole `cmset-checks` is not
    /// bound in the namespace (see docs/checks.md).
    #[error("running check {check} in namespace {namespace}: {}{}", redact::api_error(.source), forbidden_hint(.source, .namespace))]
    Check {
        namespace: String,
        check: String,
        source: kube::Error,
    },
}

/// The category and the redacted text: the derived form would print the kube error's own Debug
/// (the whole `Status`, or the body's bytes).
impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple(self.category())
            .field(&format_args!("{self}"))
            .finish()
    }
}

impl Error {
    /// A bounded label for metrics and event reasons.
    pub fn category(&self) -> &'static str {
        match self {
            Self::MissingNamespace(_) => "MissingNamespace",
            Self::CreateRevision { .. } => "CreateRevision",
            Self::ReadExisting { .. } => "ReadExisting",
            Self::ReadSource { .. } => "ReadSource",
            Self::PatchRevision { .. } => "PatchRevision",
            Self::DeleteRevision { .. } => "DeleteRevision",
            Self::ListPods { .. } => "ListPods",
            Self::WriteStatus { .. } => "WriteStatus",
            Self::PatchWorkload { .. } => "PatchWorkload",
            Self::KindNotServed(_) => "KindNotServed",
            Self::Check { .. } => "Check",
        }
    }

    /// Conflicts and failed `test` guards mean the object moved on underneath: retry soon from a fresh
    /// read instead of treating it as a failure. A guard is a JSON patch's `test` (422); a status is
    /// written by server-side apply, which has no guard, so a 422 there is a refusal of what was sent
    /// and is reported as the failure it is.
    pub fn is_conflict(&self) -> bool {
        match self.api_status() {
            Some(status) if status.code == 409 => true,
            Some(status) if status.code == 422 => !matches!(self, Self::WriteStatus { .. }),
            _ => false,
        }
    }

    /// A write was not sent (or was cut off) because this replica's term as leader ended: the
    /// process is stepping down, nothing failed.
    pub fn is_term_ended(&self) -> bool {
        self.kube_error()
            .is_some_and(crate::platform::leader::TermEnded::is)
    }

    /// How long the API server asked us to wait (`Status.details.retryAfterSeconds`, which it sets on
    /// a 429 beside the `Retry-After` header; kube's client consumes the header in its own retries and
    /// surfaces only the body).
    pub fn retry_after(&self) -> Option<std::time::Duration> {
        let seconds = self.api_status()?.details.as_ref()?.retry_after_seconds;
        (seconds > 0).then(|| std::time::Duration::from_secs(seconds.into()))
    }

    /// The API server gave no answer (refused or cut connection, timeout): nothing about the object.
    pub fn is_unreachable(&self) -> bool {
        matches!(
            self.kube_error(),
            Some(kube::Error::HyperError(_) | kube::Error::Service(_))
        )
    }

    fn api_status(&self) -> Option<&kube::core::Status> {
        match self.kube_error()? {
            kube::Error::Api(status) => Some(status),
            _ => None,
        }
    }

    fn kube_error(&self) -> Option<&kube::Error> {
        let source = match self {
            Self::CreateRevision { source, .. }
            | Self::ReadExisting { source, .. }
            | Self::ReadSource { source, .. }
            | Self::PatchRevision { source, .. }
            | Self::DeleteRevision { source, .. }
            | Self::ListPods { source, .. }
            | Self::WriteStatus { source, .. }
            | Self::PatchWorkload { source, .. }
            | Self::Check { source, .. } => source,
            Self::MissingNamespace(_) | Self::KindNotServed(_) => return None,
        };
        Some(source)
    }
}

pub fn describe<K: kube::Resource<DynamicType = ()>>(obj: &ObjectRef<K>) -> String {
    format!("{}/{}", obj.namespace.as_deref().unwrap_or(""), obj.name)
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The HTTP status code of an API error, if it is one.
/// What a check refused with 403 lacks: the ClusterRole `cmset-checks` bound in its namespace.
fn forbidden_hint(source: &kube::Error, namespace: &str) -> String {
    if api_code(source) != Some(403) {
        return String::new();
    }
    format!(
        "; checks need the ClusterRole cmset-checks bound in namespace {namespace} (kubectl -n {namespace} \
         create rolebinding cmset-checks --clusterrole=cmset-checks --serviceaccount=<operator's namespace>:<its \
         service account>)"
    )
}

pub fn api_code(err: &kube::Error) -> Option<u16> {
    match err {
        kube::Error::Api(status) => Some(status.code),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answered(code: u16) -> kube::Error {
        kube::Error::Api(Box::new(kube::core::Status {
            code,
            ..kube::core::Status::default()
        }))
    }

    #[test]
    fn a_refused_status_apply_is_a_failure_and_a_failed_patch_guard_a_conflict() {
        let status = |code| Error::WriteStatus {
            name: "app".into(),
            source: answered(code),
        };
        let workload = |code| Error::PatchWorkload {
            workload: "web".into(),
            source: answered(code),
        };
        assert!(status(409).is_conflict(), "the set moved on since the plan");
        assert!(
            !status(422).is_conflict(),
            "the API server refused what was applied: reported, not retried quietly"
        );
        assert!(workload(422).is_conflict(), "a JSON patch's test failed");
        assert!(!workload(500).is_conflict());
    }
}
