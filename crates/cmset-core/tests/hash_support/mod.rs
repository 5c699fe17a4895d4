//! What `hash_vectors.rs` and `secret_hash_vectors.rs` share: the bytes of the files their kustomize
//! scripts write, and maps of bytes that differ in a single byte.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use proptest::prelude::*;
use proptest::sample::Index;

/// Bytes of a generator's file.
#[derive(Clone, Copy)]
pub enum Bytes {
    Raw(&'static [u8]),
    /// `(i * mul + add) % 256` for `i` in `0..len`, as the scripts' `seq`.
    Seq {
        len: usize,
        mul: usize,
        add: usize,
    },
}

impl Bytes {
    pub fn to_vec(self) -> Vec<u8> {
        match self {
            Bytes::Raw(bytes) => bytes.to_vec(),
            Bytes::Seq { len, mul, add } => (0..len).map(|i| ((i * mul + add) % 256) as u8).collect(),
        }
    }
}

type ByteMap = BTreeMap<String, ByteString>;

/// A map from `maps` that has a non-empty value, and a copy of it with one byte of one value flipped.
pub fn one_byte_apart(maps: impl Strategy<Value = ByteMap>) -> impl Strategy<Value = (ByteMap, ByteMap)> {
    let maps = maps.prop_filter("needs a non-empty value", |m| m.values().any(|v| !v.0.is_empty()));
    (maps, any::<Index>(), any::<Index>(), 1..=255u8).prop_map(|(map, pick, at, flip)| {
        let keys: Vec<&String> = map.keys().filter(|k| !map[*k].0.is_empty()).collect();
        let key = pick.get(&keys).to_string();
        let mut changed = map.clone();
        if let Some(bytes) = changed.get_mut(&key) {
            let i = at.index(bytes.0.len());
            bytes.0[i] ^= flip;
        }
        (map, changed)
    })
}
