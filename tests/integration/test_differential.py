"""The differential test: every integration case goes to the reference `webhook` and to hookrunner.

Both answers must be identical: status, interim 1xx answers, body (remote ports masked) and the header
lines in the order written, Date's value masked; the selected log messages (timestamps and request ids
stripped) must match in order, and all of the request's log messages must match as a set once ports,
durations and temporary names are masked.
A case marked `deliberate` is a documented improvement (docs/compatibility.md): for it, each server must
give its own documented answer, and the two answers must still differ.
"""

from __future__ import annotations

import pytest
from integration_cases import CASES, Case, mismatches, normalise, run_case
from integration_harness import FORMATS, Response, ServerPool

pytestmark = pytest.mark.reference


def comparable_headers(response: Response, drop_length: bool) -> list[tuple[str, str]]:
    """The header lines as written, in order and with their names' case: only Date's value is masked (and
    Content-Length's where a remote port was masked in the body)."""
    masked = {"date"} | ({"content-length"} if drop_length else set())
    return [(name, "*" if name.lower() in masked else value) for name, value in response.headers]


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_same_answer_as_reference(server_pool: ServerPool, fmt: str, case: Case) -> None:
    reference = run_case(server_pool, "reference", fmt, case)
    ours = run_case(server_pool, "hookrunner", fmt, case)
    ref, got = reference.response, ours.response

    # Masking remote ports can change lengths only where a port was masked.
    masked = normalise(ref.body) != ref.body or normalise(got.body) != got.body
    same = (
        (got.status, normalise(got.body), got.interim) == (ref.status, normalise(ref.body), ref.interim)
        and comparable_headers(got, masked) == comparable_headers(ref, masked)
        and ours.selected_logs() == reference.selected_logs()
        and ours.all_logs(drop_additions=True) == reference.all_logs()
    )
    if case.deliberate:
        assert mismatches(case.for_target("reference"), reference) == []
        assert mismatches(case.for_target("hookrunner"), ours) == []
        assert not same, f"{case.name}: the reference now answers like hookrunner; drop the deliberate mark"
        return

    assert (got.status, normalise(got.body)) == (ref.status, normalise(ref.body))
    assert got.interim == ref.interim
    assert got.status_line == ref.status_line
    assert comparable_headers(got, masked) == comparable_headers(ref, masked)
    assert ours.selected_logs() == reference.selected_logs()
    assert ours.all_logs(drop_additions=True) == reference.all_logs()
    assert ours.leftover_files == reference.leftover_files == []
