"""The run state: the run journal, the finish ledger and the run history's store, and what they hold
(docs/run-state.md: the room a second backend joins)."""
