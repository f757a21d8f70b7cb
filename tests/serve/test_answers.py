"""Answers framed as Go frames them, Go's path cleaning, the access log's durations and sizes, and the cap
on a body of unknown length."""

import pytest

from hookrunner.serve.answers import answer, clean_path, go_duration, humanize_bytes


@pytest.mark.parametrize(
    ("path", "cleaned"),
    [
        ("/", "/"),
        ("//hooks/a", "/hooks/a"),
        ("/hooks/./a", "/hooks/a"),
        ("/hooks/../x/", "/x/"),
        ("/a/", "/a/"),
    ],
)
def test_clean_path(path: str, cleaned: str) -> None:
    assert clean_path(path) == cleaned


def test_bodyless_statuses() -> None:
    response = answer(204, b"dropped", {})
    assert response.get_data() == b"" and "Content-Length" not in response.headers


def test_the_handlers_headers_are_those_set_before_the_status() -> None:
    # A hook's headers and a type set before WriteHeader are the handler's (written first, sorted); a type
    # set after it (webhook's command-failure message) is only in the -debug dump: the head's is sniffed.
    before = answer(500, b"boom", {"X-A": "1"}, "text/plain; charset=utf-8")
    after = answer(500, b"boom", {"X-A": "1"}, "text/plain; charset=utf-8", type_after_status=True)
    assert before.handler_names == frozenset({"X-A", "Content-Type"})
    assert after.handler_names == frozenset({"X-A"})
    assert before.written_headers == after.written_headers == {"X-A": "1", "Content-Type": "text/plain; charset=utf-8"}
    assert after.headers["Content-Type"] == "text/plain; charset=utf-8"  # sniffed, the same text
    environ = {"REQUEST_METHOD": "POST", "SERVER_NAME": "x", "SERVER_PORT": "80", "wsgi.url_scheme": "http"}
    after.get_wsgi_headers(environ)
    assert environ["hookrunner.handler_headers"] == frozenset({"X-A"})


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0.0000005, "500ns"), (0.000098106, "98.106µs"), (0.0015845, "1.5845ms"), (1.5, "1.5s"), (0.001, "1ms")],
)
def test_go_duration(seconds: float, text: str) -> None:
    assert go_duration(seconds) == text


@pytest.mark.parametrize(
    ("size", "text"), [(0, "0 B"), (9, "9 B"), (91, "91 B"), (1536, "1.5 KiB"), (20 << 20, "20 MiB")]
)
def test_humanize_bytes(size: int, text: str) -> None:
    assert humanize_bytes(size) == text


# --- -max-body-size for bodies of unknown length (docs/limits.md) --------------------------------------


def test_capped_input_refuses_one_byte_too_many_instead_of_cutting_the_body_short() -> None:
    import io

    from werkzeug.exceptions import RequestEntityTooLarge

    from hookrunner.serve.answers import CappedInput

    assert CappedInput(io.BytesIO(b"x" * 10), 10).read() == b"x" * 10
    with pytest.raises(RequestEntityTooLarge):
        CappedInput(io.BytesIO(b"x" * 11), 10).read()
    stream = CappedInput(io.BytesIO(b"x" * 11), 10)
    assert stream.read(4) == b"xxxx"
    assert stream.read(6) == b"xxxxxx"
    with pytest.raises(RequestEntityTooLarge):
        stream.read(4)
    exact = CappedInput(io.BytesIO(b"x" * 10), 10)
    assert exact.read(10) == b"x" * 10
    assert exact.read(10) == b""
