"""The README's examples run as written: its quick start, "Using it" and the handler.

A fenced block right after ``<!-- readme-test: run ... -->`` is run (``sh`` with bash, ``python``
with this interpreter), and one after ``<!-- readme-test: file PATH -->`` is written to PATH first;
all in one folder of the test's own, in the README's order, against real ``spool`` processes. The
one line not run is the quick start's install (``python3 -m venv ... pip install .``): the test
runs the ``spool`` this checkout installed (and Python with ``-P``: see below).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from support import ROOT

MARKED = re.compile(r"<!-- readme-test: (run|file ([^ ]+))[^>]*-->\n```(\w+)\n(.*?)\n```", re.S)
INSTALL = re.compile(r"^python3 -m venv .*pip install \.$")
BLOCK_SECONDS = 120


@dataclass(frozen=True)
class Block:
    kind: str  # "run" or "file"
    path: str | None
    language: str
    text: str


def readme_blocks() -> list[Block]:
    text = (ROOT / "README.md").read_text()
    return [
        Block("file" if path else "run", path or None, language, body)
        for kind, path, language, body in MARKED.findall(text)
    ]


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """The user's folder: the data the examples name."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "book.txt").write_text("to be or not to be\n")
    (work / "notes.txt").write_text("not a picture\n")
    for name in ("a.jpg", "b.jpg", "c.jpg"):
        (work / name).write_bytes(b"\xff\xd8\xff\xe0 a JPEG's first bytes " + name.encode())
    return work


def test_the_readme_marks_the_quick_start_the_handler_and_using_it() -> None:
    blocks = readme_blocks()
    assert [(b.kind, b.language) for b in blocks] == [
        ("run", "sh"),
        ("run", "sh"),
        ("file", "python"),
        ("run", "python"),
    ]
    assert blocks[2].path == "myapp/tasks.py" and "..." not in blocks[2].text


def test_the_readme_examples_run_as_written(folder: Path) -> None:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("SPOOL_")},
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": "",
    }
    blocks = readme_blocks()
    for block in blocks:
        if block.kind == "file":
            assert block.path is not None
            (folder / block.path).parent.mkdir(parents=True, exist_ok=True)
            (folder / block.path).write_text(block.text + "\n")
    sessions: list[int] = []
    outputs = []
    try:
        for number, block in enumerate(b for b in blocks if b.kind == "run"):
            if block.language == "sh":
                lines = [line for line in block.text.splitlines() if not INSTALL.match(line)]
                argv = ["bash", "-c", "\n".join(lines)]
            else:
                # -P: this checkout's editable install maps `spool` with a finder that a folder
                # ./spool (the spool itself) would shadow; a plain `pip install .` is not shadowed
                argv = [sys.executable, "-P", "-c", block.text]
            # files, not pipes: a `spool run &` the block leaves behind keeps its output open
            out_file, err_file = folder.parent / f"block-{number}.out", folder.parent / f"block-{number}.err"
            with open(out_file, "wb") as out_fd, open(err_file, "wb") as err_fd:
                proc = subprocess.Popen(argv, cwd=folder, env=env, stdout=out_fd, stderr=err_fd, start_new_session=True)
            sessions.append(proc.pid)  # what the block left running is in this process group
            proc.wait(timeout=BLOCK_SECONDS)
            out, err = out_file.read_text(), err_file.read_text()
            assert proc.returncode == 0 and "Traceback" not in err, (block.text, out, err)
            outputs.append(out)
    finally:
        for group in sessions:
            _end_group(group)
    demo, using, python = outputs
    assert "done" in demo
    assert '"words": 6' in using  # spool result of book.txt
    assert "Reject: not a JPEG" in using  # cat spool/dead/*.yaml: why the thumbnail of notes.txt died
    assert "'path': 'a.256.jpg'" in python
    assert all((folder / f"{name}.256.jpg").exists() for name in "abc")


def _end_group(group: int) -> None:
    """SIGTERM what a block left running (spool run stops its children), SIGKILL what stays."""
    try:
        os.killpg(group, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:  # a condition with a deadline: the group is gone
        try:
            os.killpg(group, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    os.killpg(group, signal.SIGKILL)
