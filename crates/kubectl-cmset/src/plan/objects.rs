//! The objects a plan is made from, whatever they were read from: the files given with `-f` (what
//! will be applied), and the world they land in, read from the cluster or from files (`--base`, or the
//! other objects of the `-f` files). Both modes end here, as plain JSON objects in the API server's
//! form, so the same objects give the same plan whichever way they came.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::Value;

use crate::error::Error;

/// One object, and where it was read.
#[derive(Clone, Debug)]
pub struct Object {
    pub value: Value,
    /// `FILE, document N`, or `the cluster`.
    pub origin: String,
}

impl Object {
    pub fn kind(&self) -> &str {
        self.value["kind"].as_str().unwrap_or_default()
    }

    pub fn api_version(&self) -> &str {
        self.value["apiVersion"].as_str().unwrap_or_default()
    }

    pub fn name(&self) -> &str {
        self.value
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
    }

    pub fn namespace(&self) -> Option<&str> {
        self.value.pointer("/metadata/namespace").and_then(Value::as_str)
    }

    pub fn is_set(&self) -> bool {
        self.api_version().starts_with(&format!("{}/", cmset_api::GROUP))
            && matches!(self.kind(), "ConfigMapSet" | "SecretSet")
    }

    pub fn resource_version(&self) -> Option<&str> {
        self.value
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str)
    }
}

/// The objects of some files, each document (a `List`'s items each) in order.
pub fn documents(files: &[(String, String)]) -> Result<Vec<Object>, Error> {
    let mut objects = Vec::new();
    for (file, text) in files {
        for (index, document) in serde_yaml_ng::Deserializer::from_str(text).enumerate() {
            let origin = format!("{file}, document {}", index + 1);
            let value: Value = serde::Deserialize::deserialize(document)
                .map_err(|e| Error::Usage(format!("{origin}: not YAML or JSON: {e}")))?;
            if value.is_null() {
                continue;
            }
            if !value.is_object() {
                return Err(Error::Usage(format!(
                    "{origin}: not a Kubernetes object (a mapping with apiVersion and kind)"
                )));
            }
            if value["kind"] == "List" {
                for item in value["items"].as_array().into_iter().flatten() {
                    objects.push(Object {
                        value: item.clone(),
                        origin: origin.clone(),
                    });
                }
                continue;
            }
            if value["kind"].as_str().is_none() || value["apiVersion"].as_str().is_none() {
                return Err(Error::Usage(format!("{origin}: has no apiVersion or kind")));
            }
            objects.push(Object { value, origin });
        }
    }
    Ok(objects)
}

/// Reads `paths` (files, folders, `-` for standard input given as `stdin`) into objects.
pub fn read(paths: &[PathBuf], stdin: Option<&str>) -> Result<Vec<Object>, Error> {
    documents(&crate::validate::read_documents(paths, stdin)?)
}

/// An index of objects by kind, namespace and name: the later of two with the same key wins.
#[derive(Clone, Debug, Default)]
pub struct Objects {
    by_key: BTreeMap<(String, String, String), Object>,
}

impl Objects {
    pub fn new(objects: impl IntoIterator<Item = Object>, default_namespace: &str) -> Self {
        let mut index = Self::default();
        for o in objects {
            index.insert(o, default_namespace);
        }
        index
    }

    pub fn insert(&mut self, object: Object, default_namespace: &str) {
        let namespace = object.namespace().unwrap_or(default_namespace).to_string();
        let key = (object.kind().to_string(), namespace, object.name().to_string());
        self.by_key.insert(key, object);
    }

    pub fn get(&self, kind: &str, namespace: &str, name: &str) -> Option<&Object> {
        self.by_key
            .get(&(kind.to_string(), namespace.to_string(), name.to_string()))
    }

    /// The objects of `kind` in `namespace` (`None`: cluster-scoped or any).
    pub fn of_kind<'a>(
        &'a self,
        kind: &'a str,
        namespace: Option<&'a str>,
    ) -> impl Iterator<Item = &'a Object> {
        self.by_key
            .iter()
            .filter(move |((k, ns, _), _)| k == kind && namespace.is_none_or(|n| n == ns))
            .map(|(_, o)| o)
    }

    pub fn has_kind(&self, kind: &str) -> bool {
        self.by_key.keys().any(|(k, _, _)| k == kind)
    }

    pub fn iter(&self) -> impl Iterator<Item = &Object> {
        self.by_key.values()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documents_lists_and_errors_name_the_file_and_document() {
        let text = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\n---\napiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: ConfigMap, metadata: {name: b}}\n";
        let objects = documents(&[("x.yaml".into(), text.into())]).unwrap();
        assert_eq!(objects.len(), 2);
        assert_eq!(objects[1].origin, "x.yaml, document 3");
        let bad = documents(&[("y.yaml".into(), "a: 1\n---\n{{".into())]).unwrap_err();
        assert!(
            bad.to_string()
                .starts_with("y.yaml, document 1: has no apiVersion"),
            "{bad}"
        );
        let bad =
            documents(&[("z.yaml".into(), "kind: X\napiVersion: v1\n---\n: : :\n".into())]).unwrap_err();
        assert!(
            bad.to_string().starts_with("z.yaml, document 2: not YAML"),
            "{bad}"
        );
    }
}
