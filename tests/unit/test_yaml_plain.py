"""spool.yaml.plain writes what PyYAML's emitters write, byte for byte, or declines; reads it back.

The reference is ``spool.yaml.dump``'s pure-Python emitter (and libyaml's where it is used). The
generators below mostly make values the plain writer takes, so every rule of it is held to the
reference many times over; what it declines takes the emitters, which test_yaml_differential.py
holds to the same reference.
"""

from __future__ import annotations

import itertools
import random
import re
import string

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from spool.base.records import Attempt, Lease
from spool.job import Job, JobFile, encode
from spool.yaml import dump as yamldump
from spool.yaml import emit as yamlemit
from spool.base.errors import InvalidJob
from spool.yaml import parse as yamlparse
from spool.yaml.plain import NotPlain, Plain
from spool.yaml.schema import RESOLVERS_BY_FIRST
from spool.yaml.safe import dump_yaml, load_yaml

ID = "01JDZ8Q3V7K2M4N5P6R7S8T9VW"
# Words near every rule: resolvers (bools, nulls, numbers, times, sexagesimals), indicators,
# ends with ':', leading '-' or '.', characters outside the plain alphabet.
WORDS = [
    "a", "echo", "map-worker", "host-a:4001", "x.y/z", "a+b", "_", "0", "12", "-3", "1.5", "1e3", "0x1F",
    "0o17", "0123", "1_000", "1:20", "12:30:00", "2026-12-01", "2026-12-01T17:00:00.125Z", "on", "Off",
    "yes", "No", "y", "N", "true", "False", "null", "Null", "~", ".inf", ".nan", "inf", "nan", "a:", ":a",
    "-a", "-", ".a", "..", "...", "---", "a b", "", "é", "a'b", 'a"b', "#x", "a#b", "a\nb", "+1", "+",
    "k" * 61, "k" * 200, "1.", ".5", "=", "<<", "0b101", "1,000", "190:20:30", "a/b:c", "x-", "v1.2.3",
    "/", "/data/in.txt", "//x:", "/-",
    "hello world", "a b c", "a - b", "x :y", "a  b", "a b:", "a: b", "a :", "2001-12-14 21:59:43.10 -5",
    "on off", "y", "1 2", "a b#c", "a #b", "a b ", " a b", "- a", "a\tb", "w " * 38 + "w", "w " * 39 + "w",
    "/data/my file.txt", "12:30 pm", "a b'c",
]  # fmt: skip
SCALARS: list[object] = [None, True, False, 0, -7, 10**20, 1.5, -0.0, 3600.0, 0.1, 1e16, 1e-7, 2.5e-10, float("inf")]


def reference(value: object) -> bytes:
    return yamlemit._dump_with(yamlemit._Dumper, value)


def check(value: object) -> bool:
    """The plain writer gives the reference's bytes or declines; True when it wrote them. The
    plain reader reads them back as the pure-Python parser does, and its mutants too."""
    try:
        out = yamldump.PLAIN.dump(value)
    except NotPlain:
        assert dump_yaml(value) == reference(value)
        return False
    assert out == reference(value), value
    assert out == yamlemit._dump_with(yamlemit._FastDumper, value)
    assert repr(yamldump.PLAIN.load(out)) == repr(_as_loaded(value)) == pure_load(out)
    return True


def pure_load(data: bytes) -> str:
    """The reference parser's answer (its value's repr, or "refused")."""
    try:
        return repr(yamlparse._load_single(yamlparse._Loader(data.decode("utf-8"))))
    except (yaml.YAMLError, UnicodeDecodeError, InvalidJob):
        return "refused"


def check_read(data: bytes) -> bool:
    """The plain reader declines ``data`` or reads it as the pure-Python parser does."""
    try:
        value = yamldump.PLAIN.load(data)
    except NotPlain:
        return False
    assert repr(value) == pure_load(data), data
    assert repr(load_yaml(data, max_bytes=1 << 20, source="s")) == repr(value)
    return True


def mutate(rng: random.Random, data: bytes) -> bytes:
    """One small edit where it matters to a line reader: a space, a colon, a dash, a quote, a line."""
    text = data.decode("ascii")
    at = rng.randrange(len(text) + 1)
    roll = rng.random()
    if roll < 0.6:
        return (
            text[:at] + rng.choice([" ", ":", "- ", "'", "\n", "#", "  ", "0", "e", ".", "-", "{}"]) + text[at:]
        ).encode()
    if roll < 0.8:
        return (text[:at] + text[at + 1 :]).encode()
    lines = text.split("\n")
    line = rng.randrange(len(lines))
    lines.insert(line, lines[line])
    return "\n".join(lines).encode()


def _as_loaded(value: object) -> object:
    if isinstance(value, (list, tuple)):
        return [_as_loaded(item) for item in value]
    if isinstance(value, dict):
        return {key: _as_loaded(item) for key, item in value.items()}
    return value


TAKEN = [
    word
    for word in WORDS
    if re.fullmatch(r"[A-Za-z0-9_/][A-Za-z0-9_./+:-]*( [A-Za-z0-9_./+:-]+)*", word) and ": " not in word + " "
]
KEYS = ["a", "echo", "map-worker", "host-a:4001", "x.y/z", "a+b", "_", "k1", "v1.2.3", "x-", "a/b:c", "n" * 60]
KEYS += ["n", "y", "1"]  # written in quotes: they read back as a boolean, a number


def word(rng: random.Random) -> str:
    return rng.choice(WORDS) if rng.random() < 0.02 else rng.choice(TAKEN)


def key(rng: random.Random) -> str:
    return rng.choice(WORDS) if rng.random() < 0.02 else rng.choice(KEYS)


def random_value(rng: random.Random, depth: int = 0) -> object:
    roll = rng.random()
    if depth > 4 or roll < 0.6:
        return word(rng) if rng.random() < 0.6 else rng.choice(SCALARS[:10] if rng.random() < 0.9 else SCALARS)
    if roll < 0.75 and depth == 0:
        return [random_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    if roll < 0.8:
        return [word(rng) if rng.random() < 0.5 else {key(rng): random_value(rng, depth + 2)}]
    return {key(rng): random_value(rng, depth + 1) for _ in range(rng.randint(0, 4))}


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_generated_plain_values_are_written_as_the_emitters_write_them(seed: int) -> None:
    rng = random.Random(seed)
    written = 0
    read_mutants = 0
    for _ in range(3000):
        value = {key(rng): random_value(rng) for _ in range(rng.randint(1, 5))}
        if check(value):
            written += 1
            data = yamldump.PLAIN.dump(value)
            read_mutants += sum(check_read(mutate(rng, data)) for _ in range(3))
    assert written > 1000  # the plain writer took a good share: its rules were exercised
    assert read_mutants > 100  # and some mutants were still plain: read as the reference reads them


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=string.ascii_letters + string.digits + "_./+:-' #", max_size=12), st.sampled_from(SCALARS))
def test_any_short_string_as_key_or_value(text: str, scalar: object) -> None:
    check({"k": text, "n": scalar, "l": [text, {"v": text}]})
    check({text: scalar})


def test_every_job_file_shape_is_written_as_before() -> None:
    job = Job(
        id=ID,
        key=ID,
        task="wordcount",
        args={"path": "/data/in.txt", "count": 3},
        not_before="2026-12-01T18:00:00.000Z",
    )
    pending = JobFile(job=job, submitted_at="2026-12-01T17:00:00.000Z")
    lease = Lease(ID, "host-a:4001", 1, "2026-12-01T17:01:00.125Z")
    opened = Attempt(1, "host-a:4001", "2026-12-01T17:01:00.125Z", None, None, None)
    leased = pending.replace(attempt=1, tries=1, lease=lease, attempts=(opened,))
    done = pending.replace(
        attempt=1, tries=1, attempts=(opened.closed(outcome="done", ended="2026-12-01T17:01:02.000Z", error=None),)
    )
    for job_file in (pending, leased, done):
        head, spec, runner = job_file.mapping_parts()
        for part in ({**head, **spec}, runner, job_file.to_mapping()):
            assert check(part), part  # the common shapes all take the plain writer
        assert encode(job_file) == reference(job_file.to_mapping())


@pytest.mark.parametrize(
    "value",
    [
        [1],
        "x",
        5,
        {},
        {"a": [[1]]},
        {1: "x"},
        {"k": "a: b"},
        {"k": "w " * 39 + "w"},
        {"a b": 1},
        {"k": 1e16},
        {"k": float("nan")},
        {"k": "é"},
    ],
)
def test_what_it_declines(value: object) -> None:
    with pytest.raises(NotPlain):
        yamldump.PLAIN.dump(value)
    assert dump_yaml(value) == reference(value)


@pytest.mark.parametrize(
    "data",
    [
        b"a: 1\na: 2\n",  # a duplicate key
        b"a: 1 # c\n",
        b"a:  1\n",
        b"a: !!str 1\n",
        b"a: &x 1\nb: *x\n",
        b"a: 0123\n",
        b"a: 1_000\n",
        b"a: -0\n",
        b"a: yes\n",
        b"a: 'on\n",
        b"a: 'x'\n",  # quoted where the writer would not quote
        b"a:\n  b: 1\n c: 2\n",
        b"a:\n- 1\n  - 2\n",
        b"a: 1",
        b"---\na: 1\n",
        b"a: 1\n...\n",
        b"a: " + b"9" * 5000 + b"\n",
        b"a:\n" + b"".join(b"  " * n + b"b:\n" for n in range(1, 3000)) + b"  " * 3000 + b"c: 1\n",
    ],
)
def test_what_the_reader_declines_the_parsers_decide(data: bytes) -> None:
    with pytest.raises(NotPlain):
        yamldump.PLAIN.load(data)


def test_the_joined_traps_match_where_any_resolver_does_and_the_verdicts_kept_are_the_same() -> None:
    rng = random.Random(4)
    texts = WORDS + [
        "".join(rng.choice("0123456789-:._eE+xobTZyn") for _ in range(rng.randint(1, 12))) for _ in range(5000)
    ]
    fresh = Plain(yamldump.PLAIN.traps)
    for text in texts:
        entries = RESOLVERS_BY_FIRST.get(text[:1], [])
        joined = yamldump.PLAIN.traps.get(text[:1])
        assert bool(joined and joined.match(text)) == any(p.match(text) for _tag, p in entries), text
        try:
            verdict = fresh.word(text)
        except NotPlain:
            continue
        assert fresh.word(text) == verdict == Plain(yamldump.PLAIN.traps).word(text)  # kept, and as found anew


def test_every_string_pyyaml_reads_as_something_else_is_quoted() -> None:
    """spool's YAML 1.1 table (``schema.YAML11_READINGS``, written from the 1.1 type definitions
    so that a plain document needs no PyYAML) catches every string PyYAML's own resolvers read as
    another type: each short string over the characters that matter, dates and times, and random
    numeric ones. Quoting a few more than PyYAML would is allowed; fewer is a misread file."""
    resolver = yaml.resolver.Resolver()
    rng = random.Random(11)
    alphabet = "0123456789_.:+-eExXbBoOtTyYnNa~<= "
    texts = [""] + ["".join(chars) for size in (1, 2, 3) for chars in itertools.product(alphabet, repeat=size)]
    texts += ["".join(rng.choice("0123456789_.:+-eE") for _ in range(rng.randint(4, 14))) for _ in range(50_000)]
    times = ["", "T1:2:3", " 10:20:30.5Z", "t10:20:30-5"]  # dates, then dates with times
    dates = [f"{rng.randint(0, 9999):04d}-{rng.randint(0, 99)}-{rng.randint(0, 99)}" for _ in range(5000)]
    texts += [date + rng.choice(times) for date in dates]
    texts += WORDS + [word.upper() for word in WORDS] + [word.title() for word in WORDS]
    missed = [
        text
        for text in texts
        if resolver.resolve(yaml.ScalarNode, text, (True, False)) != "tag:yaml.org,2002:str"
        and not any(pattern.match(text) for _tag, pattern in RESOLVERS_BY_FIRST.get(text[:1], ()))
    ]
    assert not missed, missed[:20]
    for text in ("on", "1:20", "2026-12-07", "0b101", "1_000", ".5", "<<", "="):
        assert yaml.safe_load(dump_yaml({"k": text})) == {"k": text}, text


def test_spaced_strings_are_written_as_the_emitters_write_them_up_to_the_fold() -> None:
    """Around the emitters' width (80 columns), where they fold a spaced string onto the next line,
    at several columns (key lengths, nesting, sequences): written as they write it, or declined."""
    taken = 0
    for key_length in (1, 5, 20):
        for length in range(50, 95):
            for words in ("ab cd ", "on of ", "2001-12-14 21:59:43.10 -5 x"):
                text = (words * 30)[:length].strip()
                k = "k" * key_length
                for value in ({k: text}, {k: [text]}, {"a": {k: text}}, {"a": [{k: text, "b": text}]}):
                    taken += check(value)
    assert taken > 500  # the writer took the short ones; check() held each to the reference
