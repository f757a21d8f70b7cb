"""Per-client token buckets (-rate-limit-*): the burst, the refill, the wait told to a refused client,
clients kept apart, the memory bound, and the 429 answer itself."""

from __future__ import annotations

import pytest
from fakeclock import Clock

from hookrunner.serve.ratelimit import TokenBuckets, retry_after, too_fast


def test_a_client_gets_its_burst_then_waits_for_the_refill() -> None:
    clock = Clock()
    buckets = TokenBuckets(2, 3, clock)  # 2 a second, 3 at once
    assert [buckets.take("a") for _ in range(3)] == [0, 0, 0]
    assert buckets.take("a") == pytest.approx(0.5)  # one token comes in half a second
    clock.now += 0.25
    assert buckets.take("a") == pytest.approx(0.25)  # a refused request takes nothing
    clock.now += 0.25
    assert buckets.take("a") == 0
    assert buckets.take("a") == pytest.approx(0.5)


def test_the_bucket_never_holds_more_than_the_burst() -> None:
    clock = Clock()
    buckets = TokenBuckets(10, 2, clock)
    buckets.take("a")
    clock.now += 3600  # an hour idle: 2 tokens, not 36,000
    assert [buckets.take("a") for _ in range(3)] == [0, 0, pytest.approx(0.1)]


def test_clients_have_buckets_of_their_own() -> None:
    clock = Clock()
    buckets = TokenBuckets(1, 1, clock)
    assert buckets.take("127.0.0.1") == 0
    assert buckets.take("127.0.0.1") > 0
    assert buckets.take("127.0.0.2") == 0


def test_the_least_recently_used_buckets_are_forgotten_past_the_bound() -> None:
    clock = Clock()
    buckets = TokenBuckets(1, 1, clock, max_clients=3)
    for client in ("a", "b", "c"):
        buckets.take(client)
    buckets.take("a")  # a used again: b is now the least recent
    buckets.take("d")
    assert len(buckets) == 3
    assert buckets.take("a") > 0 and buckets.take("c") > 0  # kept, still empty
    assert buckets.take("b") == 0  # forgotten: a full bucket again


@pytest.mark.parametrize(("rate", "burst"), [(0, 1), (1, 0), (-1, 5)])
def test_rate_and_burst_must_be_positive(rate: float, burst: int) -> None:
    with pytest.raises(ValueError):
        TokenBuckets(rate, burst)


@pytest.mark.parametrize(("wait", "text"), [(0.001, "1"), (0.5, "1"), (1.0, "1"), (1.01, "2"), (9.5, "10")])
def test_retry_after_is_whole_seconds_rounded_up(wait: float, text: str) -> None:
    assert retry_after(wait) == text


def test_too_fast_answers_429_with_retry_after_in_http_error_form() -> None:
    clock = Clock()
    buckets = TokenBuckets(1, 1, clock)
    seen: list[int] = []

    def client() -> tuple[str, str]:
        seen.append(1)
        return "127.0.0.1", "5555"

    assert too_fast(None, client, {}) is None
    assert seen == []  # without limits the client is not even looked up
    assert too_fast(buckets, client, {"X-Global": "1"}) is None
    refusal = too_fast(buckets, client, {"X-Global": "1"})
    assert refusal is not None
    assert refusal.status_code == 429
    assert refusal.get_data() == b"Rate limit exceeded\n"
    assert refusal.headers["Retry-After"] == "1"
    assert refusal.headers["Content-Type"] == "text/plain; charset=utf-8"
    assert refusal.headers["X-Content-Type-Options"] == "nosniff"
    assert refusal.headers["X-Global"] == "1"  # -header values, as on every answer
