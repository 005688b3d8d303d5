"""spool.yaml.safe's two paths: libyaml's parser and emitter must give what the pure-Python ones give.

``load_yaml`` parses with libyaml's events where it may and falls back to PyYAML's pure-Python
parser, the reference, on any error or any spot where the two are known to differ; ``dump_yaml``
writes with libyaml's emitter where the bytes come out the same. These tests hold both paths to
the reference on a corpus: every string literal in tests/, every job file shape the runner writes,
and a few thousand generated and mutated documents (a seeded generator, so a failure replays).
"""

from __future__ import annotations

import ast
import math
import random
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

import pytest
import yaml

from spool.yaml import emit as yamlemit
from spool.yaml import parse as yamlparse
from spool.base.errors import InvalidJob
from spool.job import Job, JobFile, decode, encode, encode_measured
from spool.base.records import Attempt, Lease
from spool.yaml.safe import dump_yaml, load_yaml

pytestmark = pytest.mark.skipif(not yaml.__with_libyaml__, reason="PyYAML without libyaml: one path only")

LIMIT = 1 << 22
TESTS = Path(__file__).resolve().parents[1]
ID = "01JDZ8Q3V7K2M4N5P6R7S8T9VW"
TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "/srv/app/tasks.py", line 41, in wordcount\n'
    "    counts = count(open(path).read())\n"
    '  File "/srv/app/tasks.py", line 12, in count\n'
    '    raise ValueError(f"bad word {word!r}: not ascii")\n'
    "ValueError: bad word 'naïve': not ascii\n"
)


def outcome(data: bytes) -> tuple[str, object]:
    try:
        return "value", load_yaml(data, max_bytes=LIMIT, source="s")
    except InvalidJob as err:
        return "refused", str(err)


def pure_outcome(data: bytes) -> tuple[str, object]:
    with mock.patch.object(yamlparse, "_CLoader", None):
        return outcome(data)


def libyaml_value(data: bytes) -> tuple[bool, object]:
    """(whether libyaml's path gave a value, the value) for bytes ``load_yaml`` would give it."""
    assert yamlparse._CLoader is not None
    try:
        return True, yamlparse._load_single(yamlparse._CLoader(data))
    except Exception:  # noqa: BLE001 - every libyaml error falls back to the reference
        return False, None


def same(a: object, b: object) -> bool:
    return repr(a) == repr(b)  # repr: NaN, -0.0 and 1 vs 1.0 vs True all tell apart


def check_load(data: bytes) -> bool:
    """Both paths agree on ``data``; True when libyaml's path gave the value itself."""
    reference, answer = pure_outcome(data), outcome(data)
    assert same(answer, reference), data
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    if not yamlparse._libyaml_may_parse(data):
        return False
    parsed, value = libyaml_value(data)
    if parsed:  # libyaml never accepts what the reference refuses, nor reads it otherwise
        assert reference == ("value", value) and same(value, reference[1]), data
    return parsed


def check_dump(value: object) -> bytes:
    """``dump_yaml`` writes the reference emitter's bytes, and they read back to ``value``."""
    reference = yamlemit._dump_with(yamlemit._Dumper, value)
    out = dump_yaml(value)
    assert out == reference, value
    assert same(load_yaml(out, max_bytes=LIMIT, source="s"), value)
    return out


def on_libyaml_emitter(value: object) -> bool:
    try:
        out = yamlemit._dump_with(yamlemit._FastDumper, value)
    except yamlemit._NotForLibyaml:
        return False
    return not out.endswith(b"\n...\n")


# --- the corpus ---------------------------------------------------------------------------------


def strings_in_tests() -> list[bytes]:
    found: set[bytes] = set()
    for path in sorted(TESTS.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, (str, bytes)):
                value = node.value
                found.add(value.encode("utf-8", "surrogatepass") if isinstance(value, str) else value)
    return sorted(found)


def attempt(n: int, outcome: str | None, error: str | None = None) -> Attempt:
    ended = None if outcome is None else f"2026-12-01T17:0{n % 10}:01.250Z"
    return Attempt(n, f"host-a:{4000 + n}", f"2026-12-01T17:0{n % 10}:00.125Z", ended, outcome, error)


def job_files() -> Iterator[JobFile]:
    """Every shape of file the runner writes: pending, leased, done, retried, dead, invalid drop."""
    plain = Job(id=ID, key=ID, task="wordcount", args={"path": "/data/in.txt", "n": 3})
    fancy = Job(
        id=ID,
        key="invoice-2026-12-01/acme: ünïcödé, #7 — 日本語",
        task="shell",
        args={
            "argv": ["sh", "-c", "echo 'on' && date -u"],
            "text": "line one\nline two\n  indented\nlast",
            "long": "word " * 60 + "end",
            "flags": {"on": True, "yes": "no", "date": "2026-12-01", "octal": "0123", "null": None, "f": 1.5},
            "numbers": [0, -1, 10**30, 2.5e-10, 1e300],
            "empty": {},
            "none": [],
        },
        priority=-5,
        max_tries=10,
        timeout=1.5,
        not_before="2026-12-01T18:00:00.000Z",
        depends_on=("01JDZ8Q3V7K2M4N5P6R7S8T9VA", "01JDZ8Q3V7K2M4N5P6R7S8T9VB"),
    )
    for job in (plain, fancy):
        pending = JobFile(job=job, submitted_at="2026-12-01T17:00:00.000Z")
        yield pending
        lease = Lease(ID, "host-a:4001", 1, "2026-12-01T17:01:00.125Z")
        yield pending.replace(attempt=1, tries=1, lease=lease, attempts=(attempt(1, None),))
        yield pending.replace(attempt=1, tries=1, attempts=(attempt(1, "done"),))
        failed = tuple(attempt(n, "failed", TRACEBACK * n) for n in range(1, 4))
        yield pending.replace(attempt=3, tries=3, backoff_seconds=4.0, error=TRACEBACK, attempts=failed)
        big = "x" * 5000 + "\n" + TRACEBACK
        many = tuple(attempt(n, "expired", big) for n in range(1, 130))
        yield pending.replace(attempt=129, tries=3, reason="failed", error=big, attempts=many, attempts_dropped=7)
        yield pending.replace(reason="skipped", skipped_because="01JDZ8Q3V7K2M4N5P6R7S8T9VA is dead")
        yield pending.replace(dropped_as="my job.yaml", reason="cancelled", error="cancelled by admin")
    hostile = "task: [unclosed\n\t\x01 \u2028 \U0001f600 tabs\tand a BOM \ufeff\n  trailing space \n\n"
    yield JobFile(
        job=Job(id=ID, key=ID, task="invalid", args={}),
        submitted_at="2026-12-01T17:00:00.000Z",
        dropped_as="bad.yaml",
        reason="invalid",
        error="bad.yaml: found character '\\t' that cannot start any token at line 2, column 1",
        original=hostile,
    )


TOKENS = [
    "on", "yes", "No", "y", "~", "null", "", " ", "2026-01-01", "2026-01-01T00:00:00Z", "0123", "0o17",
    "0x1F", "1e3", "1_000", ".inf", "-.INF", ".NaN", "+1", "-0", "1.", ".5", "True", "é", "日本", "😀",
    "a: b", "- x", "#c", "x #c", "'q'", '"d"', "\\", "\x85", "\u2028", "\ufeff", "\r\n", "\n", "\n\n",
    "x\n", " lead", "trail ", "a" * 90, "word " * 30, "%", "@", "`", "!", "&", "*", "|", ">", "?", ":",
    ",", "[", "]", "{", "}", "\x07", "\t", "\ufffd", "\ud800",
]  # fmt: skip
FRAGMENTS = [
    "%YAML 1.2\n", "%YAML 1.1\n", "%YAML 2.0\n", "%TAG !e! tag:e,2000:\n", "---\n", "--- ", "...\n",
    "# c\n", "? a\n", ": b\n", "a: b\n", "a:b\n", "a :b\n", "- x\n", "- - x\n", "  - y\n", "  k: v\n",
    "    deep: 1\n", "k: |\n  lit\n   more\n\n", "k: >-\n  fold\n  ed\n", "k: |+\n  keep\n\n\n",
    "k: |2\n   x\n", 'k: "a\\N\\_\\L\\P\\x41\\u00e9\\U0001F600\\/\\ \\\n  b"\n', "k: 'it''s\n  wrapped'\n",
    "k: plain\n  continued\n", "k: [a, b, {c: d}]\n", "k: {a: [1, 2], b: }\n", "[a, b]: c\n",
    "k: !!str 1\n", "k: ! x\n", "k: &a x\n", "k: *a\n", "k: a # c\n", "k: a#c\n", "k:\r\n  v\r\n",
    "k: v\rw\n", "k: x\x85y\n", "k: x\u2028y\n", "'q': 1\n", '"d": 2\n', "? |\n  blockkey\n: v\n",
    "- ? a\n  : b\n", "k: - x\n", "k: 0x_1\n", "k: +.inf\n", "k: 1e+3\n", "k: 01.5\n", "k: -\n",
    "k: :\n", 'k: "unterminated\n', "k: 'x'y\n", 'k: "\\q"\n', 'k: "\\U00110000"\n', "   \n", "\n",
    "k: x  \n", "k: [\n  a,\n  b\n]\n", "k: [a?b]\n", "k: |#\n", "\ufeffk: v\n", "k: a\tb\n",
]  # fmt: skip
SIGNIFICANT = list("[]{}-:?,#&*!|>'\"%@` \t\n\r\\") + ["\x85", "\u2028", "\ufeff", "é", "\x00", "---", ": ", "- "]


def random_value(rng: random.Random, depth: int = 0) -> object:
    roll = rng.random()
    if depth > 3 or roll < 0.5:
        if rng.random() < 0.6:
            return "".join(rng.choice(TOKENS) for _ in range(rng.randint(1, 3)))
        return rng.choice([None, True, False, 0, -7, 10**20, 1.5, -0.0, 1e300, 3.0, math.inf])
    if roll < 0.75:
        return [random_value(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    keys = ("".join(rng.choice(TOKENS) for _ in range(rng.randint(1, 2))) for _ in range(rng.randint(0, 4)))
    return {key: random_value(rng, depth + 1) for key in keys}


def random_text(rng: random.Random) -> str:
    """Job-file-like text: words, punctuation, accents, line breaks; what libyaml may write."""
    alphabet = "abcdefgh  -:#'\".,?!/é日\n"
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, rng.choice([20, 90, 400]))))


def mutate(rng: random.Random, data: bytes) -> bytes:
    text = data.decode("utf-8", "replace")
    for _ in range(rng.randint(1, 4)):
        at = rng.randrange(len(text) + 1)
        roll = rng.random()
        if roll < 0.4:
            text = text[:at] + rng.choice(SIGNIFICANT) + text[at:]
        elif roll < 0.7:
            text = text[:at] + text[at + rng.randint(1, 3) :]
        elif roll < 0.85:
            text = text[:at] + rng.choice(SIGNIFICANT) + text[at + 1 :]
        else:
            lines = text.split("\n")
            line = rng.randrange(len(lines))
            lines.insert(line, lines[line])
            text = "\n".join(lines)
    return text.encode("utf-8", "surrogatepass")


def generated_documents(seed: int, count: int) -> Iterator[bytes]:
    rng = random.Random(seed)
    styles = [None, None, "'", '"', "|", ">"]
    for _ in range(count):
        value = random_value(rng)
        options = {"default_flow_style": rng.choice([False, True, None]), "width": rng.choice([20, 80, 1000])}
        try:
            dumped = yaml.dump(value, Dumper=yaml.SafeDumper, default_style=rng.choice(styles),
                                        allow_unicode=rng.random() < 0.7, **options)  # fmt: skip
            data = dumped.encode("utf-8", "surrogatepass")
        except (yaml.YAMLError, UnicodeEncodeError):
            data = b"x"
        fragments = "".join(rng.choice(FRAGMENTS) for _ in range(rng.randint(1, 6))).encode("utf-8", "surrogatepass")
        yield from (data, mutate(rng, data), fragments, mutate(rng, fragments))


# --- loading ------------------------------------------------------------------------------------


def test_every_string_in_the_tests_loads_the_same_on_both_paths() -> None:
    corpus = strings_in_tests()
    assert len(corpus) > 1000
    on_libyaml = sum(check_load(data) for data in corpus)
    assert on_libyaml > 200  # the comparison is not vacuous


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_generated_and_mutated_documents_load_the_same_on_both_paths(seed: int) -> None:
    rng = random.Random(seed)
    seeds = [data for data in strings_in_tests() if len(data) < 3000]
    documents = [mutate(rng, rng.choice(seeds)) for _ in range(1500)] + list(generated_documents(seed, 500))
    on_libyaml = sum(check_load(data) for data in documents)
    assert on_libyaml > len(documents) // 5


def test_the_runners_own_files_load_on_libyaml_and_match() -> None:
    for job_file in job_files():
        data = encode(job_file)
        assert check_load(data), data  # even a hostile drop's text, which the file holds escaped
        assert encode(decode(data, source="s", expected_id=ID, max_bytes=LIMIT)) == data


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (b"a: b\tc\n", "found character '\\t' that cannot start any token at line 1, column 5"),
        (b"k: [a?b]\n", "expected ',' or ']', but got '?' at line 1, column 6"),
        (b"k: |#\n", "expected chomping or indentation indicators, but found '#' at line 1, column 5"),
        (b"x\n\xef\xbb\xbf: 1\n", "s: "),
    ],
)
def test_where_libyaml_is_laxer_the_pure_parser_decides(data: bytes, words: str) -> None:
    assert not yamlparse._libyaml_may_parse(data)
    kind, message = outcome(data)
    assert (kind, message) == pure_outcome(data)
    assert kind == "refused" and words in str(message)


def test_an_escape_past_unicode_is_refused_not_a_crash() -> None:
    for data in (b'"\\U00110000"', b'k: ["\\UFFFFFFFF"]'):
        kind, message = outcome(data)
        assert kind == "refused" and "found an escape past U+10FFFF" in str(message)


@pytest.mark.parametrize("size", [60_000, 1_000_000])
def test_deep_nesting_never_crashes_libyaml_path(size: int) -> None:
    # In a child process: a segfault would kill it, not the test run. libyaml's events are fed
    # the openers directly here (load_yaml itself sends so many openers to the pure parser).
    script = (
        "import sys\n"
        "from spool.yaml import parse as yamlparse\nfrom spool.yaml import safe as yamlsafe\n"
        f"data = b'[' * {size}\n"
        "try:\n"
        "    yamlparse._load_single(yamlparse._CLoader(data))\n"
        "except Exception as err:\n"
        "    print(type(err).__name__)\n"
        "try:\n"
        "    yamlsafe.load_yaml(data, max_bytes=1 << 21, source='s')\n"
        "except Exception as err:\n"
        "    print(err)\n"
    )
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    first, second = run.stdout.splitlines()
    assert first in ("_Refused", "ScannerError")
    assert second == pure_outcome(b"[" * size)[1]
    assert second == "s: nesting is deeper than 32 levels at line 1, column 33"


def test_a_document_just_under_the_bound_still_stops_at_the_depth_cap() -> None:
    data = b"[" * yamlparse.MAX_C_NESTING_BYTES
    assert yamlparse._libyaml_may_parse(data) and not yamlparse._libyaml_may_parse(data + b"[")
    assert outcome(data) == pure_outcome(data)
    assert "nesting is deeper than 32 levels" in str(outcome(data)[1])


def test_without_libyaml_the_pure_paths_are_used() -> None:
    data = encode(next(job_files()))
    with mock.patch.object(yamlparse, "_CLoader", None), mock.patch.object(yamlemit, "_FastDumper", yamlemit._Dumper):
        assert dump_yaml(load_yaml(data, max_bytes=LIMIT, source="s")) == data


# --- dumping ------------------------------------------------------------------------------------


def test_the_runners_own_files_are_written_byte_for_byte_as_before_and_on_libyaml() -> None:
    for job_file in job_files():
        mapping = job_file.to_mapping()
        data = check_dump(mapping)
        assert encode(job_file) == data
        assert encode_measured(job_file)[0] == data
        if job_file.original is None:  # the hostile drop's text takes the pure emitter
            assert on_libyaml_emitter(mapping), data


@pytest.mark.parametrize("seed", [1, 2])
def test_generated_values_are_written_as_the_pure_emitter_writes_them(seed: int) -> None:
    rng = random.Random(seed)
    on_libyaml = 0
    for _ in range(1500):
        value = random_value(rng)
        if rng.random() < 0.6:
            value = {"a": value, "text": random_text(rng), "list": [random_text(rng), {"e": random_text(rng)}]}
        if isinstance(value, float) and math.isinf(value):
            continue
        check_dump(value)
        on_libyaml += on_libyaml_emitter(value)
    assert on_libyaml > 200


@pytest.mark.parametrize(
    "text",
    ["😀", "a\tb", "x\r\ny", "trailing \nspace", "ends with space\n ", "keep\n\n", "\ufeff", "nel\x85", "\ud800"],
)
def test_strings_libyaml_writes_otherwise_take_the_pure_emitter(text: str) -> None:
    value = {"k": text}
    assert not on_libyaml_emitter(value)
    check_dump(value)


@pytest.mark.parametrize("key", ["", "k" * 61, "日本", "two\nlines"])
def test_keys_libyaml_writes_otherwise_take_the_pure_emitter(key: str) -> None:
    value = {key: 1}
    assert not on_libyaml_emitter(value)
    check_dump(value)


def test_a_bare_scalar_takes_the_pure_emitter() -> None:
    assert dump_yaml(-7) == b"-7\n...\n" == yamlemit._dump_with(yamlemit._Dumper, -7)
