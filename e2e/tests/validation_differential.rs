//! cmset's validation of a set's name and content (`cmset_core::content::validate::validate`) against the API
//! server's validation of a plain ConfigMap with that name and content (a server-side dry-run create,
//! `dryRun=All`, so nothing is stored), over a deterministic corpus: data keys of every kind (valid and
//! invalid characters, lengths around 253, `.`, `..`, unicode, empty), names of every kind, and sizes
//! around the 1 MiB limit in `data`, in `binaryData` (counted decoded, sent base64) and in both.
//!
//! The verdicts are compared field by field (the name, each offending key of `data` and `binaryData`,
//! the total size), not only accept/refuse, so that cmset blames the same fields the server does. They
//! must agree everywhere but in one deliberate place: cmset refuses set names of 243 to 253 characters
//! that the server would accept for a ConfigMap, since a revision's name is the set's name, `-` and a
//! 10-character hash, and must itself fit in 253.

use std::collections::{BTreeMap, BTreeSet};

use cmset_core::content::validate::validate;
use cmset_core::revisions::naming::{MAX_SET_NAME_LEN, is_dns_subdomain};
use cmset_e2e::TestNamespace;
use cmset_e2e::cmset_api::{ConfigMapSetSpec, ConfigMapTemplate, MAX_CONFIGMAP_BYTES};
use cmset_e2e::k8s_openapi::ByteString;
use cmset_e2e::k8s_openapi::api::core::v1::ConfigMap;
use cmset_e2e::kube::Api;
use cmset_e2e::kube::api::{ObjectMeta, PostParams};

/// The corpus is the same on every run.
const SEED: u64 = 0xc0ff_ee11;

/// A field one side refuses.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Field {
    Name,
    Data(String),
    Binary(String),
    Size,
}

#[derive(Clone, Debug, Default)]
struct Case {
    name: String,
    data: BTreeMap<String, String>,
    binary: BTreeMap<String, Vec<u8>>,
}

impl Case {
    fn named(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            ..Self::default()
        }
    }
    fn data(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.data.insert(key.into(), value.into());
        self
    }
    fn binary(mut self, key: impl Into<String>, value: Vec<u8>) -> Self {
        self.binary.insert(key.into(), value);
        self
    }
    fn data_map(&self) -> Option<BTreeMap<String, String>> {
        (!self.data.is_empty()).then(|| self.data.clone())
    }
    fn binary_map(&self) -> Option<BTreeMap<String, ByteString>> {
        (!self.binary.is_empty()).then(|| {
            self.binary
                .iter()
                .map(|(k, v)| (k.clone(), ByteString(v.clone())))
                .collect()
        })
    }
    fn describe(&self) -> String {
        let short = |s: &str| {
            if s.len() > 40 {
                format!("{:?}…({} bytes)", s.chars().take(20).collect::<String>(), s.len())
            } else {
                format!("{s:?}")
            }
        };
        let data: Vec<String> = self
            .data
            .iter()
            .map(|(k, v)| format!("{}={} bytes", short(k), v.len()))
            .collect();
        let binary: Vec<String> = self
            .binary
            .iter()
            .map(|(k, v)| format!("{}={} bytes", short(k), v.len()))
            .collect();
        format!(
            "name {} data [{}] binaryData [{}]",
            short(&self.name),
            data.join(", "),
            binary.join(", ")
        )
    }
}

/// SplitMix64: a few lines, deterministic, and enough for a corpus.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
    /// `len` characters, mostly from `common`, sometimes from `rare`.
    fn string(&mut self, len: usize, common: &[char], rare: &[char]) -> String {
        (0..len)
            .map(|_| {
                if self.below(12) == 0 {
                    *self.pick(rare)
                } else {
                    *self.pick(common)
                }
            })
            .collect()
    }
}

const KEY_CHARS: &[char] = &[
    'a', 'b', 'z', 'A', 'Z', '0', '9', '-', '_', '.', '.', 'k', 'E', 'y',
];
const NAME_CHARS: &[char] = &['a', 'b', 'z', '0', '9', '-', '-', '.', 'q', 'x'];
const ODD_CHARS: &[char] = &[
    ' ', '/', ':', '@', '~', '+', '=', '\n', '\t', '\0', 'é', 'ß', '日', '😀', 'A', '_', 'Ａ', '\u{200b}',
];
/// Lengths that matter (the ends of the range, and 253 ± 2).
const LENGTHS: &[usize] = &[
    0, 1, 2, 3, 5, 8, 13, 63, 64, 241, 242, 243, 251, 252, 253, 254, 255,
];

fn keys(rng: &mut Rng) -> Vec<String> {
    let mut keys: Vec<String> = [
        "",
        ".",
        "..",
        "...",
        "..a",
        "..data",
        ".a",
        "a.",
        "a..b",
        "-",
        "_",
        "a",
        "A",
        "0",
        "key.name",
        "KEY_NAME",
        "key-name",
        "a b",
        "a/b",
        "a:b",
        "a\\b",
        "é",
        "ключ",
        "日本",
        "a\u{0}",
        "\t",
        "Ａ",
        "a\u{200b}",
        "😀",
        "a\n",
    ]
    .iter()
    .map(|k| k.to_string())
    .collect();
    for len in [252, 253, 254] {
        keys.push("k".repeat(len));
        keys.push(format!("..{}", "k".repeat(len - 2)));
        keys.push(format!(".{}", "k".repeat(len - 1)));
        keys.push(".".repeat(len));
    }
    // 252 bytes in 126 characters, and 254 bytes in 127: lengths are bytes, on both sides.
    keys.push("é".repeat(126));
    keys.push("é".repeat(127));
    for _ in 0..150 {
        let len = *rng.pick(LENGTHS);
        keys.push(rng.string(len, KEY_CHARS, ODD_CHARS));
    }
    keys.sort();
    keys.dedup();
    keys
}

fn names(rng: &mut Rng) -> Vec<String> {
    let mut names: Vec<String> = [
        "",
        "a",
        "0",
        "a-b",
        "a.b",
        "a..b",
        ".a",
        "a.",
        "-a",
        "a-",
        "A",
        "a_b",
        "a b",
        "é",
        "a/b",
        "a.-b",
        "a-.b",
        "app-config",
        "x.y.z",
        "1.2.3.4",
    ]
    .iter()
    .map(|n| n.to_string())
    .collect();
    for len in [1, 63, 64, 241, 242, 243, 244, 252, 253, 254, 300] {
        names.push("n".repeat(len));
    }
    // Dotted names of 62-character parts, around the limits.
    for parts in [4, 5] {
        let name = vec!["p".repeat(62); parts].join(".");
        names.push(name.chars().take(242).collect());
        names.push(name.chars().take(243).collect::<String>() + "x");
        names.push(name.chars().take(253).collect());
        names.push(name);
    }
    for _ in 0..120 {
        let len = *rng.pick(LENGTHS);
        names.push(rng.string(len, NAME_CHARS, ODD_CHARS));
    }
    names.sort();
    names.dedup();
    names
}

/// Contents around the size limit. Keys are not counted by either side, so long keys ride along.
fn sizes() -> Vec<Case> {
    const MAX: usize = MAX_CONFIGMAP_BYTES;
    let text = |n: usize| "x".repeat(n);
    // Every byte value, so that base64 carries all of them.
    let bytes = |n: usize| (0..n).map(|i| (i * 31 % 256) as u8).collect::<Vec<u8>>();
    let mut cases = vec![Case::named("empty"), Case::named("empty-value").data("a", "")];
    for n in [MAX - 1, MAX, MAX + 1] {
        cases.push(Case::named("text").data("a", text(n)));
        cases.push(Case::named("binary").binary("b", bytes(n)));
        cases.push(
            Case::named("split")
                .data("a", text(n / 2))
                .binary("b", bytes(n - n / 2)),
        );
        // Four long keys: 1012 bytes of keys on top of the values, counted by neither side.
        let mut spread = Case::named("long-keys");
        for (i, c) in ['a', 'b', 'c', 'd'].into_iter().enumerate() {
            let share = n / 4 + usize::from(i < n % 4);
            spread = spread.data(c.to_string().repeat(253), text(share));
        }
        cases.push(spread);
    }
    // Multi-byte characters: the limit is in bytes, not characters.
    cases.push(Case::named("two-byte").data("a", "é".repeat(MAX / 2)));
    cases.push(Case::named("two-byte-over").data("a", "é".repeat(MAX / 2) + "x"));
    cases.push(Case::named("three-byte").data("a", "日".repeat(MAX / 3)));
    cases.push(Case::named("three-byte-over").data("a", "日".repeat(MAX / 3 + 1)));
    // Over the limit and with a bad key: both are blamed.
    cases.push(Case::named("over-and-bad-key").data("a b", text(MAX + 1)));
    cases
}

/// Random combinations: a name and a few keys from the corpora, in both maps, sometimes the same key
/// in both (refused as a duplicate on the `data` side).
fn combinations(rng: &mut Rng, names: &[String], keys: &[String]) -> Vec<Case> {
    (0..120)
        .map(|_| {
            let mut case = Case::named(rng.pick(names).clone());
            for _ in 0..rng.below(4) {
                case = case.data(rng.pick(keys).clone(), "v");
            }
            for _ in 0..rng.below(3) {
                case = case.binary(rng.pick(keys).clone(), vec![0, 255]);
            }
            if rng.below(5) == 0
                && let Some(key) = case.data.keys().next().cloned()
            {
                case = case.binary(key, vec![1]);
            }
            case
        })
        .collect()
}

fn corpus() -> Vec<Case> {
    let mut rng = Rng(SEED);
    let keys = keys(&mut rng);
    let names = names(&mut rng);
    let mut cases = Vec::new();
    for name in &names {
        cases.push(Case::named(name.clone()).data("k", "v"));
    }
    for key in &keys {
        cases.push(Case::named("keys").data(key.clone(), "v"));
        cases.push(Case::named("keys").binary(key.clone(), b"v".to_vec()));
    }
    cases.extend(sizes());
    cases.extend(combinations(&mut rng, &names, &keys));
    cases
}

/// What cmset refuses, by field.
fn cmset_verdict(case: &Case) -> BTreeSet<Field> {
    let spec = ConfigMapSetSpec {
        template: ConfigMapTemplate {
            data: case.data_map(),
            binary_data: case.binary_map(),
            ..ConfigMapTemplate::default()
        },
        revision_history_limit: 10,
        rollout: None,
        config_map_name: None,
        ..ConfigMapSetSpec::default()
    };
    let Err(problems) = validate(&case.name, &spec) else {
        return BTreeSet::new();
    };
    problems
        .iter()
        .map(|p| match p.field.as_str() {
            "metadata.name" => Field::Name,
            "spec.template" => Field::Size,
            field => {
                let data = case
                    .data
                    .keys()
                    .find(|k| field == format!("spec.template.data[{k:?}]"));
                let binary = case
                    .binary
                    .keys()
                    .find(|k| field == format!("spec.template.binaryData[{k:?}]"));
                match (data, binary) {
                    (Some(k), _) => Field::Data(k.clone()),
                    (None, Some(k)) => Field::Binary(k.clone()),
                    _ => panic!(
                        "cmset blames a field outside the corpus: {p} ({})",
                        case.describe()
                    ),
                }
            }
        })
        .collect()
}

/// What the API server refuses for a plain ConfigMap with the same name and content, by field.
async fn server_verdict(api: &Api<ConfigMap>, case: &Case) -> BTreeSet<Field> {
    let cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some(case.name.clone()),
            ..ObjectMeta::default()
        },
        data: case.data_map(),
        binary_data: case.binary_map(),
        ..ConfigMap::default()
    };
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let status = match api.create(&dry_run, &cm).await {
        Ok(_) => return BTreeSet::new(),
        Err(cmset_e2e::kube::Error::Api(status)) if status.code == 422 => status,
        Err(e) => panic!(
            "the server answered neither yes nor 422: {e} ({})",
            case.describe()
        ),
    };
    let causes = status.details.map(|d| d.causes).unwrap_or_default();
    assert!(!causes.is_empty(), "422 without causes: {}", status.message);
    causes
        .iter()
        .map(|c| {
            let field = c.field.as_str();
            let inner = |prefix: &str| field.strip_prefix(prefix)?.strip_suffix(']').map(str::to_owned);
            if field == "metadata.name" {
                Field::Name
            } else if let Some(key) = inner("data[") {
                Field::Data(key)
            } else if let Some(key) = inner("binaryData[") {
                Field::Binary(key)
            } else if field == "[]" {
                // The size error names the whole object: `field.NewPath("")`, which prints as `[]`.
                assert!(c.message.contains("Too long"), "{c:?}");
                Field::Size
            } else {
                panic!(
                    "the server blames an unexpected field: {c:?} ({})",
                    case.describe()
                )
            }
        })
        .collect()
}

/// cmset's one deliberate difference: a name the server takes for a ConfigMap but that is too long to
/// leave room for `-<hash>` in the revisions' names.
fn name_too_long_for_revisions(name: &str) -> bool {
    is_dns_subdomain(name) && name.len() > MAX_SET_NAME_LEN
}

#[tokio::test]
async fn cmset_and_the_api_server_agree_on_what_a_configmap_may_hold() {
    let ns = TestNamespace::new("validation-differential").await;
    let api: Api<ConfigMap> = ns.api();
    let cases = corpus();
    let (mut accepted, mut refused, mut deliberate) = (0, 0, 0);
    let mut disagreements = Vec::new();
    for case in &cases {
        let cmset = cmset_verdict(case);
        let server = server_verdict(&api, case).await;
        let mut expected = server.clone();
        if name_too_long_for_revisions(&case.name) {
            // Stated exactly: cmset refuses the name as well, and nothing else the server accepts.
            expected.insert(Field::Name);
        }
        if cmset != expected {
            disagreements.push(format!(
                "{}: cmset refuses {cmset:?}, the server {server:?}",
                case.describe()
            ));
        } else if cmset != server {
            deliberate += 1;
        } else if cmset.is_empty() {
            accepted += 1;
        } else {
            refused += 1;
        }
    }
    eprintln!(
        "validation differential (seed {SEED:#x}): {} cases; both accept {accepted}, both refuse the same \
         fields {refused}, cmset refuses only the name as too long for revisions {deliberate}, \
         disagreements {}",
        cases.len(),
        disagreements.len()
    );
    assert!(
        disagreements.is_empty(),
        "{} disagreements:\n{}",
        disagreements.len(),
        disagreements.join("\n")
    );
    // The corpus reaches every kind of verdict, or it proves little.
    assert!(
        accepted > 50 && refused > 100 && deliberate >= 5,
        "{accepted} {refused} {deliberate}"
    );
}
