"""The ``kit`` fixture the multi-process tests here share, and the task module their workers import.

The helpers are in tests/crashkit.py (``Kit``: short terms, our own task, /proc helpers); this
file writes its ``crash_tasks`` module to a temporary folder put on PYTHONPATH and makes one
``Kit`` per test.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from crashkit import TASK_MODULE, Kit
from support import Procs

from spool import Spool


@pytest.fixture(scope="session")
def task_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("crash-tasks")
    (folder / "crash_tasks.py").write_text(TASK_MODULE, encoding="utf-8")
    return folder


@pytest.fixture(autouse=True)
def _task_module_on_path(task_dir: Path, clean_environ: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(task_dir), os.environ["PYTHONPATH"]]))


@pytest.fixture
def kit(spool_dir: Path, sp: Spool, procs: Procs) -> Kit:
    return Kit(spool_dir, sp, procs)
