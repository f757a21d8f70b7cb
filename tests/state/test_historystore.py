"""The run history's store: events put together in any order, filters and pages newest first, retention by
count and by age, kept across a restart in the journal's database file, and hooks with their last run."""

from __future__ import annotations

import base64
import os
import stat
import time
from pathlib import Path

import pytest

from hookrunner.state.historystore import HistoryStore


def run(store: HistoryStore, key: str, rid: str, hook: str = "h", outcome: str = "ok", **extra: object) -> None:
    store.apply({"event": "run", "key": key, "id": rid, "hook": hook, "accepted_at": time.time(), "outcome": "pending"})
    store.apply({"event": "run", "key": key, "outcome": outcome, **extra})


def test_events_in_any_order_make_one_record() -> None:
    store = HistoryStore()
    # The run's thread started and ended it before the request reported how it was admitted.
    store.apply({"event": "run", "key": "k", "outcome": "running", "started_at": 10.0, "argv": ["/bin/x", "a"]})
    store.apply({"event": "run", "key": "k", "outcome": "ok", "ended_at": 12.5, "exit_code": 0,
                 "output": base64.b64encode(b"out").decode(), "output_size": 3})
    store.apply({"event": "run", "key": "k", "id": "r", "hook": "h", "accepted_at": 9.0, "outcome": "pending"})
    store.apply({"event": "run", "key": "k", "kind": "queued"})
    record = store.run("r")
    assert record is not None
    assert (record["outcome"], record["kind"], record["duration"], bytes(record["output"])) == ("ok", "queued", 2.5, b"out")
    assert record["argv"] == ["/bin/x", "a"]


def test_malformed_events_are_ignored() -> None:
    store = HistoryStore()
    for event in ({}, {"event": "run"}, {"event": "run", "key": 5}, {"event": "hooks", "files": "x"}, {"event": "?"}):
        store.apply(event)
    assert store.count() == 0 and store.hooks() == []


def test_filters_and_pages_newest_first() -> None:
    store = HistoryStore()
    for n in range(7):
        run(store, f"k{n}", f"r{n}", hook="a" if n % 2 else "b", outcome="failed" if n == 3 else "ok")
    assert [r["id"] for r in store.runs()] == ["r6", "r5", "r4", "r3", "r2", "r1", "r0"]
    assert [r["id"] for r in store.runs(hook="a")] == ["r5", "r3", "r1"]
    assert [r["id"] for r in store.runs(outcome="failed")] == ["r3"]
    page = store.runs(limit=3)
    assert [r["id"] for r in page] == ["r6", "r5", "r4"]
    assert [r["id"] for r in store.runs(limit=3, before=page[-1]["seq"])] == ["r3", "r2", "r1"]
    assert "output" not in page[0] and "argv" not in page[0]


def test_one_run_is_the_newest_of_its_id() -> None:
    store = HistoryStore()
    run(store, "k1", "same", outcome="failed")
    run(store, "k2", "same", outcome="ok")
    assert store.run("same")["outcome"] == "ok"  # type: ignore[index]
    assert store.run("other") is None


def test_retention_by_count_keeps_runs_still_going() -> None:
    store = HistoryStore(keep=3)
    store.apply({"event": "run", "key": "going", "id": "going", "hook": "h", "outcome": "running"})
    for n in range(6):
        run(store, f"k{n}", f"r{n}")
    store.prune()
    assert [r["id"] for r in store.runs()] == ["r5", "r4", "r3", "going"]


def test_retention_by_age() -> None:
    store = HistoryStore(keep=100, max_age=60)
    store.apply({"event": "run", "key": "old", "id": "old", "hook": "h", "accepted_at": time.time() - 120, "outcome": "ok"})
    run(store, "new", "new")
    assert store.prune() == 1
    assert [r["id"] for r in store.runs()] == ["new"]


def test_retention_applies_as_events_come(monkeypatch: pytest.MonkeyPatch) -> None:
    store = HistoryStore(keep=5)
    for n in range(120):
        run(store, f"k{n}", f"r{n}")
    assert store.count() <= 5 + 1  # a -state-keep under ten is applied at every event


def test_kept_across_a_restart_in_the_journals_file(tmp_path: Path) -> None:
    state = tmp_path / "state"
    first = HistoryStore.for_state_dir(str(state), keep=10, max_age=0)
    run(first, "k1", "done")
    first.apply({"event": "run", "key": "k2", "id": "cut", "hook": "h", "outcome": "running"})
    first.close()
    path = state / "journal.sqlite3"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    second = HistoryStore.for_state_dir(str(state), keep=10, max_age=0)
    assert second.run("done")["outcome"] == "ok"  # type: ignore[index]
    cut = second.run("cut")
    assert cut is not None and cut["outcome"] == "cancelled" and "stopped" in cut["detail"]
    second.apply({"event": "replaying", "id": "cut", "hook": "h", "accepted_at": 1.0})
    assert second.run("cut")["outcome"] == "replayed"  # type: ignore[index]


def test_replaying_marks_a_dead_workers_record_not_the_replays_own() -> None:
    store = HistoryStore()
    store.apply({"event": "run", "key": "k1", "id": "r", "hook": "h", "outcome": "running", "pid": 100})
    store.apply({"event": "run", "key": "k2", "id": "r", "hook": "h", "outcome": "pending", "pid": 200})
    store.apply({"event": "replaying", "id": "r", "hook": "h", "accepted_at": 1.0, "pid": 200})
    assert [(r["outcome"]) for r in store.runs()] == ["pending", "replayed"]


def test_hooks_with_their_file_load_time_and_last_run() -> None:
    store = HistoryStore()
    store.apply({"event": "hooks", "pid": 1, "files": [{"file": "/h.json", "loaded_at": 5.0, "hooks": ["a", "b"]}]})
    run(store, "k1", "r1", hook="a", outcome="failed")
    run(store, "k2", "r2", hook="a", outcome="ok")
    hooks = {h["id"]: h for h in store.hooks()}
    assert set(hooks) == {"a", "b"}
    assert hooks["a"]["file"] == "/h.json" and hooks["a"]["loaded_at"] == 5.0
    assert hooks["a"]["last_run"]["id"] == "r2" and hooks["b"]["last_run"] is None
    # A reload reported later replaces the file's hooks.
    store.apply({"event": "hooks", "pid": 2, "files": [{"file": "/h.json", "loaded_at": 6.0, "hooks": ["b"]}]})
    assert [h["id"] for h in store.hooks()] == ["b"]


def test_a_workers_open_runs_end_with_it() -> None:
    store = HistoryStore()
    store.apply({"event": "run", "key": "a", "id": "a", "hook": "h", "outcome": "running", "pid": 10})
    store.apply({"event": "run", "key": "b", "id": "b", "hook": "h", "outcome": "ok", "pid": 10})
    store.apply({"event": "run", "key": "c", "id": "c", "hook": "h", "outcome": "running", "pid": 11})
    assert store.worker_gone(10) == 1
    assert {r["id"]: r["outcome"] for r in store.runs()} == {"a": "cancelled", "b": "ok", "c": "running"}
    assert store.run("a")["detail"] == "the process that ran it (10, the run owner) ended before it did"  # type: ignore[index]


def output(store: HistoryStore, key: str, offset: int, data: bytes, size: int | None = None) -> None:
    store.apply({"event": "output", "key": key, "offset": offset, "size": offset + len(data) if size is None else size,
                 "output": base64.b64encode(data).decode()})


def test_a_running_runs_output_grows_up_to_the_limit() -> None:
    store = HistoryStore(output_limit=8)
    run(store, "k", "r", outcome="running")
    output(store, "k", 0, b"abc")
    record = store.run("r")
    assert record is not None
    assert (bytes(record["output"]), record["output_size"], record["output_truncated"]) == (b"abc", 3, False)
    output(store, "k", 3, b"defghij")
    output(store, "k", 3, b"defghij")  # sent twice: nothing changes
    record = store.run("r")
    assert record is not None
    assert (bytes(record["output"]), record["output_size"], record["output_truncated"]) == (b"cdefghij", 10, True)
    # Bytes dropped in a flood (the event starts past what was kept): what is kept is the event's.
    output(store, "k", 500, b"xyz")
    record = store.run("r")
    assert record is not None and (bytes(record["output"]), record["output_size"]) == (b"xyz", 503)


def test_an_ended_run_keeps_its_final_output_and_bad_output_events_are_ignored() -> None:
    store = HistoryStore(output_limit=64)
    run(store, "k", "r", outcome="running")
    output(store, "k", 0, b"live")
    store.apply({"event": "run", "key": "k", "outcome": "ok", "output": base64.b64encode(b"final").decode(),
                 "output_size": 5, "output_truncated": False})
    output(store, "k", 5, b"late")  # a batch sent as the run ended
    for bad in ({"offset": "1", "size": 3}, {"offset": 5, "size": 2}, {"offset": -1, "size": 2}, {}):
        store.apply({"event": "output", "key": "k", "output": "", **bad})
    record = store.run("r")
    assert record is not None and (bytes(record["output"]), record["output_size"]) == (b"final", 5)
    output(store, "unknown", 0, b"x")
    assert store.count() == 1


def test_followed_by_key_and_outcomes() -> None:
    store = HistoryStore()
    run(store, "k1", "r", outcome="ok")
    run(store, "k2", "r", outcome="running")  # the same id again: the newest is followed
    followed = store.followed("r")
    assert followed is not None and (followed["key"], followed["outcome"]) == ("k2", "running")
    assert "key" not in (store.run("r") or {"key": 1})
    by_key = store.by_key("k1")
    assert by_key is not None and by_key["outcome"] == "ok"
    assert store.followed("nope") is None and store.by_key("nope") is None
    assert store.outcomes(["k1", "k2", "gone"]) == {"k1": "ok", "k2": "running"}
    assert store.outcomes([]) == {}


def test_a_running_runs_output_is_kept_in_memory_not_written(tmp_path: Path) -> None:
    """With -state-dir, an output event writes nothing to the journal's file (it would share its write lock
    with the requests); the reads show it while the run runs, and the final event writes the record."""
    store = HistoryStore.for_state_dir(str(tmp_path), keep=10, max_age=0, output_limit=64)
    run(store, "k", "r", outcome="running")
    before = (tmp_path / "journal.sqlite3").stat().st_mtime_ns, os.path.getsize(tmp_path / "journal.sqlite3")
    wal = tmp_path / "journal.sqlite3-wal"
    wal_size = wal.stat().st_size if wal.exists() else 0
    output(store, "k", 0, b"building\n")
    assert (wal.stat().st_size if wal.exists() else 0) == wal_size
    assert ((tmp_path / "journal.sqlite3").stat().st_mtime_ns, os.path.getsize(tmp_path / "journal.sqlite3")) == before
    listed = store.runs()[0]
    assert (listed["output_size"], "key" in listed) == (9, False)
    record = store.run("r")
    assert record is not None and bytes(record["output"]) == b"building\n"
    store.apply({"event": "run", "key": "k", "outcome": "ok", "output": base64.b64encode(b"built\n").decode(),
                 "output_size": 6})
    record = store.run("r")
    assert record is not None and (bytes(record["output"]), record["output_size"]) == (b"built\n", 6)
    store.close()


def test_the_live_output_of_a_run_whose_worker_died_is_let_go() -> None:
    store = HistoryStore(output_limit=64)
    store.apply({"event": "run", "key": "k", "id": "r", "hook": "h", "outcome": "running", "pid": 7})
    output(store, "k", 0, b"half")
    assert store.worker_gone(7) == 1
    record = store.run("r")
    assert record is not None and record["outcome"] == "cancelled" and record["output_size"] == 0
    store.apply({"event": "run", "key": "k2", "id": "r2", "hook": "h", "outcome": "running", "pid": 8})
    output(store, "k2", 0, b"more")
    store.worker_gone(8)
    store.prune()
    assert store._live == {}
