//! Keeps the webhook's serving certificate current, on every replica.
//!
//! Two sources:
//! - a Secret cmset keeps itself (the default install): the first replica to find it missing issues a
//!   CA and a serving certificate (`webhook_certs`), a replica that finds it due renews it, and a
//!   conflict means another replica got there first, whose pair is then used. Before serving a pair,
//!   each replica makes sure the `caBundle` of the MutatingWebhookConfiguration (and of the
//!   ValidatingWebhookConfiguration of the same name, when installed) trusts its CA, so the API server
//!   never meets a certificate it cannot verify. That patch is made on the version read, and
//!   merged again on a conflict, so that replicas adding different CAs at once keep both.
//! - files in a directory (cert-manager's mounted Secret, or a self-signed pair generated there for a
//!   local run), read again when they change.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};
use tracing::{debug, info, warn};

use crate::serving::webhook::{ServingCert, WebhookError};
use crate::serving::webhook_certs::{self, CA_KEY, CERT_KEY, PRIVATE_KEY_KEY, Pair, Policy, Verdict};

/// Where the serving certificate comes from.
#[derive(Clone, Debug)]
pub enum CertSource {
    Secret(SecretSource),
    /// Holds `tls.crt` and `tls.key`; a self-signed pair is generated there when they are missing.
    Dir {
        dir: PathBuf,
        names: Vec<String>,
    },
}

#[derive(Clone, Debug)]
pub struct SecretSource {
    pub namespace: String,
    pub name: String,
    /// The MutatingWebhookConfiguration whose webhooks must trust the CA; the ValidatingWebhookConfiguration
    /// of this name too, when there is one.
    pub configuration: String,
    pub policy: Policy,
}

/// Every request of the keeper gets this long: a hung API server delays a renewal, never blocks it.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(20);
/// How often the files of a directory source are read again.
const DIR_INTERVAL: Duration = Duration::from_secs(30);
const FIELD_MANAGER: &str = "cmset-controller";
/// Reads and merges of the webhook configuration before giving up for this pass (each conflict means
/// another writer succeeded in between, so more than a few means something rewrites it in a loop).
const TRUST_ATTEMPTS: u32 = 5;

#[derive(Debug, thiserror::Error)]
pub enum KeepError {
    #[error("{operation}: {}", crate::platform::redact::api_error(.source))]
    Api {
        operation: &'static str,
        source: kube::Error,
    },
    #[error("{operation}: no answer within {REQUEST_TIMEOUT:?}")]
    Timeout { operation: &'static str },
    #[error("issuing a certificate: {0}")]
    Issue(#[from] rcgen::Error),
    #[error("loading the certificate: {0}")]
    Load(#[from] WebhookError),
    /// Another replica wrote the Secret between our read and our write: read it again.
    #[error("the Secret changed under us")]
    Raced,
    /// The webhook configuration changed between each read and patch: retried with a backoff.
    #[error("{operation}: the object changed between read and write {attempts} times in a row")]
    Contended { operation: &'static str, attempts: u32 },
}

async fn call<T>(
    operation: &'static str,
    request: impl std::future::Future<Output = Result<T, kube::Error>>,
) -> Result<T, KeepError> {
    match tokio::time::timeout(REQUEST_TIMEOUT, request).await {
        Ok(Ok(t)) => Ok(t),
        Ok(Err(kube::Error::Api(status))) if status.code == 409 => Err(KeepError::Raced),
        Ok(Err(source)) => Err(KeepError::Api { operation, source }),
        Err(_) => Err(KeepError::Timeout { operation }),
    }
}

/// Loads the first certificate of a directory source (so that bad files stop the operator at
/// startup), then keeps `cert` current in the background until `shutdown`.
pub async fn start(
    client: Client,
    source: CertSource,
    cert: Arc<ServingCert>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<tokio::task::JoinHandle<()>, WebhookError> {
    let task = match source {
        CertSource::Dir { dir, names } => {
            let mut loaded = load_dir(&dir, &names, &cert)?;
            tokio::spawn(async move {
                tokio::pin!(shutdown);
                loop {
                    tokio::select! {
                        _ = tokio::time::sleep(DIR_INTERVAL) => {}
                        _ = &mut shutdown => return,
                    }
                    match read_files(&dir) {
                        Ok(files) if files != loaded => match cert.install(&files.0, &files.1) {
                            Ok(()) => {
                                info!(dir = %dir.display(), "webhook certificate files changed; serving the new pair");
                                loaded = files;
                            }
                            Err(e) => {
                                warn!(dir = %dir.display(), error = %e, "new webhook certificate files are unusable; still serving the previous pair")
                            }
                        },
                        Ok(_) => {}
                        Err(e) => {
                            warn!(dir = %dir.display(), error = %e, "reading the webhook certificate files")
                        }
                    }
                }
            })
        }
        CertSource::Secret(source) => tokio::spawn(Keeper::new(client, source, cert).run(shutdown)),
    };
    Ok(task)
}

type Files = (Vec<u8>, Vec<u8>);

fn read_files(dir: &Path) -> std::io::Result<Files> {
    Ok((
        std::fs::read(dir.join(CERT_KEY))?,
        std::fs::read(dir.join(PRIVATE_KEY_KEY))?,
    ))
}

fn load_dir(dir: &Path, names: &[String], cert: &ServingCert) -> Result<Files, WebhookError> {
    let io = |source| WebhookError::Certificate {
        dir: dir.to_path_buf(),
        source,
    };
    if !dir.join(CERT_KEY).exists() || !dir.join(PRIVATE_KEY_KEY).exists() {
        let mut all = vec!["localhost".to_string(), "127.0.0.1".to_string()];
        all.extend(names.iter().cloned());
        let generated = rcgen::generate_simple_self_signed(all)?;
        std::fs::create_dir_all(dir).map_err(io)?;
        write_private(
            &dir.join(PRIVATE_KEY_KEY),
            generated.signing_key.serialize_pem().as_bytes(),
        )
        .map_err(io)?;
        std::fs::write(dir.join(CERT_KEY), generated.cert.pem()).map_err(io)?;
        info!(dir = %dir.display(), "generated a self-signed webhook serving certificate");
    }
    let files = read_files(dir).map_err(io)?;
    cert.install(&files.0, &files.1)?;
    Ok(files)
}

fn write_private(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(contents)
}

/// One pass of what each replica repeats (read or issue the pair, trust its CA, serve it), with the
/// pair it served before; returns when to renew. `start` runs it in a loop; tests call it directly.
pub async fn keep_once(
    client: Client,
    source: SecretSource,
    cert: Arc<ServingCert>,
    serving: &mut Option<Pair>,
) -> Result<Timestamp, KeepError> {
    Keeper::new(client, source, cert).sync(serving).await
}

/// A webhook configuration whose webhooks' `caBundle` the keeper keeps.
trait Configuration:
    kube::Resource<DynamicType = (), Scope = k8s_openapi::ClusterResourceScope>
    + Clone
    + serde::de::DeserializeOwned
    + std::fmt::Debug
{
    const KIND: &'static str;
    /// Without it the operator cannot work as installed (warned about), or it is optional.
    const REQUIRED: bool;
    /// Each webhook's name and caBundle.
    fn bundles(&self) -> Vec<(&str, &[u8])>;
}

impl Configuration for MutatingWebhookConfiguration {
    const KIND: &'static str = "MutatingWebhookConfiguration";
    const REQUIRED: bool = true;
    fn bundles(&self) -> Vec<(&str, &[u8])> {
        self.webhooks
            .iter()
            .flatten()
            .map(|w| (w.name.as_str(), bundle_of(w.client_config.ca_bundle.as_ref())))
            .collect()
    }
}

/// The validation of AnalysisTemplates: an install may leave it out (the controller checks templates
/// anyway), or run with RBAC from before it existed.
impl Configuration for ValidatingWebhookConfiguration {
    const KIND: &'static str = "ValidatingWebhookConfiguration";
    const REQUIRED: bool = false;
    fn bundles(&self) -> Vec<(&str, &[u8])> {
        self.webhooks
            .iter()
            .flatten()
            .map(|w| (w.name.as_str(), bundle_of(w.client_config.ca_bundle.as_ref())))
            .collect()
    }
}

fn bundle_of(bundle: Option<&ByteString>) -> &[u8] {
    bundle.map_or(&[][..], |b| &b.0[..])
}

struct Keeper {
    secrets: Api<Secret>,
    configurations: Api<MutatingWebhookConfiguration>,
    validations: Api<ValidatingWebhookConfiguration>,
    source: SecretSource,
    cert: Arc<ServingCert>,
}

impl Keeper {
    fn new(client: Client, source: SecretSource, cert: Arc<ServingCert>) -> Self {
        Self {
            secrets: Api::namespaced(client.clone(), &source.namespace),
            configurations: Api::all(client.clone()),
            validations: Api::all(client),
            source,
            cert,
        }
    }

    async fn run(self, shutdown: impl std::future::Future<Output = ()>) {
        tokio::pin!(shutdown);
        let interval = self.source.policy.check_interval();
        let mut retry = Duration::from_secs(1);
        let mut serving: Option<Pair> = None;
        loop {
            let wait = match self.sync(&mut serving).await {
                Ok(renew_at) => {
                    retry = Duration::from_secs(1);
                    let until_renewal = renew_at
                        .duration_since(Timestamp::now())
                        .try_into()
                        .unwrap_or(Duration::ZERO);
                    interval.min(until_renewal.max(Duration::from_secs(1)))
                }
                Err(KeepError::Raced) => Duration::ZERO,
                Err(e) => {
                    warn!(secret = %self.source.name, error = %e, retry_in = ?retry, "keeping the webhook certificate");
                    let wait = retry;
                    retry = (retry * 2).min(interval);
                    wait
                }
            };
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = &mut shutdown => return,
            }
        }
    }

    /// One pass: read (or issue) the pair, make the webhook trust its CA, serve it. Returns when to
    /// renew.
    async fn sync(&self, serving: &mut Option<Pair>) -> Result<Timestamp, KeepError> {
        let name = &self.source.name;
        let secret = call("reading the certificate Secret", self.secrets.get_opt(name)).await?;
        let stored = secret.as_ref().and_then(pair_of);
        let now = Timestamp::now();
        let (pair, renew_at) = match webhook_certs::verdict(stored.as_ref(), &self.source.policy, now) {
            Verdict::Keep { renew_at } => (stored.expect("kept pairs exist"), renew_at),
            Verdict::Issue(reason) => {
                let previous = stored.as_ref().map(|p| p.ca.as_str());
                let pair = webhook_certs::issue(&self.source.policy, now, previous)?;
                self.store(secret, &pair).await?;
                info!(secret = %name, %reason, "issued a new webhook CA and serving certificate");
                let renew_at = match webhook_certs::verdict(Some(&pair), &self.source.policy, now) {
                    Verdict::Keep { renew_at } => renew_at,
                    Verdict::Issue(_) => now,
                };
                (pair, renew_at)
            }
        };
        self.trust(&self.configurations, &pair.ca).await?;
        match self.trust(&self.validations, &pair.ca).await {
            Ok(()) => {}
            // Optional: serving the mutating webhook must not wait for it.
            Err(e) => warn!(error = %e, "keeping the caBundle of the ValidatingWebhookConfiguration"),
        }
        if serving.as_ref() != Some(&pair) {
            self.cert.install(pair.cert.as_bytes(), pair.key.as_bytes())?;
            info!(secret = %name, %renew_at, "serving the webhook certificate from the Secret");
            *serving = Some(pair);
        }
        Ok(renew_at)
    }

    /// Creates the Secret, or replaces it on the version that was read (a conflict: someone else won).
    async fn store(&self, current: Option<Secret>, pair: &Pair) -> Result<(), KeepError> {
        let data = BTreeMap::from([
            (CA_KEY.to_string(), ByteString(pair.ca.clone().into_bytes())),
            (CERT_KEY.to_string(), ByteString(pair.cert.clone().into_bytes())),
            (
                PRIVATE_KEY_KEY.to_string(),
                ByteString(pair.key.clone().into_bytes()),
            ),
        ]);
        match current {
            None => {
                let secret = Secret {
                    metadata: ObjectMeta {
                        name: Some(self.source.name.clone()),
                        namespace: Some(self.source.namespace.clone()),
                        labels: Some(BTreeMap::from([
                            ("app.kubernetes.io/name".to_string(), "cmset".to_string()),
                            (
                                "app.kubernetes.io/managed-by".to_string(),
                                "cmset-controller".to_string(),
                            ),
                        ])),
                        ..ObjectMeta::default()
                    },
                    type_: Some("kubernetes.io/tls".to_string()),
                    data: Some(data),
                    ..Secret::default()
                };
                call(
                    "creating the certificate Secret",
                    self.secrets.create(&post_params(), &secret),
                )
                .await?;
            }
            Some(mut secret) => {
                // The read version travels in metadata.resourceVersion: a replace on it fails on conflict.
                secret.data = Some(data);
                secret.string_data = None;
                call(
                    "replacing the certificate Secret",
                    self.secrets.replace(&self.source.name, &post_params(), &secret),
                )
                .await?;
            }
        }
        Ok(())
    }

    /// Adds the CA to every webhook of the configuration (`api`, named as the source says) that lacks it
    /// (nothing is written when they all trust it already). The patch is made on the version read; when
    /// another writer changed the configuration in between (another replica adding its CA), it is read
    /// and merged again. A missing configuration is only reported: the API server then calls no
    /// webhook, and serving costs nothing.
    async fn trust<K: Configuration>(&self, api: &Api<K>, ca: &str) -> Result<(), KeepError> {
        let name = &self.source.configuration;
        for attempt in 1..=TRUST_ATTEMPTS {
            match self.trust_once(api, ca).await {
                Err(KeepError::Raced) => {
                    debug!(configuration = %name, kind = K::KIND, attempt, "the webhook configuration changed since it was read; merging again")
                }
                done => return done,
            }
        }
        Err(KeepError::Contended {
            operation: PATCH_BUNDLE,
            attempts: TRUST_ATTEMPTS,
        })
    }

    async fn trust_once<K: Configuration>(&self, api: &Api<K>, ca: &str) -> Result<(), KeepError> {
        let name = &self.source.configuration;
        let Some(config) = call("reading the webhook configuration", api.get_opt(name)).await? else {
            if K::REQUIRED {
                warn!(configuration = %name, kind = K::KIND, "no such webhook configuration: the API server will not call this webhook");
            } else {
                debug!(configuration = %name, kind = K::KIND, "no such webhook configuration");
            }
            return Ok(());
        };
        let Some((patch, changed)) = trust_patch(&config, ca, Timestamp::now()) else {
            debug!(configuration = %name, kind = K::KIND, "the webhook configuration trusts the CA already");
            return Ok(());
        };
        call(
            PATCH_BUNDLE,
            api.patch(
                name,
                &PatchParams {
                    field_manager: Some(FIELD_MANAGER.to_string()),
                    ..PatchParams::default()
                },
                &Patch::Strategic(patch),
            ),
        )
        .await?;
        info!(configuration = %name, kind = K::KIND, webhooks = changed, "updated the webhook configuration's caBundle");
        Ok(())
    }
}

const PATCH_BUNDLE: &str = "patching the webhook configuration's caBundle";

/// The patch that makes every webhook of `config` trust `ca`, and how many webhooks it changes; `None`
/// when they all trust it already.
///
/// A strategic merge: webhooks merge by name, so only their caBundle changes. It carries the
/// `resourceVersion` read, which the API server checks as a precondition (409 Conflict if the
/// configuration changed since), so a bundle merged from a stale read never replaces one that another
/// replica extended in between. (A real API server always sends the version; without one the patch
/// goes unguarded, as it did before.)
fn trust_patch<K: Configuration>(config: &K, ca: &str, now: Timestamp) -> Option<(Value, usize)> {
    let changed: Vec<_> = config
        .bundles()
        .into_iter()
        .filter_map(|(name, bundle)| {
            let merged = webhook_certs::merged_bundle(ca, bundle, now)?;
            Some(json!({"name": name, "clientConfig": {"caBundle": ByteString(merged)}}))
        })
        .collect();
    if changed.is_empty() {
        return None;
    }
    let count = changed.len();
    let mut patch = json!({ "webhooks": changed });
    if let Some(version) = &config.meta().resource_version {
        patch["metadata"] = json!({ "resourceVersion": version });
    }
    Some((patch, count))
}

fn post_params() -> PostParams {
    PostParams {
        field_manager: Some(FIELD_MANAGER.to_string()),
        ..PostParams::default()
    }
}

/// The pair stored in a Secret, if all three keys are there as text.
fn pair_of(secret: &Secret) -> Option<Pair> {
    let data = secret.data.as_ref()?;
    let text = |key: &str| String::from_utf8(data.get(key)?.0.clone()).ok();
    Some(Pair {
        ca: text(CA_KEY)?,
        cert: text(CERT_KEY)?,
        key: text(PRIVATE_KEY_KEY)?,
    })
}

/// Deletes the Mutating- and ValidatingWebhookConfiguration `name` (`--delete-webhook-configurations`,
/// the chart's pre-delete hook); one already gone is fine. Returns what it deleted, as `Kind/name`.
pub async fn delete_configurations(client: Client, name: &str) -> Result<Vec<String>, kube::Error> {
    let mut deleted = Vec::new();
    if delete_one(Api::<MutatingWebhookConfiguration>::all(client.clone()), name).await? {
        deleted.push(format!("MutatingWebhookConfiguration/{name}"));
    }
    if delete_one(Api::<ValidatingWebhookConfiguration>::all(client), name).await? {
        deleted.push(format!("ValidatingWebhookConfiguration/{name}"));
    }
    Ok(deleted)
}

/// Whether `name` was there to delete (a 404 is no error: nothing left to do).
async fn delete_one<K>(api: Api<K>, name: &str) -> Result<bool, kube::Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.delete(name, &Default::default()).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(false),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_directory_pair_is_generated_once_and_then_reused() {
        let dir = std::env::temp_dir().join(format!("cmset-webhook-cert-{}", std::process::id()));
        let cert = ServingCert::default();
        let first = load_dir(&dir, &[], &cert).unwrap();
        let second = load_dir(&dir, &[], &cert).unwrap();
        assert_eq!(first, second, "the written pair is reused");
        assert!(cert.is_loaded());
        let _ = std::fs::remove_dir_all(dir);
    }

    fn ca() -> String {
        let policy = Policy {
            validity: Duration::from_secs(90 * 86_400),
            names: vec!["cmset-webhook.cmset-system.svc".to_string()],
        };
        webhook_certs::issue(&policy, Timestamp::now(), None).unwrap().ca
    }

    fn configuration(version: &str, bundles: &[&[u8]]) -> MutatingWebhookConfiguration {
        let webhooks: Vec<Value> = bundles
            .iter()
            .enumerate()
            .map(|(i, bundle)| {
                json!({"name": format!("hook{i}.cmset.dev"), "sideEffects": "None",
                    "admissionReviewVersions": ["v1"],
                    "clientConfig": {"url": "https://127.0.0.1:9443/mutate", "caBundle": ByteString(bundle.to_vec())}})
            })
            .collect();
        serde_json::from_value(
            json!({"metadata": {"name": "cmset", "resourceVersion": version}, "webhooks": webhooks}),
        )
        .unwrap()
    }

    /// Whether `bundle` trusts `ca` (merging it would add nothing).
    fn trusts(bundle: &Value, ca: &str) -> bool {
        let bytes: ByteString = serde_json::from_value(bundle.clone()).unwrap();
        webhook_certs::merged_bundle(ca, &bytes.0, Timestamp::now()).is_none()
    }

    #[test]
    fn the_bundle_patch_adds_the_ca_where_it_lacks_on_the_version_read() {
        let (ours, theirs) = (ca(), ca());
        let now = Timestamp::now();
        let trusting = webhook_certs::merged_bundle(&ours, b"", now).unwrap();
        let other = webhook_certs::merged_bundle(&theirs, b"", now).unwrap();
        let config = configuration("42", &[&trusting, &other]);
        let (patch, changed) = trust_patch(&config, &ours, now).expect("one webhook lacks the CA");
        assert_eq!(changed, 1);
        assert_eq!(
            patch["metadata"],
            json!({"resourceVersion": "42"}),
            "a precondition, and no other metadata"
        );
        let hooks = patch["webhooks"].as_array().unwrap();
        assert_eq!(hooks.len(), 1, "the trusting webhook is left alone");
        assert_eq!(hooks[0]["name"], "hook1.cmset.dev");
        assert_eq!(
            hooks[0].as_object().unwrap().keys().collect::<Vec<_>>(),
            ["clientConfig", "name"]
        );
        let bundle = &hooks[0]["clientConfig"]["caBundle"];
        assert!(
            trusts(bundle, &ours) && trusts(bundle, &theirs),
            "the CA already there is kept"
        );
    }

    #[test]
    fn nothing_is_patched_when_every_webhook_trusts_the_ca() {
        let ours = ca();
        let now = Timestamp::now();
        let trusting = webhook_certs::merged_bundle(&ours, b"", now).unwrap();
        let both = webhook_certs::merged_bundle(&ca(), &trusting, now).unwrap();
        let config = configuration("42", &[&trusting, &both]);
        assert_eq!(trust_patch(&config, &ours, now), None);
    }

    /// `--delete-webhook-configurations` deletes both configurations by name, and one already gone is
    /// no error; anything else (here a 403) is.
    #[tokio::test]
    async fn deleting_the_webhook_configurations_deletes_both_and_tolerates_one_gone() {
        use http::{Request, Response};
        use kube::client::Body;
        let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let record = seen.clone();
        tokio::spawn(async move {
            while let Some((request, send)) = handle.next_request().await {
                let path = request.uri().path().to_string();
                record
                    .lock()
                    .unwrap()
                    .push(format!("{} {path}", request.method()));
                let (code, body) = if path.ends_with("/mutatingwebhookconfigurations/cmset") {
                    (
                        200,
                        json!({"kind": "Status", "apiVersion": "v1", "status": "Success"}),
                    )
                } else {
                    let code = if path.ends_with("/cmset") { 404 } else { 403 };
                    let status = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                        "reason": "NotFound", "message": path, "code": code});
                    (code, status)
                };
                let response = Response::builder()
                    .status(code)
                    .body(Body::from(serde_json::to_vec(&body).unwrap()))
                    .unwrap();
                send.send_response(response);
            }
        });
        let client = Client::new(service, "default");
        let deleted = delete_configurations(client.clone(), "cmset").await.unwrap();
        assert_eq!(deleted, vec!["MutatingWebhookConfiguration/cmset".to_string()]);
        let base = "/apis/admissionregistration.k8s.io/v1";
        assert_eq!(
            *seen.lock().unwrap(),
            vec![
                format!("DELETE {base}/mutatingwebhookconfigurations/cmset"),
                format!("DELETE {base}/validatingwebhookconfigurations/cmset"),
            ]
        );
        let refused = delete_configurations(client, "other").await;
        assert!(refused.is_err(), "a 403 is an error: {refused:?}");
    }
}
