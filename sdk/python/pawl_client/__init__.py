"""A thin Python client of Pawl over the stubs buf generates from proto/.

The generated modules (``pawl.v1.*_pb2``, ``*_pb2_grpc``) live in the
repository's gen/python. Importing this package makes them importable:
when ``pawl.v1`` cannot be imported already, it adds the directory named
by the PAWL_GEN_PYTHON environment variable or, without it, the
repository's gen/python (found relative to this file) to sys.path.

canonical computes the content digest exactly as the Go SDK does;
client registers an instance, follows its assignments, verifies each
release's content digest and ACKs with a W3C traceparent.
"""

import importlib.util
import os
import sys


def _gen_path():
    return os.environ.get("PAWL_GEN_PYTHON") or os.path.normpath(
        os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "gen", "python")
    )


try:
    _found = importlib.util.find_spec("pawl.v1") is not None
except ImportError:
    _found = False
if not _found:
    sys.path.insert(0, _gen_path())

from . import canonical  # noqa: E402
from .client import Applied, Client, DigestMismatch, channel, traceparent, verify  # noqa: E402

__all__ = ["Applied", "Client", "DigestMismatch", "canonical", "channel", "traceparent", "verify"]
