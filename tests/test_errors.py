"""hookrunner.errors: the error types' texts are checked where they are raised; here, keeping an error as a value."""

from __future__ import annotations

from gc_support import hookrunner_garbage

from hookrunner.errors import ParameterNodeError, as_value


def _lookup(params: dict[str, str], name: str) -> str:
    try:
        return params[name]
    except KeyError:
        raise ParameterNodeError(name) from None


def _caught(params: dict[str, str], name: str) -> ParameterNodeError | None:
    try:
        _lookup(params, name)
    except ParameterNodeError as error:
        return as_value(error)
    return None


def test_an_error_kept_as_a_value_holds_no_frame() -> None:
    error = _caught({}, "ref")
    assert isinstance(error, ParameterNodeError) and str(error) == "parameter node not found: ref"
    assert error.__traceback__ is None and error.__context__ is None


def test_a_caller_keeping_the_error_makes_no_cycle() -> None:
    """A traceback holds the raising frames and, once they return, their callers': the caller's own frame
    keeps the error, a cycle that only the cyclic collector would free."""

    def caller() -> str:
        error = _caught({}, "ref")
        return str(error)

    assert caller() == "parameter node not found: ref"
    assert hookrunner_garbage(caller) == []
