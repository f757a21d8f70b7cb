"""The hook engine, as webhook's internal/hook: the model, files, rules, request values."""
