"""The canonical digest against the Go SDK's test vectors."""

import json
import os
import unittest

from pawl_client import canonical

# The Go SDK's vectors, read in place: every implementation passes the
# same file (sdk/canonical/CANONICAL.md).
VECTORS = os.path.join(os.path.dirname(__file__), "..", "..", "canonical", "testdata", "vectors.json")


class VectorsTest(unittest.TestCase):
    def test_vectors(self):
        with open(VECTORS, encoding="utf-8") as f:
            vectors = json.load(f)
        self.assertGreater(len(vectors), 0)
        for v in vectors:
            with self.subTest(v["name"]):
                content = v["content"].encode("utf-8")
                self.assertEqual(canonical.form(v["media_type"], content), v["canonical"].encode("utf-8"))
                self.assertEqual(canonical.digest(v["media_type"], content), v["digest"])

    def test_equivalent_json_has_one_digest(self):
        a = canonical.digest("application/json", b'{"b":1,"a":[1.0,2]}')
        b = canonical.digest("application/json; charset=utf-8", b'{\n  "a": [1, 2e0],\n  "b": 1\n}\n')
        self.assertEqual(a, b)
        self.assertNotEqual(canonical.digest("text/plain", b'{"b":1,"a":[1.0,2]}'), a)

    def test_invalid_json_is_refused(self):
        for bad in [b"", b"{", b'{"a":1}{}', b'{"a":1,"a":2}', b"[1e400]", b'"\xff"', b"nul", b"NaN", b"[-Infinity]"]:
            with self.subTest(bad):
                with self.assertRaises(canonical.InvalidJSON):
                    canonical.form("application/json", bad)

    def test_lone_surrogate_becomes_replacement_character(self):
        # As Go's decoder does.
        self.assertEqual(canonical.form("application/json", b'"\\ud800"'), '"\ufffd"'.encode("utf-8"))


if __name__ == "__main__":
    unittest.main()
