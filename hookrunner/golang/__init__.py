"""Go's semantics, reproduced: knows nothing of hooks."""
