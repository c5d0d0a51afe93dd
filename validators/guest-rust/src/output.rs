//! The result's JSON encoding (validators/ABI.md, "Result").

use crate::{Severity, Verdict};

pub(crate) fn encode(v: &Verdict) -> Vec<u8> {
    let mut out = Vec::with_capacity(64);
    out.extend_from_slice(if v.valid() { b"{\"valid\":true,\"violations\":[" } else { b"{\"valid\":false,\"violations\":[" });
    for (i, viol) in v.violations.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(b"{\"path\":");
        string(&mut out, &viol.path);
        out.extend_from_slice(b",\"message\":");
        string(&mut out, &viol.message);
        out.extend_from_slice(match viol.severity {
            Severity::Error => b",\"severity\":\"error\"}",
            Severity::Warning => b",\"severity\":\"warning\"}",
        });
    }
    out.push(b']');
    if !v.secrets.is_empty() {
        out.extend_from_slice(b",\"secrets\":[");
        for (i, s) in v.secrets.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            string(&mut out, s);
        }
        out.push(b']');
    }
    out.push(b'}');
    out
}

fn string(out: &mut Vec<u8>, s: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push(b'"');
    for &c in s.as_bytes() {
        match c {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            0..=0x1f => out.extend_from_slice(&[b'\\', b'u', b'0', b'0', HEX[(c >> 4) as usize], HEX[(c & 15) as usize]]),
            _ => out.push(c),
        }
    }
    out.push(b'"');
}
