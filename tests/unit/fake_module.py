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
