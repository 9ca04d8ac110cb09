//! Text for the terminal. Strings that come from files or from the command
//! line (bundle and section names, class labels, paths, error messages that
//! quote them) can hold control characters; printed raw, a bundle could
//! clear the screen, set the window title or hide text. Print them through
//! [`Escaped`] (JSON output needs nothing: serde_json escapes control
//! characters itself).

use std::borrow::Cow;
use std::fmt;

/// Whether `c` is escaped: the C0 controls (including tab and newline),
/// DEL, the C1 controls (U+0080..=U+009F, which some terminals read as
/// escape introducers), and the Unicode bidirectional overrides and
/// isolates (U+202A..=U+202E, U+2066..=U+2069), which reorder what is shown.
pub fn needs_escape(c: char) -> bool {
    c.is_control() || matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
}

/// `s` with every character for which [`needs_escape`] holds written as a
/// Rust-style escape: `\n`, `\r`, `\t`, `\x1b` (below U+0080), `\u{9b}`
/// (above). Backslashes are left as they are. Borrows when nothing needs
/// escaping.
pub fn escape_control(s: &str) -> Cow<'_, str> {
    if s.chars().any(needs_escape) {
        Cow::Owned(Escaped(s).to_string())
    } else {
        Cow::Borrowed(s)
    }
}

/// Displays a string with control characters escaped (see
/// [`escape_control`]), without allocating unless a width is given.
/// Honours width, fill and alignment (`{:<24}`) like `str`.
#[derive(Clone, Copy, Debug)]
pub struct Escaped<'a>(pub &'a str);

impl Escaped<'_> {
    fn write_to(&self, f: &mut impl fmt::Write) -> fmt::Result {
        let mut rest = self.0;
        while let Some((at, c)) = rest.char_indices().find(|&(_, c)| needs_escape(c)) {
            f.write_str(rest.get(..at).unwrap_or_default())?;
            match c {
                '\n' => f.write_str("\\n")?,
                '\r' => f.write_str("\\r")?,
                '\t' => f.write_str("\\t")?,
                c if (c as u32) < 0x80 => write!(f, "\\x{:02x}", c as u32)?,
                c => write!(f, "\\u{{{:x}}}", c as u32)?,
            }
            rest = rest.get(at + c.len_utf8()..).unwrap_or_default();
        }
        f.write_str(rest)
    }
}

impl fmt::Display for Escaped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if f.width().is_none() && f.precision().is_none() {
            return self.write_to(f);
        }
        let mut s = String::with_capacity(self.0.len());
        self.write_to(&mut s)?;
        f.pad(&s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped() {
        assert_eq!(escape_control("detect/model.onnx"), "detect/model.onnx");
        assert!(matches!(escape_control("plain"), Cow::Borrowed(_)));
        assert_eq!(
            escape_control("a\x1b[2J\x1b]0;pwned\x07b"),
            "a\\x1b[2J\\x1b]0;pwned\\x07b"
        );
        assert_eq!(escape_control("x\ny\tz\r"), "x\\ny\\tz\\r");
        assert_eq!(escape_control("\u{7f}\u{9b}31m"), "\\x7f\\u{9b}31m");
        assert_eq!(escape_control("abc\u{202e}gpj.exe"), "abc\\u{202e}gpj.exe");
        assert_eq!(escape_control("café ✓ C:\\x"), "café ✓ C:\\x");
        let out = escape_control("\x1b\u{9b}\u{2066}\n");
        assert!(!out.chars().any(needs_escape), "{out}");
    }

    #[test]
    fn width_and_alignment_apply_to_the_escaped_text() {
        assert_eq!(format!("[{:<6}]", Escaped("a\x07")), "[a\\x07 ]");
        assert_eq!(format!("[{:>4}]", Escaped("ab")), "[  ab]");
        assert_eq!(format!("[{}]", Escaped("ab")), "[ab]");
    }
}
