#!/usr/bin/env python3
"""The command the integration hooks run: prints its argv and HOOK_ environment, like upstream's hookecho.

Output (bytes are passed through untouched, so invalid UTF-8 survives):
  arg: <argv[1:] joined by a space>             when there are arguments
  env: <sorted HOOK_* variables as K=V>          when there are any
Extra words among the arguments ask for more lines:
  exit=N (first argument)   exit with status N after printing
  raw                       (first argument) print the other arguments joined by a space and nothing else
  stderr=TEXT               also write TEXT and a newline to stderr
  showenv=NAME              print `showenv: NAME=<value>` (or `NAME unset`) for any variable
  showfile=NAME             NAME holds a path to a temporary file: print its size, sha256, mode, where it
                            lives and its content; the path itself is replaced by <file> in `env:` and is
                            appended to the file named by $ECHO_RECORD so a test can check it was removed
  showcwd                   print `cwd: <basename of the working directory>`
  sleep=SECONDS             sleep that long before exiting
"""

from __future__ import annotations

import hashlib
import os
import stat
import sys
import tempfile
import time


def _file_report(name: bytes, path: bytes) -> bytes:
    try:
        with open(path, "rb") as handle:
            data = handle.read()
        mode = stat.S_IMODE(os.stat(path).st_mode)
    except OSError as exc:
        return b"file " + name + b": unreadable " + str(exc.errno).encode()
    real_dir = os.path.dirname(os.path.realpath(path))
    if real_dir == os.path.realpath(os.getcwdb()):
        where = b"cwd"
    elif real_dir == os.path.realpath(os.fsencode(tempfile.gettempdir())):
        where = b"tmp"
    else:
        where = b"other"
    prefixed = b"yes" if os.path.basename(path).startswith(name) else b"no"
    digest = hashlib.sha256(data).hexdigest()[:16].encode()
    content = data if len(data) <= 200 else b"<" + str(len(data)).encode() + b" bytes>"
    record = os.environ.get("ECHO_RECORD")
    if record:
        with open(record, "ab") as handle:
            handle.write(path + b"\n")
    return (
        b"file "
        + name
        + b": size="
        + str(len(data)).encode()
        + b" sha256="
        + digest
        + b" mode="
        + oct(mode)[2:].encode()
        + b" dir="
        + where
        + b" prefix="
        + prefixed
        + b" content="
        + content
    )


def main() -> int:
    args = [os.fsencode(a) for a in sys.argv[1:]]
    out = sys.stdout.buffer
    if args and args[0] == b"raw":
        out.write(b" ".join(args[1:]))
        out.flush()
        return 0

    if args:
        out.write(b"arg: " + b" ".join(args) + b"\n")

    env = os.environb
    file_vars = [a[len(b"showfile=") :] for a in args if a.startswith(b"showfile=")]
    hook_vars = sorted(k for k in env if k.startswith(b"HOOK_"))
    if hook_vars:
        shown = [k + b"=" + (b"<file>" if k in file_vars else env[k]) for k in hook_vars]
        out.write(b"env: " + b" ".join(shown) + b"\n")

    for arg in args:
        if arg.startswith(b"showenv="):
            name = arg[len(b"showenv=") :]
            value = env.get(name)
            out.write(b"showenv: " + (name + b" unset" if value is None else name + b"=" + value) + b"\n")
        elif arg.startswith(b"showfile="):
            name = arg[len(b"showfile=") :]
            path = env.get(name)
            line = b"file " + name + b": unset" if path is None else _file_report(name, path)
            out.write(line + b"\n")
        elif arg == b"showcwd":
            out.write(b"cwd: " + os.path.basename(os.getcwd()).encode() + b"\n")
        elif arg.startswith(b"sleep="):
            out.flush()
            time.sleep(float(arg[len(b"sleep=") :]))
        elif arg.startswith(b"stderr="):
            out.flush()
            sys.stderr.buffer.write(arg[len(b"stderr=") :] + b"\n")
            sys.stderr.buffer.flush()
    out.flush()

    if args and args[0].startswith(b"exit="):
        text = args[0][len(b"exit=") :]
        try:
            return int(text)
        except ValueError:
            out.write(b"Exit code " + text + b" not an int!")
            return 255
    return 0


if __name__ == "__main__":
    sys.exit(main())
