"""spool.yaml.safe: what untrusted YAML may and may not do, and that spool's own writes read back."""

from __future__ import annotations

import math
import time

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from spool.base.errors import InvalidJob
from spool.yaml.safe import MAX_DEPTH, dump_yaml, load_yaml

LIMIT = 65536


def load(text: str | bytes, max_bytes: int = LIMIT) -> object:
    data = text.encode() if isinstance(text, str) else text
    return load_yaml(data, max_bytes=max_bytes, source="job.yaml")


def refused(text: str | bytes, max_bytes: int = LIMIT) -> str:
    with pytest.raises(InvalidJob) as info:
        load(text, max_bytes)
    message = str(info.value)
    assert message.startswith("job.yaml: ")
    assert "\n" not in message
    return message


# The classic "billion laughs": a few hundred bytes that expand to 10**9 strings.
ALIAS_BOMB = """\
a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
"""


def test_alias_bomb_is_refused_at_its_first_anchor() -> None:
    assert 300 < len(ALIAS_BOMB) < 400
    assert refused(ALIAS_BOMB) == "job.yaml: anchors are not allowed at line 1, column 4"


def test_anchor_and_alias_are_each_refused() -> None:
    assert "anchors are not allowed" in refused("a: &x 1\n")
    assert "aliases are not allowed at line 2, column 4" in refused("a: 1\nb: *x\n")


@pytest.mark.parametrize("opener", ["[", "{", "[{"])
def test_sixty_kilobytes_of_openers_is_refused_quickly(opener: str) -> None:
    data = opener * (60_000 // len(opener))
    start = time.monotonic()
    message = refused(data)
    assert time.monotonic() - start < 0.2  # the scanner stops at the 33rd, not 1024 later
    assert f"nesting is deeper than {MAX_DEPTH} levels" in message


def test_depth_limit_is_exact_in_flow_and_block_style() -> None:
    assert load("[" * MAX_DEPTH + "]" * MAX_DEPTH) is not None
    refused("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1))
    block = "".join(f"{'  ' * i}k{i}:\n" for i in range(MAX_DEPTH + 1)) + "  " * (MAX_DEPTH + 1) + "v"
    assert "nesting is deeper" in refused(block)


@pytest.mark.parametrize(
    "text",
    [
        '!!python/object/apply:os.system ["echo hi"]',
        "a: !!python/object/apply:os.system [echo hi]",
        "a: !!str 1",
        "a: !!int '1'",
        "a: !foo x",
        "a: ! x",
        "a: !<tag:yaml.org,2002:str> x",
        "a: !!set {x: null}",
        "!!map {a: 1}",
        "a: !!binary aGk=",
        "%TAG !e! tag:example.com,2000:\n---\na: !e!x 1",
    ],
)
def test_every_explicit_tag_is_refused(text: str) -> None:
    assert "tags are not allowed" in refused(text)


def test_python_tag_message_names_the_tag_and_place() -> None:
    message = refused('!!python/object/apply:os.system ["echo hi"]')
    assert message.startswith("job.yaml: tags are not allowed ('!!python/object/apply:os.system")
    assert message.endswith("at line 1, column 1")


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("0123", 123),
        ("-0123", -123),
        ("+7", 7),
        ("0o17", 15),
        ("0x1F", 31),
        ("0b101", "0b101"),
        ("1_000", "1_000"),
        ("1:20", "1:20"),
        ("2026-11-30", "2026-11-30"),
        ("2026-11-30T12:00:00Z", "2026-11-30T12:00:00Z"),
        ("on", "on"),
        ("yes", "yes"),
        ("No", "No"),
        ("OFF", "OFF"),
        ("y", "y"),
        ("true", True),
        ("True", True),
        ("TRUE", True),
        ("false", False),
        ("FALSE", False),
        ("tRUE", "tRUE"),
        ("~", None),
        ("null", None),
        ("Null", None),
        ("NULL", None),
        ("nULL", "nULL"),
        ("", None),
        ("1.5", 1.5),
        ("-.5", -0.5),
        ("1.", 1.0),
        ("1e3", 1000.0),
        ("6.02E+23", 6.02e23),
        (".inf", math.inf),
        ("-.Inf", -math.inf),
        ("+.INF", math.inf),
        ("=", "="),
        ("<<", "<<"),
        ("'0123'", "0123"),
        ('"true"', "true"),
        ("٣", "٣"),  # a non-ASCII digit stays a string
    ],
)
def test_scalars_resolve_by_the_yaml_1_2_core_schema(text: str, value: object) -> None:
    loaded = load(f"v: {text}\n")
    assert loaded == {"v": value}
    assert type(loaded["v"]) is type(value)  # type: ignore[index]


def test_nan_loads_as_nan() -> None:
    loaded = load("v: .NaN")
    assert isinstance(loaded, dict) and math.isnan(loaded["v"])


def test_yaml_1_1_traps_read_as_written() -> None:
    assert load("on: yes\nmode: 0123\nday: 2026-11-30\n") == {
        "on": "yes",
        "mode": 123,
        "day": "2026-11-30",
    }


@pytest.mark.parametrize("text", ["a: 1\na: 2\n", "{a: 1, a: 2}", "1: x\n'1': y\n1: z\n"])
def test_duplicate_keys_are_refused(text: str) -> None:
    assert "duplicate key" in refused(text)


def test_duplicate_key_message_says_which_and_where() -> None:
    assert refused("a: 1\nb: 2\na: 3\n") == "job.yaml: duplicate key 'a' at line 3, column 1"


def test_non_scalar_key_is_refused() -> None:
    assert "a mapping key must be a scalar" in refused("? [a]\n: b\n")


def test_nul_byte_is_refused_with_its_place() -> None:
    assert refused(b"a: 1\nb: x\x00y\n") == ("job.yaml: character #x0000 is not allowed at line 2, column 5")


def test_invalid_utf8_is_refused() -> None:
    assert refused(b"a: \xff\xfe\n") == "job.yaml: not valid UTF-8 at byte 3"
    assert "not valid UTF-8" in refused(b"a: \xed\xa0\x80")  # an encoded surrogate


def test_size_is_checked_before_parsing() -> None:
    assert load(b"a: 1", max_bytes=4) == {"a": 1}
    assert refused(b"a: &x [*x", max_bytes=8) == "job.yaml: 9 bytes is over the limit of 8"


def test_syntax_errors_are_one_line_with_line_and_column() -> None:
    assert refused("a: 1\nb: c: d\n") == ("job.yaml: mapping values are not allowed here at line 2, column 5")
    assert "while scanning a quoted scalar" in refused("a: 'open\n")


def test_only_one_document() -> None:
    assert "expected one document, found another at line 2" in refused("a\n---\nb\n")


def test_an_integer_too_long_for_python_is_refused() -> None:
    assert "number is too large" in refused("n: " + "9" * 5000)


def test_empty_document_is_none() -> None:
    assert load("") is None
    assert load("# only a comment\n") is None


def test_byte_order_mark_is_accepted() -> None:
    assert load(b"\xef\xbb\xbfa: 1\n") == {"a": 1}


def test_dump_quotes_every_string_a_reader_could_take_for_something_else() -> None:
    traps = [
        "0o17",
        "0123",
        "123",
        "1.5",
        ".inf",
        "true",
        "null",
        "~",
        "",
        "yes",
        "on",
        "N",
        "2026-11-30",
        "1:20",
        "1_000",
        "0b11",
        "<<",
        "=",
    ]
    text = dump_yaml({"v": traps}).decode()
    for trap in traps:
        assert f"- '{trap}'\n" in text or f'- "{trap}"\n' in text
    assert load(text) == {"v": traps}


def test_dump_is_block_style_in_insertion_order_with_unicode() -> None:
    value = {"z": 1, "a": [True, None, 2.5], "é": "naïve", "m": {}}
    assert dump_yaml(value).decode() == ("z: 1\na:\n- true\n- null\n- 2.5\né: naïve\nm: {}\n")


def test_dump_writes_multi_line_strings_as_literal_blocks() -> None:
    text = "Traceback (most recent call last):\n  File x\nValueError: no\n"
    dumped = dump_yaml({"error": text})
    assert dumped.startswith(b"error: |")
    assert load(dumped) == {"error": text}


def test_dump_never_writes_anchors_for_shared_values() -> None:
    shared = {"x": [1]}
    dumped = dump_yaml({"a": shared, "b": shared})
    assert b"&" not in dumped
    assert load(dumped) == {"a": shared, "b": shared}


def test_dump_tuples_as_lists_and_refuses_other_types() -> None:
    assert load(dump_yaml({"t": ("a", "b")})) == {"t": ["a", "b"]}
    with pytest.raises(TypeError, match="set"):
        dump_yaml({"s": {1}})
    with pytest.raises(TypeError, match="bytes"):
        dump_yaml(b"x")


def test_dump_refuses_what_load_would_refuse_as_too_deep() -> None:
    ok: object = "leaf"
    for _ in range(MAX_DEPTH):
        ok = [ok]
    assert load(dump_yaml(ok)) == ok
    with pytest.raises(InvalidJob, match="nesting"):
        dump_yaml([ok])


def depth(value: object) -> int:
    if isinstance(value, dict):
        return 1 + max(map(depth, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(depth, value), default=0)
    return 0


scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False)
    | st.text()
    | st.sampled_from(
        [
            "0123",
            "0o17",
            "0x1F",
            "yes",
            "on",
            "~",
            "2026-11-30",
            "1:20",
            "1e3",
            ".inf",
            "a\nb",
            " a",
            "a ",
            "\n",
            "- a",
            "#",
            "a: b",
            "'",
            '"',
            "\t",
        ]
    )
)
json_like = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(), inner, max_size=5),
    max_leaves=30,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(json_like)
def test_round_trip(value: object) -> None:
    assume(depth(value) < MAX_DEPTH)
    assert load(dump_yaml(value)) == value


yamlish = st.text(alphabet=" \t\n\r-:?[]{},&*!|>'\"#%@`\\0123456789abeflnortuxy.~\x00\x85é")


@settings(max_examples=150, deadline=None)
@given(st.binary(max_size=200) | yamlish.map(str.encode))
def test_any_bytes_load_or_raise_invalid_job(data: bytes) -> None:
    try:
        value = load_yaml(data, max_bytes=150, source="fuzz")
    except InvalidJob as err:
        message = str(err)
        assert message.startswith("fuzz: ") and "\n" not in message
    else:
        assert depth(value) <= MAX_DEPTH
