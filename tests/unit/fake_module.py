"""A module object for the unit tests of the modules' own functions: its params, check mode, and exit_json and
fail_json raising what a test catches (BaseExceptions, as SystemExit is, so a module's own `except Exception`
does not swallow them)."""

from __future__ import annotations


class DoneError(BaseException):
    """module.exit_json, caught."""


class FailedError(BaseException):
    """module.fail_json, caught."""


class Module:
    def __init__(self, check_mode: bool = False, **params) -> None:
        self.params = params
        self.check_mode = check_mode
        self._diff = False

    def exit_json(self, **result):
        raise DoneError(result)

    def fail_json(self, **result):
        raise FailedError(result)


def outcome(function, params: dict, check_mode: bool = False) -> tuple[str, dict]:
    """("exit" or "fail", what it said) of `function(module)`."""
    try:
        function(Module(check_mode, **params))
    except DoneError as done:
        return "exit", done.args[0]
    except FailedError as failed:
        return "fail", failed.args[0]
    raise AssertionError("the module neither exited nor failed")


def exits(function, params: dict, check_mode: bool = False) -> dict:
    """What `function(module)` exits with; a failure fails the test, with what it said."""
    kind, said = outcome(function, params, check_mode)
    assert kind == "exit", f"the module failed: {said}"
    return said


def fails(function, params: dict, check_mode: bool = False) -> dict:
    """What `function(module)` fails with; an exit fails the test."""
    kind, said = outcome(function, params, check_mode)
    assert kind == "fail", f"the module exited: {said}"
    return said
