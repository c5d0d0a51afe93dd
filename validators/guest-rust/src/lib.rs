//! Pawl validator ABI, version 1, for Rust guests (see validators/ABI.md).
//!
//! An author writes one function from [`Input`] to [`Verdict`] and exports
//! it with [`export!`]:
//!
//! ```ignore
//! use pawl_guest::{export, Input, Verdict};
//!
//! fn validate(input: &Input) -> Verdict {
//!     let mut v = Verdict::default();
//!     if input.config.is_empty() {
//!         v.error("", "empty config");
//!     }
//!     v
//! }
//!
//! export!(validate);
//! ```
//!
//! Built for `wasm32-unknown-unknown` the module imports nothing: no WASI,
//! no Go runtime. [`json`] parses JSON the way Go's `encoding/json` does, so
//! a port of a Go validator can reach the same verdicts.

pub mod json;

mod output;

/// The ABI version this library implements; `pawl_abi_version` returns it.
pub const ABI_VERSION: i32 = 1;

/// The four fields of a validation's input (validators/ABI.md, "Input").
pub struct Input<'a> {
    /// The config content, as stored.
    pub config: &'a [u8],
    /// The media type, e.g. `application/json` (may be empty).
    pub media_type: &'a [u8],
    /// The config's ID or key (may be empty).
    pub name: &'a [u8],
    /// The validator's parameters as a JSON document; `None` when empty.
    pub params: Option<&'a [u8]>,
}

/// How serious a violation is: any `Error` makes the verdict invalid.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Severity {
    /// The config may not be released.
    Error,
    /// Reported, but does not make the config invalid.
    Warning,
}

/// One problem found in the config.
#[derive(Clone, Debug)]
pub struct Violation {
    /// A JSON Pointer (RFC 6901) to the problem; empty for the whole config.
    pub path: String,
    /// What is wrong, for a person.
    pub message: String,
    /// Error or warning.
    pub severity: Severity,
}

/// A validation's result. The verdict is valid exactly when no violation
/// is an error; `secrets` lists JSON Pointers of secret values that hosts
/// redact from what they report.
#[derive(Clone, Debug, Default)]
pub struct Verdict {
    /// The violations, in the order they were found.
    pub violations: Vec<Violation>,
    /// JSON Pointers of the config's secret values.
    pub secrets: Vec<String>,
}

impl Verdict {
    /// Adds an error at path.
    pub fn error(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.violations.push(Violation { path: path.into(), message: message.into(), severity: Severity::Error });
    }

    /// Adds a warning at path.
    pub fn warning(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.violations.push(Violation { path: path.into(), message: message.into(), severity: Severity::Warning });
    }

    /// Marks the value at path secret.
    pub fn secret(&mut self, path: impl Into<String>) {
        self.secrets.push(path.into());
    }

    /// Reports whether no violation is an error.
    pub fn valid(&self) -> bool {
        self.violations.iter().all(|v| v.severity == Severity::Warning)
    }
}

/// Decodes the four length-prefixed fields of an input; `None` if it is
/// truncated. Bytes after the fourth field are ignored.
pub fn decode_input(mut b: &[u8]) -> Option<Input<'_>> {
    let mut fields: [&[u8]; 4] = [&[]; 4];
    for f in fields.iter_mut() {
        if b.len() < 4 {
            return None;
        }
        let n = u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize;
        b = &b[4..];
        if b.len() < n {
            return None;
        }
        *f = &b[..n];
        b = &b[n..];
    }
    Some(Input { config: fields[0], media_type: fields[1], name: fields[2], params: if fields[3].is_empty() { None } else { Some(fields[3]) } })
}

/// Runs f on an encoded input and returns the encoded result. A truncated
/// input gives an invalid verdict, as the Go guest does.
pub fn run(input: &[u8], f: fn(&Input) -> Verdict) -> Vec<u8> {
    let verdict = match decode_input(input) {
        Some(input) => f(&input),
        None => {
            let mut v = Verdict::default();
            v.error("", "abi: truncated input");
            v
        }
    };
    output::encode(&verdict)
}

/// The buffers behind the exports: the input the host writes and the
/// result it reads. An instance serves one call at a time (validators/ABI.md),
/// so one of each suffices.
#[doc(hidden)]
pub mod buffers {
    static mut INPUT: Vec<u8> = Vec::new();
    static mut OUTPUT: Vec<u8> = Vec::new();

    /// pawl_alloc: size writable bytes, valid until the next validation.
    pub fn alloc(size: i32) -> i32 {
        // SAFETY: the host calls one export at a time; nothing else touches
        // the buffers.
        unsafe {
            INPUT.clear();
            INPUT.resize(size.max(0) as usize, 0);
            INPUT.as_mut_ptr() as i32
        }
    }

    /// pawl_validate: runs f on the input at ptr..ptr+len.
    pub fn validate(ptr: i32, len: i32, f: fn(&super::Input) -> super::Verdict) -> i64 {
        // SAFETY: the host wrote len bytes at ptr, an address pawl_alloc
        // returned (or any address in memory it chose to use).
        let input = unsafe { core::slice::from_raw_parts(ptr as usize as *const u8, len.max(0) as usize) };
        let out = super::run(input, f);
        unsafe {
            OUTPUT = out;
            ((OUTPUT.as_ptr() as usize as i64) << 32) | OUTPUT.len() as i64
        }
    }
}

/// Exports the ABI's functions for the validator function f:
/// `pawl_abi_version`, `pawl_alloc` and `pawl_validate`.
#[macro_export]
macro_rules! export {
    ($f:path) => {
        #[no_mangle]
        pub extern "C" fn pawl_abi_version() -> i32 {
            $crate::ABI_VERSION
        }

        #[no_mangle]
        pub extern "C" fn pawl_alloc(size: i32) -> i32 {
            $crate::buffers::alloc(size)
        }

        #[no_mangle]
        pub extern "C" fn pawl_validate(ptr: i32, len: i32) -> i64 {
            $crate::buffers::validate(ptr, len, $f)
        }
    };
}
