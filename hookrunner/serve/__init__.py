"""Serving HTTP: the Flask app, gunicorn's arbiter and workers, the wire protocol, TLS."""
