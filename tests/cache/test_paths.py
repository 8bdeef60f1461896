"""``fastlower.cache.paths``: meta paths keyed relative to base directories, and a hit's
meta rewritten from the writer's bases to the reader's (issue 48), tested directly."""

from __future__ import annotations

import os
import sys
from collections import namedtuple

import pytest
import torch

from fastlower import settings
from fastlower.cache import paths
from fastlower.cache.paths import PathMap

M = paths._MARK
S = os.sep


def mark(label: str, rest: str) -> str:
    return f"{M}{label}{M}{S}{rest}"


@pytest.fixture(autouse=True)
def no_base_setting(monkeypatch):
    monkeypatch.delenv(settings.CACHE_BASE_DIR, raising=False)


# ----------------------------------------------------------------------- PathMap.relative
def test_the_longest_base_wins():
    bases = (("outer", "/w"), ("inner", "/w/repo"), ("deep", "/w/repo/src/pkg"))
    keyed = PathMap(bases)
    assert keyed.relative("/w/x.py") == mark("outer", "x.py")
    assert keyed.relative("/w/repo/export.py") == mark("inner", "export.py")
    assert keyed.relative("/w/repo/src/pkg/m.py") == mark("deep", "m.py")
    # the order of the bases does not matter, only their lengths
    assert PathMap(tuple(reversed(bases))).relative("/w/repo/src/pkg/m.py") == mark("deep", "m.py")


def test_of_equal_bases_the_last_label_wins():
    # the repository root is the working directory, no symlink: repo, repo~real, cwd, cwd~real
    bases = (("repo", "/w/repo"), ("repo~real", "/w/repo"), ("cwd", "/w/repo"),
             ("cwd~real", "/w/repo"))
    assert PathMap(bases).relative("/w/repo/export.py") == mark("cwd~real", "export.py")
    # a process whose script is no file (python -c, a pytest worker) has no repo base:
    # it keys the checkout as the one that has it
    assert PathMap(bases[2:]).relative("/w/repo/export.py") == mark("cwd~real", "export.py")


def test_every_path_of_a_string_is_keyed():
    keyed = PathMap((("repo", "/w/repo"), ("site-0", "/venv/site")))
    trace = ('File "/w/repo/export.py", line 3, in main\n'
             '  File "/venv/site/torch/nn/modules/module.py", line 9, in _call_impl\n'
             '  File "/usr/lib/python3.11/runpy.py", line 1, in <module>')
    assert keyed.relative(trace) == (
        f'File "{mark("repo", "export.py")}", line 3, in main\n'
        f'  File "{mark("site-0", "torch/nn/modules/module.py")}", line 9, in _call_impl\n'
        '  File "/usr/lib/python3.11/runpy.py", line 1, in <module>')


@pytest.mark.parametrize("text", [
    "/usr/lib/python3.11/runpy.py",   # below no base: kept absolute
    "/w/repository/export.py",        # shares the base's first letters, not below it
    "/w/repo",                        # the base itself, no file below it
    "/elsewhere/w/repo/export.py",    # holds the base's path inside another path
    "build/w/repo/export.py",         # a relative path ending in the base's
    "L['self'].linear",               # no separator at all
])
def test_a_path_below_no_base_is_kept(text):
    assert PathMap((("repo", "/w/repo"),)).relative(text) == text


def test_a_string_holding_a_nul_is_keyed_as_it_is_and_comes_back():
    keyed = PathMap((("repo", "/w/repo"),))
    text = f"/w/repo/a.py{M}repo{M}"
    assert keyed.relative(text) == paths._RAW + text
    assert keyed.absolute(keyed.relative(text)) == text


# ------------------------------------------------------------------- current(): the bases
def test_a_symlinked_base_is_taken_as_given_and_resolved(monkeypatch, tmp_path):
    real = tmp_path / "real-env"
    real.mkdir()
    link = tmp_path / "env-link"
    link.symlink_to(real, target_is_directory=True)
    monkeypatch.setenv(settings.CACHE_BASE_DIR, f"{link}{os.pathsep}{tmp_path / 'other'}")
    bases = paths.current()
    other = tmp_path / "other"
    assert bases[:4] == (("setting-0", str(link)), ("setting-0~real", os.path.realpath(real)),
                         ("setting-1", str(other)), ("setting-1~real", os.path.realpath(other)))
    keyed = PathMap(bases)
    assert keyed.relative(f"{link}/lib/m.py") == mark("setting-0", "lib/m.py")
    resolved = os.path.realpath(real)
    assert keyed.relative(f"{resolved}/lib/m.py") == mark("setting-0~real", "lib/m.py")


def test_current_names_the_working_directory_and_prefixes(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    bases = dict(paths.current())
    assert bases["cwd"] == str(tmp_path) and bases["cwd~real"] == os.path.realpath(tmp_path)
    assert bases["prefix"] == os.path.normpath(os.path.abspath(sys.prefix))
    assert "setting-0" not in bases
    assert all(path != os.sep for path in bases.values())  # "/" is never a base


# ------------------------------------------------------- writer -> reader (absolute, localize)
WRITER = (("repo", "/a/repo"), ("setting-0", "/a/env"), ("cwd", "/a/repo"))
READER = (("repo", "/bb/elsewhere/repo"), ("setting-0", "/opt/env"),
          ("cwd", "/bb/elsewhere/repo"))


def test_round_trip_from_the_writers_bases_to_the_readers():
    text = ('File "/a/repo/export.py", line 3\n  File "/a/env/lib/m.py", line 4\n'
            '  File "/usr/lib/python3.11/runpy.py", line 5')
    keyed = PathMap(WRITER).relative(text)
    assert PathMap(READER).relative(PathMap(READER).absolute(keyed)) == keyed
    assert PathMap(READER).absolute(keyed) == (
        'File "/bb/elsewhere/repo/export.py", line 3\n  File "/opt/env/lib/m.py", line 4\n'
        '  File "/usr/lib/python3.11/runpy.py", line 5')
    assert PathMap(WRITER).absolute(keyed) == text


def test_a_base_the_reader_lacks_gives_none():
    keyed = PathMap(WRITER).relative("/a/env/lib/m.py")
    assert PathMap(READER[:1]).absolute(keyed) is None


class Small(torch.nn.Module):
    def forward(self, x):
        return x + 1


@pytest.fixture
def program():
    return torch.export.export(Small(), (torch.ones(2),), strict=False)


def _set_meta(program, **meta):
    nodes = list(program.graph_module.graph.nodes)
    for node in nodes:
        node.meta.update(meta)
    return nodes


def test_localize_writes_the_readers_paths_into_a_hits_meta(monkeypatch, program):
    Pair = namedtuple("Pair", "name path")
    nodes = _set_meta(program, stack_trace='File "/a/repo/export.py", line 3',
                      nn_module_stack={"L__self__": ("", "/a/env/lib/m.py")},
                      custom=[Pair("m", "/a/env/lib/m.py"), 3, "/usr/lib/x.py"])
    monkeypatch.setattr(paths, "current", lambda: READER)
    assert paths.localize({"bases": paths.as_info(WRITER)}, {"forward": program}) is None
    for node in nodes:
        assert node.meta["stack_trace"] == 'File "/bb/elsewhere/repo/export.py", line 3'
        assert node.meta["nn_module_stack"] == {"L__self__": ("", "/opt/env/lib/m.py")}
        assert node.meta["custom"] == [Pair("m", "/opt/env/lib/m.py"), 3, "/usr/lib/x.py"]
        assert type(node.meta["custom"][0]) is Pair


def test_localize_leaves_a_hit_at_the_writers_own_bases_alone(monkeypatch, program):
    nodes = _set_meta(program, stack_trace='File "/a/repo/export.py", line 3')
    monkeypatch.setattr(paths, "current", lambda: WRITER)
    assert paths.localize({"bases": paths.as_info(WRITER)}, {"forward": program}) is None
    assert all(n.meta["stack_trace"] == 'File "/a/repo/export.py", line 3' for n in nodes)


@pytest.mark.parametrize("info, why", [
    ({"bases": paths.as_info(WRITER)}, "names a base this process lacks"),
    ({}, "does not say where it was written"),
    ({"bases": [["repo", 3]]}, "does not say where it was written"),
    ({"bases": paths.as_info(WRITER), "path_bound": True}, "its delegate payloads name them"),
])
def test_a_hit_the_reader_cannot_localize_is_a_miss(monkeypatch, program, info, why):
    _set_meta(program, stack_trace='File "/a/env/lib/m.py", line 4')
    monkeypatch.setattr(paths, "current", lambda: READER[:1])  # no setting-0 here
    assert why in paths.localize(info, {"forward": program})


def test_a_path_in_a_container_the_key_does_not_rebuild_is_a_miss(monkeypatch, program):
    class Trail(list):
        pass

    _set_meta(program, custom=Trail(["/a/repo/export.py"]))
    monkeypatch.setattr(paths, "current", lambda: READER)
    why = paths.localize({"bases": paths.as_info(WRITER)}, {"forward": program})
    assert why == "a path inside a Trail"


@pytest.mark.parametrize("value", [None, "bases", [["repo"]], [["repo", "/a", "x"]], [("r", "/a")]])
def test_from_info_refuses_garbage(value):
    assert paths.from_info(value) is None


def test_from_info_reads_as_info():
    assert paths.from_info(paths.as_info(WRITER)) == WRITER
