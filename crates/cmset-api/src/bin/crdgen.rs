//! Prints one of cmset's CRDs as YAML, by name:
//! `cargo run -p cmset-api --bin crdgen -- secretsets.cmset.dev > crds/secretsets.cmset.dev.yaml`.
//! Without an argument it prints the ConfigMapSet CRD; `--list` prints every name.

use std::process::ExitCode;

fn main() -> ExitCode {
    let crds = cmset_api::crd_yamls();
    match std::env::args().nth(1).as_deref() {
        None => print!("{}", cmset_api::crd_yaml()),
        Some("--list") => crds.iter().for_each(|(name, _)| println!("{name}")),
        Some(wanted) => match crds.iter().find(|(name, _)| *name == wanted) {
            Some((_, yaml)) => print!("{yaml}"),
            None => {
                let names: Vec<&str> = crds.iter().map(|(name, _)| *name).collect();
                eprintln!("crdgen: no CRD named {wanted:?}; known: {}", names.join(", "));
                return ExitCode::FAILURE;
            }
        },
    }
    ExitCode::SUCCESS
}
