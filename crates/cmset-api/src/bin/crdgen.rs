//! Prints the ConfigMapSet CRD as YAML: `cargo run -p cmset-api --bin crdgen > crds/configmapsets.cmset.dev.yaml`.

fn main() {
    print!("{}", cmset_api::crd_yaml());
}
