//! Errors, each worded for the person at the terminal. Every error exits with status 2.

use cmset_core::set::SetKind;

use crate::address::SetId;
use crate::diff::ResolveError;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{set} not found in namespace {namespace:?}")]
    SetNotFound { set: SetId, namespace: String },

    /// A bare name, and no set of either kind has it.
    #[error("configmapset {name:?} not found in namespace {namespace:?}, nor secretset {name:?}")]
    NeitherFound { name: String, namespace: String },

    /// A bare name, and a set of each kind has it.
    #[error(
        "both a configmapset and a secretset are named {name:?} in namespace {namespace:?}: \
         write configmapset/{name} or secretset/{name}"
    )]
    Ambiguous { name: String, namespace: String },

    /// The API of `kind` (of both kinds, for `None`) is not installed.
    #[error("{}", no_api(*kind))]
    NoApi { kind: Option<SetKind> },

    #[error("{0}")]
    Resolve(#[from] ResolveError),

    #[error("{0}")]
    Usage(String),

    #[error("kubeconfig: {0}")]
    Config(String),

    #[error("{doing}: {source}")]
    Kube {
        doing: String,
        #[source]
        source: kube::Error,
    },

    /// An error while reading Secrets, told without anything the answer held (see
    /// [`crate::cluster::secret_error`]).
    #[error("{doing}: {message}")]
    Secret { doing: &'static str, message: String },

    #[error("writing {format}: {message}")]
    Serialize { format: &'static str, message: String },
}

impl Error {
    pub fn kube(doing: impl Into<String>, source: kube::Error) -> Self {
        Error::Kube {
            doing: doing.into(),
            source,
        }
    }

    /// The API server refused the request (HTTP 403): the user may not read that.
    pub fn is_forbidden(&self) -> bool {
        matches!(self, Error::Kube { source: kube::Error::Api(status), .. } if status.code == 403)
    }
}

fn no_api(kind: Option<SetKind>) -> String {
    match kind {
        Some(SetKind::ConfigMapSet) => "the ConfigMapSet API (configmapsets.cmset.dev) is not installed in \
                                        this cluster; install cmset's CRDs first"
            .to_string(),
        Some(SetKind::SecretSet) => "the SecretSet API (secretsets.cmset.dev) is not installed in this \
                                     cluster; install cmset's CRDs first"
            .to_string(),
        None => "neither the ConfigMapSet API (configmapsets.cmset.dev) nor the SecretSet API \
                 (secretsets.cmset.dev) is installed in this cluster; install cmset's CRDs first"
            .to_string(),
    }
}
