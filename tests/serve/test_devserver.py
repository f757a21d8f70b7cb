"""serve/devserver.py: the stand-in for werkzeug's development server in the worker. Each case runs in a
fresh interpreter, since the stand-in is about the first import of werkzeug in a process."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest


def run(code: str) -> dict[str, object]:
    """`code` after devserver.install() and `import flask` in a fresh interpreter; what it prints as JSON."""
    prelude = textwrap.dedent(
        """
        import json, sys
        from hookrunner.serve import devserver
        devserver.install()
        import flask, werkzeug
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", prelude + textwrap.dedent(code)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout.splitlines()[-1]))


def test_flask_imports_with_the_stand_in_and_no_http_server() -> None:
    seen = run(
        """
        app = flask.Flask("x")
        app.add_url_rule("/", "root", lambda: "ok")
        with app.test_client() as client:
            answer = client.get("/")
        print(json.dumps({
            "module": type(sys.modules["werkzeug.serving"]).__name__,
            "http.server": "http.server" in sys.modules,
            "finders": sum(type(f).__name__ == "_Finder" for f in sys.meta_path),
            "answer": [answer.status_code, answer.get_data(as_text=True)],
        }))
        """
    )
    assert seen == {"module": "_StandIn", "http.server": False, "finders": 0, "answer": [200, "ok"]}


def test_reading_another_name_loads_the_real_module_everywhere() -> None:
    seen = run(
        """
        standin = sys.modules["werkzeug.serving"]
        from werkzeug.serving import WSGIRequestHandler
        import werkzeug.serving
        real = sys.modules["werkzeug.serving"]
        print(json.dumps({
            "real": type(real).__name__,
            "same class": WSGIRequestHandler is real.WSGIRequestHandler,
            "package attribute": werkzeug.serving is real,
            "stand-in mirrors": standin.WSGIRequestHandler is real.WSGIRequestHandler,
            "http.server": "http.server" in sys.modules,
        }))
        """
    )
    assert seen == {
        "real": "module",
        "same class": True,
        "package attribute": True,
        "stand-in mirrors": True,
        "http.server": True,
    }


@pytest.mark.parametrize("reloader", ["true", ""])
def test_the_two_names_flask_reads_call_the_real_functions(reloader: str) -> None:
    seen = run(
        f"""
        import os
        os.environ["WERKZEUG_RUN_MAIN"] = {reloader!r}
        from flask import cli
        before = type(sys.modules["werkzeug.serving"]).__name__
        answer = cli.is_running_from_reloader()
        print(json.dumps({{
            "before": before,
            "answer": answer,
            "after": type(sys.modules["werkzeug.serving"]).__name__,
            "run_simple": werkzeug.run_simple.__module__,
        }}))
        """
    )
    assert seen == {
        "before": "_StandIn",
        "answer": reloader == "true",
        "after": "module",
        "run_simple": "hookrunner.serve.devserver",
    }


def test_no_stand_in_once_werkzeug_is_imported() -> None:
    code = (
        "import json, sys, werkzeug\n"
        "from hookrunner.serve import devserver\n"
        "devserver.install()\n"
        "print(json.dumps({'finders': sum(type(f).__name__ == '_Finder' for f in sys.meta_path),"
        " 'module': type(sys.modules['werkzeug.serving']).__name__}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert json.loads(done.stdout) == {"finders": 0, "module": "module"}


def test_threads_reading_at_once_load_one_real_module() -> None:
    seen = run(
        """
        import threading
        standin = sys.modules["werkzeug.serving"]
        got = []
        start = threading.Barrier(8)
        def read():
            start.wait()
            got.append(standin.BaseWSGIServer)
        threads = [threading.Thread(target=read) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        print(json.dumps({
            "distinct": len({id(cls) for cls in got}),
            "is the real one": got[0] is sys.modules["werkzeug.serving"].BaseWSGIServer,
        }))
        """
    )
    assert seen == {"distinct": 1, "is the real one": True}
