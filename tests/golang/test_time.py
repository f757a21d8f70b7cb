"""Go's time package: time.Parse for the scalr Date layout, time.ParseDuration."""

from __future__ import annotations

import pytest

from hookrunner.golang.time import parse_go_duration, parse_scalr_date


@pytest.mark.parametrize(
    "date",
    [
        # verified: each was accepted as a date (and then reported as outdated).
        "Fri 08 Sep 2017 11:24:32 UTC",
        "fri 08 sep 2017 11:24:32 UTC",
        "Fri  08 Sep 2017 11:24:32 GMT+3",
        "Fri 08 Sep 2017 1:24:32 EST",
        "Fri 08 Sep 2017 11:24:32.5 UTC",
    ],
)
def test_scalr_dates_go_accepts(date: str) -> None:
    assert abs(parse_scalr_date(date) - 1504869872) < 11 * 3600


def test_scalr_date_value() -> None:
    when = 1504869872  # Fri 08 Sep 2017 11:24:32 UTC
    assert parse_scalr_date("Fri 08 Sep 2017 11:24:32 UTC") == when
    # An unknown abbreviation (and GMT+n) leaves the clock reading as if it were UTC.
    assert parse_scalr_date("Fri 08 Sep 2017 11:24:32 XYZ") == when
    assert parse_scalr_date("Fri 08 Sep 2017 11:24:32 GMT+3") == when
    assert parse_scalr_date("Mon 29 Feb 2016 00:00:00 UTC") == 1456704000
    assert parse_scalr_date("Thu 01 Jan 1970 00:00:00 UTC") == 0
    assert parse_scalr_date("Sat 01 Jan 0000 00:00:00 UTC") == -62167219200  # Go's year 0


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30s", 30.0), ("1m30s", 90.0), ("1.5h", 5400.0), ("250ms", 0.25), ("0", 0.0), ("2us", 2e-6), ("-1s", -1.0)],
)
def test_go_durations(text: str, seconds: float) -> None:
    assert parse_go_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize(("text", "message"), [("10", "missing unit"), ("x", "invalid duration"), ("", "invalid duration")])
def test_bad_go_durations(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_go_duration(text)


def test_a_bad_second_is_raised_without_a_reference_cycle() -> None:
    """The seconds' error is kept in a variable and raised later: it must not stay alive in a cycle with
    the frame that raised it (the gevent worker collects cycles seldom)."""
    import gc
    import weakref

    from hookrunner.golang.time import _parse_scalr_date, _TimeParseError

    gc.disable()
    try:
        with pytest.raises(_TimeParseError) as caught:
            _parse_scalr_date(b"Fri 08 Sep 2017 11:24:x UTC")
        gone = weakref.ref(caught.value)
        del caught
        assert gone() is None
    finally:
        gc.enable()
