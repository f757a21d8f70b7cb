#!/usr/bin/env python3
"""Upstream webhook's test helper (test/hookecho.go) in Python, for its handler cases.

Prints `arg: <arguments joined by a space>` when there are arguments and `env: <HOOK_* variables joined
by a space, in environment order>` when there are any; when the first argument is `exit=N`, it then
exits with status N (an N that is not an integer prints a complaint and exits with 255, as Go's
os.Exit(-1) does).
"""

from __future__ import annotations

import os
import re
import sys


def main() -> int:
    args = sys.argv[1:]
    out = sys.stdout.buffer
    if args:
        out.write(b"arg: " + b" ".join(os.fsencode(a) for a in args) + b"\n")
    env = [k + b"=" + v for k, v in os.environb.items() if k.startswith(b"HOOK_")]
    if env:
        out.write(b"env: " + b" ".join(env) + b"\n")
    out.flush()
    if args and args[0].startswith("exit="):
        text = args[0][5:]
        if not re.fullmatch(r"[+-]?[0-9]+", text):  # strconv.Atoi's syntax
            out.write(f"Exit code {text} not an int!".encode())
            out.flush()
            return 255
        return int(text) & 0xFF
    return 0


if __name__ == "__main__":
    sys.exit(main())
