//! Content hashes of revisions, compatible with kustomize's `configMapGenerator`.
//!
//! A revision is named `<set>-<hash>`. With a collision count of 0 the hash is byte for byte the one
//! kustomize (v5) appends to a generated ConfigMap, so a team moving from `configMapGenerator` to a
//! ConfigMapSet keeps the same ConfigMap names and its workloads see no needless rollout.
//!
//! # What is hashed
//!
//! kustomize hashes the Go `encoding/json` encoding of a map, so its keys come out sorted and with no
//! whitespace:
//!
//! ```text
//! {"binaryData":{...},"data":{...},"kind":"ConfigMap","name":""}
//! ```
//!
//! - `name` is always empty: kustomize hashes the generated ConfigMap before it gives it a name, so the
//!   hash depends on the content only.
//! - `data` is the map of entries, or the empty *string* `""` when there are none. A generator with no
//!   entries therefore always yields `6ct58987ht`.
//! - `binaryData` appears only when there are binary entries. Its values are the standard base64
//!   encoding (with padding) of the bytes, but exactly as kustomize writes them: an encoding of 70
//!   characters or more is cut into lines of 70, each line ending in `\n` (the last one too); shorter
//!   encodings have no newline at all.
//! - Strings are encoded as Go does: `"`, `\` and control characters are escaped (`\b \f \n \r \t` in
//!   short form, others as `\u00XX`), and so are `<`, `>`, `&` (`\u003c`, `\u003e`, `\u0026`) and
//!   U+2028, U+2029 (`\u2028`, `\u2029`). Every other character, DEL and non-ASCII included, is written
//!   as raw UTF-8.
//!
//! An empty `data` or `binaryData` map is hashed exactly like an absent one. They produce the same
//! ConfigMap (Kubernetes does not store empty maps), so they must produce the same name.
//!
//! The SHA-256 of that text is written in hex, and its first 10 characters, with `0→g 1→h 3→k a→m e→t`,
//! are the hash. (Kubernetes avoids vowels, and digits that read as vowels, in generated names so that
//! they cannot spell words.) The alphabet of a hash is therefore [`HASH_ALPHABET`].
//!
//! All of this was checked against `kubectl kustomize` (kustomize v5.5.0); `tests/hash_vectors.rs`
//! holds the names it produced.
//!
//! # Collisions
//!
//! kustomize has no collision handling. cmset does: when a name is already taken by a ConfigMap with
//! other content, the set's `status.collisionCount` is bumped and enters the hash, in the style of a
//! Deployment's `collisionCount`. For a count `n != 0` the object gets one more key, kept in sorted
//! order, between `binaryData` and `data`:
//!
//! ```text
//! {"binaryData":{...},"collisionCount":n,"data":{...},"kind":"ConfigMap","name":""}
//! ```
//!
//! Every count gives its own, stable hash, and count 0 stays the kustomize one.
//!
//! Secrets are hashed as kustomize's `secretGenerator` does, which differs in shape: see [`secret`].

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use sha2::{Digest, Sha256};

use crate::set::{Content, SetRef, Source, SourceState};
use secret::secret_hash;

pub mod secret;

/// Number of characters in a hash.
pub const HASH_LEN: usize = 10;

/// Every character that can appear in a hash: the hex digits, less the five that are replaced.
pub const HASH_ALPHABET: &str = "bcdfghkmt2456789";

/// The hash of a revision's content: the 10-character suffix of its name.
///
/// With `collision_count == 0` this equals the suffix kustomize gives a generated ConfigMap with the
/// same `data` and `binaryData` (see the [module docs](self) for the exact encoding); any other count
/// gives another hash, the same every time for the same content and count.
pub fn content_hash(
    data: Option<&BTreeMap<String, String>>,
    binary_data: Option<&BTreeMap<String, ByteString>>,
    collision_count: i32,
) -> String {
    streamed_hash(|hasher| write_hash_input(hasher, data, binary_data, collision_count))
}

/// The hash of the text `write` produces. The encoding is streamed into the digest: a revision may
/// hold a mebibyte, and there is no need to build that text just to hash it.
fn streamed_hash(write: impl FnOnce(&mut Sha256)) -> String {
    let mut hasher = Sha256::new();
    write(&mut hasher);
    encode_digest(&hasher.finalize())
}

/// The exact text [`content_hash`] digests, for debugging and for comparing with kustomize.
pub fn hash_input(
    data: Option<&BTreeMap<String, String>>,
    binary_data: Option<&BTreeMap<String, ByteString>>,
    collision_count: i32,
) -> String {
    let mut out = String::new();
    write_hash_input(&mut out, data, binary_data, collision_count);
    out
}

/// A short, stable hash of arbitrary bytes, in the same 10-character alphabet as [`content_hash`].
/// Used where a long name must be shortened yet stay distinct, such as a label value.
pub fn short_hash(bytes: &[u8]) -> String {
    encode_digest(&Sha256::digest(bytes))
}

/// Whether `s` could be a hash: exactly [`HASH_LEN`] characters of [`HASH_ALPHABET`].
pub fn is_hash(s: &str) -> bool {
    s.len() == HASH_LEN && s.bytes().all(|b| HASH_ALPHABET.as_bytes().contains(&b))
}

/// Turns a lowercase hex digest into a hash the way kustomize (and `kubectl`) do: its first 10
/// characters with `0→g 1→h 3→k a→m e→t`. Input shorter than 10 characters is encoded as far as it goes.
pub fn encode_hash(hex: &str) -> String {
    hex.chars()
        .take(HASH_LEN)
        .map(|c| match c {
            '0' => 'g',
            '1' => 'h',
            '3' => 'k',
            'a' => 'm',
            'e' => 't',
            other => other,
        })
        .collect()
}

/// The first 10 hex characters of a digest, encoded. Five bytes give exactly ten hex digits.
fn encode_digest(digest: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let hex: String = digest
        .iter()
        .take(HASH_LEN / 2)
        .flat_map(|b| [HEX[usize::from(b >> 4)], HEX[usize::from(b & 0x0f)]])
        .map(char::from)
        .collect();
    encode_hash(&hex)
}

/// Where the encoding goes: a string to look at, or a digest to feed.
trait Sink {
    fn put(&mut self, s: &str);
}

impl Sink for String {
    fn put(&mut self, s: &str) {
        self.push_str(s);
    }
}

impl Sink for Sha256 {
    fn put(&mut self, s: &str) {
        self.update(s.as_bytes());
    }
}

fn write_hash_input(
    out: &mut impl Sink,
    data: Option<&BTreeMap<String, String>>,
    binary_data: Option<&BTreeMap<String, ByteString>>,
    collision_count: i32,
) {
    // Keys are written in Go's (byte-wise) sorted order: binaryData, collisionCount, data, kind, name.
    out.put("{");
    if let Some(binary) = binary_data.filter(|m| !m.is_empty()) {
        out.put("\"binaryData\":");
        write_base64_map(out, binary);
        out.put(",");
    }
    write_collision_count(out, collision_count);
    out.put("\"data\":");
    match data.filter(|m| !m.is_empty()) {
        Some(data) => write_object(out, data, |out, value| write_go_json_string(out, value)),
        None => out.put("\"\""),
    }
    out.put(",\"kind\":\"ConfigMap\",\"name\":\"\"}");
}

/// Writes `"collisionCount":n,` for a count other than 0, and nothing for 0 so that the hash stays
/// kustomize's. In both kinds of object the key sorts just before `data`.
fn write_collision_count(out: &mut impl Sink, collision_count: i32) {
    if collision_count != 0 {
        out.put("\"collisionCount\":");
        out.put(&collision_count.to_string());
        out.put(",");
    }
}

/// Writes a map of bytes as a JSON object of kustomize's wrapped base64 strings.
fn write_base64_map(out: &mut impl Sink, map: &BTreeMap<String, ByteString>) {
    write_object(out, map, |out, value| {
        // Base64 needs no JSON escaping: its alphabet is letters, digits, '+', '/' and '='. The
        // '\n' of kustomize's line wrapping is the only character that does.
        out.put("\"");
        write_kustomize_base64(out, &value.0);
        out.put("\"");
    });
}

/// Writes a map as a JSON object. A `BTreeMap` iterates its keys byte-wise sorted, which is the
/// order Go's encoder writes map keys in.
fn write_object<S: Sink, V>(out: &mut S, map: &BTreeMap<String, V>, mut write_value: impl FnMut(&mut S, &V)) {
    out.put("{");
    for (i, (key, value)) in map.iter().enumerate() {
        if i > 0 {
            out.put(",");
        }
        write_go_json_string(out, key);
        out.put(":");
        write_value(out, value);
    }
    out.put("}");
}

/// Writes `s` as a JSON string exactly as Go's `encoding/json` does by default (HTML escaping on,
/// Go 1.22 or later). Rust strings are always valid UTF-8, so Go's replacement of invalid bytes by
/// U+FFFD never applies.
fn write_go_json_string(out: &mut impl Sink, s: &str) {
    out.put("\"");
    // Runs of characters that need no escaping are written in one piece.
    let mut start = 0;
    let mut buf = [0u8; 6];
    for (i, c) in s.char_indices() {
        let escaped = match c {
            '"' => "\\\"",
            '\\' => "\\\\",
            '\n' => "\\n",
            '\r' => "\\r",
            '\t' => "\\t",
            // Go writes these two in short form since 1.22, and so does the kustomize in kubectl.
            '\u{8}' => "\\b",
            '\u{c}' => "\\f",
            // Other control characters, the three HTML-sensitive ones and the two JavaScript line
            // terminators become \uXXXX.
            '\0'..='\u{1f}' | '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => u_escape(c, &mut buf),
            _ => continue,
        };
        out.put(&s[start..i]);
        out.put(escaped);
        start = i + c.len_utf8();
    }
    out.put(&s[start..]);
    out.put("\"");
}

/// `\uXXXX` with lowercase hex digits, as Go writes it, for a character of the Basic Multilingual Plane.
fn u_escape(c: char, buf: &mut [u8; 6]) -> &str {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let n = u32::from(c);
    *buf = [
        b'\\',
        b'u',
        HEX[((n >> 12) & 0xf) as usize],
        HEX[((n >> 8) & 0xf) as usize],
        HEX[((n >> 4) & 0xf) as usize],
        HEX[(n & 0xf) as usize],
    ];
    // Six ASCII bytes are always valid UTF-8.
    std::str::from_utf8(buf).unwrap_or_default()
}

/// Line length of kustomize's base64 output (`encodeBase64` in its generator code).
const KUSTOMIZE_BASE64_LINE: usize = 70;

/// Writes the standard base64 encoding (with padding) of `bytes` the way kustomize puts it in a
/// generated ConfigMap: an encoding of at least 70 characters is cut into 70-character lines, each
/// followed by `\n`, written here as the JSON escape `\n` since it sits inside a JSON string.
fn write_kustomize_base64(out: &mut impl Sink, bytes: &[u8]) {
    let encoded = base64_standard(bytes);
    if encoded.len() < KUSTOMIZE_BASE64_LINE {
        out.put(&encoded);
        return;
    }
    // The encoding is ASCII, so cutting it every 70 bytes never splits a character.
    for line in encoded.as_bytes().chunks(KUSTOMIZE_BASE64_LINE) {
        out.put(std::str::from_utf8(line).unwrap_or_default());
        out.put("\\n");
    }
}

/// Standard base64 (RFC 4648, `+` and `/`, `=` padding), as Go's `base64.StdEncoding`.
fn base64_standard(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        let sextet = |shift: u32| char::from(ALPHABET[((n >> shift) & 0x3f) as usize]);
        out.push(sextet(18));
        out.push(sextet(12));
        out.push(if chunk.len() > 1 { sextet(6) } else { '=' });
        out.push(if chunk.len() > 2 { sextet(0) } else { '=' });
    }
    out
}

/// A set's content named by its hash: defined here, with the hashes, so that the set view needs
/// nothing above it.
impl Content<'_> {
    /// The hash naming a revision of this content, with the set's collision count: kustomize's
    /// configMapGenerator or secretGenerator hash when the count is 0.
    pub fn hash(&self, collision_count: i32) -> String {
        match *self {
            Self::ConfigMap { data, binary_data } => content_hash(data, binary_data, collision_count),
            Self::Secret { type_, data } => secret_hash(type_, data, collision_count),
        }
    }

    /// The identity of the content: its hash without a collision count.
    pub fn identity(&self) -> String {
        self.hash(0)
    }
}

impl SourceState<'_> {
    /// The content identity of `set` given this state, when there is one: the content to version.
    pub fn identity(&self, set: SetRef<'_>) -> Option<String> {
        match (self, set.source()) {
            (Self::Inline, Source::Inline(content)) => Some(content.identity()),
            (Self::Read(content), _) => Some(content.identity()),
            (Self::Known(identity), _) => Some((*identity).to_string()),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn go_json(s: &str) -> String {
        let mut out = String::new();
        write_go_json_string(&mut out, s);
        out
    }

    #[test]
    fn go_json_leaves_plain_text_alone() {
        assert_eq!(go_json(""), r#""""#);
        assert_eq!(go_json("hello world"), r#""hello world""#);
        assert_eq!(
            go_json("APP_VERSION=1 ~!@#$%^*()_+{}|:?[];',./`"),
            r#""APP_VERSION=1 ~!@#$%^*()_+{}|:?[];',./`""#
        );
    }

    #[test]
    fn go_json_escapes_quotes_backslashes_and_short_controls() {
        assert_eq!(go_json("a\"b\\c"), r#""a\"b\\c""#);
        assert_eq!(go_json("\n\r\t\u{8}\u{c}"), r#""\n\r\t\b\f""#);
    }

    #[test]
    fn go_json_escapes_other_controls_as_lowercase_u_escapes() {
        assert_eq!(go_json("\0\u{1}\u{1b}\u{1f}"), r#""\u0000\u0001\u001b\u001f""#);
        // DEL is not a control character for Go's encoder.
        assert_eq!(go_json("\u{7f}"), "\"\u{7f}\"");
    }

    #[test]
    fn go_json_escapes_html_characters() {
        assert_eq!(
            go_json("<tag> & \"quotes\""),
            r#""\u003ctag\u003e \u0026 \"quotes\"""#
        );
    }

    #[test]
    fn go_json_escapes_line_and_paragraph_separators_only() {
        assert_eq!(go_json("a\u{2028}b\u{2029}c"), r#""a\u2028b\u2029c""#);
        // Everything else outside ASCII is raw UTF-8, astral characters included.
        assert_eq!(go_json("héllo wörld ✓ 😀 \u{85}"), "\"héllo wörld ✓ 😀 \u{85}\"");
    }

    #[test]
    fn base64_matches_rfc4648_test_vectors() {
        let cases = [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ];
        for (input, expected) in cases {
            assert_eq!(base64_standard(input.as_bytes()), expected, "input {input:?}");
        }
        assert_eq!(base64_standard(&[0x00, 0x01, 0x02, 0xff, 0xfe, 0xfd]), "AAEC//79");
        assert_eq!(base64_standard(&[0xfb, 0xff]), "+/8=");
    }

    fn wrapped(bytes: &[u8]) -> String {
        let mut out = String::new();
        write_kustomize_base64(&mut out, bytes);
        out
    }

    #[test]
    fn base64_is_wrapped_only_from_70_characters() {
        // 51 bytes encode to 68 characters: one line, no newline.
        let short = wrapped(&[7; 51]);
        assert_eq!(short.len(), 68);
        assert!(!short.contains("\\n"));
        // 52 bytes encode to 72 characters: a line of 70 and one of 2, each with its newline.
        let long = wrapped(&[7; 52]);
        let lines: Vec<&str> = long.split("\\n").collect();
        assert_eq!(lines.iter().map(|l| l.len()).collect::<Vec<_>>(), [70, 2, 0]);
        // 105 bytes encode to exactly 140 characters: two full lines, both ending in a newline.
        let exact = wrapped(&[7; 105]);
        assert_eq!(exact.split("\\n").map(str::len).collect::<Vec<_>>(), [70, 70, 0]);
    }

    #[test]
    fn hash_input_has_the_kustomize_shape() {
        assert_eq!(
            hash_input(None, None, 0),
            r#"{"data":"","kind":"ConfigMap","name":""}"#
        );
        let data = BTreeMap::from([("APP_VERSION".to_string(), "1".to_string())]);
        assert_eq!(
            hash_input(Some(&data), None, 0),
            r#"{"data":{"APP_VERSION":"1"},"kind":"ConfigMap","name":""}"#
        );
        let binary = BTreeMap::from([(
            "small.bin".to_string(),
            ByteString(vec![0, 1, 2, 0xff, 0xfe, 0xfd]),
        )]);
        assert_eq!(
            hash_input(None, Some(&binary), 0),
            r#"{"binaryData":{"small.bin":"AAEC//79"},"data":"","kind":"ConfigMap","name":""}"#
        );
        assert_eq!(
            hash_input(Some(&data), Some(&binary), 3),
            r#"{"binaryData":{"small.bin":"AAEC//79"},"collisionCount":3,"data":{"APP_VERSION":"1"},"kind":"ConfigMap","name":""}"#
        );
    }

    #[test]
    fn empty_maps_hash_like_absent_ones() {
        let empty_data = BTreeMap::new();
        let empty_binary = BTreeMap::new();
        assert_eq!(
            hash_input(Some(&empty_data), Some(&empty_binary), 0),
            hash_input(None, None, 0)
        );
        assert_eq!(content_hash(Some(&empty_data), None, 0), "6ct58987ht");
    }

    #[test]
    fn streamed_digest_equals_digest_of_hash_input() {
        let data = BTreeMap::from([("k".to_string(), "<v>\n\u{2028}".to_string())]);
        let binary = BTreeMap::from([("b".to_string(), ByteString((0..=255).collect()))]);
        let text = hash_input(Some(&data), Some(&binary), 7);
        let hex: String = Sha256::digest(text.as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(content_hash(Some(&data), Some(&binary), 7), encode_hash(&hex));
    }

    #[test]
    fn encode_hash_replaces_the_five_characters() {
        assert_eq!(encode_hash("0123456789abcdef"), "gh2k456789");
        assert_eq!(encode_hash("abcdef0123"), "mbcdtfgh2k");
        assert_eq!(encode_hash("d2c653391a"), "d2c65kk9hm");
        assert_eq!(encode_hash("eeee"), "tttt");
    }

    #[test]
    fn alphabet_is_hex_less_the_replaced_digits_plus_their_replacements() {
        let mut expected: Vec<char> = "0123456789abcdef"
            .chars()
            .map(|c| encode_hash(&c.to_string()).chars().next().unwrap())
            .collect();
        expected.sort_unstable();
        expected.dedup();
        let mut alphabet: Vec<char> = HASH_ALPHABET.chars().collect();
        alphabet.sort_unstable();
        assert_eq!(alphabet, expected);
    }

    #[test]
    fn is_hash_accepts_only_ten_characters_of_the_alphabet() {
        assert!(is_hash("d2c65kk9hm"));
        assert!(is_hash("6ct58987ht"));
        assert!(!is_hash("d2c65kk9h"));
        assert!(!is_hash("d2c65kk9hmm"));
        assert!(!is_hash("d2c653391a"));
        assert!(!is_hash("D2C65KK9HM"));
        assert!(!is_hash(""));
    }
}
