//! `kubectl cmset diff` through the program in `KUBECTL_EXTERNAL_DIFF`, as `kubectl diff` runs it:
//! each side is written to a directory of its own (one file per key, named by the key, holding the
//! value as stored), and the program is run with the two directories as its last arguments. Its output
//! is the diff; its exit status 0 or 1 is passed on, anything else is an error.
//!
//! Only for ConfigMapSets: a SecretSet's values never leave cmset, so for one the variable is not
//! used (the caller says so).
//!
//! As kubectl does, the variable is split on whitespace and run without a shell; the words after the
//! program must be flags (`diff -u -N`, `meld`, `dyff between`... are what people set), so the
//! variable cannot smuggle in a command.

use std::path::{Path, PathBuf};
use std::process::Command;

use k8s_openapi::api::core::v1::ConfigMap;

/// The program and its flags from `KUBECTL_EXTERNAL_DIFF`'s value; `None` when it names none.
pub fn command(value: &str) -> Result<Option<Vec<String>>, String> {
    let words: Vec<String> = value.split_whitespace().map(str::to_string).collect();
    let Some((_, args)) = words.split_first() else {
        return Ok(None);
    };
    // kubectl's rule: the arguments are flags, letters, digits, `-`, `_` and `=` only.
    let flag = |a: &str| {
        a.starts_with('-')
            && a.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '='))
    };
    match args.iter().find(|a| !flag(a)) {
        Some(bad) => Err(format!(
            "KUBECTL_EXTERNAL_DIFF={value:?}: {bad:?} is not a flag (only the program and its flags are \
             allowed, as in kubectl diff)"
        )),
        None => Ok(Some(words)),
    }
}

/// What the program printed and its exit status (0: same, 1: different).
#[derive(Debug, PartialEq, Eq)]
pub struct Ran {
    pub stdout: String,
    pub code: u8,
}

/// Writes `from` and `to` (named by their revisions, `from_name` and `to_name`) under `dir` and runs
/// `command` on them. `dir` must exist and be empty; the caller removes it.
pub fn run(
    command: &[String],
    dir: &Path,
    (from_name, from): (&str, &ConfigMap),
    (to_name, to): (&str, &ConfigMap),
) -> Result<Ran, String> {
    let (from_dir, to_dir) = side_dirs(dir, from_name, to_name);
    write_side(&from_dir, from)?;
    write_side(&to_dir, to)?;
    let (program, args) = command
        .split_first()
        .ok_or("KUBECTL_EXTERNAL_DIFF names no program")?;
    let output = Command::new(program)
        .args(args)
        .arg(&from_dir)
        .arg(&to_dir)
        .output()
        .map_err(|e| format!("KUBECTL_EXTERNAL_DIFF: running {program:?}: {e}"))?;
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    match output.status.code() {
        Some(code @ (0 | 1)) => Ok(Ran {
            stdout,
            code: code as u8,
        }),
        other => Err(format!(
            "KUBECTL_EXTERNAL_DIFF: {program:?} failed ({}): {}",
            other.map_or("killed by a signal".to_string(), |c| format!("exit status {c}")),
            String::from_utf8_lossy(&output.stderr).trim()
        )),
    }
}

/// The two sides' directories: the revisions' names, told apart when a revision is compared with
/// itself.
fn side_dirs(dir: &Path, from: &str, to: &str) -> (PathBuf, PathBuf) {
    if from == to {
        (dir.join(format!("{from}.a")), dir.join(format!("{to}.b")))
    } else {
        (dir.join(from), dir.join(to))
    }
}

/// One file per key, holding the value byte for byte (binaryData decoded). ConfigMap keys are
/// `[-._a-zA-Z0-9]+` and never `.` or `..`, so each is a plain file name.
fn write_side(dir: &Path, cm: &ConfigMap) -> Result<(), String> {
    std::fs::create_dir(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let text = cm.data.iter().flatten().map(|(k, v)| (k, v.as_bytes()));
    let binary = cm.binary_data.iter().flatten().map(|(k, v)| (k, v.0.as_slice()));
    for (key, value) in text.chain(binary) {
        let safe = !key.is_empty() && key != "." && key != ".." && !key.contains(['/', '\\']);
        if !safe {
            return Err(format!("key {key:?} cannot be a file name"));
        }
        let path = dir.join(key);
        std::fs::write(&path, value).map_err(|e| format!("writing {}: {e}", path.display()))?;
    }
    Ok(())
}

/// A fresh, empty directory for one diff under the system's temporary directory.
pub fn scratch_dir() -> Result<PathBuf, String> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    static TAKEN: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = TAKEN.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("kubectl-cmset-diff-{}-{nanos}-{n}", std::process::id()));
    std::fs::create_dir(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;
    use std::collections::BTreeMap;

    fn cm(data: &[(&str, &str)], binary: &[(&str, &[u8])]) -> ConfigMap {
        ConfigMap {
            data: Some(data.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()),
            binary_data: (!binary.is_empty()).then(|| {
                binary
                    .iter()
                    .map(|(k, v)| (k.to_string(), ByteString(v.to_vec())))
                    .collect()
            }),
            ..ConfigMap::default()
        }
    }

    fn words(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_variable_is_a_program_and_its_flags() {
        assert_eq!(command(""), Ok(None));
        assert_eq!(command("  "), Ok(None));
        assert_eq!(command("meld"), Ok(Some(words(&["meld"]))));
        assert_eq!(
            command("diff -u -N --color=always"),
            Ok(Some(words(&["diff", "-u", "-N", "--color=always"])))
        );
        let error = command("diff -u ; rm -rf /").unwrap_err();
        assert!(error.contains("\";\" is not a flag"), "{error}");
        assert!(command("sh -c x").is_err());
    }

    #[test]
    fn the_program_gets_one_directory_per_side_and_one_file_per_key() {
        let dir = scratch_dir().unwrap();
        let from = cm(
            &[("LOG_LEVEL", "info\n"), ("gone", "x")],
            &[("logo.png", &[0, 159, 146, 150])],
        );
        let to = cm(&[("LOG_LEVEL", "debug\n")], &[("logo.png", &[0, 159, 146, 150])]);
        let ran = run(
            &words(&["diff", "-r", "-u"]),
            &dir,
            ("app-1", &from),
            ("app-2", &to),
        )
        .unwrap();
        assert_eq!(ran.code, 1, "diff(1) exits 1 when the sides differ");
        assert!(ran.stdout.contains("-info\n+debug\n"), "{}", ran.stdout);
        assert!(ran.stdout.contains("Only in"), "a removed key: {}", ran.stdout);
        assert!(
            !ran.stdout.contains("logo.png"),
            "equal binary values compare equal: {}",
            ran.stdout
        );
        assert_eq!(
            std::fs::read(dir.join("app-2/logo.png")).unwrap(),
            [0, 159, 146, 150]
        );
        std::fs::remove_dir_all(dir).unwrap();
        let dir = scratch_dir().unwrap();
        let same = run(&words(&["diff", "-r"]), &dir, ("app-2", &to), ("app-2", &to)).unwrap();
        assert_eq!(
            same,
            Ran {
                stdout: String::new(),
                code: 0
            },
            "a revision against itself"
        );
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_program_that_fails_or_is_missing_is_an_error() {
        let empty = cm(&[], &[]);
        let dir = scratch_dir().unwrap();
        let error = run(
            &words(&["diff", "--no-such-flag"]),
            &dir,
            ("a", &empty),
            ("b", &empty),
        )
        .unwrap_err();
        assert!(error.contains("exit status 2"), "{error}");
        std::fs::remove_dir_all(dir).unwrap();
        let dir = scratch_dir().unwrap();
        let error = run(&words(&["no-such-differ"]), &dir, ("a", &empty), ("b", &empty)).unwrap_err();
        assert!(error.contains("running \"no-such-differ\""), "{error}");
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_key_that_is_no_file_name_is_refused() {
        let bad = ConfigMap {
            data: Some(BTreeMap::from([("../escape".to_string(), "x".to_string())])),
            ..ConfigMap::default()
        };
        let dir = scratch_dir().unwrap();
        let error = run(&words(&["diff"]), &dir, ("a", &bad), ("b", &bad)).unwrap_err();
        assert!(error.contains("cannot be a file name"), "{error}");
        std::fs::remove_dir_all(dir).unwrap();
    }
}
