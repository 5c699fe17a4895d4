//! Errors, each worded for the person at the terminal. Every error exits with status 2.

use crate::diff::ResolveError;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("configmapset {name:?} not found in namespace {namespace:?}")]
    SetNotFound { name: String, namespace: String },

    #[error(
        "the ConfigMapSet API (configmapsets.cmset.dev) is not installed in this cluster; install cmset's CRD first"
    )]
    NoApi,

    #[error("{0}")]
    Resolve(#[from] ResolveError),

    #[error("{0}")]
    Usage(String),

    #[error("kubeconfig: {0}")]
    Config(String),

    #[error("{doing}: {source}")]
    Kube {
        doing: &'static str,
        #[source]
        source: kube::Error,
    },

    #[error("writing {format}: {message}")]
    Serialize { format: &'static str, message: String },
}

impl Error {
    pub fn kube(doing: &'static str, source: kube::Error) -> Self {
        Error::Kube { doing, source }
    }
}
