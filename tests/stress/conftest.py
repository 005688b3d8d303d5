"""The stress tier's chaos runs share tests/faults/history.py with the fault suite.

It must be imported under one name, ``history``, as tests/faults' own modules import it: imported
a second time as ``tests.faults.history`` it would register its tasks again under another module,
which the registry refuses (a clash, not a reload), and collection of the whole suite would fail.
"""

from __future__ import annotations

import sys
from pathlib import Path

FAULTS = str(Path(__file__).resolve().parents[1] / "faults")
if FAULTS not in sys.path:
    sys.path.insert(0, FAULTS)
