//! The webhook's serving certificate when cmset keeps it itself (no cert-manager): a private CA and a
//! serving certificate it signs, issued together and replaced together once a third of their lifetime
//! is left (cert-manager's default rule). The CA's private key is dropped right after signing: nobody,
//! not even whoever can read the Secret, can mint another certificate the API server would trust.
//!
//! Trust moves without a gap: a CA stays in the Secret's `ca.crt` and in the webhook configuration's
//! `caBundle` until it expires, so a replica still serving the previous certificate stays trusted while
//! another already serves the new one.
//!
//! Pure: the caller passes the time and does every read and write (see `cert_keeper`).

use std::collections::BTreeSet;
use std::fmt;
use std::time::Duration;

use base64::Engine;
use jiff::Timestamp;
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;
use x509_parser::extensions::GeneralName;

/// Secret keys, as cert-manager and `kubernetes.io/tls` Secrets name them.
pub const CA_KEY: &str = "ca.crt";
pub const CERT_KEY: &str = "tls.crt";
pub const PRIVATE_KEY_KEY: &str = "tls.key";

/// Names every certificate carries besides the configured ones: the API server reaches a webhook that
/// runs outside the cluster (`make dev`, the e2e suite) at a loopback URL.
const LOOPBACK_NAMES: [&str; 2] = ["localhost", "127.0.0.1"];

/// How certificates are issued.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Policy {
    /// Lifetime of the CA and the serving certificate.
    pub validity: Duration,
    /// DNS names the API server uses (the webhook Service's), besides the loopback ones.
    pub names: Vec<String>,
}

impl Policy {
    /// Every subject alternative name a certificate must carry, sorted.
    pub fn subject_names(&self) -> BTreeSet<String> {
        LOOPBACK_NAMES
            .iter()
            .map(|n| n.to_string())
            .chain(self.names.iter().cloned())
            .collect()
    }

    /// How often a replica looks at the Secret: often enough to pick up a rotation (at two thirds of
    /// the lifetime) long before the certificate it serves expires.
    pub fn check_interval(&self) -> Duration {
        (self.validity / 12).clamp(Duration::from_secs(1), Duration::from_secs(300))
    }
}

/// The PEM texts kept in the Secret. Its `Debug` never shows the private key.
#[derive(Clone, PartialEq, Eq)]
pub struct Pair {
    /// The CAs to trust, the one that signed `cert` first.
    pub ca: String,
    pub cert: String,
    pub key: String,
}

impl fmt::Debug for Pair {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pair")
            .field("key", &"<redacted>")
            .finish_non_exhaustive()
    }
}

/// Why a new pair is issued.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Renewal {
    Missing,
    /// The stored pair cannot be used (it does not parse, or the certificate is not the CA's).
    Unusable(String),
    /// The configured names changed (e.g. the Service was renamed).
    NamesChanged,
    /// A third of its lifetime or less is left (or it is already expired, or not yet valid).
    Due {
        not_after: Timestamp,
    },
    /// It lives longer than the configured validity (which was lowered): the change takes effect now.
    LongerThanConfigured,
}

impl fmt::Display for Renewal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Renewal::Missing => f.write_str("no certificate stored yet"),
            Renewal::Unusable(why) => write!(f, "the stored certificate is unusable: {why}"),
            Renewal::NamesChanged => f.write_str("the webhook's DNS names changed"),
            Renewal::Due { not_after } => write!(f, "due for renewal (expires {not_after})"),
            Renewal::LongerThanConfigured => f.write_str("it outlives the configured validity"),
        }
    }
}

/// What to do with what is stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    Keep { renew_at: Timestamp },
    Issue(Renewal),
}

/// Validity and names of one certificate.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Facts {
    not_before: Timestamp,
    not_after: Timestamp,
    subject: Vec<u8>,
    issuer: Vec<u8>,
    public_key: Vec<u8>,
    names: BTreeSet<String>,
}

fn facts(der: &CertificateDer<'_>) -> Result<Facts, String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).map_err(|e| format!("not X.509: {e}"))?;
    let validity = cert.validity();
    let time =
        |t: &x509_parser::time::ASN1Time| Timestamp::from_second(t.timestamp()).map_err(|e| e.to_string());
    let mut names = BTreeSet::new();
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for name in &san.value.general_names {
            match name {
                GeneralName::DNSName(dns) => {
                    names.insert(dns.to_string());
                }
                GeneralName::IPAddress(ip) => {
                    if let Ok(v4) = <[u8; 4]>::try_from(*ip) {
                        names.insert(std::net::Ipv4Addr::from(v4).to_string());
                    } else if let Ok(v6) = <[u8; 16]>::try_from(*ip) {
                        names.insert(std::net::Ipv6Addr::from(v6).to_string());
                    }
                }
                _ => {}
            }
        }
    }
    Ok(Facts {
        not_before: time(&validity.not_before)?,
        not_after: time(&validity.not_after)?,
        subject: cert.subject().as_raw().to_vec(),
        issuer: cert.issuer().as_raw().to_vec(),
        public_key: cert.public_key().raw.to_vec(),
        names,
    })
}

fn certificates(pem: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_slice_iter(pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("not PEM: {e}"))?;
    if certs.is_empty() {
        return Err("no certificate in it".to_string());
    }
    Ok(certs)
}

/// Whether the stored pair can keep serving, and until when.
pub fn verdict(stored: Option<&Pair>, policy: &Policy, now: Timestamp) -> Verdict {
    let Some(pair) = stored else {
        return Verdict::Issue(Renewal::Missing);
    };
    match check(pair, policy) {
        Err(renewal) => Verdict::Issue(renewal),
        Ok(cert) => {
            // Renew with a third of the lifetime left.
            let lifetime = cert.not_after.as_second() - cert.not_before.as_second();
            // Issued pairs live the validity plus the minute they are backdated; allow for that.
            if lifetime > policy.validity.as_secs() as i64 + 120 {
                return Verdict::Issue(Renewal::LongerThanConfigured);
            }
            let renew_at = Timestamp::from_second(cert.not_before.as_second() + lifetime * 2 / 3)
                .unwrap_or(cert.not_before);
            if now < cert.not_before || now >= renew_at {
                Verdict::Issue(Renewal::Due {
                    not_after: cert.not_after,
                })
            } else {
                Verdict::Keep { renew_at }
            }
        }
    }
}

fn check(pair: &Pair, policy: &Policy) -> Result<Facts, Renewal> {
    let unusable = |why: String| Renewal::Unusable(why);
    let cert = certificates(&pair.cert).map_err(|e| unusable(format!("{CERT_KEY}: {e}")))?;
    let cert = facts(&cert[0]).map_err(|e| unusable(format!("{CERT_KEY}: {e}")))?;
    let ca = certificates(&pair.ca).map_err(|e| unusable(format!("{CA_KEY}: {e}")))?;
    let ca = facts(&ca[0]).map_err(|e| unusable(format!("{CA_KEY}: {e}")))?;
    if cert.issuer != ca.subject {
        return Err(unusable(format!(
            "{CERT_KEY} was not issued by the first CA in {CA_KEY}"
        )));
    }
    let key = rcgen::KeyPair::from_pem(&pair.key).map_err(|e| unusable(format!("{PRIVATE_KEY_KEY}: {e}")))?;
    if rcgen::PublicKeyData::subject_public_key_info(&key) != cert.public_key {
        return Err(unusable(format!(
            "{PRIVATE_KEY_KEY} is not the key of {CERT_KEY}"
        )));
    }
    if !policy.subject_names().is_subset(&cert.names) {
        return Err(Renewal::NamesChanged);
    }
    Ok(cert)
}

/// Issues a new CA and a serving certificate signed by it, both valid from `now` for the policy's
/// lifetime (backdated a minute for clocks a little behind). `previous_ca` is the `ca.crt` being
/// replaced: its CAs that are still valid stay trusted after the new one.
pub fn issue(policy: &Policy, now: Timestamp, previous_ca: Option<&str>) -> Result<Pair, rcgen::Error> {
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
        KeyUsagePurpose,
    };

    let not_before = offset_time(now.as_second() - 60);
    let not_after = offset_time(now.as_second() + policy.validity.as_secs() as i64);

    let ca_key = KeyPair::generate()?;
    let mut ca_params = CertificateParams::default();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    ca_params.distinguished_name.push(
        DnType::CommonName,
        format!("cmset webhook CA {}", key_id(&ca_key)),
    );
    ca_params.not_before = not_before;
    ca_params.not_after = not_after;
    let ca_cert = ca_params.self_signed(&ca_key)?;
    let issuer = Issuer::new(ca_params, ca_key);

    let mut params = CertificateParams::new(policy.subject_names().into_iter().collect::<Vec<_>>())?;
    params.distinguished_name.push(
        DnType::CommonName,
        policy.names.first().map_or("localhost", String::as_str),
    );
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.not_before = not_before;
    params.not_after = not_after;
    let key = KeyPair::generate()?;
    let cert = params.signed_by(&key, &issuer)?;

    let mut ca = ca_cert.pem();
    for kept in still_valid(previous_ca.unwrap_or_default(), now) {
        ca.push_str(&pem_encode(&kept));
    }
    Ok(Pair {
        ca,
        cert: cert.pem(),
        key: key.serialize_pem(),
    })
}

/// A short, unique tag for a CA's name: a certificate is matched to its CA by name, so no two CAs may
/// share one.
fn key_id(key: &rcgen::KeyPair) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(key.public_key_raw());
    digest[..8].iter().map(|b| format!("{b:02x}")).collect()
}

fn offset_time(second: i64) -> time::OffsetDateTime {
    time::OffsetDateTime::from_unix_timestamp(second).unwrap_or(time::OffsetDateTime::UNIX_EPOCH)
}

/// The certificates of a PEM bundle that have not expired (unreadable ones are dropped), in order.
fn still_valid(pem: &str, now: Timestamp) -> Vec<CertificateDer<'static>> {
    CertificateDer::pem_slice_iter(pem.as_bytes())
        .filter_map(Result::ok)
        .filter(|der| facts(der).is_ok_and(|f| f.not_after > now))
        .collect()
}

fn pem_encode(der: &CertificateDer<'_>) -> String {
    let body = base64::engine::general_purpose::STANDARD.encode(der.as_ref());
    let mut pem = String::from("-----BEGIN CERTIFICATE-----\n");
    for line in body.as_bytes().chunks(64) {
        pem.push_str(std::str::from_utf8(line).unwrap_or_default());
        pem.push('\n');
    }
    pem.push_str("-----END CERTIFICATE-----\n");
    pem
}

/// The `caBundle` that trusts every certificate a replica may be serving: the bundle's own CAs that
/// are still valid (another replica may still serve a certificate one of them signed, and a replica
/// that read an older Secret must not take away a newer CA), then the Secret's CAs it lacks. Expired
/// and unreadable entries go. `None` when the bundle already is exactly that.
pub fn merged_bundle(secret_ca: &str, bundle: &[u8], now: Timestamp) -> Option<Vec<u8>> {
    let mut trusted: Vec<CertificateDer<'static>> = Vec::new();
    let current = std::str::from_utf8(bundle).unwrap_or_default();
    for der in still_valid(current, now)
        .into_iter()
        .chain(still_valid(secret_ca, now))
    {
        if !trusted.contains(&der) {
            trusted.push(der);
        }
    }
    let merged: String = trusted.iter().map(pem_encode).collect();
    (merged.as_bytes() != bundle).then(|| merged.into_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: Duration = Duration::from_secs(86_400);

    fn policy() -> Policy {
        Policy {
            validity: 90 * DAY,
            names: vec!["cmset-webhook.cmset-system.svc".to_string()],
        }
    }

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + second).unwrap()
    }

    fn ca_count(pem: &str) -> usize {
        certificates(pem).map_or(0, |c| c.len())
    }

    #[test]
    fn a_fresh_pair_is_kept_until_two_thirds_of_its_lifetime_then_renewed() {
        let pair = issue(&policy(), at(0), None).unwrap();
        let renew_at = at(60 * 86_400 - 20); // two thirds of 90 days, from a minute before issue
        assert_eq!(verdict(Some(&pair), &policy(), at(0)), Verdict::Keep { renew_at });
        assert_eq!(
            verdict(Some(&pair), &policy(), at(59 * 86_400)),
            Verdict::Keep { renew_at }
        );
        assert!(matches!(
            verdict(Some(&pair), &policy(), renew_at),
            Verdict::Issue(Renewal::Due { .. })
        ));
        assert!(matches!(
            verdict(Some(&pair), &policy(), at(91 * 86_400)),
            Verdict::Issue(Renewal::Due { .. })
        ));
        assert!(
            matches!(
                verdict(Some(&pair), &policy(), at(-3600)),
                Verdict::Issue(Renewal::Due { .. })
            ),
            "not yet valid (a clock far behind): issue again"
        );
    }

    #[test]
    fn missing_unusable_or_misnamed_pairs_are_issued_anew() {
        assert_eq!(verdict(None, &policy(), at(0)), Verdict::Issue(Renewal::Missing));
        let pair = issue(&policy(), at(0), None).unwrap();
        let broken = [
            Pair {
                cert: "junk".into(),
                ..pair.clone()
            },
            Pair {
                ca: String::new(),
                ..pair.clone()
            },
            Pair {
                key: "junk".into(),
                ..pair.clone()
            },
            // The key of another pair.
            Pair {
                key: issue(&policy(), at(0), None).unwrap().key,
                ..pair.clone()
            },
            // A certificate from another CA than the one the Secret says to trust.
            Pair {
                ca: issue(&policy(), at(0), None).unwrap().ca,
                ..pair.clone()
            },
        ];
        for b in &broken {
            assert!(
                matches!(
                    verdict(Some(b), &policy(), at(0)),
                    Verdict::Issue(Renewal::Unusable(_))
                ),
                "{b:?}"
            );
        }
        let renamed = Policy {
            names: vec!["other.cmset-system.svc".into()],
            ..policy()
        };
        assert_eq!(
            verdict(Some(&pair), &renamed, at(0)),
            Verdict::Issue(Renewal::NamesChanged)
        );
        let shorter = Policy {
            validity: 30 * DAY,
            ..policy()
        };
        assert_eq!(
            verdict(Some(&pair), &shorter, at(0)),
            Verdict::Issue(Renewal::LongerThanConfigured)
        );
        let longer = Policy {
            validity: 365 * DAY,
            ..policy()
        };
        assert!(
            matches!(verdict(Some(&pair), &longer, at(0)), Verdict::Keep { .. }),
            "kept until due"
        );
    }

    #[test]
    fn issued_certificates_name_the_service_and_the_loopback() {
        let pair = issue(&policy(), at(0), None).unwrap();
        let cert = facts(&certificates(&pair.cert).unwrap()[0]).unwrap();
        assert_eq!(
            cert.names,
            BTreeSet::from([
                "127.0.0.1".to_string(),
                "cmset-webhook.cmset-system.svc".to_string(),
                "localhost".to_string()
            ])
        );
        assert_eq!(cert.not_after, at(90 * 86_400));
    }

    #[test]
    fn a_rotation_keeps_the_previous_ca_trusted_until_it_expires() {
        let first = issue(&policy(), at(0), None).unwrap();
        let second = issue(&policy(), at(61 * 86_400), Some(&first.ca)).unwrap();
        assert_eq!(ca_count(&second.ca), 2, "new CA first, then the previous one");
        assert!(second.ca.ends_with(&first.ca), "{:?}", second.ca);
        let third = issue(&policy(), at(122 * 86_400), Some(&second.ca)).unwrap();
        assert_eq!(
            ca_count(&third.ca),
            2,
            "the first CA expired on day 90 and is gone"
        );
    }

    #[test]
    fn the_bundle_gains_new_cas_keeps_valid_ones_and_drops_expired_or_junk() {
        let first = issue(&policy(), at(0), None).unwrap();
        let bundle = merged_bundle(&first.ca, b"", at(0)).expect("an empty bundle gets the CA");
        assert_eq!(
            merged_bundle(&first.ca, &bundle, at(0)),
            None,
            "converged: nothing to write"
        );

        // A replica that read the old Secret does not take the new CA away.
        let second = issue(&policy(), at(61 * 86_400), Some(&first.ca)).unwrap();
        let both = merged_bundle(&second.ca, &bundle, at(61 * 86_400)).unwrap();
        assert_eq!(ca_count(std::str::from_utf8(&both).unwrap()), 2);
        assert_eq!(merged_bundle(&first.ca, &both, at(61 * 86_400)), None);

        // Past the first CA's expiry only the second remains; junk is dropped.
        let mut junk = both.clone();
        junk.extend_from_slice(b"not a certificate\n");
        let later = merged_bundle(&second.ca, &junk, at(91 * 86_400)).unwrap();
        assert_eq!(later, merged_bundle(&second.ca, b"", at(91 * 86_400)).unwrap());
        assert_eq!(ca_count(std::str::from_utf8(&later).unwrap()), 1);
    }

    #[test]
    fn the_private_key_never_shows_in_debug_output() {
        let pair = issue(&policy(), at(0), None).unwrap();
        let shown = format!("{pair:?}");
        assert!(
            !shown.contains("PRIVATE KEY") && !shown.contains(&pair.key[40..80]),
            "{shown}"
        );
    }

    #[test]
    fn replicas_look_often_enough_to_pick_up_a_rotation_in_time() {
        assert_eq!(policy().check_interval(), Duration::from_secs(300));
        let short = Policy {
            validity: Duration::from_secs(60),
            ..policy()
        };
        assert_eq!(short.check_interval(), Duration::from_secs(5));
    }
}
