"""Handlers by name: the ``@task`` registry, ``Reject``, and ``current()`` inside a handler.

A handler is any callable registered under a task name; the attempt child looks it up with
``handler_for`` and calls it with the job's ``args`` as keyword arguments. ``shell`` is not a
handler: it is reserved, and the attempt child runs it itself when the worker allows it.

``current()`` is one module-wide value, not a context variable, because a handler's own threads
must see it too (a new thread does not inherit the caller's context). The attempt child runs one
attempt at a time, sets it before the call with ``set_current`` and clears it after.

The registry starts with the built-in handlers (``spool.builtin_tasks.BUILTIN``: ``wordcount``),
so every worker has them without ``--import``. It also owns the rule for task names, which the
job schema (``spool.job``) checks too.
"""

from __future__ import annotations

import copy
import importlib
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from spool.builtin_tasks import BUILTIN
from spool.base.clock import SYSTEM, Clock
from spool.base.errors import UsageError

__all__ = [
    "Current",
    "Reject",
    "current",
    "handler_for",
    "import_task_modules",
    "is_valid_task_name",
    "registered",
    "set_current",
    "task",
]

TASK_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
RESERVED = frozenset({"shell"})

F = TypeVar("F", bound=Callable[..., Any])

_handlers: dict[str, Callable[..., Any]] = dict(BUILTIN)
_current: Current | None = None


def is_valid_task_name(name: object) -> bool:
    return isinstance(name, str) and TASK_NAME.fullmatch(name) is not None


class Reject(Exception):
    """Raised by a handler to end its job dead at once: the input can never succeed, so no retry."""


@dataclass(frozen=True)
class Current:
    """The attempt a handler is running in, so it can make its own side effects idempotent.

    ``deadline`` is a wall-clock time, seconds since the epoch (the ``clock.wall()`` scale), at
    which the worker kills the attempt for its timeout, as of the attempt's start. The worker
    decides on its monotonic clock: if the wall clock steps during the attempt, ``deadline`` no
    longer says when the kill comes and ``seconds_left()`` (on ``clock.monotonic()``) still does.
    """

    job_id: str
    attempt: int
    tries_left: int
    deadline: float
    # The same instant on the monotonic clock (host-wide on Linux, so the worker's number is ours).
    monotonic_deadline: float | None = field(default=None, repr=False)

    def seconds_left(self, clock: Clock = SYSTEM) -> float:
        """Seconds until the attempt's timeout (never below 0), immune to wall-clock steps."""
        if self.monotonic_deadline is None:
            return max(0.0, self.deadline - clock.wall())
        return max(0.0, self.monotonic_deadline - clock.monotonic())

    def parent_results(self) -> dict[str, object]:
        """``{parent_id: result}`` for each id in the job's ``depends_on`` (every parent is done
        when a child runs); ``{}`` for a job without. A fresh copy at each call, so a handler may
        change it freely. Bounded by ``max_parent_results_bytes`` (``runner.attempt.parents``)."""
        return copy.deepcopy(dict(getattr(self, "_parent_results", {})))

    def with_parent_results(self, parents: Mapping[str, object]) -> Current:
        """This value, carrying its job's parents' results (for the attempt child). Kept off the
        fields on purpose: ``asdict(current())`` and its repr stay a few small numbers, however
        big the parents' results (up to ``max_parent_results_bytes``)."""
        object.__setattr__(self, "_parent_results", parents)  # frozen: set once, before the handler runs
        return self


def _definition(fn: Callable[..., Any]) -> tuple[str, str] | None:
    """Where a named top-level callable is defined; None for lambdas and closures."""
    module, qualname = getattr(fn, "__module__", None), getattr(fn, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qualname, str) or "<" in qualname:
        return None
    return module, qualname


def _same_definition(a: Callable[..., Any], b: Callable[..., Any]) -> bool:
    # importlib.reload() makes a new function object for the same definition: a re-registration,
    # not a clash. Two lambdas or closures are only the same if they are the same object.
    return a is b or (_definition(a) is not None and _definition(a) == _definition(b))


def task(name: str) -> Callable[[F], F]:
    """Register the decorated callable as the handler of task ``name``; returns it unchanged.

    Raises ValueError for a malformed or reserved name, or when another callable already has it.
    """
    if not is_valid_task_name(name):
        raise ValueError(f"task name {name!r} must match {TASK_NAME.pattern}")
    if name in RESERVED:
        raise ValueError(f"task name {name!r} is reserved")

    def register(fn: F) -> F:
        if not callable(fn):
            raise TypeError(f"@task({name!r}) needs a callable, got {type(fn).__name__}")
        existing = _handlers.get(name)
        if existing is not None and not _same_definition(existing, fn):
            raise ValueError(
                f"task {name!r} is already registered to "
                f"{getattr(existing, '__module__', '?')}.{getattr(existing, '__qualname__', '?')}"
            )
        _handlers[name] = fn
        return fn

    return register


def handler_for(name: str) -> Callable[..., Any] | None:
    """The handler registered under ``name``, or None."""
    return _handlers.get(name)


def registered() -> frozenset[str]:
    """Every registered task name (``shell`` is never among them)."""
    return frozenset(_handlers)


def import_task_modules(modules: Sequence[str]) -> None:
    """Import each module so its ``@task`` decorators run.

    Raises UsageError with one line naming the module and the error, since a worker that cannot
    import its tasks is misconfigured rather than unlucky.
    """
    for module in modules:
        try:
            importlib.import_module(module)
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # SystemExit at import is a misconfiguration too
            detail = str(exc).strip().splitlines()
            message = f"{type(exc).__name__}: {detail[-1]}" if detail else type(exc).__name__
            raise UsageError(f"cannot import task module {module!r}: {message}") from exc


def current() -> Current:
    """The running attempt; RuntimeError outside a handler."""
    value = _current
    if value is None:
        raise RuntimeError("spool.current() is only available inside a handler")
    return value


def set_current(value: Current | None) -> None:
    """Set (or clear, with None) what ``current()`` returns; for the attempt child only."""
    global _current  # noqa: PLW0603 - one value for all threads; see the module docstring
    _current = value
