//! Messages people read in conditions and events: several clauses in one line, capped in length because
//! Kubernetes caps those fields (and a wall of text helps no one).

/// Room kept for "; and N more" while clauses remain to be counted.
const MORE_ROOM: usize = 32;

const ELLIPSIS: &str = "…";

/// A timeout as people write it: `10s`, or `250ms` when it is not whole seconds.
pub fn duration(duration: std::time::Duration) -> String {
    if duration.subsec_millis() == 0 {
        format!("{}s", duration.as_secs())
    } else {
        format!("{}ms", duration.as_millis())
    }
}

/// `clauses` joined with `; `, in order, in at most `max_len` bytes: as many as fit, then
/// `; and N more`. The first clause is always shown, cut short with `…` if it alone is too long.
/// `max_len` must leave room for the count (more than 32 bytes).
pub fn join_capped(clauses: &[String], max_len: usize) -> String {
    let mut out = String::new();
    let mut shown = 0;
    for (i, clause) in clauses.iter().enumerate() {
        let separator = if i == 0 { "" } else { "; " };
        let budget = if i + 1 == clauses.len() {
            max_len
        } else {
            max_len - MORE_ROOM
        };
        if out.len() + separator.len() + clause.len() <= budget {
            out.push_str(separator);
            out.push_str(clause);
            shown += 1;
            continue;
        }
        if i == 0 {
            out.push_str(truncate(clause, budget - ELLIPSIS.len()));
            out.push_str(ELLIPSIS);
            shown = 1;
        }
        break;
    }
    let more = clauses.len() - shown;
    if more > 0 {
        out.push_str(&format!("; and {more} more"));
    }
    out
}

/// The longest prefix of `s` of at most `max` bytes that ends on a character boundary.
fn truncate(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let end = (0..=max).rev().find(|&i| s.is_char_boundary(i)).unwrap_or(0);
    &s[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_people_write_them() {
        use std::time::Duration;
        for (d, want) in [
            (Duration::from_secs(10), "10s"),
            (Duration::from_millis(250), "250ms"),
            (Duration::from_millis(1500), "1500ms"),
            (Duration::ZERO, "0s"),
        ] {
            assert_eq!(duration(d), want);
        }
    }

    #[test]
    fn truncate_respects_character_boundaries() {
        assert_eq!(truncate("héllo", 2), "h");
        assert_eq!(truncate("héllo", 3), "hé");
        assert_eq!(truncate("héllo", 100), "héllo");
    }

    #[test]
    fn clauses_that_fit_are_joined_as_they_are() {
        let clauses = ["Created revision 2".to_string(), "Deleted revision 1".to_string()];
        assert_eq!(
            join_capped(&clauses, 100),
            "Created revision 2; Deleted revision 1"
        );
        assert_eq!(join_capped(&clauses[..1], 100), "Created revision 2");
        assert_eq!(join_capped(&[], 100), "");
    }
}
