"""A logger for the modules a fresh ``spool submit`` imports, without importing :mod:`logging`
(~5 ms of CPU per `spool submit` process).

A warning or an error always goes to :mod:`logging` (imported then: with no handler set up, its
last-resort handler still prints it to stderr). Debug and info records are dropped while
:mod:`logging` has never been imported: nothing can have set a handler or a level then, so the
default root level (WARNING) would have dropped them too. Once anything imports :mod:`logging`
(the runner sets up its logs at start), every record is passed on as a plain logger would.
"""

from __future__ import annotations

import sys
from typing import Any


class LazyLogger:
    """The parts of :class:`logging.Logger` spool's data modules use, by the same name."""

    __slots__ = ("name", "_logger")

    def __init__(self, name: str) -> None:
        self.name = name
        self._logger: Any = None  # the logging.Logger, once logging is loaded

    def debug(self, msg: object, *args: object, **kwargs: Any) -> None:
        if "logging" in sys.modules:
            self._log("debug", msg, args, kwargs)

    def info(self, msg: object, *args: object, **kwargs: Any) -> None:
        if "logging" in sys.modules:
            self._log("info", msg, args, kwargs)

    def warning(self, msg: object, *args: object, **kwargs: Any) -> None:
        self._log("warning", msg, args, kwargs)

    def error(self, msg: object, *args: object, **kwargs: Any) -> None:
        self._log("error", msg, args, kwargs)

    def _log(self, level: str, msg: object, args: tuple[object, ...], kwargs: dict[str, Any]) -> None:
        if self._logger is None:
            import logging  # start-up: a submit that logs nothing above info never loads logging

            self._logger = logging.getLogger(self.name)
        # stacklevel 3: the record names the line that called debug/info/warning/error, not this file.
        kwargs["stacklevel"] = kwargs.get("stacklevel", 1) + 2
        getattr(self._logger, level)(msg, *args, **kwargs)


def lazy_logger(name: str) -> LazyLogger:
    """``logging.getLogger(name)`` for a module that a fresh process may import on its way to a submit."""
    return LazyLogger(name)
