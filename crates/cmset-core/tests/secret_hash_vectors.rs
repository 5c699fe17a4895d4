//! `secret_hash` against names produced by kustomize's `secretGenerator`, and its properties.
//!
//! Every expected name in [`VECTORS`] was printed by `kubectl kustomize` (kubectl v1.32.4, kustomize
//! v5.5.0) for a generator with the same type and content. To reproduce them, run this in an empty
//! directory:
//!
//! ```sh
//! set -e
//! printf '\0\1\2\377\376\375' > small.bin
//! printf 'caf\351' > latin1.txt
//! printf 'bs\b ff\f nul\0 esc\033 del\177' > ctrl.bin
//! printf '{"auths":{"registry.example.com":{"auth":"dXNlcjpwYXNz"}}}' > dockerconfig.json
//! printf -- '-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIUQ2VydGlmaWNhdGUgZm9yIHRlc3Rpbmc=\n-----END CERTIFICATE-----\n' > tls.crt
//! printf '<tag> & "quotes" \\ back\ttab\r\nnewline héllo ✓ 😀 \342\200\250' > special.txt
//! python3 -c "
//! def seq(n, mul, add): return bytes((i * mul + add) % 256 for i in range(n))
//! open('big.bin', 'wb').write(seq(200, 37, 11))
//! open('long.txt', 'wb').write(seq(1000, 0, 120))
//! for n in (51, 52, 105): open(f'b{n}.bin', 'wb').write(seq(n, 7, 3))
//! "
//! cat > kustomization.yaml <<'K'
//! secretGenerator:
//! - {name: opaque, literals: [password=s3cret, user=app]}
//! - {name: opaque-explicit, type: Opaque, literals: [password=s3cret, user=app]}
//! - {name: tls, type: kubernetes.io/tls, literals: [tls.crt=CERT, tls.key=KEY]}
//! - {name: tls-pem, type: kubernetes.io/tls, files: [tls.crt], literals: [tls.key=KEY]}
//! - {name: docker, type: kubernetes.io/dockerconfigjson, files: [.dockerconfigjson=dockerconfig.json]}
//! - {name: basic-auth, type: kubernetes.io/basic-auth, literals: [username=admin, password=t0p-Secret]}
//! - {name: ssh-auth, type: kubernetes.io/ssh-auth, literals: [ssh-privatekey=KEYDATA]}
//! - {name: sa-token, type: kubernetes.io/service-account-token, literals: [token=abc]}
//! - {name: bootstrap, type: bootstrap.kubernetes.io/token, literals: [token-id=abcdef, token-secret=0123456789abcdef]}
//! - {name: custom-type, type: "vendor.example.com/<kind>&more", literals: [k=v]}
//! - {name: empty}
//! - {name: empty-tls, type: kubernetes.io/tls}
//! - {name: empty-value, literals: [EMPTY=]}
//! - {name: small-bin, files: [small.bin]}
//! - {name: latin1, files: [latin1.txt]}
//! - {name: ctrl, files: [ctrl.bin]}
//! - {name: big-bin, files: [big.bin]}
//! - {name: b51, files: [b51.bin]}
//! - {name: b52, files: [b52.bin]}
//! - {name: b105, files: [b105.bin]}
//! - {name: long, files: [long.txt]}
//! - {name: special, files: [special.txt]}
//! - {name: keys, literals: [Z=1, _u=2, -d=3, .dot=4, a.b=5, A-B_c.9=6]}
//! K
//! kubectl kustomize . | grep '^  name:'
//! ```
//!
//! Unlike a ConfigMap, a Secret has no `binaryData`: text and binary values alike are base64 in `data`.
//! The values here are made up; real Secret values must never appear in a test's output.

use std::collections::BTreeMap;

use cmset_core::revisions::hash::secret::{secret_hash, secret_hash_input};
use cmset_core::revisions::hash::{HASH_ALPHABET, HASH_LEN, content_hash, is_hash};
use cmset_core::revisions::naming::revision_name;
use cmset_core::set::DEFAULT_SECRET_TYPE;
use k8s_openapi::ByteString;
use proptest::prelude::*;

mod hash_support;
use hash_support::{Bytes, one_byte_apart};

struct Vector {
    /// Name of the generator.
    name: &'static str,
    /// The generator's `type:`; `None` when it has none (kustomize then writes `Opaque`).
    type_: Option<&'static str>,
    data: &'static [(&'static str, Bytes)],
    /// The name kustomize gave the Secret.
    expected: &'static str,
}

const fn text(s: &'static str) -> Bytes {
    Bytes::Raw(s.as_bytes())
}

const fn seq(len: usize, mul: usize, add: usize) -> Bytes {
    Bytes::Seq { len, mul, add }
}

const TLS: Option<&str> = Some("kubernetes.io/tls");
const PEM: &str = "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIUQ2VydGlmaWNhdGUgZm9yIHRlc3Rpbmc=\n-----END CERTIFICATE-----\n";
const OPAQUE_DATA: &[(&str, Bytes)] = &[("password", text("s3cret")), ("user", text("app"))];

const VECTORS: &[Vector] = &[
    // The two vectors of the issue.
    Vector {
        name: "opaque",
        type_: None,
        data: OPAQUE_DATA,
        expected: "opaque-9k5ddchd8d",
    },
    // Writing `type: Opaque` changes nothing.
    Vector {
        name: "opaque-explicit",
        type_: Some("Opaque"),
        data: OPAQUE_DATA,
        expected: "opaque-explicit-9k5ddchd8d",
    },
    Vector {
        name: "tls",
        type_: TLS,
        data: &[("tls.crt", text("CERT")), ("tls.key", text("KEY"))],
        expected: "tls-4b255hm948",
    },
    // A PEM certificate: multi-line text whose base64 is longer than 70 characters, so wrapped.
    Vector {
        name: "tls-pem",
        type_: TLS,
        data: &[("tls.crt", text(PEM)), ("tls.key", text("KEY"))],
        expected: "tls-pem-tt84t8t6ff",
    },
    // A key with a leading dot.
    Vector {
        name: "docker",
        type_: Some("kubernetes.io/dockerconfigjson"),
        data: &[(
            ".dockerconfigjson",
            text(r#"{"auths":{"registry.example.com":{"auth":"dXNlcjpwYXNz"}}}"#),
        )],
        expected: "docker-b58c62mtmg",
    },
    Vector {
        name: "basic-auth",
        type_: Some("kubernetes.io/basic-auth"),
        data: &[("username", text("admin")), ("password", text("t0p-Secret"))],
        expected: "basic-auth-hc85kdfg94",
    },
    Vector {
        name: "ssh-auth",
        type_: Some("kubernetes.io/ssh-auth"),
        data: &[("ssh-privatekey", text("KEYDATA"))],
        expected: "ssh-auth-4m79h68f2g",
    },
    Vector {
        name: "sa-token",
        type_: Some("kubernetes.io/service-account-token"),
        data: &[("token", text("abc"))],
        expected: "sa-token-fd7mhfch5g",
    },
    Vector {
        name: "bootstrap",
        type_: Some("bootstrap.kubernetes.io/token"),
        data: &[
            ("token-id", text("abcdef")),
            ("token-secret", text("0123456789abcdef")),
        ],
        expected: "bootstrap-64kf66mhbm",
    },
    // A custom type is free text: '<', '>' and '&' in it are escaped as Go does.
    Vector {
        name: "custom-type",
        type_: Some("vendor.example.com/<kind>&more"),
        data: &[("k", text("v"))],
        expected: "custom-type-4hbg78gc47",
    },
    // No entries: `"data":{}`, unlike a ConfigMap's `"data":""`.
    Vector {
        name: "empty",
        type_: None,
        data: &[],
        expected: "empty-46f8b28mk5",
    },
    // The type alone tells two empty Secrets apart.
    Vector {
        name: "empty-tls",
        type_: TLS,
        data: &[],
        expected: "empty-tls-694464d966",
    },
    Vector {
        name: "empty-value",
        type_: None,
        data: &[("EMPTY", text(""))],
        expected: "empty-value-4m9mb49984",
    },
    // Values that are not UTF-8.
    Vector {
        name: "small-bin",
        type_: None,
        data: &[("small.bin", Bytes::Raw(&[0x00, 0x01, 0x02, 0xff, 0xfe, 0xfd]))],
        expected: "small-bin-2hg287d927",
    },
    Vector {
        name: "latin1",
        type_: None,
        data: &[("latin1.txt", Bytes::Raw(b"caf\xe9"))],
        expected: "latin1-8g66hb25tk",
    },
    // Control characters are bytes like any other once in base64.
    Vector {
        name: "ctrl",
        type_: None,
        data: &[("ctrl.bin", Bytes::Raw(b"bs\x08 ff\x0c nul\x00 esc\x1b del\x7f"))],
        expected: "ctrl-625f4cc25k",
    },
    // 200 bytes: 268 base64 characters, hashed in lines of 70, each ending in a newline.
    Vector {
        name: "big-bin",
        type_: None,
        data: &[("big.bin", seq(200, 37, 11))],
        expected: "big-bin-d888ffm7b4",
    },
    // 51 bytes: 68 characters, the longest encoding kustomize does not wrap.
    Vector {
        name: "b51",
        type_: None,
        data: &[("b51.bin", seq(51, 7, 3))],
        expected: "b51-cgd5524g7t",
    },
    // 52 bytes: 72 characters, wrapped into 70 + 2.
    Vector {
        name: "b52",
        type_: None,
        data: &[("b52.bin", seq(52, 7, 3))],
        expected: "b52-7t6t298f57",
    },
    // 105 bytes: exactly two lines of 70, both with their newline.
    Vector {
        name: "b105",
        type_: None,
        data: &[("b105.bin", seq(105, 7, 3))],
        expected: "b105-47kh282fh9",
    },
    // 1000 × 'x': a long text value, wrapped like binary.
    Vector {
        name: "long",
        type_: None,
        data: &[("long.txt", seq(1000, 0, b'x' as usize))],
        expected: "long-ctmk6kbkc2",
    },
    // Quotes, backslash, HTML characters, CR LF, tab, non-ASCII and U+2028: none of it is escaped,
    // since values are hashed in base64.
    Vector {
        name: "special",
        type_: None,
        data: &[(
            "special.txt",
            text("<tag> & \"quotes\" \\ back\ttab\r\nnewline héllo ✓ 😀 \u{2028}"),
        )],
        expected: "special-d522f67hh8",
    },
    // Keys sort byte-wise: '-' < '.' < uppercase < '_' < lowercase.
    Vector {
        name: "keys",
        type_: None,
        data: &[
            ("Z", text("1")),
            ("_u", text("2")),
            ("-d", text("3")),
            (".dot", text("4")),
            ("a.b", text("5")),
            ("A-B_c.9", text("6")),
        ],
        expected: "keys-4fhd4tfm44",
    },
];

fn data_of(v: &Vector) -> BTreeMap<String, ByteString> {
    v.data
        .iter()
        .map(|(k, b)| (k.to_string(), ByteString(b.to_vec())))
        .collect()
}

#[test]
fn names_equal_kustomize_names() {
    assert!(VECTORS.len() >= 20);
    let mut failures = Vec::new();
    for v in VECTORS {
        let data = data_of(v);
        let name = revision_name(v.name, &secret_hash(v.type_, Some(&data), 0));
        // Only names in the message: the hash input holds the values.
        if name != v.expected {
            failures.push(format!("{}: got {name}, kustomize made {}", v.name, v.expected));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn a_stored_secret_keeps_the_generated_name() {
    // The API server drops an empty `data` and fills in an absent or empty `type`: what it returns
    // for a generated Secret must hash to the generated name.
    let empty = BTreeMap::new();
    for (type_, data) in [
        (None, None),
        (Some(""), None),
        (Some(DEFAULT_SECRET_TYPE), None),
        (None, Some(&empty)),
    ] {
        assert_eq!(secret_hash(type_, data, 0), "46f8b28mk5");
    }
}

#[test]
fn long_values_are_wrapped_as_kustomize_does() {
    let data = BTreeMap::from([("b52.bin".to_string(), ByteString(seq(52, 7, 3).to_vec()))]);
    assert_eq!(
        secret_hash_input(None, Some(&data), 0).expose_secret(),
        r#"{"data":{"b52.bin":"AwoRGB8mLTQ7QklQV15lbHN6gYiPlp2kq7K5wMfO1dzj6vH4/wYNFBsiKTA3PkVMU1phaA\n==\n"},"kind":"Secret","name":"","type":"Opaque"}"#
    );
}

#[test]
fn collision_count_enters_first() {
    let data = BTreeMap::from([("k".to_string(), ByteString(b"v".to_vec()))]);
    assert_eq!(
        secret_hash_input(Some("Opaque"), Some(&data), 1).expose_secret(),
        r#"{"collisionCount":1,"data":{"k":"dg=="},"kind":"Secret","name":"","type":"Opaque"}"#
    );
    assert_eq!(
        secret_hash_input(None, None, -2).expose_secret(),
        r#"{"collisionCount":-2,"data":{},"kind":"Secret","name":"","type":"Opaque"}"#
    );
    let hashes: std::collections::BTreeSet<String> =
        (0..100).map(|n| secret_hash(None, Some(&data), n)).collect();
    assert_eq!(hashes.len(), 100);
}

#[test]
fn a_secret_and_a_config_map_with_the_same_entries_hash_apart() {
    let data = BTreeMap::from([("k".to_string(), ByteString(b"v".to_vec()))]);
    assert_ne!(
        secret_hash(None, Some(&data), 0),
        content_hash(None, Some(&data), 0)
    );
    assert_ne!(secret_hash(None, None, 0), content_hash(None, None, 0));
}

fn any_data() -> impl Strategy<Value = BTreeMap<String, ByteString>> {
    // Any key at all, not only what a Secret allows: the hash must cope with anything.
    prop::collection::btree_map(
        ".{0,12}",
        prop::collection::vec(any::<u8>(), 0..160).prop_map(ByteString),
        0..5,
    )
}

fn any_type() -> impl Strategy<Value = Option<String>> {
    prop::option::of(prop_oneof![
        Just("Opaque".to_string()),
        Just("kubernetes.io/tls".to_string()),
        ".{0,30}",
    ])
}

proptest! {
    #[test]
    fn hash_is_ten_characters_of_the_alphabet(type_ in any_type(), data in any_data(), count in any::<i32>()) {
        let hash = secret_hash(type_.as_deref(), Some(&data), count);
        prop_assert_eq!(hash.len(), HASH_LEN);
        prop_assert!(hash.chars().all(|c| HASH_ALPHABET.contains(c)), "{}", hash);
        prop_assert!(is_hash(&hash));
        prop_assert_eq!(&hash, &secret_hash(type_.as_deref(), Some(&data.clone()), count));
    }

    #[test]
    fn changing_a_byte_changes_the_hash((data, changed) in one_byte_apart(any_data())) {
        prop_assert_ne!(secret_hash(None, Some(&data), 0), secret_hash(None, Some(&changed), 0));
    }

    #[test]
    fn changing_the_type_changes_the_hash(data in any_data(), a in any_type(), b in any_type()) {
        let norm = |t: &Option<String>| t.clone().filter(|t| !t.is_empty()).unwrap_or_else(|| DEFAULT_SECRET_TYPE.to_string());
        prop_assume!(norm(&a) != norm(&b));
        prop_assert_ne!(secret_hash(a.as_deref(), Some(&data), 0), secret_hash(b.as_deref(), Some(&data), 0));
    }

    #[test]
    fn collision_counts_give_distinct_hashes(data in any_data(), a in 0..10_000i32, b in 0..10_000i32) {
        prop_assume!(a != b);
        prop_assert_ne!(secret_hash(None, Some(&data), a), secret_hash(None, Some(&data), b));
    }

    /// The hashed text is JSON that reads back as exactly the type (defaulted), the values (through
    /// kustomize's wrapped base64), the collision count when there is one, and nothing else.
    #[test]
    fn hash_input_reads_back_as_the_content(type_ in any_type(), data in any_data(), count in -3..3i32) {
        let input = secret_hash_input(type_.as_deref(), Some(&data), count);
        let parsed: serde_json::Value = serde_json::from_str(input.expose_secret())
            .map_err(|e| TestCaseError::fail(format!("not JSON: {e}")))?;
        let object = parsed.as_object().expect("an object");
        let expected_type = type_.filter(|t| !t.is_empty()).unwrap_or_else(|| DEFAULT_SECRET_TYPE.to_string());
        prop_assert_eq!(&object["type"], &serde_json::json!(expected_type));
        prop_assert_eq!(&object["kind"], "Secret");
        prop_assert_eq!(&object["name"], "");
        prop_assert_eq!(object.get("collisionCount").and_then(|c| c.as_i64()), (count != 0).then_some(i64::from(count)));
        let decoded: BTreeMap<String, ByteString> = object["data"].as_object().expect("a map").iter().map(|(k, v)| {
            let unwrapped = v.as_str().expect("a string").replace('\n', "");
            (k.clone(), serde_json::from_value(serde_json::json!(unwrapped)).expect("base64"))
        }).collect();
        prop_assert!(decoded == data, "values do not read back");
        prop_assert_eq!(object.len(), 4 + usize::from(count != 0));
    }
}
