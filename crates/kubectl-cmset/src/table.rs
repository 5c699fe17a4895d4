//! Aligned columns as kubectl prints them: uppercase headers, every column as wide as its widest cell,
//! three spaces between columns, the last column not padded (no trailing spaces).

use crate::style::{Palette, Role, visible};

/// One cell: its text and, optionally, what it means (for colour). Widths count the text only, so a
/// coloured table lines up exactly like a plain one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cell {
    pub text: String,
    pub role: Option<Role>,
}

impl Cell {
    pub fn new(text: impl Into<String>) -> Self {
        Self {
            text: visible(&text.into()),
            role: None,
        }
    }

    pub fn styled(text: impl Into<String>, role: Option<Role>) -> Self {
        Self {
            role,
            ..Self::new(text)
        }
    }
}

impl From<&str> for Cell {
    fn from(text: &str) -> Self {
        Cell::new(text)
    }
}

impl From<String> for Cell {
    fn from(text: String) -> Self {
        Cell::new(text)
    }
}

const GAP: &str = "   ";

/// The table, one line per row after the header line, each ending in a newline.
pub fn render(headers: &[&str], rows: &[Vec<Cell>], palette: Palette) -> String {
    let width = |s: &str| s.chars().count();
    let mut widths: Vec<usize> = headers.iter().map(|h| width(h)).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if i < widths.len() {
                widths[i] = widths[i].max(width(&cell.text));
            } else {
                widths.push(width(&cell.text));
            }
        }
    }

    let mut out = String::new();
    let mut line = |cells: Vec<(String, Option<Role>)>| {
        let last = cells.len().saturating_sub(1);
        let mut text = String::new();
        for (i, (cell, role)) in cells.into_iter().enumerate() {
            let pad = widths[i] - width(&cell);
            text.push_str(&palette.paint(role, &cell));
            if i < last {
                text.push_str(&" ".repeat(pad));
                text.push_str(GAP);
            }
        }
        out.push_str(text.trim_end_matches(' '));
        out.push('\n');
    };
    line(headers.iter().map(|h| (h.to_uppercase(), None)).collect());
    for row in rows {
        line(row.iter().map(|c| (c.text.clone(), c.role)).collect());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_line_up_with_three_spaces() {
        let rows = vec![
            vec![Cell::new("3"), Cell::new("app-config-abc"), Cell::new("*")],
            vec![Cell::new("12"), Cell::new("a"), Cell::new("")],
        ];
        let out = render(&["revision", "configmap", "current"], &rows, Palette::PLAIN);
        assert_eq!(
            out,
            "REVISION   CONFIGMAP        CURRENT\n\
             3          app-config-abc   *\n\
             12         a\n"
        );
    }

    #[test]
    fn colour_does_not_change_the_alignment() {
        let rows = vec![vec![Cell::styled("*", Some(Role::Good)), Cell::new("x")]];
        let plain = render(&["A", "B"], &rows, Palette::PLAIN);
        let coloured = render(&["A", "B"], &rows, Palette::COLOR);
        assert_eq!(plain, "A   B\n*   x\n");
        assert_eq!(coloured, "A   B\n\u{1b}[32m*\u{1b}[0m   x\n");
    }

    #[test]
    fn wide_characters_and_control_characters() {
        let rows = vec![vec![Cell::new("é\u{1b}"), Cell::new("x")]];
        assert_eq!(
            render(&["a", "b"], &rows, Palette::PLAIN),
            "A       B\né\\x1b   x\n"
        );
    }

    #[test]
    fn headers_only() {
        assert_eq!(render(&["name", "age"], &[], Palette::PLAIN), "NAME   AGE\n");
    }
}
