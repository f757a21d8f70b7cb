"""Which `hookrunner` the tests exec: the installed artefact that users get, or the dev install.

scripts/test builds the wheel, installs it with its `postgres` extra only into a fresh venv and exports
HOOKRUNNER_BIN as that venv's `hookrunner`, so the integration tests run what `pip install .[postgres]` gives a
user. Without the variable (a
bare `pytest` run by hand), the command beside the test interpreter is used: the editable dev install.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

#: The command the integration and docs-service tests start.
HOOKRUNNER_BIN = os.environ.get("HOOKRUNNER_BIN") or str(Path(sys.executable).with_name("hookrunner"))
