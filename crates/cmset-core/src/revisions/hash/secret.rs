//! Content hashes of Secret revisions, compatible with kustomize's `secretGenerator`.
//!
//! A SecretSet's revision is named `<set>-<hash>`. With a collision count of 0 the hash is byte for
//! byte the one kustomize (v5) appends to a generated Secret with the same `type` and `data`, so a team
//! replacing a `secretGenerator` by a SecretSet keeps its Secret names and rolls no pods.
//!
//! # What is hashed
//!
//! As for ConfigMaps ([`super`]), the Go `encoding/json` encoding of a map with sorted keys, but of
//! another shape:
//!
//! ```text
//! {"data":{...},"kind":"Secret","name":"","type":"Opaque"}
//! ```
//!
//! - `kind` is `Secret`, and `type` is the Secret's type as a Go JSON string (escaped like every other
//!   string, see [`super`]; a type is free text, so escaping can matter there). An absent or empty type
//!   is hashed as `Opaque`: that is what the API server stores for it, and what a `secretGenerator`
//!   without `type:` writes.
//! - Every value is bytes: `data` maps each key to the standard base64 encoding of its value, wrapped
//!   in lines of 70 exactly like a ConfigMap's `binaryData` (kustomize encodes Secret values with the
//!   same function). Text and binary values are treated alike, and there is no `binaryData` key.
//! - A Secret with no entries has `"data":{}`, never `""` as a ConfigMap has: the generator always
//!   writes a `data` map, even an empty one. An absent `data` is hashed the same way, because the API
//!   server drops the empty map on write: the stored Secret must keep the generated name, `46f8b28mk5`.
//! - `name` is always empty, as for ConfigMaps.
//! - `stringData` is never hashed: the API server folds it into `data` on write and never returns it.
//!
//! This was checked against `kubectl kustomize` (kustomize v5.5.0); `tests/secret_hash_vectors.rs`
//! holds the names it produced.
//!
//! # Collisions
//!
//! As for ConfigMaps: a count `n != 0` adds `"collisionCount":n` in its sorted place, here first:
//!
//! ```text
//! {"collisionCount":n,"data":{...},"kind":"Secret","name":"","type":"Opaque"}
//! ```
//!
//! # Keeping values secret
//!
//! The hash input holds every value, and base64 hides nothing. [`secret_hash_input`] therefore returns
//! a [`SecretHashInput`], whose `Debug` shows only its length and which has no `Display`: it cannot end
//! up in a log line, an event or an error message by accident. The hash itself reveals nothing useful.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::ByteString;

use crate::set::DEFAULT_SECRET_TYPE;

use super::{Sink, streamed_hash, write_base64_map, write_collision_count, write_go_json_string};

/// The hash of a Secret revision's content: the 10-character suffix of its name.
///
/// `type_` and `data` are the Secret's `type` and `data` as the API server returns them. With
/// `collision_count == 0` this equals the suffix kustomize gives a generated Secret with the same type
/// and data (see the [module docs](self)); any other count gives another, stable hash.
pub fn secret_hash(
    type_: Option<&str>,
    data: Option<&BTreeMap<String, ByteString>>,
    collision_count: i32,
) -> String {
    streamed_hash(|hasher| write_secret_hash_input(hasher, type_, data, collision_count))
}

/// The exact text [`secret_hash`] digests, for tests and for comparing with kustomize. It holds the
/// Secret's values: see [`SecretHashInput`].
pub fn secret_hash_input(
    type_: Option<&str>,
    data: Option<&BTreeMap<String, ByteString>>,
    collision_count: i32,
) -> SecretHashInput {
    let mut out = String::new();
    write_secret_hash_input(&mut out, type_, data, collision_count);
    SecretHashInput(out)
}

/// The text a Secret's hash is computed from. It contains the Secret's values, so it is only shown on
/// explicit request ([`expose_secret`](Self::expose_secret)); `Debug` prints its length alone.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretHashInput(String);

impl SecretHashInput {
    /// The text itself, values included. Never log it.
    pub fn expose_secret(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for SecretHashInput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SecretHashInput(<redacted, {} bytes>)", self.0.len())
    }
}

fn write_secret_hash_input(
    out: &mut impl Sink,
    type_: Option<&str>,
    data: Option<&BTreeMap<String, ByteString>>,
    collision_count: i32,
) {
    // Keys in Go's sorted order: collisionCount, data, kind, name, type.
    out.put("{");
    write_collision_count(out, collision_count);
    out.put("\"data\":");
    match data {
        Some(data) => write_base64_map(out, data),
        None => out.put("{}"),
    }
    out.put(",\"kind\":\"Secret\",\"name\":\"\",\"type\":");
    let type_ = type_.filter(|t| !t.is_empty()).unwrap_or(DEFAULT_SECRET_TYPE);
    write_go_json_string(out, type_);
    out.put("}");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(entries: &[(&str, &[u8])]) -> BTreeMap<String, ByteString> {
        entries
            .iter()
            .map(|(k, v)| (k.to_string(), ByteString(v.to_vec())))
            .collect()
    }

    #[test]
    fn hash_input_has_the_kustomize_secret_shape() {
        let data = bytes(&[("user", b"app"), ("password", b"s3cret")]);
        assert_eq!(
            secret_hash_input(Some("Opaque"), Some(&data), 0).expose_secret(),
            r#"{"data":{"password":"czNjcmV0","user":"YXBw"},"kind":"Secret","name":"","type":"Opaque"}"#
        );
        assert_eq!(
            secret_hash_input(Some("kubernetes.io/tls"), None, 2).expose_secret(),
            r#"{"collisionCount":2,"data":{},"kind":"Secret","name":"","type":"kubernetes.io/tls"}"#
        );
    }

    #[test]
    fn absent_or_empty_type_is_opaque_and_absent_data_is_empty() {
        let empty = BTreeMap::new();
        let expected = secret_hash_input(Some("Opaque"), Some(&empty), 0);
        assert_eq!(secret_hash_input(None, None, 0), expected);
        assert_eq!(secret_hash_input(Some(""), Some(&empty), 0), expected);
        assert_eq!(secret_hash(None, None, 0), "46f8b28mk5");
    }

    #[test]
    fn type_is_escaped_as_go_does() {
        assert_eq!(
            secret_hash_input(Some("a<b>&\"c\""), None, 0).expose_secret(),
            r#"{"data":{},"kind":"Secret","name":"","type":"a\u003cb\u003e\u0026\"c\""}"#
        );
    }

    #[test]
    fn debug_never_shows_the_values() {
        let data = bytes(&[("password", b"s3cret")]);
        let input = secret_hash_input(None, Some(&data), 0);
        let debug = format!("{input:?}");
        assert!(
            !debug.contains("czNjcmV0") && !debug.contains("password"),
            "{debug}"
        );
        assert_eq!(
            debug,
            format!(
                "SecretHashInput(<redacted, {} bytes>)",
                input.expose_secret().len()
            )
        );
    }
}
