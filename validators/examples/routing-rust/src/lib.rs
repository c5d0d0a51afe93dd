//! The routing-policy example validator (validators/examples/routing) in
//! Rust, verdict for verdict and message for message with the Go one: an
//! upstream routing table whose weights must sum to 100 and whose hosts
//! must be unique.
//!
//!     {"upstreams": [{"host": "a.internal:443", "weight": 60}, {"host": "b.internal:443", "weight": 40}]}
//!
//! An upstream may carry a "token" of at least 16 characters; every token
//! is marked secret. The table is decoded with Go's `encoding/json` rules
//! (case-insensitive keys, the last duplicate wins, a repeated array
//! decodes into the elements of the one before it, integers only as
//! integer literals), which is what the Go example does.
//!
//! Build: cargo build --release --target wasm32-unknown-unknown

mod goquote;
mod isprint;

use pawl_guest::json::{self, Kind, Value};
use pawl_guest::{export, Input, Verdict};

export!(validate);

#[derive(Default, Clone)]
struct Upstream {
    host: String,
    weight: Option<i64>,
    token: String,
}

/// A field whose value has the wrong kind, as Go's UnmarshalTypeError
/// describes it: the dotted field path, what was found, what the field is.
struct TypeError {
    field: &'static str,
    value: String,
    want: Want,
}

enum Want {
    Object,
    Array,
    Int,
    Str,
}

fn validate(input: &Input) -> Verdict {
    let upstreams = match json::parse(input.config) {
        Err(_) => return fail("not a routing table: invalid JSON"),
        Ok(doc) => match table(doc.root()) {
            Ok(u) => u,
            Err(e) => return fail(&type_error(&e)),
        },
    };
    let mut res = Verdict::default();
    if upstreams.is_empty() {
        res.error("/upstreams", "at least one upstream is required");
    }
    let mut seen = std::collections::BTreeMap::<&str, usize>::new();
    let mut sum: i64 = 0;
    for (i, u) in upstreams.iter().enumerate() {
        let path = format!("/upstreams/{}", i);
        if u.host.is_empty() {
            res.error(format!("{}/host", path), "host is required");
        } else if let Some(&j) = seen.get(u.host.as_str()) {
            res.error(format!("{}/host", path), format!("host {} is also upstream {}; hosts must be unique", goquote::quote(&u.host), j));
        } else {
            seen.insert(&u.host, i);
        }
        if !u.token.is_empty() {
            res.secret(format!("{}/token", path));
            if u.token.len() < 16 {
                res.error(format!("{}/token", path), format!("token {} is shorter than 16 characters", goquote::quote(&u.token)));
            }
        }
        match u.weight {
            None => res.error(format!("{}/weight", path), "weight is required"),
            Some(w) if !(0..=100).contains(&w) => res.error(format!("{}/weight", path), format!("weight {} is outside 0..100", w)),
            Some(w) => sum += w,
        }
    }
    if !upstreams.is_empty() && sum != 100 {
        res.error("/upstreams", format!("weights sum to {}; they must sum to 100", sum));
    }
    res
}

fn fail(msg: &str) -> Verdict {
    let mut v = Verdict::default();
    v.error("", msg);
    v
}

fn type_error(e: &TypeError) -> String {
    let place = if e.field.is_empty() { "the config" } else { e.field };
    let want = match e.want {
        Want::Object if !e.field.is_empty() => return format!("not a routing table: {} must hold objects, not {}", place, e.value),
        Want::Object => "an object",
        Want::Array => "an array",
        Want::Int => "an integer",
        Want::Str => "a string",
    };
    format!("not a routing table: {} must be {}, not {}", place, want, e.value)
}

fn wrong(v: Value, field: &'static str, want: Want) -> TypeError {
    TypeError { field, value: v.kind().go_name().to_string(), want }
}

// table decodes the document into the upstreams as Go's json.Unmarshal
// decodes it into the Go example's struct, stopping at the first type
// error (the only one Go reports).
fn table(root: Value) -> Result<Vec<Upstream>, TypeError> {
    // slots is the slice's backing array: Go decodes a repeated
    // "upstreams" array into the elements it already has.
    let mut slots: Vec<Upstream> = Vec::new();
    let mut len = 0;
    match root.kind() {
        Kind::Null => {}
        Kind::Object => {
            for (k, v) in root.members() {
                if !json::key_matches(k, "upstreams") {
                    continue;
                }
                match v.kind() {
                    Kind::Null => {
                        slots.clear();
                        len = 0;
                    }
                    Kind::Array => {
                        len = 0;
                        for item in v.items() {
                            if len == slots.len() {
                                slots.push(Upstream::default());
                            }
                            upstream(item, &mut slots[len])?;
                            len += 1;
                        }
                        if len == 0 {
                            slots.clear();
                        }
                    }
                    _ => return Err(wrong(v, "upstreams", Want::Array)),
                }
            }
        }
        _ => return Err(wrong(root, "", Want::Object)),
    }
    slots.truncate(len);
    Ok(slots)
}

fn upstream(v: Value, u: &mut Upstream) -> Result<(), TypeError> {
    match v.kind() {
        Kind::Null => return Ok(()),
        Kind::Object => {}
        _ => return Err(wrong(v, "upstreams", Want::Object)),
    }
    for (k, f) in v.members() {
        if json::key_matches(k, "host") {
            string(f, &mut u.host, "upstreams.host")?;
        } else if json::key_matches(k, "token") {
            string(f, &mut u.token, "upstreams.token")?;
        } else if json::key_matches(k, "weight") {
            match f.kind() {
                Kind::Null => u.weight = None,
                Kind::Number => match f.int() {
                    Some(n) => u.weight = Some(n),
                    None => {
                        return Err(TypeError { field: "upstreams.weight", value: format!("number {}", String::from_utf8_lossy(f.raw())), want: Want::Int })
                    }
                },
                _ => return Err(wrong(f, "upstreams.weight", Want::Int)),
            }
        }
    }
    Ok(())
}

fn string(v: Value, dst: &mut String, field: &'static str) -> Result<(), TypeError> {
    match v.kind() {
        Kind::Null => Ok(()),
        Kind::String => {
            *dst = v.str().to_string();
            Ok(())
        }
        _ => Err(wrong(v, field, Want::Str)),
    }
}
