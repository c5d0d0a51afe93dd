//! A JSON parser that accepts, rejects and decodes text as Go's
//! `encoding/json` does: the same grammar, a nesting limit of 10,000, and
//! strings decoded the same way (invalid UTF-8 and lone surrogates become
//! U+FFFD). Numbers keep their literal text, so a caller decides, as Go's
//! decoder does, whether `1e2` is an integer (it is not).
//!
//! The document is an arena of nodes: nothing recurses, so neither a deep
//! document nor dropping it can overflow the stack.

/// The kind of a JSON value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `null`.
    Null,
    /// `true` or `false`.
    Bool,
    /// A number, kept as its literal text.
    Number,
    /// A string.
    String,
    /// An array.
    Array,
    /// An object.
    Object,
}

impl Kind {
    /// The name Go's `encoding/json` gives the kind in a type error:
    /// "bool", "number", "string", "array" or "object" ("null" never errs).
    pub fn go_name(self) -> &'static str {
        match self {
            Kind::Null => "null",
            Kind::Bool => "bool",
            Kind::Number => "number",
            Kind::String => "string",
            Kind::Array => "array",
            Kind::Object => "object",
        }
    }
}

struct Node {
    kind: Kind,
    start: u32,
    end: u32,
    text: String,
    kids_start: u32,
    kids_len: u32,
}

/// A parsed document. Its values are [`Value`]s borrowed from it.
pub struct Doc<'a> {
    src: &'a [u8],
    nodes: Vec<Node>,
    kids: Vec<u32>,
    root: u32,
}

/// A value of a [`Doc`].
#[derive(Clone, Copy)]
pub struct Value<'d> {
    doc: &'d Doc<'d>,
    idx: u32,
}

/// The most nested arrays and objects Go's decoder accepts.
pub const MAX_DEPTH: usize = 10_000;

/// Why a text is not JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SyntaxError {
    /// The byte offset where parsing failed.
    pub offset: usize,
}

impl<'a> Doc<'a> {
    /// The document's top-level value.
    pub fn root(&self) -> Value<'_> {
        Value { doc: self, idx: self.root }
    }
}

impl<'d> Value<'d> {
    fn node(&self) -> &'d Node {
        &self.doc.nodes[self.idx as usize]
    }

    /// The value's kind.
    pub fn kind(&self) -> Kind {
        self.node().kind
    }

    /// The value's literal text as it appears in the document.
    pub fn raw(&self) -> &'d [u8] {
        let n = self.node();
        &self.doc.src[n.start as usize..n.end as usize]
    }

    /// A string's decoded text; empty for other kinds.
    pub fn str(&self) -> &'d str {
        &self.node().text
    }

    /// A boolean's value; false for other kinds.
    pub fn bool(&self) -> bool {
        self.kind() == Kind::Bool && self.raw() == b"true"
    }

    fn kid(&self, i: usize) -> Value<'d> {
        let n = self.node();
        Value { doc: self.doc, idx: self.doc.kids[n.kids_start as usize + i] }
    }

    /// An array's elements, in order; none for other kinds.
    pub fn items(&self) -> impl Iterator<Item = Value<'d>> + 'd {
        let v = *self;
        let n = if v.kind() == Kind::Array { v.node().kids_len as usize } else { 0 };
        (0..n).map(move |i| v.kid(i))
    }

    /// An object's members (key, value), in order, duplicates included;
    /// none for other kinds.
    pub fn members(&self) -> impl Iterator<Item = (&'d str, Value<'d>)> + 'd {
        let v = *self;
        let n = if v.kind() == Kind::Object { v.node().kids_len as usize / 2 } else { 0 };
        (0..n).map(move |i| (v.kid(2 * i).str(), v.kid(2 * i + 1)))
    }

    /// An integer as Go's `strconv.ParseInt(text, 10, 64)` reads a number's
    /// literal: `None` for fractions, exponents and out-of-range values.
    pub fn int(&self) -> Option<i64> {
        if self.kind() != Kind::Number {
            return None;
        }
        let raw = self.raw();
        let (neg, digits) = match raw.first() {
            Some(b'-') => (true, &raw[1..]),
            _ => (false, raw),
        };
        if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
            return None;
        }
        let mut n: i128 = 0;
        for &d in digits {
            n = n * 10 + (d - b'0') as i128;
            if n > i64::MAX as i128 + 1 {
                return None;
            }
        }
        let n = if neg { -n } else { n };
        i64::try_from(n).ok()
    }
}

/// Reports whether an object key matches a field name as Go's decoder
/// matches them: exactly or case-insensitively, folding as
/// `unicode.SimpleFold` (so `K`, the Kelvin sign, matches `k`, and `ſ`
/// matches `s`). name must be ASCII.
pub fn key_matches(key: &str, name: &str) -> bool {
    let mut n = name.bytes();
    for c in key.chars() {
        let folded = match c {
            '\u{212a}' => b'K',
            '\u{17f}' => b'S',
            c if c.is_ascii() => (c as u8).to_ascii_uppercase(),
            _ => return false,
        };
        match n.next() {
            Some(b) if b.to_ascii_uppercase() == folded => {}
            _ => return false,
        }
    }
    n.next().is_none()
}

struct Frame {
    node: u32,
    object: bool,
    pending: usize,
}

/// Parses src as one JSON value with optional white space around it.
pub fn parse(src: &[u8]) -> Result<Doc<'_>, SyntaxError> {
    let mut p = Parser { src, pos: 0, nodes: Vec::new(), kids: Vec::new(), pending: Vec::new() };
    let root = p.document()?;
    Ok(Doc { src, nodes: p.nodes, kids: p.kids, root })
}

struct Parser<'a> {
    src: &'a [u8],
    pos: usize,
    nodes: Vec<Node>,
    kids: Vec<u32>,
    pending: Vec<u32>,
}

impl<'a> Parser<'a> {
    fn err<T>(&self) -> Result<T, SyntaxError> {
        Err(SyntaxError { offset: self.pos })
    }

    fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.src.get(self.pos) {
            self.pos += 1;
        }
    }

    fn peek(&self) -> Option<u8> {
        self.src.get(self.pos).copied()
    }

    fn push(&mut self, kind: Kind, start: usize, text: String) -> u32 {
        self.nodes.push(Node { kind, start: start as u32, end: self.pos as u32, text, kids_start: 0, kids_len: 0 });
        (self.nodes.len() - 1) as u32
    }

    fn document(&mut self) -> Result<u32, SyntaxError> {
        let mut stack: Vec<Frame> = Vec::new();
        self.ws();
        loop {
            // A value starts here.
            let start = self.pos;
            let mut done = match self.peek() {
                Some(c @ (b'{' | b'[')) => {
                    self.pos += 1;
                    let node = self.push(if c == b'{' { Kind::Object } else { Kind::Array }, start, String::new());
                    stack.push(Frame { node, object: c == b'{', pending: self.pending.len() });
                    if stack.len() > MAX_DEPTH {
                        return self.err();
                    }
                    self.ws();
                    if self.peek() == Some(if c == b'{' { b'}' } else { b']' }) {
                        self.pos += 1;
                        Some(self.close(&mut stack))
                    } else {
                        if c == b'{' {
                            self.key()?;
                        }
                        None
                    }
                }
                Some(b'"') => {
                    let s = self.string()?;
                    Some(self.push(Kind::String, start, s))
                }
                Some(b't') => Some(self.literal(b"true", Kind::Bool)?),
                Some(b'f') => Some(self.literal(b"false", Kind::Bool)?),
                Some(b'n') => Some(self.literal(b"null", Kind::Null)?),
                Some(b'-' | b'0'..=b'9') => Some(self.number()?),
                _ => return self.err(),
            };
            // After a value: separators and closing brackets.
            while let Some(v) = done {
                if stack.is_empty() {
                    self.ws();
                    if self.pos != self.src.len() {
                        return self.err();
                    }
                    return Ok(v);
                }
                self.pending.push(v);
                self.ws();
                let object = stack.last().map_or(false, |f| f.object);
                match self.peek() {
                    Some(b',') => {
                        self.pos += 1;
                        self.ws();
                        if object {
                            self.key()?;
                        }
                        done = None;
                    }
                    Some(b'}') if object => {
                        self.pos += 1;
                        done = Some(self.close(&mut stack));
                    }
                    Some(b']') if !object => {
                        self.pos += 1;
                        done = Some(self.close(&mut stack));
                    }
                    _ => return self.err(),
                }
            }
        }
    }

    // key parses an object's key and its colon, leaving the key pending.
    fn key(&mut self) -> Result<(), SyntaxError> {
        if self.peek() != Some(b'"') {
            return self.err();
        }
        let start = self.pos;
        let s = self.string()?;
        let k = self.push(Kind::String, start, s);
        self.pending.push(k);
        self.ws();
        if self.peek() != Some(b':') {
            return self.err();
        }
        self.pos += 1;
        self.ws();
        Ok(())
    }

    fn close(&mut self, stack: &mut Vec<Frame>) -> u32 {
        let f = stack.pop().expect("close without a frame");
        let n = &mut self.nodes[f.node as usize];
        n.kids_start = self.kids.len() as u32;
        n.kids_len = (self.pending.len() - f.pending) as u32;
        n.end = self.pos as u32;
        self.kids.extend(self.pending.drain(f.pending..));
        f.node
    }

    fn literal(&mut self, word: &[u8], kind: Kind) -> Result<u32, SyntaxError> {
        let start = self.pos;
        if !self.src[self.pos..].starts_with(word) {
            return self.err();
        }
        self.pos += word.len();
        Ok(self.push(kind, start, String::new()))
    }

    fn digits(&mut self) -> usize {
        let start = self.pos;
        while let Some(b'0'..=b'9') = self.peek() {
            self.pos += 1;
        }
        self.pos - start
    }

    fn number(&mut self) -> Result<u32, SyntaxError> {
        let start = self.pos;
        if self.peek() == Some(b'-') {
            self.pos += 1;
        }
        match self.peek() {
            Some(b'0') => self.pos += 1,
            Some(b'1'..=b'9') => {
                self.digits();
            }
            _ => return self.err(),
        }
        if self.peek() == Some(b'.') {
            self.pos += 1;
            if self.digits() == 0 {
                return self.err();
            }
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.pos += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.pos += 1;
            }
            if self.digits() == 0 {
                return self.err();
            }
        }
        Ok(self.push(Kind::Number, start, String::new()))
    }

    fn hex4(&self, at: usize) -> Option<u32> {
        let h = self.src.get(at..at + 4)?;
        let mut n = 0;
        for &c in h {
            n = n * 16 + (c as char).to_digit(16)?;
        }
        Some(n)
    }

    fn string(&mut self) -> Result<String, SyntaxError> {
        self.pos += 1; // the opening quote
        let mut out = String::new();
        loop {
            let c = match self.peek() {
                Some(c) => c,
                None => return self.err(),
            };
            match c {
                b'"' => {
                    self.pos += 1;
                    return Ok(out);
                }
                0..=0x1f => return self.err(),
                b'\\' => {
                    let e = match self.src.get(self.pos + 1) {
                        Some(&e) => e,
                        None => {
                            self.pos += 1;
                            return self.err();
                        }
                    };
                    self.pos += 2;
                    match e {
                        b'"' | b'\\' | b'/' => out.push(e as char),
                        b'b' => out.push('\u{8}'),
                        b'f' => out.push('\u{c}'),
                        b'n' => out.push('\n'),
                        b'r' => out.push('\r'),
                        b't' => out.push('\t'),
                        b'u' => {
                            let r = match self.hex4(self.pos) {
                                Some(r) => r,
                                None => return self.err(),
                            };
                            self.pos += 4;
                            if (0xd800..0xe000).contains(&r) {
                                // A surrogate pairs only with a following
                                // \uXXXX low surrogate, as Go's unquote does.
                                let low = if self.src.get(self.pos..self.pos + 2) == Some(&b"\\u"[..]) { self.hex4(self.pos + 2) } else { None };
                                match low {
                                    Some(lo) if r < 0xdc00 && (0xdc00..0xe000).contains(&lo) => {
                                        self.pos += 6;
                                        out.push(char::from_u32(0x10000 + ((r - 0xd800) << 10) + (lo - 0xdc00)).unwrap_or('\u{fffd}'));
                                    }
                                    _ => out.push('\u{fffd}'),
                                }
                            } else {
                                out.push(char::from_u32(r).unwrap_or('\u{fffd}'));
                            }
                        }
                        _ => {
                            self.pos -= 1;
                            return self.err();
                        }
                    }
                }
                0x20..=0x7f => {
                    out.push(c as char);
                    self.pos += 1;
                }
                _ => {
                    let (ch, n) = decode_rune(&self.src[self.pos..]);
                    out.push(ch);
                    self.pos += n;
                }
            }
        }
    }
}

/// Decodes one UTF-8 sequence as Go's `utf8.DecodeRune`: an invalid one is
/// U+FFFD of one byte.
fn decode_rune(b: &[u8]) -> (char, usize) {
    let cont = |i: usize, lo: u8, hi: u8| b.get(i).map_or(false, |&c| (lo..=hi).contains(&c));
    let n = match b[0] {
        0xc2..=0xdf if cont(1, 0x80, 0xbf) => 2,
        0xe0 if cont(1, 0xa0, 0xbf) && cont(2, 0x80, 0xbf) => 3,
        0xe1..=0xec | 0xee..=0xef if cont(1, 0x80, 0xbf) && cont(2, 0x80, 0xbf) => 3,
        0xed if cont(1, 0x80, 0x9f) && cont(2, 0x80, 0xbf) => 3,
        0xf0 if cont(1, 0x90, 0xbf) && cont(2, 0x80, 0xbf) && cont(3, 0x80, 0xbf) => 4,
        0xf1..=0xf3 if cont(1, 0x80, 0xbf) && cont(2, 0x80, 0xbf) && cont(3, 0x80, 0xbf) => 4,
        0xf4 if cont(1, 0x80, 0x8f) && cont(2, 0x80, 0xbf) && cont(3, 0x80, 0xbf) => 4,
        _ => return ('\u{fffd}', 1),
    };
    match core::str::from_utf8(&b[..n]).ok().and_then(|s| s.chars().next()) {
        Some(c) => (c, n),
        None => ('\u{fffd}', 1),
    }
}
