"""The rule for task names, shared by the job schema and the handler registry."""

from __future__ import annotations

import re

TASK_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def is_valid_task_name(name: object) -> bool:
    return isinstance(name, str) and TASK_NAME.fullmatch(name) is not None
