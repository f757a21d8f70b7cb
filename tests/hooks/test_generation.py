"""Hooks generations (issue 32 step 9): the counter every process of the tree shares, a generation as it
crosses from the run owner to a worker, and the worker's side that applies it and catches up with it."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from hookrunner.errors import HooksNotCurrent
from hookrunner.hooks.generation import Follower, SharedGeneration, pack, unpack
from hookrunner.hooks.load import HookRegistry
from hookrunner.run.spawn import Waits


def write(path: Path, ids: list[str], answer: str = "") -> str:
    path.write_text(
        "".join(f"- id: {i}\n  execute-command: /bin/true\n  response-message: '{answer}'\n" for i in ids)
    )
    return str(path)


def test_the_counter_is_shared_with_a_process_forked_after_it_was_made() -> None:
    shared = SharedGeneration()
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child sets it; the parent, which made it, must see the value
        os.close(reader)
        shared.set(2**40 + 7)
        os.write(writer, b"x")
        os._exit(0)
    os.close(writer)
    assert os.read(reader, 1) == b"x"
    os.close(reader)
    os.waitpid(pid, 0)
    assert shared.value == 2**40 + 7


def test_pack_and_unpack_keep_every_text_and_the_order() -> None:
    files = [("/b.json", None), ("/a.yaml", "- id: é\n"), ("/odd", "bytes \udcff kept"), ("/empty", "")]
    fields, data = pack(files)
    assert unpack(fields, data) == files


@pytest.mark.parametrize(
    ("fields", "data"),
    [
        ({}, b""),
        ({"files": [["/a", 5]]}, b"abc"),  # longer than the bytes
        ({"files": [["/a", 1]]}, b"abc"),  # bytes left over
        ({"files": [["/a", -1]]}, b""),
        ({"files": [[1, None]]}, b""),
        ({"files": [["/a", True]]}, b"x"),
    ],
)
def test_unpack_refuses_what_does_not_add_up(fields: dict[str, Any], data: bytes) -> None:
    with pytest.raises(ValueError):
        unpack(fields, data)


def follower_of(tmp_path: Path) -> tuple[HookRegistry, SharedGeneration, Follower, str, str]:
    a = write(tmp_path / "a.yaml", ["one"], "start")
    b = write(tmp_path / "b.yaml", ["two"])
    registry = HookRegistry([a, b])
    registry.load_initial()
    shared = SharedGeneration()
    return registry, shared, Follower(registry, shared, Waits()), a, b


def test_a_generation_is_served_whole_with_the_start_up_hooks_where_it_says_so(tmp_path: Path) -> None:
    registry, _, follower, a, b = follower_of(tmp_path)
    two = registry.match("two")
    follower.apply(1, [(a, "- id: one\n  execute-command: /bin/true\n  response-message: new\n"), (b, None)])
    assert registry.generation == 1
    hook = registry.match("one")
    assert hook is not None and hook.response_message == "new"
    assert registry.match("two") is two  # b.yaml's hooks as the tree read them at its start
    # A generation without a file drops its hooks; an older one is ignored.
    follower.apply(2, [(a, "- id: three\n  execute-command: /bin/true\n")])
    assert (registry.match("one"), registry.match("two")) == (None, None)
    assert registry.match("three") is not None
    follower.apply(1, [(b, None)])
    assert registry.generation == 2 and registry.match("three") is not None


def test_a_text_that_did_not_change_is_not_parsed_again(tmp_path: Path) -> None:
    registry, _, follower, a, b = follower_of(tmp_path)
    text = "- id: one\n  execute-command: /bin/true\n"
    follower.apply(1, [(a, text), (b, None)])
    first = registry.match("one")
    follower.apply(2, [(a, text), (b, "- id: four\n  execute-command: /bin/true\n")])
    assert registry.match("one") is first
    assert registry.match("four") is not None


def test_a_request_waits_for_the_published_generation_and_gives_up_in_time(tmp_path: Path) -> None:
    registry, shared, follower, a, b = follower_of(tmp_path)
    registry.latest = follower.catch_up
    assert registry.match_latest("one") is not None  # generation 0 everywhere: nothing to wait for
    shared.set(1)
    applier = threading.Timer(0.2, follower.apply, (1, [(b, None)]))  # the reader, a little later
    applier.start()
    began = time.monotonic()
    assert registry.match_latest("one") is None  # matched against generation 1 only: a.yaml is gone
    assert time.monotonic() - began >= 0.15
    applier.join()
    shared.set(2)
    follower.catch_up_wait = 0.1
    with pytest.raises(HooksNotCurrent):
        registry.match_latest("two")
