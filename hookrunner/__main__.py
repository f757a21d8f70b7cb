"""`python -m hookrunner` runs the command-line entry point."""

from hookrunner.cli import main

raise SystemExit(main())
