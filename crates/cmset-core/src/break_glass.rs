//! Break glass: the proof that lets one rollout through the change windows.
//!
//! `cmset.dev/window-override: <revision>@<startedAt>` names the rollout; it counts only beside a
//! record that cmset's admission webhook wrote after the API server said the user may `override`
//! `changewindows.cmset.dev` (ClusterRole `cmset-break-glass`): `cmset.dev/window-override-by:
//! <user> <time>`, the user as the API server authenticated them, and `cmset.dev/window-override-proof`,
//! an HMAC-SHA256 over the set (kind, uid, namespace, name), the override, the user and the time, keyed
//! from key material only cmset's replicas hold (see [`ProofKey::derive`]). A tenant can write the
//! annotations but not the proof; a proof copied to another set, another rollout, another name or
//! another time does not verify. An override without a proof that verifies (written by hand, or while
//! the webhook was down: it fails open) is [`Override::Refused`]: it lets nothing through, and the
//! controller reports it without quoting the names it claims.
//!
//! Pure: the keys and the time are passed in.

use base64::Engine;
use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256};

use crate::set::{SetKind, SetRef};

/// A key proofs are made and checked with (32 bytes).
#[derive(Clone, PartialEq, Eq)]
pub struct ProofKey([u8; 32]);

impl std::fmt::Debug for ProofKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ProofKey(<redacted>)")
    }
}

impl ProofKey {
    /// The key derived from `secret` (the webhook's serving private key, which every replica holds and
    /// no tenant can read). Derived, so the private key itself is never used for anything else.
    pub fn derive(secret: &[u8]) -> Self {
        let mut hasher = Sha256::new();
        hasher.update(b"cmset.dev/window-override-proof/v1\0");
        hasher.update(secret);
        Self(hasher.finalize().into())
    }
}

/// What a proof vouches for: an override of one set, asked for by one user at one time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Claim<'a> {
    pub kind: SetKind,
    pub uid: &'a str,
    pub namespace: &'a str,
    pub name: &'a str,
    /// The override annotation's value: `<revision>@<startedAt>`.
    pub value: &'a str,
    /// The user as the API server authenticated them.
    pub user: &'a str,
    /// When, RFC 3339.
    pub at: &'a str,
}

impl Claim<'_> {
    /// The bytes the MAC covers: every field length-prefixed, so no two claims share an encoding.
    fn message(&self) -> Vec<u8> {
        let kind = match self.kind {
            SetKind::ConfigMapSet => "ConfigMapSet",
            SetKind::SecretSet => "SecretSet",
        };
        let mut out = Vec::new();
        for field in [
            kind,
            self.uid,
            self.namespace,
            self.name,
            self.value,
            self.user,
            self.at,
        ] {
            out.extend_from_slice(&(field.len() as u64).to_be_bytes());
            out.extend_from_slice(field.as_bytes());
        }
        out
    }

    /// The record annotation's value: `<user> <time>`.
    pub fn record(&self) -> String {
        format!("{} {}", self.user, self.at)
    }
}

/// The proof of `claim` under `key` (base64 of its HMAC-SHA256).
pub fn prove(key: &ProofKey, claim: &Claim<'_>) -> String {
    base64::engine::general_purpose::STANDARD.encode(hmac_sha256(&key.0, &claim.message()))
}

/// Whether `proof` is the proof of `claim` under one of `keys` (the current key and, across a key
/// rotation, the previous one). Compared in constant time (`verify_slice`).
pub fn verifies(keys: &[ProofKey], claim: &Claim<'_>, proof: &str) -> bool {
    let Ok(given) = base64::engine::general_purpose::STANDARD.decode(proof) else {
        return false;
    };
    let message = claim.message();
    keys.iter()
        .any(|key| mac(&key.0, &message).verify_slice(&given).is_ok())
}

/// The user and time of a record annotation (`<user> <time>`; a user name may contain spaces, the
/// time never does).
pub fn parse_record(record: &str) -> Option<(&str, &str)> {
    record
        .rsplit_once(' ')
        .filter(|(user, at)| !user.is_empty() && !at.is_empty())
}

/// What the controller makes of a set's override annotation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Override {
    /// Recorded by the webhook for a user allowed to override: `value` names the rollout let through.
    Verified { value: String, user: String, at: String },
    /// Present, but not recorded by the webhook (or the record was changed since): lets nothing through.
    Refused,
}

/// The override of `set`, if it carries one, judged against `keys`.
pub fn judge(set: SetRef<'_>, keys: &[ProofKey]) -> Option<Override> {
    let value = set.window_override()?;
    let annotations = set.metadata().annotations.as_ref();
    let get = |key: &str| annotations.and_then(|a| a.get(key)).map(String::as_str);
    let verified = (|| {
        let (user, at) = parse_record(get(cmset_api::labels::WINDOW_OVERRIDE_BY)?)?;
        let proof = get(cmset_api::labels::WINDOW_OVERRIDE_PROOF)?;
        let uid = set.uid();
        let claim = Claim {
            kind: set.kind(),
            uid: &uid,
            namespace: set.namespace(),
            name: set.name(),
            value,
            user,
            at,
        };
        verifies(keys, &claim, proof).then(|| Override::Verified {
            value: value.to_string(),
            user: user.to_string(),
            at: at.to_string(),
        })
    })();
    Some(verified.unwrap_or(Override::Refused))
}

/// Condition type on a set saying whether its override counts: `True` (reason `Verified`) when the
/// webhook's proof verifies, `False` (reason `NotVerified`) when not.
pub const CONDITION: &str = "WindowOverride";

/// The message of the `True` condition: it names the override and the record the controller verified,
/// so that a reader (the plugin) can tell whether the annotations it sees are the ones verified.
pub fn verified_message(value: &str, user: &str, at: &str) -> String {
    format!("The override {value} was recorded by cmset's admission webhook for {user} at {at}")
}

/// The record (`<user> <time>`) of the set's override as the controller last verified it, if the set's
/// annotations are still the ones it verified (read from the status, which only cmset writes).
pub fn confirmed_record(set: SetRef<'_>) -> Option<String> {
    let value = set.window_override()?;
    let record = set.window_override_by()?;
    let (user, at) = parse_record(record)?;
    let expected = verified_message(value, user, at);
    set.status()?
        .conditions
        .iter()
        .any(|c| c.type_ == CONDITION && c.status == "True" && c.message == expected)
        .then(|| record.to_string())
}

type HmacSha256 = Hmac<Sha256>;

/// HMAC-SHA256 (RFC 2104) of `message` under `key`.
fn hmac_sha256(key: &[u8], message: &[u8]) -> [u8; 32] {
    mac(key, message).finalize().into_bytes().into()
}

fn mac(key: &[u8], message: &[u8]) -> HmacSha256 {
    // HMAC takes a key of any length: this cannot fail.
    let mut mac = HmacSha256::new_from_slice(key).expect("HMAC accepts any key length");
    mac.update(message);
    mac
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use cmset_api::{ConfigMapSet, labels};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn hmac_matches_rfc_4231() {
        // Test cases 1, 2 and 6 (a key longer than a block).
        assert_eq!(
            hex(&hmac_sha256(&[0x0b; 20], b"Hi There")),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"
        );
        assert_eq!(
            hex(&hmac_sha256(b"Jefe", b"what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        assert_eq!(
            hex(&hmac_sha256(
                &[0xaa; 131],
                b"Test Using Larger Than Block-Size Key - Hash Key First"
            )),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"
        );
    }

    fn claim() -> Claim<'static> {
        Claim {
            kind: SetKind::ConfigMapSet,
            uid: "6f1c0000-0000-0000-0000-000000000001",
            namespace: "team",
            name: "app",
            value: "app-7c9f5d6b8d@20261127T172000Z",
            user: "ana@example.com",
            at: "2026-11-27T17:21:00Z",
        }
    }

    fn key() -> ProofKey {
        ProofKey::derive(b"-----BEGIN PRIVATE KEY-----\nserving key\n-----END PRIVATE KEY-----\n")
    }

    #[test]
    fn a_proof_verifies_for_its_claim_only() {
        let proof = prove(&key(), &claim());
        assert!(verifies(&[key()], &claim(), &proof));
        let others: [(&str, Claim<'static>); 8] = [
            (
                "another set (uid)",
                Claim {
                    uid: "6f1c0000-0000-0000-0000-000000000002",
                    ..claim()
                },
            ),
            (
                "another namespace",
                Claim {
                    namespace: "other",
                    ..claim()
                },
            ),
            (
                "another name",
                Claim {
                    name: "app2",
                    ..claim()
                },
            ),
            (
                "another kind",
                Claim {
                    kind: SetKind::SecretSet,
                    ..claim()
                },
            ),
            (
                "another rollout",
                Claim {
                    value: "app-7c9f5d6b8d@20261127T180000Z",
                    ..claim()
                },
            ),
            (
                "another revision",
                Claim {
                    value: "app-5b8d7c9f6d@20261127T172000Z",
                    ..claim()
                },
            ),
            (
                "another user",
                Claim {
                    user: "mallory",
                    ..claim()
                },
            ),
            (
                "a changed time",
                Claim {
                    at: "2026-11-27T17:21:01Z",
                    ..claim()
                },
            ),
        ];
        for (what, other) in others {
            assert!(!verifies(&[key()], &other, &proof), "{what}");
        }
    }

    #[test]
    fn a_proof_fails_under_another_key_garbage_or_nothing() {
        let proof = prove(&key(), &claim());
        assert!(!verifies(&[ProofKey::derive(b"another key")], &claim(), &proof));
        assert!(!verifies(&[], &claim(), &proof));
        for bad in ["", "not base64!", "AAAA", &proof[..proof.len() - 4]] {
            assert!(!verifies(&[key()], &claim(), bad), "{bad:?}");
        }
        // Across a rotation, the previous key still verifies what it signed.
        assert!(verifies(&[ProofKey::derive(b"new"), key()], &claim(), &proof));
    }

    #[test]
    fn fields_cannot_be_shifted_into_one_another() {
        let shifted = Claim {
            namespace: "tea",
            name: "mapp",
            ..claim()
        };
        assert_ne!(prove(&key(), &claim()), prove(&key(), &shifted));
    }

    #[test]
    fn records_split_at_the_last_space() {
        assert_eq!(
            parse_record("Ana Lopez 2026-11-27T17:21:00Z"),
            Some(("Ana Lopez", "2026-11-27T17:21:00Z"))
        );
        assert_eq!(parse_record("nobody"), None);
        assert_eq!(parse_record(" 2026-11-27T17:21:00Z"), None);
        assert_eq!(claim().record(), "ana@example.com 2026-11-27T17:21:00Z");
    }

    fn set(annotations: &[(&str, &str)]) -> ConfigMapSet {
        let mut set = ConfigMapSet::new("app", Default::default());
        set.metadata = ObjectMeta {
            name: Some("app".into()),
            namespace: Some("team".into()),
            uid: Some(claim().uid.into()),
            annotations: Some(
                annotations
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect::<BTreeMap<_, _>>(),
            ),
            ..ObjectMeta::default()
        };
        set
    }

    #[test]
    fn judge_honours_only_a_record_the_webhook_proved() {
        let c = claim();
        let proof = prove(&key(), &c);
        let record = c.record();
        let proved = set(&[
            (labels::WINDOW_OVERRIDE, c.value),
            (labels::WINDOW_OVERRIDE_BY, &record),
            (labels::WINDOW_OVERRIDE_PROOF, &proof),
        ]);
        assert_eq!(
            judge((&proved).into(), &[key()]),
            Some(Override::Verified {
                value: c.value.into(),
                user: c.user.into(),
                at: c.at.into()
            })
        );
        let cases = [
            (
                "no proof",
                vec![
                    (labels::WINDOW_OVERRIDE, c.value),
                    (labels::WINDOW_OVERRIDE_BY, record.as_str()),
                ],
            ),
            (
                "no record",
                vec![
                    (labels::WINDOW_OVERRIDE, c.value),
                    (labels::WINDOW_OVERRIDE_PROOF, proof.as_str()),
                ],
            ),
            (
                "a hand-written name",
                vec![
                    (labels::WINDOW_OVERRIDE, c.value),
                    (labels::WINDOW_OVERRIDE_BY, "root 2026-11-27T17:21:00Z"),
                    (labels::WINDOW_OVERRIDE_PROOF, proof.as_str()),
                ],
            ),
            (
                "the proof moved to another rollout",
                vec![
                    (labels::WINDOW_OVERRIDE, "app-7c9f5d6b8d@20261128T090000Z"),
                    (labels::WINDOW_OVERRIDE_BY, record.as_str()),
                    (labels::WINDOW_OVERRIDE_PROOF, proof.as_str()),
                ],
            ),
        ];
        for (what, annotations) in cases {
            assert_eq!(
                judge((&set(&annotations)).into(), &[key()]),
                Some(Override::Refused),
                "{what}"
            );
        }
        // Without keys (no webhook on this replica), nothing verifies.
        assert_eq!(judge((&proved).into(), &[]), Some(Override::Refused));
        assert_eq!(judge((&set(&[])).into(), &[key()]), None);
    }
}
