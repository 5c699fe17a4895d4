//! Keeps the machine's paths out of what a run publishes: results.json, table.md and the operator's
//! log kept beside them.

/// Replaces every path under /work, /root, /home or /tmp with `<path>`: a published result holds no
/// path of the machine it was made on.
pub fn scrub_paths(text: &str) -> String {
    const ROOTS: [&str; 4] = ["/work", "/root", "/home", "/tmp"];
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        // Only where a path can start (not inside `a/tmp/b`), and only the root itself or below it
        // (not `/workspace`).
        let starts = out.chars().last().is_none_or(|p| !is_path_char(p));
        let root = ROOTS.iter().find(|r| {
            rest.strip_prefix(**r)
                .is_some_and(|after| after.chars().next().is_none_or(|n| n == '/' || !is_path_char(n)))
        });
        if starts && root.is_some() {
            let len = rest.find(|c: char| !is_path_char(c)).unwrap_or(rest.len());
            out.push_str("<path>");
            rest = &rest[len..];
        } else {
            out.push(c);
            rest = &rest[c.len_utf8()..];
        }
    }
    out
}

fn is_path_char(c: char) -> bool {
    c.is_alphanumeric() || matches!(c, '/' | '.' | '_' | '-' | '+' | '~' | '@' | '%')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_of_the_machine_are_scrubbed() {
        assert_eq!(
            scrub_paths(r#"operator "/work/wt-bench/target/release/cmset-controller" ok"#),
            r#"operator "<path>" ok"#
        );
        assert_eq!(
            scrub_paths("log at /tmp/x.log, kubeconfig /root/.kube/config; /home/u/a:b"),
            "log at <path>, kubeconfig <path>; <path>:b"
        );
        // Not a path of the machine: only the start of a path counts, and only these roots.
        let kept = "target/bench/work/x /workspace-ish /usr/bin/x a/tmp/b /tmpfoo";
        assert_eq!(scrub_paths(kept), kept);
        assert_eq!(scrub_paths("/work"), "<path>");
    }
}
