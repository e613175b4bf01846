"""Every lease_fence error survives pickle as itself: a job system's result
backend (Celery) and multiprocessing carry exceptions between processes, and
one that came back as a wrapper (Celery's UnpickleableExceptionWrapper) could
no longer be caught by its class."""

import pickle

import pytest

import lease_fence
from lease_fence import Lease

LEASE = Lease(False, "busy", "r", "0" * 32, 7, None, "why")


@pytest.mark.parametrize("err", [
    lease_fence.LeaseBusy("busy", LEASE, "acquire of lease 'r': busy"),
    lease_fence.LeaseUnavailable("unavailable", None, "acquire of lease 'r': unavailable",
                                 "could not connect"),
    lease_fence.LeaseUnknown("unknown", LEASE, "acquire of lease 'r': unknown", "timed out"),
    lease_fence.LeaseLost("lost", LEASE, "renew of lease 'r': lost"),
    lease_fence.LeaseDenied("stale", LEASE, "acquire of lease 'r': stale"),
    lease_fence.StaleGeneration("stale generation: resource fence rejected", "stored 9",
                                schema="lease_fence", table="resource_generation",
                                resource="r"),
    lease_fence.LeaseLostAtCommit("lease lost", None),
    lease_fence.DataCorrupted("r", "holds 'x'"),
    lease_fence.TransactionRolledBack(),
], ids=lambda e: type(e).__name__)
def test_error_pickles_as_itself(err):
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is type(err)
    assert str(back) == str(err)
    assert back.__dict__ == err.__dict__
