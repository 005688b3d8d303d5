"""The processes spool starts run the installed spool, whatever folder they start in.

``python -m`` puts the current folder first on ``sys.path``, so a ``spool/`` folder there (a source
checkout, as the README's demo command is run from, or one planted in a shared folder) would be
imported instead of the installed package by every coordinator, worker and attempt child that
``spool run`` and ``spool demo`` start. They are started with ``python -P``; the folders
``--import`` needs are added explicitly.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def test_the_demo_runs_from_a_folder_holding_a_spool_package_that_is_not_ours(tmp_path: Path) -> None:
    planted = tmp_path / "spool"
    planted.mkdir()
    (planted / "__init__.py").write_text('raise ImportError("the spool/ folder in the cwd was imported")\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPOOL_")}
    done = subprocess.run(
        [sys.executable, "-P", "-m", "spool.cli", "demo", "--timeout", "30"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "words in 5 texts" in done.stdout
    assert "the spool/ folder in the cwd was imported" not in done.stderr
