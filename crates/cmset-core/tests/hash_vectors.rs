//! `content_hash` against names produced by kustomize itself, and its properties.
//!
//! Every expected name in [`VECTORS`] was printed by `kubectl kustomize` (kubectl v1.32.4, kustomize
//! v5.5.0) for a generator with the same content. To reproduce them, run this in an empty directory:
//!
//! ```sh
//! set -e
//! printf 'server {\n  listen 80;\n  location / {\n    root /usr/share/nginx/html;\n  }\n}\n' > nginx.conf
//! printf 'héllo wörld ✓' > unicode.txt
//! printf '<tag> & "quotes"' > html.txt
//! printf 'col1\tcol2\\path\\to\\file\\n' > tabs.txt
//! printf 'a=1\r\nb=2\r\n' > crlf.txt
//! printf 'line\xe2\x80\xa8para\xe2\x80\xa9end \xf0\x9f\x98\x80 \xc3\xa9' > seps.txt
//! printf 'bs\b ff\f nul\0 esc\033 del\177 cr\r lf\n' > ctrl.txt
//! printf '# comment\nDB_HOST=db.local\nDB_PORT=5432\n' > app.env
//! printf '' > empty.txt
//! printf '' > empty.env
//! printf '\0\1\2\377\376\375' > small.bin
//! printf 'caf\351' > latin1.txt
//! printf '  leading\ntrailing  \n\n\n' > ws.txt
//! printf '\357\273\277bom' > bom.txt
//! python3 -c "
//! def seq(n, mul, add): return bytes((i * mul + add) % 256 for i in range(n))
//! open('big.bin', 'wb').write(seq(200, 37, 11))
//! for n in (51, 52, 105): open(f'b{n}.bin', 'wb').write(seq(n, 7, 3))
//! "
//! cat > kustomization.yaml <<'K'
//! configMapGenerator:
//! - {name: nginx-config, literals: [APP_VERSION=1]}
//! - {name: nginx-config-2, literals: [APP_VERSION=2]}
//! - {name: app-config, literals: [LOG_LEVEL=info]}
//! - {name: empty}
//! - {name: empty-env, envs: [empty.env]}
//! - {name: literals, literals: [LOG_LEVEL=debug, APP_VERSION=1, feature.flag=true, _under=x, -dash=y, Zed=z]}
//! - {name: empty-value, literals: [EMPTY=]}
//! - {name: nginx, files: [nginx.conf]}
//! - {name: unicode, files: [unicode.txt]}
//! - {name: html, files: [html.txt]}
//! - {name: renamed, files: [custom.key=html.txt]}
//! - {name: tabs, files: [tabs.txt]}
//! - {name: crlf, files: [crlf.txt]}
//! - {name: seps, files: [seps.txt]}
//! - {name: empty-file, files: [empty.txt]}
//! - {name: ws, files: [ws.txt]}
//! - {name: bom, files: [bom.txt]}
//! - {name: env, envs: [app.env]}
//! - {name: small-bin, files: [small.bin]}
//! - {name: big-bin, files: [big.bin]}
//! - {name: b51, files: [b51.bin]}
//! - {name: b52, files: [b52.bin]}
//! - {name: b105, files: [b105.bin]}
//! - {name: mixed, files: [nginx.conf, small.bin, latin1.txt], literals: [MODE=prod]}
//! K
//! kubectl kustomize . | grep '^  name:'
//! # kustomize names a ConfigMap holding control characters, then cannot write it as YAML: the name is
//! # in its error message.
//! printf 'configMapGenerator:\n- {name: ctrl, files: [ctrl.txt]}\n' > kustomization.yaml
//! kubectl kustomize . 2>&1 | grep -o 'ctrl-[a-z0-9]*'
//! ```
//!
//! kustomize puts a file that is not valid UTF-8 in `binaryData` and every other file in `data`.

use std::collections::BTreeMap;

use cmset_core::revisions::hash::{HASH_ALPHABET, HASH_LEN, content_hash, hash_input, is_hash};
use cmset_core::revisions::naming::revision_name;
use k8s_openapi::ByteString;
use proptest::prelude::*;

mod hash_support;
use hash_support::{Bytes, one_byte_apart};

struct Vector {
    /// Name of the generator.
    name: &'static str,
    data: &'static [(&'static str, &'static str)],
    binary_data: &'static [(&'static str, Bytes)],
    /// The name kustomize gave the ConfigMap.
    expected: &'static str,
}

const NGINX_CONF: &str = "server {\n  listen 80;\n  location / {\n    root /usr/share/nginx/html;\n  }\n}\n";
const SMALL_BIN: Bytes = Bytes::Raw(&[0x00, 0x01, 0x02, 0xff, 0xfe, 0xfd]);

const VECTORS: &[Vector] = &[
    Vector {
        name: "nginx-config",
        data: &[("APP_VERSION", "1")],
        binary_data: &[],
        expected: "nginx-config-d2c65kk9hm",
    },
    Vector {
        name: "nginx-config-2",
        data: &[("APP_VERSION", "2")],
        binary_data: &[],
        expected: "nginx-config-2-tc2kg4m444",
    },
    Vector {
        name: "app-config",
        data: &[("LOG_LEVEL", "info")],
        binary_data: &[],
        expected: "app-config-hf678c7m2b",
    },
    // No entries at all: `"data":""`.
    Vector {
        name: "empty",
        data: &[],
        binary_data: &[],
        expected: "empty-6ct58987ht",
    },
    // An empty env file gives no entries either, so the same hash.
    Vector {
        name: "empty-env",
        data: &[],
        binary_data: &[],
        expected: "empty-env-6ct58987ht",
    },
    // Keys sort byte-wise: '-' < uppercase < '_' < lowercase.
    Vector {
        name: "literals",
        data: &[
            ("LOG_LEVEL", "debug"),
            ("APP_VERSION", "1"),
            ("feature.flag", "true"),
            ("_under", "x"),
            ("-dash", "y"),
            ("Zed", "z"),
        ],
        binary_data: &[],
        expected: "literals-9c2cg78c2t",
    },
    Vector {
        name: "empty-value",
        data: &[("EMPTY", "")],
        binary_data: &[],
        expected: "empty-value-k4dht5g7ht",
    },
    Vector {
        name: "nginx",
        data: &[("nginx.conf", NGINX_CONF)],
        binary_data: &[],
        expected: "nginx-5d5ctc8tmt",
    },
    // Non-ASCII is hashed as raw UTF-8.
    Vector {
        name: "unicode",
        data: &[("unicode.txt", "héllo wörld ✓")],
        binary_data: &[],
        expected: "unicode-g4f75kgkb9",
    },
    // '<', '>' and '&' are escaped as \u003c, \u003e and \u0026; '"' as \".
    Vector {
        name: "html",
        data: &[("html.txt", "<tag> & \"quotes\"")],
        binary_data: &[],
        expected: "html-586gchf75k",
    },
    Vector {
        name: "renamed",
        data: &[("custom.key", "<tag> & \"quotes\"")],
        binary_data: &[],
        expected: "renamed-h2k8mfg2b4",
    },
    Vector {
        name: "tabs",
        data: &[("tabs.txt", "col1\tcol2\\path\\to\\file\\n")],
        binary_data: &[],
        expected: "tabs-mc44tb9c89",
    },
    Vector {
        name: "crlf",
        data: &[("crlf.txt", "a=1\r\nb=2\r\n")],
        binary_data: &[],
        expected: "crlf-4m2h5g7kkg",
    },
    // U+2028 and U+2029 are escaped; an astral character and 'é' are not.
    Vector {
        name: "seps",
        data: &[("seps.txt", "line\u{2028}para\u{2029}end \u{1F600} é")],
        binary_data: &[],
        expected: "seps-h22f255k7c",
    },
    // Whitespace and blank lines are kept as they are.
    Vector {
        name: "ws",
        data: &[("ws.txt", "  leading\ntrailing  \n\n\n")],
        binary_data: &[],
        expected: "ws-bfg87dc24d",
    },
    // A byte order mark is an ordinary character.
    Vector {
        name: "bom",
        data: &[("bom.txt", "\u{feff}bom")],
        binary_data: &[],
        expected: "bom-tdkg7tkm52",
    },
    Vector {
        name: "empty-file",
        data: &[("empty.txt", "")],
        binary_data: &[],
        expected: "empty-file-fh4kb28mm2",
    },
    Vector {
        name: "env",
        data: &[("DB_HOST", "db.local"), ("DB_PORT", "5432")],
        binary_data: &[],
        expected: "env-t6f5d7c6ct",
    },
    // \b and \f in short form, other controls as \u00XX, DEL raw.
    Vector {
        name: "ctrl",
        data: &[("ctrl.txt", "bs\u{8} ff\u{c} nul\0 esc\u{1b} del\u{7f} cr\r lf\n")],
        binary_data: &[],
        expected: "ctrl-8h4f8h29h6",
    },
    // Binary only: `"binaryData":{...}` first, and `"data":""`.
    Vector {
        name: "small-bin",
        data: &[],
        binary_data: &[("small.bin", SMALL_BIN)],
        expected: "small-bin-k2fhf6mk5c",
    },
    // 200 bytes: 268 base64 characters, hashed in lines of 70, each ending in a newline.
    Vector {
        name: "big-bin",
        data: &[],
        binary_data: &[(
            "big.bin",
            Bytes::Seq {
                len: 200,
                mul: 37,
                add: 11,
            },
        )],
        expected: "big-bin-bbmhcgg5ft",
    },
    // 51 bytes: 68 characters, the longest encoding kustomize does not wrap.
    Vector {
        name: "b51",
        data: &[],
        binary_data: &[(
            "b51.bin",
            Bytes::Seq {
                len: 51,
                mul: 7,
                add: 3,
            },
        )],
        expected: "b51-gctm45f24m",
    },
    // 52 bytes: 72 characters, wrapped into 70 + 2.
    Vector {
        name: "b52",
        data: &[],
        binary_data: &[(
            "b52.bin",
            Bytes::Seq {
                len: 52,
                mul: 7,
                add: 3,
            },
        )],
        expected: "b52-h4fcd6mg4c",
    },
    // 105 bytes: exactly two lines of 70, both with their newline.
    Vector {
        name: "b105",
        data: &[],
        binary_data: &[(
            "b105.bin",
            Bytes::Seq {
                len: 105,
                mul: 7,
                add: 3,
            },
        )],
        expected: "b105-cf2m8d97tb",
    },
    Vector {
        name: "mixed",
        data: &[("MODE", "prod"), ("nginx.conf", NGINX_CONF)],
        binary_data: &[("small.bin", SMALL_BIN), ("latin1.txt", Bytes::Raw(b"caf\xe9"))],
        expected: "mixed-6fbb4md467",
    },
];

fn data_of(v: &Vector) -> Option<BTreeMap<String, String>> {
    (!v.data.is_empty()).then(|| {
        v.data
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    })
}

fn binary_of(v: &Vector) -> Option<BTreeMap<String, ByteString>> {
    (!v.binary_data.is_empty()).then(|| {
        v.binary_data
            .iter()
            .map(|(k, b)| (k.to_string(), ByteString(b.to_vec())))
            .collect()
    })
}

#[test]
fn names_equal_kustomize_names() {
    assert!(VECTORS.len() >= 12);
    let mut failures = Vec::new();
    for v in VECTORS {
        let (data, binary) = (data_of(v), binary_of(v));
        let name = revision_name(v.name, &content_hash(data.as_ref(), binary.as_ref(), 0));
        if name != v.expected {
            failures.push(format!(
                "{}: got {name}, kustomize made {}; hashed {}",
                v.name,
                v.expected,
                hash_input(data.as_ref(), binary.as_ref(), 0)
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn empty_maps_are_hashed_like_absent_ones() {
    let (data, binary) = (BTreeMap::new(), BTreeMap::new());
    for (d, b) in [
        (None, None),
        (Some(&data), None),
        (None, Some(&binary)),
        (Some(&data), Some(&binary)),
    ] {
        assert_eq!(content_hash(d, b, 0), "6ct58987ht");
    }
}

#[test]
fn hash_input_spells_binary_data_as_kustomize_does() {
    let binary = BTreeMap::from([(
        "b52.bin".to_string(),
        ByteString(
            Bytes::Seq {
                len: 52,
                mul: 7,
                add: 3,
            }
            .to_vec(),
        ),
    )]);
    assert_eq!(
        hash_input(None, Some(&binary), 0),
        r#"{"binaryData":{"b52.bin":"AwoRGB8mLTQ7QklQV15lbHN6gYiPlp2kq7K5wMfO1dzj6vH4/wYNFBsiKTA3PkVMU1phaA\n==\n"},"data":"","kind":"ConfigMap","name":""}"#
    );
    let data = BTreeMap::from([("html.txt".to_string(), "<tag> & \"quotes\"".to_string())]);
    assert_eq!(
        hash_input(Some(&data), None, 0),
        r#"{"data":{"html.txt":"\u003ctag\u003e \u0026 \"quotes\""},"kind":"ConfigMap","name":""}"#
    );
}

#[test]
fn collision_count_enters_in_key_order() {
    let data = BTreeMap::from([("k".to_string(), "v".to_string())]);
    assert_eq!(
        hash_input(Some(&data), None, 1),
        r#"{"collisionCount":1,"data":{"k":"v"},"kind":"ConfigMap","name":""}"#
    );
    assert_eq!(
        hash_input(None, None, -2),
        r#"{"collisionCount":-2,"data":"","kind":"ConfigMap","name":""}"#
    );
    // Count 0 adds nothing: it is kustomize's hash.
    assert_eq!(
        hash_input(Some(&data), None, 0),
        r#"{"data":{"k":"v"},"kind":"ConfigMap","name":""}"#
    );
    assert_ne!(
        content_hash(Some(&data), None, 0),
        content_hash(Some(&data), None, 1)
    );
}

fn any_data() -> impl Strategy<Value = BTreeMap<String, String>> {
    // Any Unicode at all, not only what a ConfigMap key allows: the hash must cope with anything.
    prop::collection::btree_map(".{0,12}", ".{0,40}", 0..6)
}

fn any_binary() -> impl Strategy<Value = BTreeMap<String, ByteString>> {
    prop::collection::btree_map(
        "[-._a-zA-Z0-9]{1,12}",
        prop::collection::vec(any::<u8>(), 0..120).prop_map(ByteString),
        0..4,
    )
}

fn opt<T>(m: &BTreeMap<String, T>) -> Option<&BTreeMap<String, T>> {
    Some(m)
}

proptest! {
    #[test]
    fn hash_is_ten_characters_of_the_alphabet(data in any_data(), binary in any_binary(), count in any::<i32>()) {
        let hash = content_hash(opt(&data), opt(&binary), count);
        prop_assert_eq!(hash.len(), HASH_LEN);
        prop_assert!(hash.chars().all(|c| HASH_ALPHABET.contains(c)), "{}", hash);
        prop_assert!(is_hash(&hash));
    }

    #[test]
    fn hash_is_deterministic(data in any_data(), binary in any_binary(), count in 0..1000i32) {
        let again = (data.clone(), binary.clone());
        prop_assert_eq!(
            content_hash(opt(&data), opt(&binary), count),
            content_hash(opt(&again.0), opt(&again.1), count)
        );
    }

    #[test]
    fn changing_a_value_changes_the_hash(
        data in any_data().prop_filter("needs an entry", |d| !d.is_empty()),
        pick in any::<prop::sample::Index>(),
        new_value in ".{0,40}",
    ) {
        let key = pick.get(&data.keys().collect::<Vec<_>>()).to_string();
        prop_assume!(data[&key] != new_value);
        let mut changed = data.clone();
        changed.insert(key, new_value);
        prop_assert_ne!(content_hash(opt(&data), None, 0), content_hash(opt(&changed), None, 0));
    }

    #[test]
    fn renaming_a_key_changes_the_hash(
        data in any_data().prop_filter("needs an entry", |d| !d.is_empty()),
        pick in any::<prop::sample::Index>(),
        new_key in ".{0,12}",
    ) {
        let key = pick.get(&data.keys().collect::<Vec<_>>()).to_string();
        prop_assume!(!data.contains_key(&new_key));
        let mut changed = data.clone();
        let value = changed.remove(&key).unwrap_or_default();
        changed.insert(new_key, value);
        prop_assert_ne!(content_hash(opt(&data), None, 0), content_hash(opt(&changed), None, 0));
    }

    #[test]
    fn changing_a_binary_byte_changes_the_hash((binary, changed) in one_byte_apart(any_binary())) {
        prop_assert_ne!(content_hash(None, opt(&binary), 0), content_hash(None, opt(&changed), 0));
    }

    #[test]
    fn moving_an_entry_between_data_and_binary_data_changes_the_hash(key in "[a-z]{1,8}", value in "[ -~]{0,30}") {
        let data = BTreeMap::from([(key.clone(), value.clone())]);
        let binary = BTreeMap::from([(key, ByteString(value.into_bytes()))]);
        prop_assert_ne!(content_hash(opt(&data), None, 0), content_hash(None, opt(&binary), 0));
    }

    #[test]
    fn collision_counts_give_distinct_stable_hashes(data in any_data(), binary in any_binary(), a in 0..10_000i32, b in 0..10_000i32) {
        prop_assume!(a != b);
        let ha = content_hash(opt(&data), opt(&binary), a);
        let hb = content_hash(opt(&data), opt(&binary), b);
        prop_assert_ne!(&ha, &hb);
        prop_assert_eq!(ha, content_hash(opt(&data), opt(&binary), a));
    }
}

#[test]
fn the_first_hundred_collision_counts_are_all_distinct() {
    let data = BTreeMap::from([("APP_VERSION".to_string(), "1".to_string())]);
    let hashes: std::collections::BTreeSet<String> =
        (0..100).map(|n| content_hash(Some(&data), None, n)).collect();
    assert_eq!(hashes.len(), 100);
    assert!(hashes.contains("d2c65kk9hm"));
}

proptest! {
    /// The text that is hashed is JSON that reads back as exactly the content (any Unicode, control
    /// characters and separators included; binary data through kustomize's wrapped base64), the
    /// collision count when there is one, and nothing else: two contents never share a hash input.
    #[test]
    fn hash_input_reads_back_as_the_content(data in any_data(), binary in any_binary(), count in -3..3i32) {
        let input = hash_input(opt(&data), opt(&binary), count);
        let parsed: serde_json::Value = serde_json::from_str(&input).map_err(|e| TestCaseError::fail(format!("{e}: {input}")))?;
        let object = parsed.as_object().expect("an object");
        let expected_data = if data.is_empty() { serde_json::json!("") } else { serde_json::json!(data) };
        prop_assert_eq!(&object["data"], &expected_data);
        prop_assert_eq!(&object["kind"], "ConfigMap");
        prop_assert_eq!(&object["name"], "");
        prop_assert_eq!(object.get("collisionCount").and_then(|c| c.as_i64()), (count != 0).then_some(i64::from(count)));
        let decoded: BTreeMap<String, ByteString> = match object.get("binaryData") {
            None => BTreeMap::new(),
            Some(b) => b.as_object().expect("a map").iter().map(|(k, v)| {
                let unwrapped = v.as_str().expect("a string").replace('\n', "");
                (k.clone(), serde_json::from_value(serde_json::json!(unwrapped)).expect("base64"))
            }).collect(),
        };
        prop_assert_eq!(decoded, binary);
        prop_assert_eq!(object.len(), 3 + usize::from(count != 0) + usize::from(object.contains_key("binaryData")));
    }
}
