"""A hooks file that does not parse is logged with yaml.v2's one line, as webhook 2.8.0 logs it (issue 22):
`couldn't load hooks from file! error converting YAML to JSON: yaml: line 12: did not find expected ','
or '}'`. Each broken file goes to the reference webhook and to hookrunner, and the lines must be equal."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
from command_under_test import HOOKRUNNER_BIN
from integration_harness import free_port, reference_available

pytestmark = pytest.mark.reference

BROKEN = {
    "json-missing-brace": '[\n  {\n    "id": "a",\n' + "".join(f'    "k{i}": {i},\n' for i in range(8))
    + '    "trigger-rule": {"match": {"type": "value"\n  }\n]\n',
    "json-missing-bracket": '[{"id": "a", "pass-arguments-to-command": [{"source": "header"}\n]\n',
    "yaml-tab-indent": "- id: a\n  execute-command: /bin/true\n  trigger-rule:\n\tmatch: {}\n",
    "yaml-bad-escape": '- id: "a\\q"\n',
    "yaml-unclosed-quote": "- id: 'a\n  execute-command: /bin/true\n",
    "yaml-mapping-in-plain": "- id: a: b\n",
    "control-character": "- id: a\x01\n",
    "invalid-utf8": b"- id: a\xff\n",
    "json-two-documents": '[{"id": "a"}]\n]]\n',
}


def load_error_line(argv: list[str], cwd: Path) -> str:
    """The `couldn't load hooks from file!` line a server logs at start, without its timestamp."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=cwd)
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            line = proc.stdout.readline().decode("utf-8", "replace")
            if not line:
                break
            if "couldn't load hooks from file!" in line:
                return line.split(" ", 3)[-1].rstrip("\n")
        raise AssertionError(f"no load error from {argv[0]}")
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        if proc.stdout is not None:
            proc.stdout.close()


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_parse_errors_are_logged_as_webhook_logs_them(tmp_path: Path, name: str) -> None:
    if not reference_available():
        pytest.skip("the reference webhook is not installed")
    text = BROKEN[name]
    path = tmp_path / "hooks.json"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    flags = ["-hooks", str(path), "-verbose", "-ip", "127.0.0.1"]
    theirs = load_error_line(["webhook", *flags, "-port", str(free_port())], tmp_path)
    ours = load_error_line([HOOKRUNNER_BIN, *flags, "-port", str(free_port())], tmp_path)
    assert ours == theirs
    assert theirs.startswith("couldn't load hooks from file! error converting YAML to JSON: yaml: ")
