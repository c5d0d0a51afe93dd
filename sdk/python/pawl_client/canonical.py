"""The canonical content digest of Pawl releases, version 1.

This is the Python twin of the Go package sdk/canonical, written from
sdk/canonical/CANONICAL.md: for JSON media types (application/json or any
``+json`` type) the content is put in its RFC 8785 (JCS) form; any other
content is hashed as it is. The digest is

    "sha256:" + hex(sha256("pawl.content.v1" 0x00 media_type 0x00 form))

with the media type lower-cased and without parameters. It must agree
byte for byte with Go on sdk/canonical/testdata/vectors.json (the tests
read that file).
"""

import decimal
import hashlib
import json
import math

DOMAIN = b"pawl.content.v1"


class InvalidJSON(ValueError):
    """JSON content that cannot be canonicalized (not UTF-8, not exactly
    one JSON value, a duplicate key, a number outside the double range)."""


def _bare_media_type(media_type):
    return media_type.split(";", 1)[0].strip().lower()


def is_json(media_type):
    """Whether media_type is canonicalized as JSON: application/json, or
    any type with the +json suffix, ignoring parameters."""
    mt = _bare_media_type(media_type)
    return mt == "application/json" or mt.endswith("+json")


def form(media_type, content):
    """The canonical byte form of content (bytes): the RFC 8785
    serialization for JSON media types, otherwise the bytes unchanged.
    Raises InvalidJSON for JSON content that cannot be canonicalized."""
    content = bytes(content)
    if not is_json(media_type):
        return content
    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InvalidJSON("canonical: invalid JSON content: not valid UTF-8") from e
    try:
        value = json.loads(
            text,
            parse_float=_number,
            parse_int=_number,
            parse_constant=_no_constant,
            object_pairs_hook=_object,
        )
    except InvalidJSON:
        raise
    except (ValueError, RecursionError) as e:
        raise InvalidJSON(f"canonical: invalid JSON content: {e}") from e
    out = []
    _write(out, value)
    return "".join(out).encode("utf-8")


def digest(media_type, content):
    """The content digest, "sha256:<hex>", of content (bytes) under
    media_type. Raises InvalidJSON as form does."""
    f = form(media_type, content)
    h = hashlib.sha256()
    h.update(DOMAIN)
    h.update(b"\x00")
    h.update(_bare_media_type(media_type).encode("utf-8"))
    h.update(b"\x00")
    h.update(f)
    return "sha256:" + h.hexdigest()


class _Number(float):
    """A parsed JSON number, kept apart from strings and booleans."""


def _number(text):
    f = float(text)
    if math.isinf(f):
        raise InvalidJSON(
            f"canonical: invalid JSON content: number {text} is outside the IEEE 754 double range"
        )
    return _Number(f)


def _no_constant(name):
    # Python's decoder accepts NaN, Infinity and -Infinity; JSON does not.
    raise InvalidJSON(f"canonical: invalid JSON content: {name} is not JSON")


def _object(pairs):
    seen = set()
    for k, _ in pairs:
        if k in seen:
            raise InvalidJSON(f"canonical: invalid JSON content: duplicate object key {k!r}")
        seen.add(k)
    return _Members(pairs)


class _Members(list):
    """A JSON object's members, in the order they were read."""


def _fix_surrogates(s):
    # Go's decoder turns a \u escape of an unpaired surrogate into U+FFFD;
    # Python's keeps the lone surrogate, which UTF-8 cannot encode.
    if any(0xD800 <= ord(c) <= 0xDFFF for c in s):
        return "".join("\ufffd" if 0xD800 <= ord(c) <= 0xDFFF else c for c in s)
    return s


def _utf16_key(s):
    # RFC 8785 sorts keys by their UTF-16 code units: big-endian bytes
    # compare in the same order.
    return s.encode("utf-16-be")


def _write(out, v):
    if v is None:
        out.append("null")
    elif v is True:
        out.append("true")
    elif v is False:
        out.append("false")
    elif isinstance(v, _Number):
        out.append(format_number(float(v)))
    elif isinstance(v, str):
        _write_string(out, v)
    elif isinstance(v, _Members):
        members = sorted(((_fix_surrogates(k), val) for k, val in v), key=lambda m: _utf16_key(m[0]))
        out.append("{")
        for i, (k, val) in enumerate(members):
            if i:
                out.append(",")
            _write_string(out, k)
            out.append(":")
            _write(out, val)
        out.append("}")
    elif isinstance(v, list):
        out.append("[")
        for i, item in enumerate(v):
            if i:
                out.append(",")
            _write(out, item)
        out.append("]")
    else:  # pragma: no cover - json.loads returns nothing else
        raise InvalidJSON(f"canonical: invalid JSON content: unexpected {type(v).__name__}")


_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _write_string(out, s):
    """Escape as ECMAScript's JSON.stringify: the two-character escapes,
    \\u00xx (lower-case hex) for other control characters, everything else
    as it is (UTF-8 once encoded)."""
    s = _fix_surrogates(s)
    out.append('"')
    for c in s:
        e = _ESCAPES.get(c)
        if e is not None:
            out.append(e)
        elif ord(c) < 0x20:
            out.append("\\u%04x" % ord(c))
        else:
            out.append(c)
    out.append('"')


def format_number(f):
    """ECMAScript's Number.prototype.toString for a finite double, as RFC
    8785 requires: the shortest digits that round-trip, plain for decimal
    exponents from -6 to 20, otherwise d.ddde±n; -0 is 0."""
    if f == 0:
        return "0"
    sign = ""
    if f < 0:
        sign, f = "-", -f
    # repr gives the shortest digits that round-trip.
    _, digit_tuple, exp = decimal.Decimal(repr(f)).normalize().as_tuple()
    digits = "".join(str(d) for d in digit_tuple)
    k = len(digits)
    n = k + exp  # the decimal point goes after the first n digits
    if k <= n <= 21:
        return sign + digits + "0" * (n - k)
    if 0 < n <= 21:
        return sign + digits[:n] + "." + digits[n:]
    if -6 < n <= 0:
        return sign + "0." + "0" * (-n) + digits
    s = digits[:1]
    if k > 1:
        s += "." + digits[1:]
    if n - 1 >= 0:
        return sign + s + "e+" + str(n - 1)
    return sign + s + "e-" + str(1 - n)
