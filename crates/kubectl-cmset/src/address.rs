//! How a set is named on the command line, as kubectl names objects: `NAME`, or `KIND/NAME` where KIND
//! is a resource name of either kind of set (`configmapset/app`, `cmset/app`, `secretset/db`,
//! `secset/db`, plural or singular, any case, optionally with the group: `secretsets.cmset.dev/db`).
//!
//! A ConfigMapSet and a SecretSet of the same name are two independent sets, so a bare name must pick
//! one: the one that exists, and never a guess when both do ([`pick`]).

use std::fmt;

use cmset_api::{ConfigMapSet, SecretSet};
use cmset_core::set::{SetKind, SetRef};

use crate::error::Error;

/// A set as the user named it: its kind when they said it, and its name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Address {
    pub kind: Option<SetKind>,
    pub name: String,
}

impl Address {
    /// `NAME` or `KIND/NAME`; the error says what is wrong, quoting only what the user typed.
    pub fn parse(arg: &str) -> Result<Self, String> {
        let (kind, name) = match arg.split_once('/') {
            Some((kind, name)) => {
                let kind = kind_named(kind).ok_or_else(|| {
                    format!(
                        "{kind:?} is not a kind of set: write configmapset/NAME (or cmset/NAME) or \
                         secretset/NAME (or secset/NAME)"
                    )
                })?;
                (Some(kind), name)
            }
            None => (None, arg),
        };
        if name.is_empty() {
            return Err(format!("{arg:?} names no set: write NAME or KIND/NAME"));
        }
        if name.contains('/') {
            return Err(format!(
                "{arg:?} is not a set: write NAME or KIND/NAME, e.g. secretset/db"
            ));
        }
        Ok(Self {
            kind,
            name: name.to_string(),
        })
    }
}

/// The kind a resource name stands for: its plural, singular or short name, any case, with or without
/// the group (`secretsets.cmset.dev`).
fn kind_named(word: &str) -> Option<SetKind> {
    let word = word.to_ascii_lowercase();
    let word = word
        .strip_suffix(&format!(".{}", cmset_api::GROUP))
        .unwrap_or(&word);
    match word {
        "configmapset" | "configmapsets" | "cmset" => Some(SetKind::ConfigMapSet),
        "secretset" | "secretsets" | "secset" => Some(SetKind::SecretSet),
        _ => None,
    }
}

/// A set whose kind is known: what messages call it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SetId {
    pub kind: SetKind,
    pub name: String,
}

impl SetId {
    pub fn new(kind: SetKind, name: impl Into<String>) -> Self {
        Self {
            kind,
            name: name.into(),
        }
    }
}

impl fmt::Display for SetId {
    /// `configmapset "app"`, `secretset "db"`: the resource name kubectl users type, and the set's name.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {:?}", resource(self.kind), self.name)
    }
}

/// `configmapset`, `secretset`.
pub fn resource(kind: SetKind) -> String {
    kind.as_str().to_ascii_lowercase()
}

/// A set of either kind, as read from the cluster.
#[derive(Clone, Debug)]
pub enum Set {
    ConfigMap(ConfigMapSet),
    Secret(SecretSet),
}

impl Set {
    pub fn view(&self) -> SetRef<'_> {
        match self {
            Self::ConfigMap(set) => SetRef::ConfigMap(set),
            Self::Secret(set) => SetRef::Secret(set),
        }
    }

    pub fn id(&self) -> SetId {
        let view = self.view();
        SetId::new(view.kind(), view.name())
    }
}

/// What a `get` of one set found.
#[derive(Clone, Debug, PartialEq)]
pub enum Lookup<K> {
    Found(K),
    /// The API answered that no such object exists.
    Missing,
    /// The kind's API is not installed in the cluster.
    NoApi,
}

impl<K> Lookup<K> {
    /// The set, or why there is none: for an address that named the kind.
    pub fn found(self, set: SetId, namespace: &str) -> Result<K, Error> {
        match self {
            Self::Found(found) => Ok(found),
            Self::Missing => Err(Error::SetNotFound {
                set,
                namespace: namespace.to_string(),
            }),
            Self::NoApi => Err(Error::NoApi { kind: Some(set.kind) }),
        }
    }
}

/// The set a bare name stands for, given what the `get` of each kind in `namespace` found: the
/// ConfigMapSet if there is one, else the SecretSet; both is an error that asks the user to say which.
///
/// A kind the user may not read counts as absent when the other kind is found: someone who may only
/// read ConfigMapSets (the built-in `view` role may not read SecretSets) can only mean the one they can
/// read. Any other failure to read a kind is an error: the name could stand for it.
pub fn pick(
    name: &str,
    namespace: &str,
    config_map_set: Result<Lookup<ConfigMapSet>, Error>,
    secret_set: Result<Lookup<SecretSet>, Error>,
) -> Result<Set, Error> {
    use Lookup::*;
    match (config_map_set, secret_set) {
        (Ok(Found(_)), Ok(Found(_))) => Err(Error::Ambiguous {
            name: name.to_string(),
            namespace: namespace.to_string(),
        }),
        (Ok(Found(set)), other) if no_rival(&other) => Ok(Set::ConfigMap(set)),
        (other, Ok(Found(set))) if no_rival(&other) => Ok(Set::Secret(set)),
        (Err(e), _) | (_, Err(e)) => Err(e),
        (Ok(NoApi), Ok(NoApi)) => Err(Error::NoApi { kind: None }),
        _ => Err(Error::NeitherFound {
            name: name.to_string(),
            namespace: namespace.to_string(),
        }),
    }
}

/// Whether the lookup of the other kind leaves a set that was found the only one the user can mean: it
/// answered (and found none: both found is decided first), or the user may not read that kind.
fn no_rival<K>(other: &Result<Lookup<K>, Error>) -> bool {
    other.as_ref().map_or_else(Error::is_forbidden, |_| true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parsing_addresses() {
        use SetKind::*;
        // (argument, kind, name)
        let table = [
            ("app", None, "app"),
            ("app-config.v2", None, "app-config.v2"),
            ("configmapset/app", Some(ConfigMapSet), "app"),
            ("configmapsets/app", Some(ConfigMapSet), "app"),
            ("cmset/app", Some(ConfigMapSet), "app"),
            ("ConfigMapSet/app", Some(ConfigMapSet), "app"),
            ("configmapsets.cmset.dev/app", Some(ConfigMapSet), "app"),
            ("secretset/db", Some(SecretSet), "db"),
            ("secretsets/db", Some(SecretSet), "db"),
            ("secset/db", Some(SecretSet), "db"),
            ("SecretSet/db", Some(SecretSet), "db"),
            ("SECSET/db", Some(SecretSet), "db"),
            ("secretsets.cmset.dev/db", Some(SecretSet), "db"),
            ("secretset.cmset.dev/db", Some(SecretSet), "db"),
        ];
        for (arg, kind, name) in table {
            assert_eq!(
                Address::parse(arg),
                Ok(Address {
                    kind,
                    name: name.to_string()
                }),
                "{arg}"
            );
        }
    }

    #[test]
    fn addresses_that_name_no_set() {
        // (argument, what the error says)
        let table = [
            ("", "\"\" names no set"),
            ("secretset/", "\"secretset/\" names no set"),
            (
                "secret/db",
                "\"secret\" is not a kind of set: write configmapset/NAME",
            ),
            ("configmap/app", "\"configmap\" is not a kind of set"),
            ("/app", "\"\" is not a kind of set"),
            ("secretsets.example.com/db", "is not a kind of set"),
            ("secretset/db/x", "\"secretset/db/x\" is not a set"),
        ];
        for (arg, says) in table {
            let err = Address::parse(arg).unwrap_err();
            assert!(err.contains(says), "{arg:?}: {err}");
        }
    }

    #[test]
    fn set_ids_read_as_kubectl_resources() {
        assert_eq!(
            SetId::new(SetKind::ConfigMapSet, "app").to_string(),
            "configmapset \"app\""
        );
        assert_eq!(
            SetId::new(SetKind::SecretSet, "db").to_string(),
            "secretset \"db\""
        );
    }

    fn cm() -> Result<Lookup<ConfigMapSet>, Error> {
        Ok(Lookup::Found(ConfigMapSet::new("app", Default::default())))
    }

    fn secret() -> Result<Lookup<SecretSet>, Error> {
        Ok(Lookup::Found(SecretSet::new("app", Default::default())))
    }

    /// The API server's answer to a request the user may not make, or one that failed.
    fn refused<K>(code: u16) -> Result<Lookup<K>, Error> {
        let status =
            kube::core::Status::failure("no", if code == 403 { "Forbidden" } else { "InternalError" })
                .with_code(code);
        Err(Error::kube("looking", kube::Error::Api(status.boxed())))
    }

    #[test]
    fn a_bare_name_picks_the_set_that_exists() {
        use Lookup::*;
        use SetKind::*;
        // (ConfigMapSet, SecretSet, the kind picked)
        let table = [
            (cm(), Ok(Missing), ConfigMapSet),
            (cm(), Ok(NoApi), ConfigMapSet),
            (cm(), refused(403), ConfigMapSet),
            (Ok(Missing), secret(), SecretSet),
            (Ok(NoApi), secret(), SecretSet),
            (refused(403), secret(), SecretSet),
        ];
        for (cm, secret, want) in table {
            let what = format!("{cm:?} {secret:?}");
            let set = pick("app", "demo", cm, secret).unwrap();
            assert_eq!(set.id(), SetId::new(want, "app"), "{what}");
        }
    }

    #[test]
    fn an_address_with_a_kind_reads_that_kind_only() {
        let id = SetId::new(SetKind::SecretSet, "db");
        let missing = Lookup::<SecretSet>::Missing
            .found(id.clone(), "demo")
            .unwrap_err();
        assert_eq!(
            missing.to_string(),
            "secretset \"db\" not found in namespace \"demo\""
        );
        let no_api = Lookup::<SecretSet>::NoApi.found(id, "demo").unwrap_err();
        assert!(
            no_api
                .to_string()
                .starts_with("the SecretSet API (secretsets.cmset.dev) is not installed"),
            "{no_api}"
        );
    }

    #[test]
    fn a_bare_name_fails_when_both_or_neither_exist() {
        use Lookup::*;
        let both = pick("app", "demo", cm(), secret()).unwrap_err().to_string();
        assert_eq!(
            both,
            "both a configmapset and a secretset are named \"app\" in namespace \"demo\": \
             write configmapset/app or secretset/app"
        );
        for (cm, secret) in [(Missing, Missing), (Missing, NoApi), (NoApi, Missing)] {
            let (cm, secret) = (Ok(cm), Ok(secret));
            let what = format!("{cm:?} {secret:?}");
            let err = pick("app", "demo", cm, secret).unwrap_err().to_string();
            assert_eq!(
                err, "configmapset \"app\" not found in namespace \"demo\", nor secretset \"app\"",
                "{what}"
            );
        }
        let err = pick("app", "demo", Ok(NoApi), Ok(NoApi)).unwrap_err().to_string();
        assert!(
            err.contains("configmapsets.cmset.dev") && err.contains("secretsets.cmset.dev"),
            "{err}"
        );
        // A kind that could not be read, when the other is not found, could be the one meant.
        for (cm, secret) in [
            (refused(403), Ok(Missing)),
            (Ok(Missing), refused(403)),
            (refused(403), refused(403)),
            (cm(), refused(500)),
            (refused(500), secret()),
        ] {
            let what = format!("{cm:?} {secret:?}");
            assert!(
                matches!(pick("app", "demo", cm, secret), Err(Error::Kube { .. })),
                "{what}"
            );
        }
    }
}
