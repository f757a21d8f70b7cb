"""webhook's routes told from a request's head: the hook a path goes to, the method check, and which
requests are answered only once their body has come (net/http's 256 KiB rule, a matched hook's read)."""

from __future__ import annotations

import dataclasses

import pytest

from hookrunner.config import Config
from hookrunner.hooks.model import Hook, decode_hook
from hookrunner.serve.routes import GO_DISCARD_LIMIT, body_first, method_allowed, routed_hook


class Registry:
    def __init__(self, *hooks: Hook) -> None:
        self.hooks = {h.id: h for h in hooks}

    def match(self, hook_id: str) -> Hook | None:
        return self.hooks.get(hook_id)


def hook(hook_id: str, **fields: object) -> Hook:
    return dataclasses.replace(decode_hook({"id": hook_id, "execute-command": "/bin/true"}), **fields)


@pytest.mark.parametrize(
    ("path", "base", "metrics", "loaded", "routed"),
    [
        ("/hooks/a", "/hooks", False, (), "a"),
        ("/hooks/", "/hooks", False, (), ""),
        ("/hooks/a/b/", "/hooks", False, (), "a/b/"),
        ("/", "", False, (), None),
        ("/other/a", "/hooks", False, (), None),
        ("/healthz", "/hooks", False, (), None),
        ("/healthz", "", False, (), None),
        ("/healthz", "", False, ("healthz",), "healthz"),  # a hook of that name keeps its path
        ("/metrics", "", True, (), None),
        ("/metrics", "", False, (), "metrics"),
        ("/a", "", False, (), "a"),
    ],
)
def test_routed_hook_is_webhooks_router(
    path: str, base: str, metrics: bool, loaded: tuple[str, ...], routed: str | None
) -> None:
    registry = Registry(*(hook(name) for name in loaded))
    assert routed_hook(path, base, metrics, registry) == routed


def test_method_allowed_takes_the_hooks_methods_then_the_flag() -> None:
    assert method_allowed(hook("a"), "BREW", ())
    assert not method_allowed(hook("a"), "GET", ("POST",))
    assert method_allowed(hook("a", http_methods=(" get ",)), "GET", ("POST",))
    assert not method_allowed(hook("a", http_methods=("get",)), "get", ())  # Go compares as sent


def test_body_first_holds_small_bodies_everywhere_and_big_ones_for_a_matched_hook() -> None:
    waits = body_first(Config(urlprefix="hooks", http_methods="POST"), Registry(hook("a")))
    big = GO_DISCARD_LIMIT
    assert waits(b"GET", b"/", big - 1)  # net/http reads it before answering
    assert waits(b"POST", b"/nowhere", 10)
    assert waits(b"POST", b"/hooks/a?x=1", big * 40)  # webhook reads a matched hook's whole body first
    assert not waits(b"POST", b"/hooks/b", big)  # 404 at once
    assert not waits(b"GET", b"/hooks/a", big)  # 405 at once
    assert not waits(b"POST", b"/hooks/./a", big)  # 301 at once
    assert not waits(b"POST", b"/", big)


def test_body_first_does_not_hold_a_body_over_max_body_size() -> None:
    waits = body_first(Config(urlprefix="hooks", max_body_size=100), Registry(hook("a")))
    assert waits(b"POST", b"/hooks/a", 100)
    assert not waits(b"POST", b"/hooks/a", 101)  # 413 at once
