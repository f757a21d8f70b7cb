"""Running commands: the executor, its limits and the run journal."""
