from __future__ import annotations

import random
import sys

from coordinator.group.result import TimerKey
from coordinator.group.timer import TimerWheel


def test_fires_at_deadline_not_before() -> None:
    wheel = TimerWheel(tick_ms=10, wheel_size=8)
    wheel.schedule(("a",), 25)
    assert wheel.poll(24) == []
    assert wheel.poll(25) == [("a",)]
    assert len(wheel) == 0


def test_reschedule_replaces_by_key() -> None:
    wheel = TimerWheel(tick_ms=10, wheel_size=8)
    wheel.schedule(("a",), 20)
    wheel.schedule(("a",), 500)
    assert wheel.poll(100) == []
    assert wheel.deadline(("a",)) == 500
    assert wheel.poll(500) == [("a",)]


def test_cancel() -> None:
    wheel = TimerWheel(tick_ms=10, wheel_size=8)
    wheel.schedule(("a",), 20)
    wheel.cancel(("a",))
    wheel.cancel(("missing",))
    assert wheel.poll(1_000) == []
    assert wheel.next_deadline() is None


def test_far_deadline_survives_many_revolutions() -> None:
    wheel = TimerWheel(tick_ms=10, wheel_size=4)  # one revolution = 40 ms
    wheel.schedule(("far",), 1_800_000)
    for now in range(0, 1_800_000, 997):
        assert wheel.poll(now) == []
    assert wheel.poll(1_800_000) == [("far",)]


def test_due_keys_come_back_in_deadline_order() -> None:
    wheel = TimerWheel(tick_ms=10, wheel_size=4)
    wheel.schedule(("c",), 300)
    wheel.schedule(("a",), 5)
    wheel.schedule(("b",), 77)
    assert wheel.poll(10_000) == [("a",), ("b",), ("c",)]


def test_past_deadline_fires_on_next_poll() -> None:
    wheel = TimerWheel(tick_ms=10, wheel_size=4)
    wheel.poll(1_000)
    wheel.schedule(("late",), 3)
    assert wheel.next_deadline() == 3
    assert wheel.poll(1_000) == [("late",)]


def test_next_deadline_is_exact_within_a_revolution_and_never_late() -> None:
    wheel = TimerWheel(tick_ms=10, wheel_size=8)
    assert wheel.next_deadline() is None
    wheel.schedule(("a",), 57)
    assert wheel.next_deadline() == 57
    wheel.schedule(("b",), 5_000)
    assert wheel.next_deadline() == 57
    wheel.cancel(("a",))
    nxt = wheel.next_deadline()
    assert nxt is not None and nxt <= 5_000


def test_start_ms_offsets_the_cursor() -> None:
    wheel = TimerWheel(tick_ms=5, wheel_size=16, start_ms=1_700_000_000_000)
    wheel.schedule(("k",), 1_700_000_000_010)
    assert wheel.poll(1_700_000_000_009) == []
    assert wheel.poll(1_700_000_000_010) == [("k",)]


def test_random_schedule_matches_a_model() -> None:
    rng = random.Random(7)
    wheel = TimerWheel(tick_ms=7, wheel_size=5)
    model: dict[TimerKey, int] = {}
    now = 0
    for _ in range(3_000):
        op = rng.random()
        key = (rng.randrange(40),)
        if op < 0.5:
            deadline = now + rng.randrange(-20, 400)
            wheel.schedule(key, deadline)
            model[key] = deadline
        elif op < 0.6:
            wheel.cancel(key)
            model.pop(key, None)
        else:
            nxt = wheel.next_deadline()
            if model:
                assert nxt is not None and nxt <= max(min(model.values()), now)
            now += rng.randrange(0, 60)
            fired = wheel.poll(now)
            expected = sorted((d, k) for k, d in model.items() if d <= now)
            assert sorted(fired) == sorted(k for _, k in expected)
            for k in fired:
                assert model.pop(k) <= now


def test_keys_due_at_the_same_time_fire_in_the_order_they_were_armed() -> None:
    wheel = TimerWheel(tick_ms=10, wheel_size=8, start_ms=-50)
    for name in ("c", "a", "b"):
        wheel.schedule((name,), 35)
    wheel.schedule(("a",), 35)  # re-armed: now the last
    wheel.schedule(("early",), -40)  # negative deadlines keep their bucket and order too
    assert wheel.deadline(("early",)) == -40
    assert wheel.poll(100) == [("early",), ("c",), ("b",), ("a",)]
    assert len(wheel) == 0


def test_a_storm_s_tables_are_fitted_once_half_its_keys_are_gone() -> None:
    """A join storm arms a key per member at once; once most have fired, the wheel's dicts are
    made anew at their present size (a dict keeps its largest table), and the wheel goes on
    firing the keys left, in order."""
    wheel = TimerWheel(tick_ms=10, wheel_size=16)
    for member in range(6_000):
        wheel.schedule(("join", member), 100 + member % 50)
    for member in range(1_000):
        wheel.schedule(("heartbeat", member), 50_000 + member)
    storm_bytes = sys.getsizeof(wheel._entries) + sum(map(sys.getsizeof, wheel._buckets))
    fired = wheel.poll(200)
    assert len(fired) == 6_000 and len(wheel) == 1_000
    fitted_bytes = sys.getsizeof(wheel._entries) + sum(map(sys.getsizeof, wheel._buckets))
    assert fitted_bytes * 4 < storm_bytes
    assert wheel.deadline(("heartbeat", 7)) == 50_007
    wheel.schedule(("heartbeat", 7), 60_000)
    wheel.cancel(("heartbeat", 8))
    assert wheel.poll(51_000) == [("heartbeat", m) for m in range(1_000) if m not in (7, 8)]
    assert wheel.poll(60_000) == [("heartbeat", 7)]
