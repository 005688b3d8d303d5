"""The settings in force: one frozen ``Settings`` built once by ``load_settings``, then passed down.

Each value comes from, in order of strength: a flag, ``SPOOL_<NAME>`` in the environment,
``SPOOL/config.yaml``, the default. ``Settings.sources`` records which, for ``spool config``.
Values are parsed and checked here, so a bad one is a ``UsageError`` naming where it came from
and which setting, and nothing downstream re-checks. Nothing here reads the environment by
itself: the caller passes it in.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from types import MappingProxyType
from typing import Any

from spool.base.errors import InvalidJob, UsageError
from spool.disk.fsio import fs
from spool.job import MAX_SECONDS, MAX_TRIES  # the job schema's ranges: a default must always make a valid job
from spool.yaml.safe import load_yaml

__all__ = [
    "CONFIG_MAX_BYTES",
    "MAX_DURATION_SECONDS",
    "MAX_JOB_BYTES",
    "MAX_RESULT_BYTES",
    "MAX_TRIES",
    "Settings",
    "environment_warnings",
    "load_settings",
    "parse_duration",
    "setting_names",
]

CONFIG_MAX_BYTES = 1024 * 1024
# Sane maximums, so a typo is refused at start instead of overflowing somewhere later.
MAX_DURATION_SECONDS = MAX_SECONDS  # 100 years: any delay, timeout or lease
MAX_JOB_BYTES = 16 * 2**20  # a job's args say where the data is; they are not the data
MAX_RESULT_BYTES = 2**30
# SPOOL_* names spool itself uses that are not settings (shell jobs get JOB_ID, ATTEMPT and
# PARENT_RESULTS; tests the seed).
OTHER_ENV_NAMES = (
    "SPOOL_DIR",
    "SPOOL_CRASH_AT",
    "SPOOL_PARENT_PID",
    "SPOOL_JOB_ID",
    "SPOOL_ATTEMPT",
    "SPOOL_PARENT_RESULTS",  # a shell job's parents' results (a file's path)
    "SPOOL_CHAOS_SEED",
    "SPOOL_TOKEN",  # `spool worker --server`'s token, instead of --token (which ps shows)
)

LOG_LEVELS = ("debug", "info", "warning", "error")
LOG_FORMATS = ("text", "json")


@dataclass(frozen=True)
class Settings:
    """The settings in force. Build once with ``load_settings``, then pass it down."""

    lease_seconds: float = 30.0
    heartbeat_seconds: float | None = None  # None: a third of the lease term the coordinator publishes
    max_tries: int = 3
    backoff_base_seconds: float = 1.0
    backoff_max_seconds: float = 300.0
    max_pending: int = 10000
    poll_seconds: float = 2.0
    grace_seconds: float = 30.0
    default_timeout_seconds: float = 3600.0
    max_job_bytes: int = 65536
    max_result_bytes: int = 1048576
    max_log_bytes: int = 1048576  # each attempt's log keeps the last this many bytes of output
    # A child job's parents' results together, handed to its attempt (runner.attempt.parents).
    max_parent_results_bytes: int = 16 * 2**20
    tasks: tuple[str, ...] = ()
    log_level: str = "info"
    log_format: str = "text"
    group_shared: bool = False
    # The runner's own periods and deadlines: settings so a test can prove each rule at 1-3 s.
    reconcile_seconds: float = 5.0  # the coordinator lists the folders and checks workers this often
    unhandled_grace_seconds: float = 3.0  # a task's ready jobs wait this long for a worker before a warning
    http_idle_seconds: float = 5.0  # spool serve closes an idle keep-alive connection after this
    http_head_seconds: float = 10.0  # a request's line and headers must arrive whole within this
    http_body_seconds: float = 30.0  # a request's body must arrive whole within this (else 408)
    tls_handshake_seconds: float = 10.0  # a TLS handshake is cut after this
    claim_patience_seconds: float = 60.0  # `spool run-one`: how long its one claim waits for the server
    # How many tasks /metrics and the dashboard's task filter name one by one (the busiest); the
    # rest are summed as "_other" (runner.api.metrics): their number is the submitters' choice.
    max_tasks_shown: int = 50
    # The same for queue names (a job's queue is the submitter's choice too): queues with limits
    # first, then the busiest; the rest summed as "_other" in /metrics and one row on the dashboard.
    max_queues_shown: int = 50
    # name -> "default", "config.yaml", "env SPOOL_X" or "flag --x"; names absent are defaults.
    sources: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}), compare=False, repr=False)
    # Things worth a word that are not errors (an unknown SPOOL_* name); the CLI prints them.
    warnings: tuple[str, ...] = field(default=(), compare=False, repr=False)

    def describe(self) -> list[tuple[str, object, str]]:
        """(name, value, source) for every setting, in declaration order."""
        return [(name, getattr(self, name), self.sources.get(name, "default")) for name in setting_names()]


def setting_names() -> list[str]:
    """Every setting's name, in declaration order (``sources`` is not a setting)."""
    return [f.name for f in fields(Settings) if f.name not in ("sources", "warnings")]


_DURATION = re.compile(r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*(ms|s|m|h|d)?")
_SECONDS_PER = {None: 1.0, "ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION_HINT = "a duration like 30, 30s, 5m or 1h"


def parse_duration(text: str | float) -> float:
    """Seconds from ``30``, ``1.5``, ``"30s"``, ``"5m"``, ``"1h"``, ``"2d"``, ``"250ms"``.

    Zero is allowed (``--delay 0``); negative, over 100 years (``MAX_DURATION_SECONDS``),
    infinite and other forms raise ``UsageError``.
    """
    seconds: float | None = None
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        seconds = float(text)
    elif isinstance(text, str):
        match = _DURATION.fullmatch(text.strip())
        if match:
            seconds = float(match[1]) * _SECONDS_PER[match[2]]
    if seconds is None or not math.isfinite(seconds) or seconds < 0:
        raise UsageError(f"expected {_DURATION_HINT}, got {text!r}")
    if seconds > MAX_DURATION_SECONDS:
        raise UsageError(f"{text!r} is too far: at most 100 years ({MAX_DURATION_SECONDS:.0f} seconds)")
    return seconds


def _positive_duration(raw: object) -> float:
    seconds = parse_duration(raw)  # type: ignore[arg-type]  # wrong types are refused inside
    if seconds <= 0:
        raise UsageError(f"expected {_DURATION_HINT} above zero, got {raw!r}")
    return seconds


def _optional_duration(raw: object) -> float | None:
    return None if raw is None else _positive_duration(raw)


def _count(raw: object) -> int:
    if isinstance(raw, int) and not isinstance(raw, bool):
        value = raw
    elif isinstance(raw, str) and re.fullmatch(r"[0-9]{1,18}", raw.strip()):
        value = int(raw.strip())
    else:
        raise UsageError(f"expected a whole number, got {raw!r}")
    if value < 1:
        raise UsageError(f"expected a whole number of at least 1, got {raw!r}")
    return value


def _tries(raw: object) -> int:
    value = _count(raw)
    if value > MAX_TRIES:
        raise UsageError(f"expected a whole number from 1 to {MAX_TRIES}, got {raw!r}")
    return value


_SIZE = re.compile(r"([0-9]{1,15})\s*(b|kb|kib|mb|mib|gb|gib)?", re.IGNORECASE)
_BYTES_PER = {None: 1, "b": 1, "kb": 10**3, "kib": 2**10, "mb": 10**6, "mib": 2**20, "gb": 10**9, "gib": 2**30}


def _size(raw: object, maximum: int) -> int:
    if isinstance(raw, int) and not isinstance(raw, bool):
        value = raw
    else:
        match = _SIZE.fullmatch(raw.strip()) if isinstance(raw, str) else None
        if match is None:
            raise UsageError(f"expected a size like 65536, 64KiB or 1MiB, got {raw!r}")
        unit = match[2].lower() if match[2] else None
        value = int(match[1]) * _BYTES_PER[unit]
    if value < 1:
        raise UsageError(f"expected a size of at least 1 byte, got {raw!r}")
    if value > maximum:
        raise UsageError(f"{raw!r} is too big: at most {maximum:,} bytes ({maximum // 2**20} MiB)")
    return value


def _job_size(raw: object) -> int:
    return _size(raw, MAX_JOB_BYTES)


def _result_size(raw: object) -> int:
    return _size(raw, MAX_RESULT_BYTES)


_TRUE = ("true", "1", "yes")
_FALSE = ("false", "0", "no")


def _flag(raw: object) -> bool:
    if isinstance(raw, bool):
        return raw
    word = str(raw).strip().lower() if isinstance(raw, (str, int)) else None
    if word in _TRUE:
        return True
    if word in _FALSE:
        return False
    raise UsageError(f"expected true or false (or 1/0, yes/no), got {raw!r}")


_MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")


def _modules(raw: object) -> tuple[str, ...]:
    if isinstance(raw, str):
        names = [name.strip() for name in raw.split(",") if name.strip()]
    elif isinstance(raw, (list, tuple)) and all(isinstance(name, str) for name in raw):
        names = [name.strip() for name in raw]
    else:
        raise UsageError(f"expected a list of module names, got {raw!r}")
    for name in names:
        if not _MODULE.fullmatch(name):
            raise UsageError(f"expected module names like myapp.tasks, got {name!r}")
    return tuple(dict.fromkeys(names))


def _one_of(choices: tuple[str, ...]) -> Callable[[object], str]:
    def parse(raw: object) -> str:
        word = raw.strip().lower() if isinstance(raw, str) else None
        if word not in choices:
            raise UsageError(f"expected one of {', '.join(choices)}, got {raw!r}")
        return word

    return parse


_PARSERS: dict[str, Callable[[object], object]] = {
    "lease_seconds": _positive_duration,
    "heartbeat_seconds": _optional_duration,
    "max_tries": _tries,
    "backoff_base_seconds": _positive_duration,
    "backoff_max_seconds": _positive_duration,
    "max_pending": _count,
    "poll_seconds": _positive_duration,
    "grace_seconds": _positive_duration,
    "default_timeout_seconds": _positive_duration,
    "max_job_bytes": _job_size,
    "max_result_bytes": _result_size,
    "max_log_bytes": _result_size,
    "max_parent_results_bytes": _result_size,
    "tasks": _modules,
    "log_level": _one_of(LOG_LEVELS),
    "log_format": _one_of(LOG_FORMATS),
    "group_shared": _flag,
    "reconcile_seconds": _positive_duration,
    "unhandled_grace_seconds": _positive_duration,
    "http_idle_seconds": _positive_duration,
    "http_head_seconds": _positive_duration,
    "http_body_seconds": _positive_duration,
    "tls_handshake_seconds": _positive_duration,
    "claim_patience_seconds": _positive_duration,
    "max_tasks_shown": _count,
    "max_queues_shown": _count,
}


def _read_config(path: Path) -> Mapping[object, object]:
    try:
        # A symlink inside a spool is refused, never followed; a FIFO planted as config.yaml
        # can't hang the open. One byte over the limit is enough to be refused.
        data = fs.read_small(str(path), CONFIG_MAX_BYTES + 1)
    except FileNotFoundError:
        return {}
    except OSError as err:
        raise UsageError(f"{path}: cannot read ({err.strerror})") from None
    if data is None:
        raise UsageError(f"{path}: not a regular file")
    try:
        loaded = load_yaml(data, max_bytes=CONFIG_MAX_BYTES, source=str(path))
    except InvalidJob as err:
        raise UsageError(str(err)) from None
    if loaded is None:
        return {}
    if not isinstance(loaded, dict):
        raise UsageError(f"{path}: expected a mapping of settings, got a {type(loaded).__name__}")
    for key in loaded:
        if key not in _PARSERS:
            close = _close_matches(str(key), _PARSERS)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise UsageError(f"{path.name}: {key}: not a setting{hint}")
    return loaded


def load_settings(
    config_path: Path | None,
    environ: Mapping[str, str],
    flags: Mapping[str, object | None],
) -> Settings:
    """Build the settings in force: flag > ``SPOOL_<NAME>`` > config.yaml > default.

    Flags set to None and empty environment values count as not given. Raises ``UsageError``.
    """
    for name in flags:
        if name not in _PARSERS:
            raise UsageError(f"flag --{name.replace('_', '-')}: not a setting")
    config = _read_config(config_path) if config_path is not None else {}
    config_label = config_path.name if config_path is not None else ""
    values: dict[str, Any] = {}  # each value of the type its parser makes, the type its field has
    sources: dict[str, str] = {}
    for name, parse in _PARSERS.items():
        env_name = f"SPOOL_{name.upper()}"
        if flags.get(name) is not None:
            raw, where = flags[name], f"flag --{name.replace('_', '-')}"
        elif environ.get(env_name):
            raw, where = environ[env_name], f"env {env_name}"
        elif name in config:
            raw, where = config[name], config_label
        else:
            sources[name] = "default"
            continue
        try:
            values[name] = parse(raw)
        except UsageError as err:
            raise UsageError(f"{where}: {name}: {err}") from None
        sources[name] = where
    _check_heartbeat(values, sources)
    return Settings(
        **values,
        sources=MappingProxyType(sources),
        warnings=tuple(environment_warnings(environ)),
    )


def environment_warnings(environ: Mapping[str, str]) -> list[str]:
    """A line for each ``SPOOL_*`` name that is neither a setting nor one spool uses (a typo)."""
    known = [f"SPOOL_{name.upper()}" for name in _PARSERS] + list(OTHER_ENV_NAMES)
    lines = []
    for name in sorted(environ):
        if name.startswith("SPOOL_") and name not in known:
            # Compared without the shared prefix, which would make every name look close.
            close = _close_matches(name[6:].upper(), [other[6:] for other in known])
            lines.append(f"{name} is not a setting" + (f"; did you mean SPOOL_{close[0]}?" if close else ""))
    return lines


def _close_matches(word: str, choices: Iterable[str]) -> list[str]:
    """The one choice closest to a mistyped ``word``, if any is close enough."""
    import difflib  # start-up: only a typo needs it (~1 ms of every command otherwise)

    return difflib.get_close_matches(word, list(choices), n=1)


def _check_heartbeat(values: Mapping[str, object], sources: Mapping[str, str]) -> None:
    """A heartbeat must come at least twice per lease term: one late or lost beat must not cost
    the lease, or two healthy workers end up running the same job. Left unset, the worker beats
    at a third of the term the coordinator publishes."""
    heartbeat = values.get("heartbeat_seconds")
    if heartbeat is None:
        return
    lease = values.get("lease_seconds", Settings.lease_seconds)
    if heartbeat > lease / 2:  # type: ignore[operator]
        raise UsageError(
            f"{sources['heartbeat_seconds']}: heartbeat_seconds: {heartbeat:g}s cannot keep a lease of "
            f"{lease:g}s (lease_seconds from {sources.get('lease_seconds', 'default')}); it must be at most "
            f"half of lease_seconds, or unset (a third of the term the coordinator publishes)"
        )
