"""Local tooling for the docs-rebuild service: Job generation, a batch-API stand-in and a sample docs repo.

Nothing here is part of hookrunner; it serves scripts/ and tests/docs_service/.
"""
