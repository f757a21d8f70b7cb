"""The admin listener on a shared history (serve/adminfleet.py, -state-url), on a real, throwaway PostgreSQL:
the app over PostgresHistory gives every replica's runs with their replica, on its pages too, answers 503
in JSON with Retry-After while the database is away and recovers; FleetFeed's poll gives the followers of a
run recorded by another replica its output as it grows, then its end."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from flask.testing import FlaskClient
from pg_cluster import Cluster
from sse_support import sse_events, sse_output

from hookrunner.config import Config
from hookrunner.run.history import Recorder
from hookrunner.serve.admin import api_record, create_admin_app
from hookrunner.serve.adminfleet import FleetFeed, open_history
from hookrunner.serve.adminfollow import Followers
from hookrunner.state.model import RunSpec
from hookrunner.state.pghistory import DOWN_FOR, PostgresHistory
from hookrunner.state.postgres import PostgresState


@pytest.fixture
def fleet(pg_database: str) -> Iterator[tuple[PostgresState, PostgresHistory]]:
    state = PostgresState(pg_database, "replica-a")
    history = open_history(Config(state_url=pg_database, state_replica="admin-b", state_keep=50))
    yield state, history
    history.close()
    state.close()


def run_spec(rid: str) -> RunSpec:
    return RunSpec("deploy", rid, "/bin/true", ("/bin/true", "<b>x</b>"), (), (), "/")


def test_the_app_shows_every_replicas_runs_and_503s_while_the_database_is_away(
    fleet: tuple[PostgresState, PostgresHistory], pg_cluster: Cluster, pg_database: str
) -> None:
    state, history = fleet
    ticket = Recorder(state.record).ticket("r1", "deploy", time.time())
    ticket.started(run_spec("r1"))
    ticket.finished(b"done\n", "exit status 2")
    client: FlaskClient = create_admin_app(history, None, Config(state_url=pg_database)).test_client()
    runs = client.get("/api/v1/runs").json
    assert runs is not None and [(r["id"], r["replica"], r["exit_code"]) for r in runs["runs"]] == [
        ("r1", "replica-a", 2)
    ]
    page = client.get("/runs").get_data(as_text=True)
    assert "<th>replica</th>" in page and '<td class="replica">replica-a</td>' in page
    assert "shared in PostgreSQL (-state-url)" in page
    one = client.get("/runs/r1").get_data(as_text=True)
    assert '<dd class="replica">replica-a</dd>' in one and "&lt;b&gt;x&lt;/b&gt;" in one
    with pg_cluster.crashed():
        for path in ("/api/v1/runs", "/api/v1/hooks", "/api/v1/runs/r1", "/", "/runs", "/runs/r1"):
            answer = client.get(path)
            assert answer.status_code == 503 and answer.mimetype == "application/json", path
            assert answer.headers["Retry-After"].isdigit()
            assert answer.json is not None and "PostgreSQL is unavailable" in answer.json["error"]
            assert "Traceback" not in answer.get_data(as_text=True)
        with client.get("/static/admin.css") as static:
            assert static.status_code == 200
    time.sleep(DOWN_FOR)
    assert client.get("/api/v1/runs/r1").status_code == 200


def test_the_poll_gives_followers_another_replicas_output_then_its_end(
    fleet: tuple[PostgresState, PostgresHistory],
) -> None:
    state, history = fleet
    recorder = Recorder(state.record)
    ticket = recorder.ticket("live", "deploy", time.time())
    ticket.started(run_spec("live"))
    ticket.output(b"one\n")
    recorder.batcher.flush()
    followers = Followers(history, api_record, 30.0)
    feed = FleetFeed(history, followers)
    try:
        follower = followers.follow("live")
        assert follower is not None and followers.keys() == [follower.key]
        ticket.output(b"two\n")
        recorder.batcher.flush()
        feed.poll()
        ticket.finished(b"one\ntwo\nthree\n", None)
        feed.poll()
        received = b"HTTP/1.1 200 OK\r\n\r\n" + b"".join(follower.frames)
        events = sse_events(received)
        assert sse_output(events) == b"one\ntwo\nthree\n"
        assert [name for name, _ in events][-1] == "end" and events[-1][1]["outcome"] == "ok"
        assert events[-1][1]["replica"] == "replica-a"
        assert followers.keys() == [] and follower.ending
    finally:
        followers.stop()
        feed.stop()
