//! Whether to colour, and the few styles the plugin uses.
//!
//! The decision is a pure function of the `--color` flag and two facts about the environment, so it is
//! tested without a terminal. Renderers take a [`Palette`]: with colour off it returns text unchanged,
//! so the same renderer produces the piped and the terminal output.

use std::fmt::Write as _;

use anstyle::{AnsiColor, Style};

/// The `--color` flag.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum ColorChoice {
    /// Colour when standard output is a terminal and NO_COLOR is not set.
    #[default]
    Auto,
    /// Always colour, even into a pipe or a file.
    Always,
    /// Never colour.
    Never,
}

/// Whether output is coloured. `no_color` is the value of the `NO_COLOR` environment variable; as
/// <https://no-color.org> says, it disables colour when present and not empty. Only `auto` consults the
/// environment: an explicit `--color=always` wins over NO_COLOR, as a flag beats the environment.
pub fn use_color(choice: ColorChoice, stdout_is_terminal: bool, no_color: Option<&str>) -> bool {
    match choice {
        ColorChoice::Always => true,
        ColorChoice::Never => false,
        ColorChoice::Auto => stdout_is_terminal && no_color.is_none_or(str::is_empty),
    }
}

/// What a piece of text means, which decides its style.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// A removed line of a diff.
    Removed,
    /// An added line of a diff.
    Added,
    /// `@@` lines of a diff.
    Hunk,
    /// `---`/`+++` headers and section titles.
    Heading,
    /// Something as it should be (the current revision, `Ready=True`).
    Good,
    /// Something waiting or deliberately held back (pending, pinned).
    Attention,
    /// Something wrong (`Ready=False`, a status behind its spec).
    Bad,
    /// Something cmset does not manage.
    Muted,
}

impl Role {
    fn style(self) -> Style {
        let fg = |c: AnsiColor| Style::new().fg_color(Some(c.into()));
        match self {
            Role::Removed => fg(AnsiColor::Red),
            Role::Added => fg(AnsiColor::Green),
            Role::Hunk => fg(AnsiColor::Cyan),
            Role::Heading => Style::new().bold(),
            Role::Good => fg(AnsiColor::Green),
            Role::Attention => fg(AnsiColor::Yellow),
            Role::Bad => fg(AnsiColor::Red).bold(),
            Role::Muted => Style::new().dimmed(),
        }
    }
}

/// Paints text when colour is on; returns it unchanged when it is off.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Palette {
    pub color: bool,
}

impl Palette {
    pub const PLAIN: Palette = Palette { color: false };
    pub const COLOR: Palette = Palette { color: true };

    pub fn paint(self, role: Option<Role>, text: &str) -> String {
        match role {
            Some(role) if self.color && !text.is_empty() => {
                let style = role.style();
                let mut out = String::with_capacity(text.len() + 12);
                // Writing to a String cannot fail.
                let _ = write!(out, "{style}{text}{style:#}");
                out
            }
            _ => text.to_string(),
        }
    }
}

/// Makes control characters of untrusted text (ConfigMap values, names from the cluster) visible, so that
/// they can neither move the cursor nor forge colours on a terminal: `ESC` becomes `\x1b`. Tabs stay.
pub fn visible(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_control() && c != '\t' {
            let _ = write!(out, "\\x{:02x}", u32::from(c));
        } else {
            out.push(c);
        }
    }
    out
}

/// Whether `text` holds an ANSI escape sequence (used by tests).
pub fn has_escapes(text: &str) -> bool {
    text.contains('\u{1b}')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colour_decision() {
        use ColorChoice::*;
        // (choice, terminal, NO_COLOR, coloured)
        let table = [
            (Auto, true, None, true),
            (Auto, false, None, false),
            (Auto, true, Some("1"), false),
            (Auto, true, Some(""), true),
            (Auto, false, Some("1"), false),
            (Always, false, None, true),
            (Always, false, Some("1"), true),
            (Never, true, None, false),
            (Never, true, Some(""), false),
        ];
        for (choice, tty, no_color, want) in table {
            assert_eq!(
                use_color(choice, tty, no_color),
                want,
                "{choice:?} tty={tty} NO_COLOR={no_color:?}"
            );
        }
    }

    #[test]
    fn painting_on_and_off() {
        assert_eq!(Palette::PLAIN.paint(Some(Role::Added), "+x"), "+x");
        assert_eq!(Palette::COLOR.paint(None, "x"), "x");
        assert_eq!(Palette::COLOR.paint(Some(Role::Added), ""), "");
        let green = Palette::COLOR.paint(Some(Role::Added), "+x");
        assert_eq!(green, "\u{1b}[32m+x\u{1b}[0m");
        assert!(has_escapes(&green));
        let red = Palette::COLOR.paint(Some(Role::Removed), "-x");
        assert_eq!(red, "\u{1b}[31m-x\u{1b}[0m");
    }

    #[test]
    fn control_characters_are_shown_not_obeyed() {
        assert_eq!(visible("a\tb"), "a\tb");
        assert_eq!(visible("\u{1b}[31mred"), "\\x1b[31mred");
        assert_eq!(visible("cr\r"), "cr\\x0d");
        assert_eq!(visible("naïve"), "naïve");
    }
}
