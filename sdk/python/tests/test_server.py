"""The client against a real pawld, started by sdk/python/python_test.go.

The environment names the server: PAWL_ADDR (plaintext, HTTP/2 with prior
knowledge), PAWL_TLS_ADDR and PAWL_TLS_CA (a second server over TLS and
the CA file that signed its certificate), PAWL_ADMIN_TOKEN and
PAWL_INSTANCE_TOKEN (both servers run with an auth file), and
PAWL_VALIDATOR_DIGEST (the routing validator, uploaded). Without
PAWL_ADDR the tests are skipped (the Go test fails on any skip).
"""

import collections
import os
import re
import unittest

import grpc
from google.protobuf import duration_pb2

import pawl_client
from pawl_client import canonical
from pawl.v1 import (
    instance_pb2,
    instance_pb2_grpc,
    kv_pb2,
    kv_pb2_grpc,
    release_pb2,
    release_pb2_grpc,
    rollout_pb2,
    rollout_pb2_grpc,
)

State = rollout_pb2.InstanceState
TIMEOUT = 20  # seconds: a bound on each wait, never a synchronisation
TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-01$")


@unittest.skipUnless(os.environ.get("PAWL_ADDR"), "PAWL_ADDR names no pawld (run go test ./sdk/python/)")
class ServerTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.addr = os.environ["PAWL_ADDR"]
        cls.instance_token = os.environ["PAWL_INSTANCE_TOKEN"]
        cls.validator = os.environ["PAWL_VALIDATOR_DIGEST"]
        cls.admin = pawl_client.channel(cls.addr, token=os.environ["PAWL_ADMIN_TOKEN"])
        cls.instances = instance_pb2_grpc.InstanceServiceStub(cls.admin)
        cls.releases = release_pb2_grpc.ReleaseServiceStub(cls.admin)
        cls.rollouts = rollout_pb2_grpc.RolloutServiceStub(cls.admin)
        cls.kv = kv_pb2_grpc.KVServiceStub(cls.admin)

    @classmethod
    def tearDownClass(cls):
        cls.admin.close()

    def client(self, identity, label, **kw):
        ch = pawl_client.channel(self.addr, token=self.instance_token)
        self.addCleanup(ch.close)
        c = pawl_client.Client(ch, workload_identity=identity, zone="zone-a", app_version="2.0.0",
                               labels={"test": label}, backoff=(0.05, 0.5), **kw)
        return c

    def await_kv(self, prefix, cond):
        """Check cond now and after every change under prefix until it
        holds; fails after TIMEOUT seconds."""
        stream = self.kv.Watch(kv_pb2.WatchRequest(prefix=prefix), timeout=TIMEOUT)
        try:
            for _ in stream:
                if cond():
                    return
        except grpc.RpcError as e:
            self.fail(f"waiting on {prefix}: {e.code()} {e.details()}")
        finally:
            stream.cancel()
        self.fail(f"the watch of {prefix} ended")

    def await_live(self, identity):
        def live():
            resp = self.instances.ListInstances(instance_pb2.ListInstancesRequest(), timeout=TIMEOUT)
            return any(r.instance.workload_identity == identity and r.live for r in resp.instances)

        self.await_kv("/_pawl/instances/", live)

    def release(self, config, content, label, window_ms=200):
        spec = release_pb2.ReleaseSpec(
            config_id=config,
            media_type="application/json",
            content=content,
            validator_digest=self.validator,
            selector={"test": label},
            stages=[release_pb2.Stage(name="everyone", policy=release_pb2.AckPolicy(kind=release_pb2.ACK_POLICY_KIND_ALL))],
            health_window=duration_pb2.Duration(nanos=window_ms * 1_000_000),
            deadline=duration_pb2.Duration(seconds=3600),
        )
        return self.releases.CreateRelease(release_pb2.CreateReleaseRequest(spec=spec), timeout=TIMEOUT).release

    def status(self, config, gen):
        return self.rollouts.GetRolloutStatus(
            rollout_pb2.GetRolloutStatusRequest(config_id=config, generation=gen, ack_page_size=1000), timeout=TIMEOUT)

    def acks_of(self, config, gen, boot):
        return [a for a in self.status(config, gen).acks if a.boot_id == boot]

    def test_follow_a_release_and_ack(self):
        applied = []
        c = self.client("py-follow", "follow", apply=applied.append)
        epoch = c.register()
        self.assertGreater(epoch, 0)
        c.start()
        self.addCleanup(c.close)
        self.await_live("py-follow")

        # Members out of order and spaces: the server's Go digest and this
        # package's agree on the canonical form, not on these bytes.
        content = b'{ "upstreams": [ {"weight": 30, "host": "a"}, {"host": "b", "weight": 70} ] }'
        rel = self.release("py-routing", content, "follow")
        self.assertEqual(canonical.digest("application/json", content), rel.content_digest)
        self.assertEqual([m.workload_identity for m in rel.membership], ["py-follow"])

        got = c.wait_for("py-routing", lambda s: s.generation == rel.generation, TIMEOUT)
        self.assertIsNotNone(got, "the release was never applied")
        self.assertEqual(got.content, content)
        self.assertEqual(got.content_digest, rel.content_digest)
        self.assertEqual([a.generation for a in applied], [rel.generation])

        def healthy_counted():
            return any(a.state == State.INSTANCE_STATE_HEALTHY_ACKED and a.counted
                       for a in self.acks_of("py-routing", rel.generation, c.boot_id))

        self.await_kv("/_pawl/acks/", healthy_counted)
        st = self.status("py-routing", rel.generation)
        self.assertEqual((st.stages[0].members, st.stages[0].healthy, st.stages[0].rejected), (1, 1, 0))
        acks = [a for a in st.acks if a.boot_id == c.boot_id]
        self.assertEqual([State.Name(a.state) for a in acks], [
            "INSTANCE_STATE_DISCOVERED", "INSTANCE_STATE_DOWNLOADED", "INSTANCE_STATE_STAGED",
            "INSTANCE_STATE_APPLIED", "INSTANCE_STATE_HEALTHY_ACKED"])
        traces = set()
        for a in acks:
            m = TRACEPARENT.match(a.traceparent)
            self.assertIsNotNone(m, f"traceparent {a.traceparent!r}")
            self.assertEqual(a.trace_id, m.group(1))
            traces.add(m.group(1))
            self.assertEqual(a.content_digest, rel.content_digest)
            self.assertEqual(a.membership_epoch, epoch)
        self.assertEqual(len(traces), 1, "one apply is one trace")
        healthy = acks[-1]
        self.assertTrue(healthy.health_ok)
        self.assertGreaterEqual(healthy.held.ToTimedelta().total_seconds(), 0.2)

        # The rollout passed: the release can be promoted.
        ptr = self.rollouts.GetPointer(rollout_pb2.GetPointerRequest(config_id="py-routing"), timeout=TIMEOUT).pointer
        self.rollouts.Promote(rollout_pb2.PromoteRequest(
            config_id="py-routing", generation=rel.generation, expected_generation=ptr.generation,
            expected_epoch=ptr.epoch, idempotency_key="py-promote-1"), timeout=TIMEOUT)
        ptr = self.rollouts.GetPointer(rollout_pb2.GetPointerRequest(config_id="py-routing"), timeout=TIMEOUT).pointer
        self.assertEqual(ptr.generation, rel.generation)

    def test_tampered_download_is_rejected(self):
        applied = []
        c = self.client("py-tamper", "tamper", apply=applied.append, download_attempts=2)
        c.releases = _Tampering(c.releases)  # a man in the middle of the download
        c.register()
        c.start()
        self.addCleanup(c.close)
        self.await_live("py-tamper")
        rel = self.release("py-tampered", b'{"upstreams":[{"host":"a","weight":50},{"host":"b","weight":50}]}', "tamper")

        def settled():  # rejected, or (the guard broken) applied
            return any(a.state in (State.INSTANCE_STATE_REJECTED, State.INSTANCE_STATE_APPLIED)
                       for a in self.acks_of("py-tampered", rel.generation, c.boot_id))

        self.await_kv("/_pawl/acks/", settled)
        acks = self.acks_of("py-tampered", rel.generation, c.boot_id)
        self.assertEqual([State.Name(a.state) for a in acks], [
            "INSTANCE_STATE_DISCOVERED", "INSTANCE_STATE_DOWNLOADED", "INSTANCE_STATE_REJECTED"])
        rej = acks[-1]
        self.assertEqual(rej.reject_code, rollout_pb2.REJECT_CODE_DIGEST_MISMATCH)
        self.assertIn("content digest mismatch", rej.reason)
        # (Another test's promoted config may reach this instance too.)
        self.assertEqual([a for a in applied if a.config_id == "py-tampered"], [], "tampered content was applied")
        self.assertIsNone(c.applied("py-tampered"))
        self.assertEqual(c.releases.calls["py-tampered"], 2, "each attempt downloads again")

    def test_a_call_without_the_token_is_unauthenticated(self):
        ch = pawl_client.channel(self.addr)
        self.addCleanup(ch.close)
        c = pawl_client.Client(ch, workload_identity="py-anonymous")
        with self.assertRaises(grpc.RpcError) as cm:
            c.register()
        self.assertEqual(cm.exception.code(), grpc.StatusCode.UNAUTHENTICATED)

    @unittest.skipUnless(os.environ.get("PAWL_TLS_ADDR"), "PAWL_TLS_ADDR names no pawld over TLS")
    def test_register_over_tls(self):
        with open(os.environ["PAWL_TLS_CA"], "rb") as f:
            ca = f.read()
        ch = pawl_client.channel(os.environ["PAWL_TLS_ADDR"], root_certificates=ca, token=self.instance_token)
        self.addCleanup(ch.close)
        c = pawl_client.Client(ch, workload_identity="py-tls", zone="zone-a")
        self.assertGreater(c.register(), 0)
        admin = pawl_client.channel(os.environ["PAWL_TLS_ADDR"], root_certificates=ca, token=os.environ["PAWL_ADMIN_TOKEN"])
        self.addCleanup(admin.close)
        resp = instance_pb2_grpc.InstanceServiceStub(admin).ListInstances(instance_pb2.ListInstancesRequest(), timeout=TIMEOUT)
        self.assertIn("py-tls", [r.instance.workload_identity for r in resp.instances])


class _Tampering:
    """A ReleaseService that changes the content of every release it
    downloads, keeping the digests it names."""

    def __init__(self, stub):
        self.stub, self.calls = stub, collections.Counter()

    def GetRelease(self, request, **kw):
        self.calls[request.config_id] += 1
        resp = self.stub.GetRelease(request, **kw)
        resp.release.spec.content = resp.release.spec.content.replace(b'"weight":50}', b'"weight":90}', 1)
        return resp


if __name__ == "__main__":
    unittest.main()
