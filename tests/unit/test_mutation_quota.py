"""KIP-599's controller mutation quota, on a fake clock."""

from __future__ import annotations

from coordinator.dataplane.mutation_quota import BURST_SECONDS, MutationQuota


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_no_quota_by_default() -> None:
    quota = MutationQuota(-1)
    quota.record("c", 1_000_000)
    assert quota.throttle_ms("c") == 0


def test_a_request_finding_tokens_goes_through_whole_and_the_next_waits() -> None:
    clock = Clock()
    quota = MutationQuota(2, clock)
    assert quota.throttle_ms("c") == 0
    quota.record("c", 2 * BURST_SECONDS + 10)  # more than the burst: accepted, bucket at -10
    assert quota.throttle_ms("c") == 5001  # 10 tokens at 2 a second
    clock.now += 5.001
    assert quota.throttle_ms("c") == 0


def test_client_ids_have_their_own_buckets() -> None:
    quota = MutationQuota(1, Clock())
    quota.record("greedy", 100)
    assert quota.throttle_ms("greedy") > 0
    assert quota.throttle_ms("other") == 0


def test_full_buckets_are_forgotten_when_many_clients_came() -> None:
    clock = Clock()
    quota = MutationQuota(1, clock)
    for i in range(10_000):
        quota.record(f"c{i}", 1)
    clock.now += 100  # every bucket full again
    quota.record("late", 1)
    assert len(quota._buckets) == 1

