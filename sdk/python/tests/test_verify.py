"""verify: a release that does not match its assignment is refused."""

import re
import unittest

import pawl_client
from pawl_client import canonical
from pawl.v1 import instance_pb2, release_pb2

CONTENT = b'{"upstreams":[{"host":"a","weight":50},{"host":"b","weight":50}]}'
DIGEST = canonical.digest("application/json", CONTENT)
VALIDATOR = "sha256:" + "ab" * 32


def assignment():
    return instance_pb2.Assignment(config_id="routing", generation=3, content_digest=DIGEST, validator_digest=VALIDATOR)


def release(content=CONTENT, **kw):
    spec = release_pb2.ReleaseSpec(config_id="routing", media_type="application/json", content=content,
                                   validator_digest=kw.pop("validator", VALIDATOR))
    return release_pb2.Release(spec=spec, generation=kw.pop("generation", 3), content_digest=kw.pop("digest", DIGEST))


class VerifyTest(unittest.TestCase):
    def test_the_release_assigned_passes(self):
        self.assertEqual(pawl_client.verify(assignment(), release()), DIGEST)

    def test_equivalent_json_passes(self):
        # Another serialization of the same document has the same digest.
        same = b'{"upstreams": [{"weight": 50, "host": "a"}, {"weight": 5e1, "host": "b"}]}'
        self.assertEqual(pawl_client.verify(assignment(), release(same)), DIGEST)

    def test_tampered_content_is_refused(self):
        tampered = CONTENT.replace(b'"weight":50}', b'"weight":90}', 1)
        with self.assertRaisesRegex(pawl_client.DigestMismatch, "content digest mismatch: the content hashes to"):
            pawl_client.verify(assignment(), release(tampered))

    def test_content_that_is_not_json_is_refused(self):
        with self.assertRaisesRegex(pawl_client.DigestMismatch, "cannot be canonicalized"):
            pawl_client.verify(assignment(), release(CONTENT[:-1]))

    def test_a_release_naming_another_digest_is_refused(self):
        with self.assertRaisesRegex(pawl_client.DigestMismatch, "the release names"):
            pawl_client.verify(assignment(), release(digest="sha256:" + "00" * 32))

    def test_another_generation_or_validator_is_refused(self):
        with self.assertRaisesRegex(pawl_client.DigestMismatch, "generation 4 for an assignment of routing generation 3"):
            pawl_client.verify(assignment(), release(generation=4))
        with self.assertRaisesRegex(pawl_client.DigestMismatch, "wrong validator"):
            pawl_client.verify(assignment(), release(validator="sha256:" + "cd" * 32))


class TraceparentTest(unittest.TestCase):
    def test_format(self):
        tp = pawl_client.traceparent()
        self.assertRegex(tp, r"^00-[0-9a-f]{32}-[0-9a-f]{16}-01$")
        self.assertTrue(pawl_client.traceparent("1" * 32).startswith("00-" + "1" * 32 + "-"))
        self.assertNotEqual(re.split("-", pawl_client.traceparent())[2], re.split("-", pawl_client.traceparent())[2])


if __name__ == "__main__":
    unittest.main()
