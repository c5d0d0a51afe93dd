"""A small Pawl instance client over the gRPC stubs buf generates.

It mirrors the Go SDK (sdk/follow.go, sdk/apply.go, sdk/ack.go) in what a
server can see: it registers the instance with a boot ID and keeps the
membership epoch the server returns; it follows the assignment stream with
deltas, resuming after the last revision it saw (registering again on
FAILED_PRECONDITION or NOT_FOUND, starting over on INVALID_ARGUMENT); for
each new assignment it reports DISCOVERED, downloads the release, checks
that its content hashes (pawl_client.canonical) to the digest the
assignment names, reports DOWNLOADED, STAGED, calls the application's
apply function, reports APPLIED, holds the release for its health window,
and reports HEALTHY_ACKED with the time held. A download that does not
match is downloaded again, up to download_attempts, then REJECTED with
REJECT_CODE_DIGEST_MISMATCH, and nothing is applied. Every ACK carries a
W3C traceparent: one trace per apply, one span ID per step.

What it leaves out, unlike the Go SDK: it does not run the release's Wasm
validator (so it never reports VALIDATED, and ignores shadow
assignments), applies one assignment at a time (a newer assignment waits
for the current health window), keeps no cache on disk and does not check
min_app_version (the server leaves such instances out of the membership).
"""

import dataclasses
import logging
import os
import threading
import time
import uuid

import grpc
from google.protobuf import duration_pb2

from pawl.v1 import instance_pb2, instance_pb2_grpc, release_pb2, release_pb2_grpc, rollout_pb2, rollout_pb2_grpc

from . import canonical

log = logging.getLogger("pawl_client")

State = rollout_pb2.InstanceState

# The longest ACK reason sent: the least bound a server puts on request
# text, so that a long reason is cut rather than the ACK refused.
MAX_REASON_BYTES = 4096

# How often a healthy HEALTHY_ACKED that reached the server before its
# measure of the health window is sent again.
MAX_EARLY_RESENDS = 20


class DigestMismatch(Exception):
    """A downloaded release does not match its assignment: another config
    or generation, content that does not hash to the assigned digest, or
    another validator."""


@dataclasses.dataclass(frozen=True)
class Applied:
    """A release the instance applied."""

    config_id: str
    generation: int
    epoch: int
    stage: str
    content_digest: str
    validator_digest: str
    media_type: str
    content: bytes


def channel(target, *, tls=False, root_certificates=None, token=None):
    """A gRPC channel to a pawld at target ("host:port"): plaintext
    (HTTP/2 with prior knowledge) unless tls or root_certificates (PEM
    bytes of the CAs to trust; None: the system's) are given. A token is
    sent as "authorization: Bearer <token>" on every call; grpc sends call
    credentials only over TLS, so on a plaintext channel the token goes
    through an interceptor instead."""
    if tls or root_certificates is not None:
        creds = grpc.ssl_channel_credentials(root_certificates=root_certificates)
        if token:
            creds = grpc.composite_channel_credentials(creds, grpc.access_token_call_credentials(token))
        return grpc.secure_channel(target, creds)
    ch = grpc.insecure_channel(target)
    if token:
        ch = grpc.intercept_channel(ch, _BearerInterceptor(token))
    return ch


class _BearerInterceptor(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor):
    def __init__(self, token):
        self._header = ("authorization", "Bearer " + token)

    def _with_token(self, details):
        metadata = list(details.metadata or []) + [self._header]
        return details._replace(metadata=metadata) if hasattr(details, "_replace") else _Details(details, metadata)

    def intercept_unary_unary(self, continuation, details, request):
        return continuation(self._with_token(details), request)

    def intercept_unary_stream(self, continuation, details, request):
        return continuation(self._with_token(details), request)


class _Details(grpc.ClientCallDetails):
    def __init__(self, d, metadata):
        self.method, self.timeout, self.credentials = d.method, d.timeout, d.credentials
        self.wait_for_ready, self.compression = getattr(d, "wait_for_ready", None), getattr(d, "compression", None)
        self.metadata = metadata


def traceparent(trace_id=None, span_id=None):
    """A W3C traceparent (version 00, sampled) for trace_id (32 hex
    digits) and span_id (16 hex digits), new random ones when not given."""
    trace_id = trace_id or os.urandom(16).hex()
    span_id = span_id or os.urandom(8).hex()
    return f"00-{trace_id}-{span_id}-01"


def verify(assignment, release):
    """Check a downloaded release (pawl.v1.Release) against its assignment
    (pawl.v1.Assignment), as the Go SDK does: it is the release assigned,
    its content hashes to the assigned content digest, it names that digest
    and the assigned validator. Returns the digest computed from the
    content; raises DigestMismatch."""
    spec = release.spec
    try:
        computed = canonical.digest(spec.media_type, spec.content)
    except canonical.InvalidJSON as e:
        raise DigestMismatch(f"content digest mismatch: the content cannot be canonicalized: {e}") from e
    if spec.config_id != assignment.config_id or release.generation != assignment.generation:
        raise DigestMismatch(
            f"the server sent {spec.config_id} generation {release.generation} for an assignment of "
            f"{assignment.config_id} generation {assignment.generation}"
        )
    if computed != assignment.content_digest:
        raise DigestMismatch(
            f"content digest mismatch: the content hashes to {computed}, the assignment names {assignment.content_digest}"
        )
    if release.content_digest != assignment.content_digest:
        raise DigestMismatch(
            f"content digest mismatch: the release names {release.content_digest}, the assignment {assignment.content_digest}"
        )
    if spec.validator_digest != assignment.validator_digest:
        raise DigestMismatch(
            f"wrong validator: the release names {spec.validator_digest}, the assignment {assignment.validator_digest}"
        )
    return computed


def _clean_reason(reason):
    b = reason.encode("utf-8")
    if len(b) <= MAX_REASON_BYTES:
        return reason
    return b[:MAX_REASON_BYTES].decode("utf-8", errors="ignore")


class Client:
    """One instance of an application, following its assignments.

    channel is a grpc.Channel (see channel()). apply, when given, is
    called with an Applied before APPLIED is reported; an exception
    rejects the release (REJECT_CODE_APPLY_FAILED). health_check, when
    given, is called with the Applied at the end of the health window; an
    exception makes the HEALTHY_ACKED unhealthy, with its message as the
    reason."""

    def __init__(
        self,
        channel,
        *,
        workload_identity,
        zone="",
        role="",
        app_version="",
        traffic_weight=0.0,
        labels=None,
        app_artifact="",
        boot_id=None,
        apply=None,
        health_check=None,
        download_attempts=3,
        backoff=(0.05, 2.0),
        rpc_timeout=10.0,
    ):
        self.instance = instance_pb2.Instance(
            workload_identity=workload_identity,
            boot_id=boot_id or str(uuid.uuid4()),
            zone=zone,
            role=role,
            traffic_weight=traffic_weight,
            app_version=app_version,
            labels=labels or {},
        )
        self.app_artifact = app_artifact
        self._apply_fn, self._health_check = apply, health_check
        self.download_attempts = max(1, download_attempts)
        self._backoff = backoff
        self._timeout = rpc_timeout
        self.instances = instance_pb2_grpc.InstanceServiceStub(channel)
        self.releases = release_pb2_grpc.ReleaseServiceStub(channel)
        self.rollouts = rollout_pb2_grpc.RolloutServiceStub(channel)
        self.epoch = 0
        self._seq = 0
        self._stop = threading.Event()
        self._stream = None
        self._cond = threading.Condition()
        self._applied = {}  # config ID -> Applied
        self._ran = {}  # config ID -> (assignment, apply sequence, digest)
        self._thread = None

    @property
    def boot_id(self):
        """The boot ID this client registers with."""
        return self.instance.boot_id

    def register(self):
        """Register the instance with this boot; returns the membership
        epoch the server returned."""
        resp = self.instances.Register(instance_pb2.RegisterRequest(instance=self.instance), timeout=self._timeout)
        epoch = resp.record.membership_epoch
        if epoch <= 0:
            raise RuntimeError(f"register {self.instance.workload_identity}: the server returned no membership epoch")
        self.epoch = epoch
        return epoch

    def start(self):
        """Follow the assignments in a background thread until close."""
        self._thread = threading.Thread(target=self.follow, name="pawl-follow", daemon=True)
        self._thread.start()

    def close(self):
        """Stop following and wait for the background thread."""
        self._stop.set()
        stream = self._stream
        if stream is not None:
            stream.cancel()
        with self._cond:
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join()

    def applied(self, config_id):
        """The release of config_id this client applied last, or None."""
        with self._cond:
            return self._applied.get(config_id)

    def wait_for(self, config_id, predicate, timeout):
        """Wait until the applied release of config_id satisfies
        predicate; returns it, or None after timeout seconds."""
        with self._cond:
            ok = self._cond.wait_for(
                lambda: self._stop.is_set()
                or (self._applied.get(config_id) is not None and predicate(self._applied[config_id])),
                timeout,
            )
            return self._applied.get(config_id) if ok and not self._stop.is_set() else None

    def follow(self):
        """Register and follow the assignment stream until close, resuming
        after the last revision seen with backoff after a failure."""
        after = 0
        assigned = {}  # config ID -> [Assignment]
        completed = set()
        highest = {}  # config ID -> highest epoch seen
        delay = self._backoff[0]
        while not self._stop.is_set():
            try:
                if self.epoch == 0:
                    self.register()
                stream = self.instances.WatchAssignments(
                    instance_pb2.WatchAssignmentsRequest(
                        workload_identity=self.instance.workload_identity,
                        boot_id=self.boot_id,
                        deltas=True,
                        after_revision=after,
                    )
                )
                self._stream = stream
                if self._stop.is_set():
                    stream.cancel()
                for msg in stream:
                    delay = self._backoff[0]
                    if msg.revision < after:
                        continue  # never go back to an older set
                    changed = set()
                    if msg.full:
                        changed.update(assigned)
                        assigned.clear()
                    for cid in msg.removed_config_ids:
                        assigned.pop(cid, None)
                        changed.add(cid)
                    delta = {}
                    for a in msg.assignments:
                        delta.setdefault(a.config_id, []).append(a)
                    assigned.update(delta)
                    changed.update(delta)
                    after = msg.revision
                    for cid in sorted(changed):
                        run = next((a for a in assigned.get(cid, []) if not a.shadow), None)
                        if run is None:
                            continue
                        if run.epoch < highest.get(cid, 0):
                            log.warning("pawl: ignoring an assignment of a lower epoch: %s@%d", cid, run.generation)
                            continue
                        highest[cid] = run.epoch
                        key = (run.config_id, run.generation, run.content_digest, run.validator_digest)
                        if key in completed:
                            continue
                        if self._apply(run):
                            completed.add(key)
                        if self._stop.is_set():
                            return
                if self._stop.is_set():
                    return
                log.warning("pawl: the server ended the assignment stream; reconnecting")
            except grpc.RpcError as e:
                if self._stop.is_set():
                    return
                code = e.code() if hasattr(e, "code") else None
                if code in (grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.NOT_FOUND):
                    self.epoch = 0  # register again, with a new membership epoch
                elif code == grpc.StatusCode.INVALID_ARGUMENT:
                    after = 0  # a revision beyond the server's: start over with a full set
                log.warning("pawl: the assignment stream (after revision %d) failed: %s", after, e)
            finally:
                self._stream = None
            self._stop.wait(delay)
            delay = min(delay * 2, self._backoff[1])

    def _apply(self, a):
        """Take one assignment through download, verify, stage, apply and
        its health window, with an ACK after each step. Returns whether it
        was completed (applied and reported, or rejected)."""
        self._seq += 1
        trace_id = os.urandom(16).hex()
        rep = _Reporter(self, a, self._seq, trace_id)
        rep.send(State.INSTANCE_STATE_DISCOVERED)
        release, digest, err = None, None, None
        for attempt in range(1, self.download_attempts + 1):
            try:
                release = self._download(a)
            except _Closed:
                return False
            except grpc.RpcError as e:
                return rep.reject(f"download {a.config_id} generation {a.generation}: {e.details()}",
                                  rollout_pb2.REJECT_CODE_DOWNLOAD_FAILED)
            if attempt == 1:
                rep.send(State.INSTANCE_STATE_DOWNLOADED)
            try:
                digest = verify(a, release)
                err = None
                break
            except DigestMismatch as e:
                err = e
                log.warning("pawl: a download of %s@%d does not match its assignment (attempt %d of %d): %s",
                            a.config_id, a.generation, attempt, self.download_attempts, e)
                if self._stop.wait(self._backoff[0] * attempt):
                    return False
        if err is not None:
            return rep.reject(f"{err} ({self.download_attempts} downloads, none matched)",
                              rollout_pb2.REJECT_CODE_DIGEST_MISMATCH)
        rep.digest = digest
        spec = release.spec
        snap = Applied(
            config_id=a.config_id, generation=a.generation, epoch=a.epoch, stage=a.stage, content_digest=digest,
            validator_digest=spec.validator_digest, media_type=spec.media_type, content=bytes(spec.content),
        )
        rep.send(State.INSTANCE_STATE_STAGED)
        if self._apply_fn is not None:
            try:
                self._apply_fn(snap)
            except Exception as e:  # the application's own failure
                return rep.reject(f"the application's apply function failed: {e}", rollout_pb2.REJECT_CODE_APPLY_FAILED)
        applied_at = time.monotonic()
        with self._cond:
            self._applied[a.config_id] = snap
            self._cond.notify_all()
        rep.send(State.INSTANCE_STATE_APPLIED)
        self._moved_past(a, rep.seq, digest, trace_id)
        window = spec.health_window.ToTimedelta().total_seconds()
        if self._stop.wait(window):
            return False
        health_ok, reason = True, ""
        if self._health_check is not None:
            try:
                self._health_check(snap)
            except Exception as e:
                health_ok, reason = False, f"health check failed: {e}"
        rep.healthy(health_ok, reason, applied_at)
        return True

    def _download(self, a):
        """GetRelease of the assignment (without the membership, naming
        the instance), retrying UNAVAILABLE and DEADLINE_EXCEEDED with
        backoff until the client closes; another failure is raised."""
        delay = self._backoff[0]
        while True:
            try:
                return self.releases.GetRelease(
                    release_pb2.GetReleaseRequest(
                        config_id=a.config_id,
                        generation=a.generation,
                        omit_membership=True,
                        workload_identity=self.instance.workload_identity,
                    ),
                    timeout=self._timeout,
                ).release
            except grpc.RpcError as e:
                if e.code() not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                    raise
                log.warning("pawl: downloading %s@%d failed; trying again: %s", a.config_id, a.generation, e.details())
            if self._stop.wait(delay):
                raise _Closed()
            delay = min(delay * 2, self._backoff[1])

    def _moved_past(self, a, seq, digest, trace_id):
        """Report STALE for the config's previous apply of this boot when
        it was of another generation, as the Go SDK does once APPLIED of
        the new one was taken."""
        prev = self._ran.get(a.config_id)
        self._ran[a.config_id] = (a, seq, digest)
        if prev is None or prev[0].generation == a.generation:
            return
        stale = _Reporter(self, prev[0], prev[1], trace_id)
        stale.digest = prev[2]
        stale.send(State.INSTANCE_STATE_STALE,
                   reason=f"the assignment moved past generation {prev[0].generation}: generation {a.generation} is applied")


class _Closed(grpc.RpcError):
    """The client closed while an ACK waited to be sent again."""

    def details(self):
        return "the client closed"


class _Reporter:
    """The ACKs of one apply (one assignment, one apply sequence, one
    boot), each with a span ID of the apply's trace."""

    def __init__(self, client, assignment, seq, trace_id):
        self.c, self.a, self.seq, self.trace_id = client, assignment, seq, trace_id
        self.digest = assignment.content_digest

    def ack(self, state, *, health_ok=False, reason="", held=None, reject_code=0):
        ack = rollout_pb2.Ack(
            config_id=self.a.config_id,
            generation=self.a.generation,
            workload_identity=self.c.instance.workload_identity,
            boot_id=self.c.boot_id,
            membership_epoch=self.c.epoch,
            content_digest=self.digest,
            validator_digest=self.a.validator_digest,
            app_artifact=self.c.app_artifact,
            app_version=self.c.instance.app_version,
            apply_sequence=self.seq,
            state=state,
            health_ok=health_ok,
            reason=_clean_reason(reason),
            traceparent=traceparent(self.trace_id),
            reject_code=reject_code,
        )
        if held is not None:
            ack.held.CopyFrom(duration_pb2.Duration(seconds=int(held), nanos=int((held % 1) * 1e9)))
        return ack

    def send(self, state, **kw):
        """Send one ACK, retrying UNAVAILABLE with backoff until the
        client closes. Returns the ACK as the server judged it, or None
        when the server refused it (logged, as the Go SDK does) or the
        client closed."""
        ack = self.ack(state, **kw)
        try:
            return self._send(ack)
        except grpc.RpcError as e:
            if not self.c._stop.is_set():
                log.warning("pawl: an ACK was refused: %s@%d %s: %s", ack.config_id, ack.generation,
                            State.Name(state), e.details())
            return None

    def _send(self, ack):
        delay = self.c._backoff[0]
        while True:
            try:
                return self.c.rollouts.Ack(rollout_pb2.AckRequest(ack=ack), timeout=self.c._timeout).ack
            except grpc.RpcError as e:
                if e.code() not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED) or self.c._stop.is_set():
                    raise
            if self.c._stop.wait(delay):
                raise _Closed()
            delay = min(delay * 2, self.c._backoff[1])

    def reject(self, reason, code):
        log.warning("pawl: release %s@%d rejected: %s", self.a.config_id, self.a.generation, reason)
        self.send(State.INSTANCE_STATE_REJECTED, reason=reason, reject_code=code)
        return True

    def healthy(self, health_ok, reason, applied_at):
        """Report HEALTHY_ACKED with the time held since APPLIED, again
        (held longer) while the server says its health window has not
        passed by its measure."""
        for _ in range(MAX_EARLY_RESENDS + 1):
            held = time.monotonic() - applied_at
            judged = self.send(State.INSTANCE_STATE_HEALTHY_ACKED, health_ok=health_ok, reason=reason, held=held)
            if judged is None:
                return None
            too_early = health_ok and not judged.counted and judged.not_counted_reason.startswith("health window:")
            if not too_early:
                return judged
            if self.c._stop.wait(min(max(held / 4, 0.1), 5.0)):
                return judged
        return judged
