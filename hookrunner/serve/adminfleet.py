"""The admin listener on a shared run state (-state-url, issue 33): its history is the database's, every
replica's runs (state/pghistory.py), and one thread of its own folds the replicas' events every half second
and brings what changed to the followers of a run. Following a run of any replica is polling the database:
its output reaches a follower within POLL seconds (plus the owner's 100 ms batches), whichever replica runs
it and whichever admin listener folded its events. Imported only with -state-url (psycopg).
"""

from __future__ import annotations

import base64
import threading

from hookrunner.config import Config
from hookrunner.serve.adminfollow import Followers
from hookrunner.state.backend import StateUnavailable
from hookrunner.state.model import FINAL_OUTCOMES, Event
from hookrunner.state.opener import replica_name
from hookrunner.state.pghistory import PostgresHistory

#: Seconds between two folds of the replicas' events, and two looks at the followed runs.
POLL = 0.5


def open_history(config: Config) -> PostgresHistory:
    """The shared history on -state-url's database; nothing is connected before the first read."""
    return PostgresHistory(
        config.state_url,
        replica_name(config),
        config.state_keep,
        config.state_keep_age,
        config.history_output,
    )


class FleetFeed:
    """What the admin listener's process does with a shared history: the workers' `hooks` events go to the
    database (their runs' events get there from each replica's run owner, through PostgresState.record), and
    a thread folds the events and feeds the followers."""

    def __init__(self, history: PostgresHistory, followers: Followers, every: float = POLL) -> None:
        self.history = history
        self.followers = followers
        self.every = every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="admin-fleet", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """End the thread, then close the history's connections."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)
        self.history.close()

    def apply(self, event: Event) -> None:
        """An event from this replica's workers (run/historyfeed.py): only the hooks they serve are
        kept here; run events are the database's."""
        self.history.note_hooks(event)

    def worker_gone(self, pid: int) -> int:
        """A worker's feed ended: its runs, if any, are the run state's to take over, not this process's."""
        return 0

    def _serve(self) -> None:
        while not self._stop.wait(self.every):
            try:
                self.poll()
            except StateUnavailable:
                pass  # logged once by the connections (state/pgconn.py); the next poll tries again

    def poll(self) -> None:
        """Fold, then give each followed run's followers what they lack of its output, and its end."""
        self.history.catch_up()
        for key in self.followers.keys():
            record = self.history.by_key(key)
            if record is None:
                continue  # left the history: the followers' sweep ends them
            kept, size = bytes(record["output"]), int(record["output_size"])
            output = base64.b64encode(kept).decode("ascii")
            self.followers.publish(
                {"event": "output", "key": key, "offset": size - len(kept), "size": size, "output": output}
            )
            if record["outcome"] in FINAL_OUTCOMES:
                self.followers.publish({"event": "run", "key": key, "outcome": record["outcome"]})
