"""``fastlower.settings``: every ``FASTLOWER_*`` variable, its one parsing rule, its errors,
and that no other library module reads (or writes) the environment."""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest

import fastlower
from fastlower import settings

SRC = Path(fastlower.__file__).parent
CONFIGURATION = Path(__file__).resolve().parents[1] / "docs" / "configuration.md"


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch):
    """Each test starts with none of the library's variables set."""
    for name in settings.VARIABLES:
        monkeypatch.delenv(name, raising=False)


# ----------------------------------------------------------------------- the rule
BOOLEANS = [settings.CACHE_VERIFY, settings.PROGRESS, settings.LOWERING_CACHE,
            settings.NATIVE_PARTITIONERS, settings.VALIDATE_ALL, settings.FORCE_PYTHON]


@pytest.mark.parametrize("name", BOOLEANS)
@pytest.mark.parametrize("text, value", [
    ("1", True), ("true", True), ("YES", True), (" On ", True),
    ("0", False), ("False", False), ("no", False), ("off\n", False),
])
def test_booleans_share_one_vocabulary(monkeypatch, name, text, value):
    monkeypatch.setenv(name, text)
    assert settings.get(name) is value


@pytest.mark.parametrize("name", BOOLEANS)
@pytest.mark.parametrize("text", ["", "   "])
def test_blank_is_unset(monkeypatch, name, text):
    monkeypatch.setenv(name, text)
    assert settings.raw(name) is None
    assert settings.get(name) is settings.VARIABLES[name].default


@pytest.mark.parametrize("name", BOOLEANS)
def test_a_bad_boolean_is_an_error_naming_the_variable(monkeypatch, name):
    monkeypatch.setenv(name, "maybe")
    with pytest.raises(settings.SettingsError, match=f"{name}='maybe'.*expected a boolean"):
        settings.get(name)
    with pytest.raises(ValueError):  # a ValueError, for callers catching that
        settings.get(name)


def test_defaults():
    assert settings.workers() is None
    assert settings.cache_dir() is None
    assert settings.cache_size() is None
    assert settings.cache_verify() is False
    assert settings.progress() is None
    assert settings.start_method() is None
    assert settings.lowering_cache() is True
    assert settings.native_partitioners() is True
    assert settings.validate_all() is False
    assert settings.force_python() is False


def test_values_are_read_at_call_time(monkeypatch):
    assert settings.validate_all() is False
    monkeypatch.setenv(settings.VALIDATE_ALL, "1")
    assert settings.validate_all() is True
    monkeypatch.delenv(settings.VALIDATE_ALL)
    assert settings.validate_all() is False


def test_integers(monkeypatch):
    monkeypatch.setenv(settings.WORKERS, " 3 ")
    assert settings.workers() == 3
    monkeypatch.setenv(settings.CACHE_SIZE, "0")
    assert settings.cache_size() == 0
    monkeypatch.setenv(settings.CACHE_SIZE, "1048576")
    assert settings.cache_size() == 1 << 20


@pytest.mark.parametrize("name, text, expected", [
    (settings.WORKERS, "two", "an integer >= 1"),
    (settings.WORKERS, "0", "an integer >= 1"),
    (settings.WORKERS, "1.5", "an integer >= 1"),
    (settings.CACHE_SIZE, "2GB", "an integer >= 0"),
    (settings.CACHE_SIZE, "-1", "an integer >= 0"),
])
def test_bad_integers(monkeypatch, name, text, expected):
    monkeypatch.setenv(name, text)
    with pytest.raises(settings.SettingsError) as info:
        settings.get(name)
    assert info.value.name == name and info.value.value == text
    assert str(info.value).endswith(f"expected {expected}")
    assert "(preprocess " in str(info.value)  # names the Python option it stands in for


def test_paths(monkeypatch, tmp_path):
    monkeypatch.setenv(settings.CACHE_DIR, str(tmp_path))
    assert settings.cache_dir() == tmp_path
    monkeypatch.setenv(settings.CACHE_DIR, "~/fl-cache")
    assert settings.cache_dir() == Path("~/fl-cache").expanduser()
    monkeypatch.setenv(settings.CACHE_DIR, "")
    assert settings.cache_dir() is None


def test_path_lists(monkeypatch, tmp_path):
    a, b = tmp_path / "env a", tmp_path / "b"
    assert settings.cache_base_dirs() == ()
    monkeypatch.setenv(settings.CACHE_BASE_DIR, f" {a}{os.pathsep}{b} ")
    assert settings.cache_base_dirs() == (a, b)
    monkeypatch.setenv(settings.CACHE_BASE_DIR, f"{os.pathsep}{a}{os.pathsep * 2}{b}{os.pathsep}")
    assert settings.cache_base_dirs() == (a, b)  # empty items are skipped
    monkeypatch.setenv(settings.CACHE_BASE_DIR, f"~/env{os.pathsep}{a}")
    assert settings.cache_base_dirs() == (Path("~/env").expanduser(), a)
    for blank in ("", "  ", os.pathsep):
        monkeypatch.setenv(settings.CACHE_BASE_DIR, blank)
        assert settings.cache_base_dirs() == ()


@pytest.mark.parametrize("text", ["relative/env", "/abs/env{sep}relative", "~user-nobody/x"])
def test_a_path_list_with_a_relative_directory_is_an_error(monkeypatch, text):
    text = text.format(sep=os.pathsep)
    monkeypatch.setenv(settings.CACHE_BASE_DIR, text)
    with pytest.raises(settings.SettingsError) as info:
        settings.cache_base_dirs()
    assert info.value.name == settings.CACHE_BASE_DIR and info.value.value == text
    assert str(info.value) == (f"{settings.CACHE_BASE_DIR}={text!r}: expected absolute "
                               f"directories separated by {os.pathsep!r}")


def test_an_unknown_home_folder_is_an_error(monkeypatch):
    monkeypatch.setenv(settings.CACHE_DIR, "~user-nobody/cache")
    with pytest.raises(settings.SettingsError, match=r"expected a path \(a ~user that exists"):
        settings.cache_dir()


def test_choices(monkeypatch):
    monkeypatch.setenv(settings.START_METHOD, "Spawn")
    assert settings.start_method() == "spawn"
    monkeypatch.setenv(settings.START_METHOD, "vfork")
    with pytest.raises(settings.SettingsError,
                       match=r"FASTLOWER_START_METHOD='vfork' \(preprocess start_method\): "
                             "expected one of auto, fork, spawn"):
        settings.start_method()


# ----------------------------------------------------------------------- the consumers
def test_preprocess_options_fall_back_to_the_environment(monkeypatch, tmp_path):
    from fastlower.preprocess import configuration as pp

    monkeypatch.setattr(pp, "_CURRENT", pp.PreprocessOptions())
    monkeypatch.setenv(settings.WORKERS, "2")
    monkeypatch.setenv(settings.CACHE_DIR, str(tmp_path))
    monkeypatch.setenv(settings.CACHE_SIZE, "1000")
    monkeypatch.setenv(settings.CACHE_VERIFY, "yes")
    monkeypatch.setenv(settings.PROGRESS, "1")
    monkeypatch.setenv(settings.START_METHOD, "FORK")
    got = pp.resolve()
    assert (got.workers, got.cache_dir, got.cache_size, got.verify, got.progress,
            got.start_method) == (2, tmp_path, 1000, True, True, "fork")
    monkeypatch.setenv(settings.PROGRESS, "0")  # false wins over a terminal too
    assert pp.resolve().progress is False
    with pp.options(workers=1, cache_dir="", cache_size=5, verify=False, progress=True,
                    start_method="spawn"):
        got = pp.resolve()  # the options win over the environment
    assert (got.workers, got.cache_dir, got.cache_size, got.verify, got.progress,
            got.start_method) == (1, None, 5, False, True, "spawn")


def test_a_variable_is_checked_only_when_its_option_is_unset(monkeypatch):
    from fastlower.preprocess import configuration as pp

    monkeypatch.setattr(pp, "_CURRENT", pp.PreprocessOptions())
    monkeypatch.setenv(settings.WORKERS, "many")
    with pytest.raises(settings.SettingsError, match="FASTLOWER_WORKERS='many'"):
        pp.resolve()
    with pp.options(workers=2):
        assert pp.resolve().workers == 2


def test_lowering_cache_switch(monkeypatch):
    from fastlower.cache import configuration as cache_settings

    assert not cache_settings.switched_off()
    monkeypatch.setenv(settings.LOWERING_CACHE, "off")
    assert cache_settings.switched_off()
    monkeypatch.setenv(settings.LOWERING_CACHE, "1")
    assert not cache_settings.switched_off()
    with cache_settings.disabled():
        assert cache_settings.switched_off()


def test_native_partitioners_switch(monkeypatch):
    from fastlower.partitioners import switch

    assert switch.ENV == settings.NATIVE_PARTITIONERS
    assert switch.enabled_by_environment()
    monkeypatch.setenv(settings.NATIVE_PARTITIONERS, "false")
    assert not switch.enabled_by_environment()


def test_validate_all(monkeypatch):
    from fastlower.lowering import programs

    assert programs.VALIDATE_ALL_ENV == settings.VALIDATE_ALL
    monkeypatch.setenv(settings.VALIDATE_ALL, "on")
    assert programs.validate_all()


def test_force_python_selects_the_twin(monkeypatch):
    from fastlower.core import loader as _core_loader

    assert _core_loader.FORCE_PYTHON_ENV == settings.FORCE_PYTHON
    monkeypatch.setenv(settings.FORCE_PYTHON, "true")
    assert _core_loader.load_core() is None


def test_cli_cache_folder(monkeypatch, tmp_path):
    import platformdirs

    from fastlower.frontends import cli

    assert cli.default_cache_dir() == platformdirs.user_cache_dir("fastlower")
    monkeypatch.setenv(settings.CACHE_DIR, f" {tmp_path} ")
    assert cli.default_cache_dir() == str(tmp_path)


# ----------------------------------------------------------------------- one place
def _environment_uses(path: Path):
    """(line, what) of every ``os.environ`` / ``os.getenv`` / ``putenv`` / ``environ``
    import in the module at ``path``."""
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in ("environ", "environb", "getenv",
                                                             "putenv", "unsetenv"):
            yield node.lineno, node.attr
        elif isinstance(node, ast.ImportFrom) and node.module == "os":
            for alias in node.names:
                if alias.name in ("environ", "environb", "getenv", "putenv", "unsetenv"):
                    yield node.lineno, alias.name


def test_only_the_settings_module_touches_the_environment():
    found = {}
    for path in sorted(SRC.rglob("*.py")):
        if path == SRC / "settings.py":
            continue
        uses = list(_environment_uses(path))
        if uses:
            found[str(path.relative_to(SRC))] = uses
    assert found == {}, "read FASTLOWER_* variables through fastlower.settings"


def test_no_other_module_names_a_variable_as_a_string():
    """A ``"FASTLOWER_..."`` literal outside settings.py (docstrings aside) would be a
    second place that knows a variable's name."""
    found = []
    for path in sorted(SRC.rglob("*.py")):
        if path == SRC / "settings.py":
            continue
        tree = ast.parse(path.read_text(), str(path))
        docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                      if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef,
                                        ast.AsyncFunctionDef))
                      and n.body and isinstance(n.body[0], ast.Expr)
                      and isinstance(n.body[0].value, ast.Constant)}
        for node in ast.walk(tree):
            if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                    and node.value.startswith("FASTLOWER_") and id(node) not in docstrings):
                found.append(f"{path.relative_to(SRC)}:{node.lineno}: {node.value}")
    assert found == []


def test_every_variable_is_documented():
    text = CONFIGURATION.read_text()
    assert "fastlower.settings" in text
    missing = [name for name in settings.VARIABLES if name not in text]
    assert missing == []


def test_environment_untouched_by_reading(monkeypatch):
    monkeypatch.setenv(settings.WORKERS, "2")
    before = dict(os.environ)
    for name in settings.VARIABLES:
        settings.get(name)
    assert dict(os.environ) == before
