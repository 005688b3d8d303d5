"""spool.settings: where each value comes from, how it is parsed, and how a bad one is reported."""

from __future__ import annotations

import dataclasses
import inspect
import os
import subprocess
import sys
from pathlib import Path

import pytest

import spool.settings as settings_module
from spool.base.errors import UsageError
from spool.settings import Settings, load_settings, parse_duration


def write_config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    return path


def usage_error(
    config: Path | None = None, environ: dict[str, str] | None = None, flags: dict[str, object | None] | None = None
) -> str:
    with pytest.raises(UsageError) as info:
        load_settings(config, environ or {}, flags or {})
    message = str(info.value)
    assert "\n" not in message
    return message


def test_defaults() -> None:
    got = load_settings(None, {}, {})
    assert got == Settings()
    assert (got.lease_seconds, got.heartbeat_seconds, got.max_tries) == (30.0, None, 3)
    assert (got.backoff_base_seconds, got.backoff_max_seconds) == (1.0, 300.0)
    assert (got.max_pending, got.poll_seconds, got.grace_seconds) == (10000, 2.0, 30.0)
    assert got.default_timeout_seconds == 3600.0
    assert (got.max_job_bytes, got.max_result_bytes) == (65536, 1048576)
    assert (got.tasks, got.log_level, got.log_format, got.group_shared) == ((), "info", "text", False)
    assert set(got.sources.values()) == {"default"}


def test_missing_and_empty_config_files_mean_defaults(tmp_path: Path) -> None:
    assert load_settings(tmp_path / "config.yaml", {}, {}) == Settings()
    assert load_settings(write_config(tmp_path, "# nothing yet\n"), {}, {}) == Settings()


def test_config_beats_default(tmp_path: Path) -> None:
    got = load_settings(write_config(tmp_path, "lease_seconds: 10\nmax_tries: 5\n"), {}, {})
    assert (got.lease_seconds, got.max_tries, got.poll_seconds) == (10.0, 5, 2.0)
    assert got.sources["lease_seconds"] == "config.yaml"
    assert got.sources["poll_seconds"] == "default"


def test_environment_beats_config(tmp_path: Path) -> None:
    config = write_config(tmp_path, "lease_seconds: 10\n")
    got = load_settings(config, {"SPOOL_LEASE_SECONDS": "20"}, {})
    assert got.lease_seconds == 20.0
    assert got.sources["lease_seconds"] == "env SPOOL_LEASE_SECONDS"


def test_flag_beats_environment(tmp_path: Path) -> None:
    config = write_config(tmp_path, "lease_seconds: 10\n")
    got = load_settings(config, {"SPOOL_LEASE_SECONDS": "20"}, {"lease_seconds": "40s"})
    assert got.lease_seconds == 40.0
    assert got.sources["lease_seconds"] == "flag --lease-seconds"


def test_a_flag_of_none_and_an_empty_variable_count_as_not_given(tmp_path: Path) -> None:
    config = write_config(tmp_path, "lease_seconds: 10\n")
    got = load_settings(config, {"SPOOL_LEASE_SECONDS": ""}, {"lease_seconds": None})
    assert (got.lease_seconds, got.sources["lease_seconds"]) == (10.0, "config.yaml")


def test_variables_that_are_not_settings_are_ignored() -> None:
    environ = {
        "SPOOL_DIR": "/tmp/x",
        "SPOOL_CRASH_AT": "worker:after-claim",
        "SPOOL_NOT_A_SETTING": "1",
        "SPOOL_lease_seconds": "abc",
        "LEASE_SECONDS": "abc",
    }
    assert load_settings(None, environ, {}) == Settings()


def test_only_the_environment_passed_in_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPOOL_LEASE_SECONDS", "abc")
    assert load_settings(None, {}, {}).lease_seconds == 30.0
    source = inspect.getsource(settings_module)
    assert "os.environ" not in source and "getenv" not in source


def test_environment_is_not_read_at_import() -> None:
    environ = {**os.environ, "SPOOL_LEASE_SECONDS": "abc", "SPOOL_MAX_TRIES": "7"}
    code = "import spool.settings as s; print(s.Settings().lease_seconds, s.Settings().max_tries)"
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=environ,
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parents[2],
        timeout=60,
    )
    assert out.stdout.split() == ["30.0", "3"]


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        (30, 30.0),
        (1.5, 1.5),
        ("1.5", 1.5),
        ("30", 30.0),
        ("30s", 30.0),
        ("5m", 300.0),
        ("1h", 3600.0),
        ("2d", 172800.0),
        ("250ms", 0.25),
        (" 10 s ", 10.0),
        ("0", 0.0),
        (".5s", 0.5),
    ],
)
def test_parse_duration(text: str | float, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize(
    "text", ["abc", "", "-1", "-5s", "1x", "5 min", "1h30m", "inf", "nan", "1e3", float("inf"), True]
)
def test_parse_duration_refuses(text: str | float) -> None:
    with pytest.raises(UsageError, match="expected a duration like 30, 30s, 5m or 1h"):
        parse_duration(text)


@pytest.mark.parametrize(
    ("text", "size"),
    [
        (100, 100),
        ("100", 100),
        ("64KiB", 65536),
        ("1MiB", 1048576),
        ("512KB", 512000),
        ("2 mb", 2000000),
        ("1GiB", 2**30),
        ("10B", 10),
    ],
)
def test_byte_sizes(text: object, size: int) -> None:
    assert load_settings(None, {}, {"max_result_bytes": text}).max_result_bytes == size


@pytest.mark.parametrize("text", ["1.5MiB", "-1", "0", "64 kilobytes", "KiB", True])
def test_bad_byte_sizes(text: object) -> None:
    assert usage_error(flags={"max_result_bytes": text}).startswith(
        "flag --max-result-bytes: max_result_bytes: expected a size"
    )


def test_heartbeat_is_optional_but_positive(tmp_path: Path) -> None:
    assert load_settings(write_config(tmp_path, "heartbeat_seconds: null\n"), {}, {}).heartbeat_seconds is None
    assert load_settings(None, {"SPOOL_HEARTBEAT_SECONDS": "10s"}, {}).heartbeat_seconds == 10.0
    assert "above zero" in usage_error(environ={"SPOOL_HEARTBEAT_SECONDS": "0"})


def test_bad_config_value_names_file_and_setting(tmp_path: Path) -> None:
    assert usage_error(write_config(tmp_path, "lease_seconds: abc\n")) == (
        "config.yaml: lease_seconds: expected a duration like 30, 30s, 5m or 1h, got 'abc'"
    )


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({"SPOOL_MAX_TRIES": "0"}, "env SPOOL_MAX_TRIES: max_tries: expected a whole number of at least 1, got '0'"),
        ({"SPOOL_MAX_PENDING": "lots"}, "env SPOOL_MAX_PENDING: max_pending: expected a whole number, got 'lots'"),
        (
            {"SPOOL_POLL_SECONDS": "-1"},
            "env SPOOL_POLL_SECONDS: poll_seconds: expected a duration like 30, 30s, 5m or 1h, got '-1'",
        ),
        (
            {"SPOOL_GRACE_SECONDS": "0s"},
            ("env SPOOL_GRACE_SECONDS: grace_seconds: expected a duration like 30, 30s, 5m or 1h above zero, got '0s'"),
        ),
        (
            {"SPOOL_LOG_LEVEL": "loud"},
            "env SPOOL_LOG_LEVEL: log_level: expected one of debug, info, warning, error, got 'loud'",
        ),
        ({"SPOOL_LOG_FORMAT": "xml"}, "env SPOOL_LOG_FORMAT: log_format: expected one of text, json, got 'xml'"),
        (
            {"SPOOL_GROUP_SHARED": "maybe"},
            "env SPOOL_GROUP_SHARED: group_shared: expected true or false (or 1/0, yes/no), got 'maybe'",
        ),
    ],
)
def test_bad_environment_values(environ: dict[str, str], message: str) -> None:
    assert usage_error(environ=environ) == message


def test_bad_flag_value() -> None:
    assert usage_error(flags={"max_tries": 2.5}) == ("flag --max-tries: max_tries: expected a whole number, got 2.5")


def test_yaml_typed_values_are_checked_too(tmp_path: Path) -> None:
    assert usage_error(write_config(tmp_path, "max_tries: true\n")) == (
        "config.yaml: max_tries: expected a whole number, got True"
    )
    assert "lease_seconds: expected" in usage_error(write_config(tmp_path, "lease_seconds:\n"))


def test_unknown_config_key_is_refused_with_a_hint(tmp_path: Path) -> None:
    assert usage_error(write_config(tmp_path, "lease_second: 3\n")) == (
        "config.yaml: lease_second: not a setting (did you mean lease_seconds?)"
    )
    assert usage_error(write_config(tmp_path, "spool_dir: x\n")) == "config.yaml: spool_dir: not a setting"


def test_unknown_flag_is_refused() -> None:
    assert usage_error(flags={"lease": 3}) == "flag --lease: not a setting"


def test_config_must_be_a_safe_yaml_mapping(tmp_path: Path) -> None:
    path = write_config(tmp_path, "- lease_seconds\n")
    assert usage_error(path) == f"{path}: expected a mapping of settings, got a list"
    write_config(tmp_path, "lease_seconds: 1\nlease_seconds: 2\n")
    assert usage_error(path) == f"{path}: duplicate key 'lease_seconds' at line 2, column 1"
    write_config(tmp_path, "lease_seconds: !!python/object/apply:os.getpid []\n")
    assert usage_error(path).startswith(f"{path}: tags are not allowed")


def test_config_size_is_capped(tmp_path: Path) -> None:
    path = write_config(tmp_path, "# " + "x" * (1024 * 1024) + "\n")
    assert "over the limit of 1048576" in usage_error(path)


def test_config_that_is_not_a_regular_file_is_refused(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "config.yaml")
    assert usage_error(tmp_path / "config.yaml").endswith("config.yaml: not a regular file")


def test_every_setting_has_a_parser() -> None:
    assert set(settings_module._PARSERS) == set(settings_module.setting_names())


def test_config_symlink_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "elsewhere.yaml"
    real.write_text("lease_seconds: 5\n")
    (tmp_path / "config.yaml").symlink_to(real)
    assert "cannot read" in usage_error(tmp_path / "config.yaml")


@pytest.mark.parametrize(
    ("raw", "tasks"),
    [("myapp.tasks", ("myapp.tasks",)), ("a.tasks, b ,,c_2", ("a.tasks", "b", "c_2")), ("", ())],
)
def test_task_lists_from_the_environment_are_comma_separated(raw: str, tasks: tuple[str, ...]) -> None:
    assert load_settings(None, {"SPOOL_TASKS": raw}, {}).tasks == tasks


def test_task_lists_from_config_and_flags(tmp_path: Path) -> None:
    assert load_settings(write_config(tmp_path, "tasks: [a, b.c]\n"), {}, {}).tasks == ("a", "b.c")
    assert load_settings(write_config(tmp_path, "tasks: a, b.c\n"), {}, {}).tasks == ("a", "b.c")
    assert load_settings(None, {}, {"tasks": ["x", "x"]}).tasks == ("x",)
    assert "expected module names like myapp.tasks, got 'not a module'" in usage_error(
        flags={"tasks": "ok, not a module"}
    )
    assert "expected a list of module names" in usage_error(write_config(tmp_path, "tasks: [1]\n"))


@pytest.mark.parametrize(
    ("raw", "value"),
    [
        ("true", True),
        ("TRUE", True),
        ("1", True),
        ("yes", True),
        ("false", False),
        ("0", False),
        ("no", False),
        ("No", False),
    ],
)
def test_booleans_from_the_environment(raw: str, value: bool) -> None:
    assert load_settings(None, {"SPOOL_GROUP_SHARED": raw}, {}).group_shared is value


def test_log_values_are_normalised() -> None:
    got = load_settings(None, {"SPOOL_LOG_LEVEL": "DEBUG", "SPOOL_LOG_FORMAT": "Json"}, {})
    assert (got.log_level, got.log_format) == ("debug", "json")


def test_describe_lists_every_setting_with_its_source(tmp_path: Path) -> None:
    got = load_settings(write_config(tmp_path, "max_tries: 4\n"), {"SPOOL_TASKS": "a"}, {"poll_seconds": 1})
    rows = got.describe()
    names = [f.name for f in dataclasses.fields(Settings) if f.name not in ("sources", "warnings")]
    assert [name for name, _, _ in rows] == names
    table = {name: (value, source) for name, value, source in rows}
    assert table["max_tries"] == (4, "config.yaml")
    assert table["tasks"] == (("a",), "env SPOOL_TASKS")
    assert table["poll_seconds"] == (1.0, "flag --poll-seconds")
    assert table["lease_seconds"] == (30.0, "default")
    assert Settings().describe()[0] == ("lease_seconds", 30.0, "default")


def test_settings_are_frozen_and_sources_do_not_count_for_equality(tmp_path: Path) -> None:
    got = load_settings(write_config(tmp_path, "lease_seconds: 30\n"), {}, {})
    assert got == Settings() and got.sources["lease_seconds"] == "config.yaml"
    with pytest.raises(dataclasses.FrozenInstanceError):
        got.lease_seconds = 1.0  # type: ignore[misc]
    with pytest.raises(TypeError):
        got.sources["lease_seconds"] = "x"  # type: ignore[index]
