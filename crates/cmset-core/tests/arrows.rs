//! The core's domains form a ladder: a file may use its own domain and the domains below it, never one
//! above. This test reads every `crate::` path in the sources (comments aside) and fails on an arrow
//! back up, naming the file, the line and the path, so a new circle is caught where it is written.

use std::fs;
use std::path::{Path, PathBuf};

/// The ladder, lowest first. lib.rs declares the same modules (rustfmt sorts them; its comment keeps
/// this order).
const LADDER: [&str; 10] = [
    "status",
    "workloads",
    "set",
    "revisions",
    "policy",
    "content",
    "analysis",
    "rollout",
    "notify",
    "admission",
];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The domain of a source file: the first component of its path under `src/`, without `.rs`.
fn domain_of(relative: &Path) -> String {
    let first = relative
        .components()
        .next()
        .unwrap()
        .as_os_str()
        .to_string_lossy();
    first.trim_end_matches(".rs").to_string()
}

fn rank(domain: &str) -> Option<usize> {
    LADDER.iter().position(|d| *d == domain)
}

/// Every `crate::name` on a line, outside a `//` comment (doc links may point anywhere).
fn crate_paths(line: &str) -> Vec<&str> {
    let code = line.split("//").next().unwrap_or_default();
    code.match_indices("crate::")
        .filter(|(at, _)| {
            // `cmset_crate::`-like identifiers are not paths into this crate.
            !code[..*at]
                .chars()
                .next_back()
                .is_some_and(|c| c.is_alphanumeric() || c == '_')
        })
        .map(|(at, m)| {
            let rest = &code[at + m.len()..];
            let end = rest
                .find(|c: char| !(c.is_ascii_lowercase() || c == '_' || c.is_ascii_digit()))
                .unwrap_or(rest.len());
            &rest[..end]
        })
        .filter(|name| !name.is_empty())
        .collect()
}

#[test]
fn every_domain_is_on_the_ladder() {
    let lib = fs::read_to_string(src().join("lib.rs")).unwrap();
    let mut declared: Vec<&str> = lib
        .lines()
        .filter_map(|l| l.strip_prefix("pub mod "))
        .map(|l| l.trim_end_matches(';'))
        .collect();
    declared.sort_unstable();
    let mut ladder = LADDER.to_vec();
    ladder.sort_unstable();
    assert_eq!(
        declared, ladder,
        "lib.rs must declare exactly the ladder's domains; a new domain takes its place in LADDER \
         (tests/arrows.rs) and in lib.rs's comment"
    );
}

#[test]
fn arrows_run_down_the_ladder() {
    let root = src();
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    files.sort();
    assert!(
        files.len() > 40,
        "found only {} files under {root:?}",
        files.len()
    );
    let mut up = Vec::new();
    for file in &files {
        let relative = file.strip_prefix(&root).unwrap();
        let from = domain_of(relative);
        let Some(from_rank) = rank(&from) else {
            assert_eq!(from, "lib", "{relative:?} is in no domain of the ladder");
            continue;
        };
        for (n, line) in fs::read_to_string(file).unwrap().lines().enumerate() {
            for to in crate_paths(line) {
                let to_rank =
                    rank(to).unwrap_or_else(|| panic!("{relative:?}:{}: crate::{to} is no domain", n + 1));
                if to_rank > from_rank {
                    up.push(format!(
                        "{}:{}: {from} uses crate::{to}, which is above it",
                        relative.display(),
                        n + 1
                    ));
                }
            }
        }
    }
    assert!(
        up.is_empty(),
        "arrows back up the ladder (move the shared piece down to the lowest domain that needs it):\n{}",
        up.join("\n")
    );
}

#[test]
fn the_reader_of_paths_finds_what_it_should() {
    assert_eq!(
        crate_paths("use crate::rollout::plan::{a, b}; // crate::notify"),
        ["rollout"]
    );
    assert_eq!(
        crate_paths("let x = crate::status::message::join(crate::set::SetKind::ALL);"),
        ["status", "set"]
    );
    assert!(crate_paths("/// see [`crate::admission`]").is_empty());
    assert!(crate_paths("use cmset_crate::x;").is_empty());
    assert_eq!(domain_of(Path::new("rollout/plan.rs")), "rollout");
    assert_eq!(domain_of(Path::new("set.rs")), "set");
}
