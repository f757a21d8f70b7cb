"""What operators see and touch: the log, the metrics, the hooks-file watcher."""
