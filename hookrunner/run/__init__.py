"""Running commands: preparing, starting and waiting for them, their limits and their history's events."""
