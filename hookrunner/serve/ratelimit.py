"""Per-client rate limits (-rate-limit-enabled, -rate-limit-rps, -rate-limit-burst, soulteary/webhook's
flags): a token bucket per client address; a request that finds its client's bucket empty is answered
`429` with `Retry-After` (docs/limits.md, "Rate limits")."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable

from hookrunner.serve.answers import TEXT_PLAIN, Answer, answer

#: Buckets kept at most; past this the least recently used ones are forgotten. A forgotten client starts
#: again with a full bucket, as one idle long enough would: its burst at most, once.
MAX_CLIENTS = 100_000


class TokenBuckets:
    """A bucket of `burst` tokens per client, refilled at `rate` tokens a second; each request takes one.
    Thread-safe: the gthread worker asks from its threads."""

    def __init__(self, rate: float, burst: int, clock: Callable[[], float] = time.monotonic,
                 max_clients: int = MAX_CLIENTS) -> None:
        if rate <= 0 or burst <= 0:
            raise ValueError("rate and burst must be positive")
        self._rate, self._burst, self._clock, self._max = rate, float(burst), clock, max_clients
        #: client -> (tokens, when they were counted), least recently used first.
        self._buckets: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._buckets)

    def take(self, client: str) -> float:
        """0 when `client` may go (a token is taken); otherwise how many seconds until it may."""
        with self._lock:
            now = self._clock()
            tokens, then = self._buckets.pop(client, (self._burst, now))
            tokens = min(self._burst, tokens + (now - then) * self._rate)
            wait = 0.0
            if tokens >= 1:
                tokens -= 1
            else:
                wait = (1 - tokens) / self._rate
            self._buckets[client] = (tokens, now)  # to the end: the most recently used
            while len(self._buckets) > self._max:
                del self._buckets[next(iter(self._buckets))]
            return wait


def retry_after(wait: float) -> str:
    """`Retry-After`'s value for a wait in seconds: whole seconds (RFC 9110), rounded up, at least 1."""
    return str(max(1, math.ceil(wait)))


def too_fast(buckets: TokenBuckets | None, client: Callable[[], tuple[str, str]],
             headers: dict[str, str]) -> Answer | None:
    """With -rate-limit-enabled (`buckets`), the `429` for a request whose client's bucket is empty,
    in net/http's http.Error form as soulteary/webhook answers it, with `Retry-After`; else None."""
    if buckets is None:
        return None
    wait = buckets.take(client()[0])
    if not wait:
        return None
    refusal = {**headers, "Retry-After": retry_after(wait), "X-Content-Type-Options": "nosniff"}
    return answer(429, b"Rate limit exceeded\n", refusal, TEXT_PLAIN)
