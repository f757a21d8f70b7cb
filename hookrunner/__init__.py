"""hookrunner: a drop-in replacement for adnanh/webhook that turns HTTP hooks into commands."""

__version__ = "0.1.0"
#: The upstream webhook release whose behaviour hookrunner reproduces.
WEBHOOK_COMPAT_VERSION = "2.8.2"
