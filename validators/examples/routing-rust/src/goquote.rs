//! Go's strconv.Quote (what fmt's %q writes for a string), so that messages
//! match the Go example's byte for byte.

use crate::isprint::PRINT;

/// Quotes s as Go's strconv.Quote does.
pub fn quote(s: &str) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        let r = c as u32;
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            ' '..='~' => out.push(c),
            _ if r >= 0x80 && is_print(r) => out.push(c),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            _ => {
                let (prefix, digits) = if r < 0x80 {
                    ("\\x", 2)
                } else if r < 0x10000 {
                    ("\\u", 4)
                } else {
                    ("\\U", 8)
                };
                out.push_str(prefix);
                for i in (0..digits).rev() {
                    out.push(HEX[((r >> (4 * i)) & 15) as usize] as char);
                }
            }
        }
    }
    out.push('"');
    out
}

// is_print is strconv.IsPrint for r >= 0x80.
fn is_print(r: u32) -> bool {
    PRINT
        .binary_search_by(|&(lo, hi)| {
            if hi < r {
                core::cmp::Ordering::Less
            } else if lo > r {
                core::cmp::Ordering::Greater
            } else {
                core::cmp::Ordering::Equal
            }
        })
        .is_ok()
}
