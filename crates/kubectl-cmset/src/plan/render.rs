//! A plan for people: a table for the terminal, Markdown for a pull-request comment or
//! `$GITHUB_STEP_SUMMARY`. Both say the verdict first. Neither shows a SecretSet's values: the plan
//! holds none (see [`super::keys`]).

use super::report::{PlanDocument, SetPlan};
use crate::style::Palette;
use crate::table::{Cell, render};

/// The most characters a Markdown plan may have: GitHub refuses a comment of 65,536.
pub const MARKDOWN_MAX: usize = 65_000;

fn dash(value: Option<&str>) -> String {
    value.filter(|v| !v.is_empty()).unwrap_or("-").to_string()
}

fn wave(w: Option<i32>) -> String {
    w.map_or("-".to_string(), |w| w.to_string())
}

/// The table output: the mode line, then each set, verdict first.
pub fn table(doc: &PlanDocument) -> String {
    let mut out = format!("{}\n", doc.mode_note);
    for plan in &doc.plans {
        out.push('\n');
        out.push_str(&set_table(plan));
    }
    if doc.plans.is_empty() {
        out.push_str("no ConfigMapSet or SecretSet in the files\n");
    }
    out
}

fn set_table(plan: &SetPlan) -> String {
    let mut out = format!(
        "{} -n {}: {}\n",
        plan.set.resource(),
        plan.set.namespace,
        plan.verdict.summary
    );
    if let Some(r) = &plan.revision {
        let number = r.number.map_or("?".into(), |n| n.to_string());
        let how = if r.new { "new" } else { "reused" };
        out.push_str(&format!("  revision:   {} ({how}, revision {number})\n", r.name));
        if !r.prunes.is_empty() {
            out.push_str(&format!("  prunes:     {}\n", r.prunes.join(", ")));
        }
    }
    if !plan.keys.is_empty() {
        let keys: Vec<String> = plan
            .keys
            .iter()
            .map(|k| format!("{} ({})", k.key, k.change))
            .collect();
        let against = plan
            .keys_against
            .as_deref()
            .map(|a| format!(" against {a}"))
            .unwrap_or_default();
        out.push_str(&format!("  keys{against}: {}\n", keys.join(", ")));
    }
    if plan.validation.messages.is_empty() {
        out.push_str("  validation: valid\n");
    } else {
        for m in &plan.validation.messages {
            out.push_str(&format!("  validation: {m}\n"));
        }
    }
    if let Some(webhook) = &plan.validation.webhook {
        out.push_str(&format!("  webhook (server-side dry run): {webhook}\n"));
    }
    if !plan.checks.run.is_empty() || !plan.checks.covered.is_empty() {
        out.push_str(&format!(
            "  checks:     run {}; covered by earlier verdicts {}\n",
            dash(Some(&plan.checks.run.join(", "))),
            dash(Some(&plan.checks.covered.join(", ")))
        ));
    }
    if !plan.workloads.is_empty() {
        let mut rows = Vec::new();
        for w in &plan.workloads {
            let fromto = if w.from == w.to {
                w.from.clone()
            } else {
                format!("{}→{}", w.from, w.to)
            };
            rows.push(
                [
                    wave(w.wave),
                    format!("{}/{}", w.kind, w.name),
                    fromto,
                    w.action.clone(),
                    dash(w.earliest.as_deref()),
                    dash(w.gate.as_deref()),
                ]
                .into_iter()
                .map(Cell::new)
                .collect::<Vec<_>>(),
            );
        }
        out.push('\n');
        out.push_str(&render(
            &["WAVE", "WORKLOAD", "FROM→TO", "ACTION", "EARLIEST", "GATE"],
            &rows,
            Palette::PLAIN,
        ));
        out.push('\n');
    }
    for h in &plan.holds {
        out.push_str(&format!(
            "  hold: {} ({}) from {} until {}{}\n",
            h.by,
            h.phase,
            h.from,
            dash(h.until.as_deref()),
            h.message.as_deref().map(|m| format!(": {m}")).unwrap_or_default()
        ));
    }
    for w in &plan.windows {
        out.push_str(&format!("  window: {}\n", window_line(w)));
    }
    for r in &plan.rollback {
        let kept = if r.kept { "kept" } else { "NOT kept" };
        out.push_str(&format!(
            "  rollback: kubectl rollout undo {} returns to {} ({kept})\n",
            r.workload, r.undo_to
        ));
    }
    for u in &plan.unknown {
        out.push_str(&format!("  unknown: {u}\n"));
    }
    out.push_str(&format!(
        "  basis: at {}, current revision {}, {} resourceVersions read\n",
        plan.basis.at,
        dash(plan.basis.current_revision.as_deref()),
        plan.basis.resource_versions.len()
    ));
    let diffs: Vec<String> = plan
        .keys
        .iter()
        .filter_map(|k| k.diff.as_ref())
        .cloned()
        .collect();
    if !diffs.is_empty() {
        out.push('\n');
        for d in diffs {
            out.push_str(&d);
        }
    }
    out
}

/// A window in one line: where it is written, its kind and name, whether it is open, its next opening.
fn window_line(w: &crate::windows::WindowRow) -> String {
    let name = w.name.as_deref().map(|n| format!(" {n}")).unwrap_or_default();
    let state = match (&w.open, &w.open_until) {
        (true, Some(until)) => format!("open until {}", until.0),
        (true, None) => "open".to_string(),
        (false, _) => "closed".to_string(),
    };
    let next = w
        .next_opening
        .as_ref()
        .map_or("no opening within 10 years".to_string(), |t| {
            format!("next opening {}", t.0)
        });
    let problem = w
        .problem
        .as_deref()
        .map(|p| format!(" ({p})"))
        .unwrap_or_default();
    format!(
        "{} {}{name} ({} {}, {}): {state}, {next}{problem}",
        w.source,
        w.kind.as_str(),
        w.schedule,
        w.duration,
        w.time_zone
    )
}

fn cell(text: &str) -> String {
    text.replace('|', "\\|").replace('\n', " ")
}

/// One set's Markdown: the hidden marker, the verdict, the tables, each key's diff folded.
fn set_markdown(plan: &SetPlan) -> String {
    let mut out = format!(
        "<!-- cmset-plan {}/{} -->\n### {} `{}/{}`: {}\n\n",
        plan.set.namespace,
        plan.set.name,
        plan.set.kind,
        plan.set.namespace,
        plan.set.name,
        cell(&plan.verdict.summary)
    );
    if let Some(r) = &plan.revision {
        let number = r.number.map_or("?".into(), |n| n.to_string());
        let how = if r.new { "new" } else { "reused" };
        out.push_str(&format!(
            "- **Revision**: `{}` ({how}, revision {number})\n",
            r.name
        ));
        if !r.prunes.is_empty() {
            out.push_str(&format!(
                "- **Prunes**: {}\n",
                r.prunes
                    .iter()
                    .map(|p| format!("`{p}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
    }
    if plan.validation.messages.is_empty() {
        out.push_str("- **Validation**: valid\n");
    } else {
        for m in &plan.validation.messages {
            out.push_str(&format!("- **Validation**: {}\n", cell(m)));
        }
    }
    if !plan.checks.run.is_empty() || !plan.checks.covered.is_empty() {
        out.push_str(&format!(
            "- **Checks**: run {}; covered {}\n",
            dash(Some(&plan.checks.run.join(", "))),
            dash(Some(&plan.checks.covered.join(", ")))
        ));
    }
    for h in &plan.holds {
        out.push_str(&format!(
            "- **Hold**: {} ({}) until {}{}\n",
            cell(&h.by),
            h.phase,
            dash(h.until.as_deref()),
            h.message
                .as_deref()
                .map(|m| format!(": {}", cell(m)))
                .unwrap_or_default()
        ));
    }
    for w in &plan.windows {
        out.push_str(&format!("- **Window**: {}\n", cell(&window_line(w))));
    }
    for u in &plan.unknown {
        out.push_str(&format!("- **Unknown**: {}\n", cell(u)));
    }
    if !plan.workloads.is_empty() {
        out.push_str(
            "\n| WAVE | WORKLOAD | FROM→TO | ACTION | EARLIEST | GATE |\n|---|---|---|---|---|---|\n",
        );
        for w in &plan.workloads {
            let fromto = if w.from == w.to {
                format!("`{}`", w.from)
            } else {
                format!("`{}`→`{}`", w.from, w.to)
            };
            out.push_str(&format!(
                "| {} | {}/{} | {fromto} | {} | {} | {} |\n",
                wave(w.wave),
                w.kind,
                w.name,
                cell(&w.action),
                dash(w.earliest.as_deref()),
                cell(&dash(w.gate.as_deref()))
            ));
        }
    }
    if !plan.rollback.is_empty() {
        out.push('\n');
        for r in &plan.rollback {
            let kept = if r.kept { "kept" } else { "**not kept**" };
            out.push_str(&format!(
                "- `kubectl rollout undo {}` returns to `{}` ({kept})\n",
                r.workload, r.undo_to
            ));
        }
    }
    if !plan.keys.is_empty() {
        let against = plan
            .keys_against
            .as_deref()
            .map(|a| format!(" against `{a}`"))
            .unwrap_or_default();
        out.push_str(&format!("\n**Keys**{against}:\n\n"));
        for k in &plan.keys {
            match &k.diff {
                Some(diff) => out.push_str(&format!(
                    "<details><summary><code>{}</code>: {}</summary>\n\n```diff\n{}```\n\n</details>\n",
                    html(&k.key),
                    k.change,
                    diff.replace("```", "`\u{200b}``")
                )),
                None => out.push_str(&format!("- `{}`: {}\n", k.key, k.change)),
            }
        }
    }
    out.push_str(&format!(
        "\n<sub>basis: {}, current revision {}, {} resourceVersions</sub>\n",
        plan.basis.at,
        dash(plan.basis.current_revision.as_deref()),
        plan.basis.resource_versions.len()
    ));
    out
}

fn html(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The Markdown output, cut below [`MARKDOWN_MAX`] characters with a pointer to `-o json`.
pub fn markdown(doc: &PlanDocument) -> String {
    let mut out = format!("## kubectl cmset plan\n\n{}\n\n", doc.mode_note);
    if doc.plans.is_empty() {
        out.push_str("No ConfigMapSet or SecretSet in the files.\n");
    }
    let cut_note = "\n\n**The plan is cut here**: it is longer than a comment may be. Run `kubectl cmset plan -o json` for all of it.\n";
    for plan in &doc.plans {
        let part = set_markdown(plan);
        if out.chars().count() + part.chars().count() + cut_note.len() > MARKDOWN_MAX {
            let room = MARKDOWN_MAX.saturating_sub(out.chars().count() + cut_note.len());
            // Cut at a line, and close a fold or a code block left open.
            let mut kept: String = part.chars().take(room.saturating_sub(32)).collect();
            if let Some(at) = kept.rfind('\n') {
                kept.truncate(at + 1);
            }
            if kept.matches("```").count() % 2 == 1 {
                kept.push_str("```\n");
            }
            if kept.matches("<details>").count() > kept.matches("</details>").count() {
                kept.push_str("</details>\n");
            }
            out.push_str(&kept);
            out.push_str(cut_note);
            return out;
        }
        out.push_str(&part);
        out.push('\n');
    }
    out
}
