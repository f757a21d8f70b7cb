"""webhook's router as a question about a request's head alone: which hook a path goes to, whether a hook
takes a method, and whether webhook answers the request only once its whole body has come.

That last one lets the gevent worker keep a slow body's connection without a greenlet until the body is
there (greenreads.DormantConnection): thousands of slow bodies then cost the loop no dispatch each, and
nothing a client sees changes, since Go writes no answer before those bodies either."""

from __future__ import annotations

from collections.abc import Callable

from hookrunner.config import Config
from hookrunner.hooks.model import Hook
from hookrunner.serve.answers import clean_path
from hookrunner.serve.context import Registry
from hookrunner.serve.protocol import GO_DISCARD_LIMIT


def routed_hook(path: str, base: str, metrics: bool, registry: Registry) -> str | None:
    """The hook id that a clean `path` is routed to (`base`: "/" and -urlprefix, or ""), or None when the
    router sends it elsewhere: `/`, `/metrics` with -metrics, `/healthz` (unless, with no prefix, a hook
    of that name is loaded), or a path outside the prefix."""
    if path == "/":
        return None
    if path == "/metrics" and metrics:
        return None
    if path == "/healthz" and not (base == "" and registry.match("healthz") is not None):
        return None
    if path.startswith(base + "/"):
        return path[len(base) + 1 :]
    return None


def method_allowed(hook: Hook, method: str, allowed_methods: tuple[str, ...]) -> bool:
    """webhook's method check: the hook's own http-methods, else -http-methods, else any method."""
    if hook.http_methods:
        return any(method == m.strip().upper() for m in hook.http_methods)
    if allowed_methods:
        return method in allowed_methods
    return True


def body_first(config: Config, registry: Registry) -> Callable[[bytes, bytes, int], bool]:
    """Whether webhook writes its answer to a request only once the body has come, told from the head: a
    body under GO_DISCARD_LIMIT on any route (net/http reads it first), or any body of a loaded hook that
    takes the method (webhook's handler reads the whole body before it decides anything). Not a body over
    -max-body-size (answered 413 at once). `target` is an origin-form target without `%` escapes."""
    base, max_body = config.hooks_base, config.body_limit
    allowed = config.allowed_methods

    def answers_after(method: bytes, target: bytes, length: int) -> bool:
        if max_body is not None and length > max_body:
            return False
        if length < GO_DISCARD_LIMIT:
            return True
        path = target.split(b"?", 1)[0].decode("latin-1")
        if clean_path(path) != path:
            return False  # a redirect
        hook_id = routed_hook(path, base, config.metrics, registry)
        hook = None if hook_id is None else registry.match(hook_id)
        return hook is not None and method_allowed(hook, method.decode("latin-1"), allowed)

    return answers_after
