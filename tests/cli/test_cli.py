"""``fastlower lower | report | cache`` and every bad-input path (exit 2, one line on
stderr, no traceback unless ``--debug``)."""

import json
import re
import os
import sys
from pathlib import Path

import diskcache
import jsonschema
import pytest
import torch

import fastlower
from fastlower.frontends import cli
from fastlower.report import json as report_json
from tests import python_children

TOY = "tests.report.toy:AddMulPartitioner"


class SmallNet(torch.nn.Module):
    """Exported in the test (not bundled): linear, relu, linear, gelu, cumsum."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.l1, self.l2 = torch.nn.Linear(16, 32), torch.nn.Linear(32, 8)

    def forward(self, x):
        return torch.nn.functional.gelu(self.l2(torch.relu(self.l1(x)))).cumsum(-1) + 1.0


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cli")
    small = folder / "small.pt2"
    torch.export.save(torch.export.export(SmallNet().eval(), (torch.randn(4, 16),)), small)
    from fastlower.frontends.examples.llama import export_aten

    _, aten, _ = export_aten(1)
    llama = folder / "llama1.pt2"
    torch.export.save(aten, llama)
    junk = folder / "junk.pt2"
    junk.write_bytes(b"this is not a zip archive")
    return {"small": small, "llama": llama, "junk": junk, "folder": folder}


@pytest.fixture
def preprocess_env(monkeypatch, tmp_path):
    """The cache folder the CLI uses by default, in the test's folder; no worker count
    from the environment. The CLI itself writes no environment variable (checked)."""
    monkeypatch.delenv("FASTLOWER_WORKERS", raising=False)
    monkeypatch.setenv(cli.ENV_CACHE_DIR, str(tmp_path / "cache"))
    before = {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}
    yield tmp_path / "cache"
    after = {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}
    assert after == before, "the CLI changed the environment"


def _run(capsys, *argv):
    code = cli.main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_lower_with_xnnpack_writes_the_pte_reports_and_checks_it(files, tmp_path, capsys,
                                                                  preprocess_env):
    pte, page, doc = tmp_path / "small.pte", tmp_path / "r.html", tmp_path / "r.json"
    code, out, err = _run(capsys, "lower", files["small"], "-o", pte, "--check", "--workers", 2,
                          "--report-html", page, "--report-json", doc)
    assert code == 0, err
    assert pte.read_bytes()[4:8] == b"ET12"  # an ExecuTorch flatbuffer
    assert f"wrote {pte}" in out and "XnnpackBackend" in out
    assert "check: ok, 1 output(s) match the exported program" in out
    report = json.loads(doc.read_text())
    jsonschema.validate(report, report_json.schema())
    assert report["partitions"] and report["partitions"][0]["processed_bytes"] > 0
    assert not report["preview"] and report["coverage"]["delegated_nodes"] > 0
    assert "aten.cumsum" in {n["op"] for n in report["not_delegated"]}
    assert "<html" in page.read_text()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temp left
    # --workers and the cache (on by default, in $FASTLOWER_CACHE_DIR) reached the preprocess
    assert fastlower.last_report().preprocess_runner == "fork pool, 2 workers"
    assert all(p["cache_hit"] is False for p in report["partitions"])
    with diskcache.Cache(str(preprocess_env)) as cache:
        lowering = [key for key in cache.iterkeys() if cache.get(key, tag=True)[1] == "lowering"]
        # one preprocess entry per partition; the lowering entry, its structure record
        # (fastlower.cache.refit) and the to_executorch entry
        assert (len(cache) - len(lowering), len(lowering)) == (len(report["partitions"]), 3)
        assert sum(key.startswith("structure:") for key in lowering) == 1
    # the same command again: both calls served from the lowering cache, the same .pte
    first = pte.read_bytes()
    code, out, err = _run(capsys, "lower", files["small"], "-o", pte, "--workers", 2)
    assert code == 0, err
    assert fastlower.last_report().lowering_cache == "hit" and pte.read_bytes() == first


def test_lower_with_a_partitioner_class_and_no_cache(files, tmp_path, capsys, preprocess_env):
    """--no-cache lowers without any cache, though $FASTLOWER_CACHE_DIR names a folder:
    no hit or miss recorded, the folder never made."""
    pte, doc = tmp_path / "small.pte", tmp_path / "r.json"
    code, out, err = _run(capsys, "lower", files["small"], "-o", pte, "--partitioner", TOY,
                          "--no-cache", "--report-json", doc)
    assert code == 0, err
    assert "FastlowerToyBackend" in out and pte.stat().st_size > 0
    report = json.loads(doc.read_text())
    assert report["partitions"] and all(p["cache_hit"] is None for p in report["partitions"])
    assert "cache:" not in out and not preprocess_env.exists()


def test_cache_dir_option_names_the_cache_folder(files, tmp_path, capsys, preprocess_env):
    folder, doc = tmp_path / "elsewhere", tmp_path / "r.json"
    for expected_hit in (False, True):
        code, out, err = _run(capsys, "lower", files["small"], "-o", tmp_path / "small.pte",
                              "--partitioner", TOY, "--cache-dir", folder, "--report-json", doc)
        assert code == 0, err
        parts = json.loads(doc.read_text())["partitions"]
        assert parts and all(p["cache_hit"] is expected_hit for p in parts)
    assert not preprocess_env.exists()  # not the default folder
    code, out, _ = _run(capsys, "cache", "info", "--cache-dir", folder)
    assert code == 0 and f"cache: {folder}\npreprocess cache: {len(parts)} entries" in out
    with pytest.raises(SystemExit) as usage:  # argparse's own usage error
        cli.main(["lower", str(files["small"]), "-o", "x.pte", "--no-cache", "--cache-dir", "d"])
    assert usage.value.code == 2 and "not allowed with argument" in capsys.readouterr().err


def test_a_failed_lowering_leaves_no_file_behind(files, tmp_path, capsys, preprocess_env):
    pte = tmp_path / "small.pte"
    pte.write_bytes(b"previous")
    code, out, err = _run(capsys, "lower", files["small"], "-o", pte, "--partitioner",
                          "tests.report.toy:TagsOutputPartitioner")
    assert code == 1
    assert err.startswith("fastlower lower: lowering failed: ") and err.count("\n") == 1
    assert "Traceback" not in err
    assert pte.read_bytes() == b"previous"
    assert [p for p in tmp_path.iterdir() if p != preprocess_env] == [pte]


def test_report_previews_the_bundled_decoder_without_preprocess(files, tmp_path, capsys,
                                                                monkeypatch):
    from executorch.backends.xnnpack.xnnpack_preprocess import XnnpackBackend

    def no_preprocess(*args):
        raise AssertionError("fastlower report ran a backend's preprocess")

    monkeypatch.setattr(XnnpackBackend, "preprocess", staticmethod(no_preprocess))
    doc, page, overlay = tmp_path / "r.json", tmp_path / "r.html", tmp_path / "me.json"
    code, out, err = _run(capsys, "report", files["llama"], "--report-json", doc,
                          "--report-html", page, "--explorer-json", overlay)
    assert code == 0, err
    assert out.startswith("delegation preview (partitioner only): forward")
    report = json.loads(doc.read_text())
    jsonschema.validate(report, report_json.schema())
    # the llama module's doc: 1 layer, 7
    assert report["preview"] and len(report["partitions"]) == 7
    assert all(p["processed_bytes"] is None for p in report["partitions"])
    assert set(json.loads(overlay.read_text())["graph"]["results"]) == {
        n["name"] for n in report["nodes"]}


def test_cache_info_and_clear(capsys, preprocess_env):
    code, out, _ = _run(capsys, "cache", "info")
    assert code == 0 and "does not exist yet" in out
    with diskcache.Cache(str(preprocess_env)) as cache:
        cache.set("a", b"x" * 1000)
        cache.set("b", b"y" * 10)
        cache.set("lowering:c", b"z" * 100, tag="lowering")  # a to_edge_transform_and_lower entry
        cache.set("executorch:d", b"w" * 10, tag="lowering")  # a to_executorch entry
    code, out, _ = _run(capsys, "cache", "info")
    assert code == 0 and f"cache: {preprocess_env}\npreprocess cache: 2 entries" in out
    assert "lowering cache: 2 entries" in out and "total: 4 entries" in out
    code, out, _ = _run(capsys, "cache", "clear", "--only", "lowering")
    assert code == 0 and "removed 2 entries" in out and "2 lowering" in out
    code, out, _ = _run(capsys, "cache", "info")
    assert "preprocess cache: 2 entries" in out and "lowering cache: 0 entries" in out
    with diskcache.Cache(str(preprocess_env)) as cache:
        cache.set("executorch:e", b"v" * 10, tag="lowering")
    code, out, _ = _run(capsys, "cache", "clear", "--only", "preprocess")
    assert code == 0 and "removed 2 entries" in out and "2 preprocess" in out
    code, out, _ = _run(capsys, "cache", "info")
    assert "preprocess cache: 0 entries" in out and "lowering cache: 1 entries" in out
    code, out, _ = _run(capsys, "cache", "clear")
    assert code == 0 and "removed 1 entries" in out
    code, out, _ = _run(capsys, "cache", "info")
    assert "total: 0 entries" in out


def test_cache_folder_defaults_to_the_user_cache_dir(monkeypatch):
    import platformdirs

    monkeypatch.delenv(cli.ENV_CACHE_DIR, raising=False)
    assert cli.default_cache_dir() == platformdirs.user_cache_dir("fastlower")


@pytest.mark.parametrize("argv, message", [
    (["lower", "{folder}/missing.pt2", "-o", "{folder}/x.pte"], "missing.pt2: no such file"),
    (["lower", "{junk}", "-o", "{folder}/x.pte"],
     "junk.pt2: not a program saved with torch.export.save"),
    (["report", "{folder}"], ": not a file"),
    (["lower", "{small}", "-o", "{folder}/x.pte", "--backend", "qnn"], "unknown backend 'qnn'"),
    (["report", "{small}", "--partitioner", "no_such_module:Partitioner"],
     "cannot import no_such_module (ModuleNotFoundError"),
    (["report", "{small}", "--partitioner", "json:NoSuchClass"], "json has no NoSuchClass"),
    (["report", "{small}", "--partitioner", "json:JSONDecoder"],
     "is not an ExecuTorch Partitioner"),
    (["report", "{small}", "--partitioner", "json"], "expected MODULE:CLASS"),
    (["lower", "{small}", "-o", "{folder}/no/such/dir/x.pte"], "does not exist"),
])
def test_bad_input_is_one_line_and_exit_code_2(files, capsys, argv, message):
    names = {k: str(v) for k, v in files.items()}
    code, out, err = _run(capsys, *[a.format(**names) for a in argv])
    assert code == 2
    assert err.count("\n") == 1 and message in err
    assert err.startswith(f"fastlower {argv[0]}: error: ")
    assert "Traceback" not in err and out == ""


def test_console_entry_point_and_debug_traceback(tmp_path, files):
    """``python -m fastlower`` in a fresh process: exit 2, one line on stderr (torch's and
    ExecuTorch's import-time chatter included); ``--debug`` adds the traceback."""
    missing = str(tmp_path / "missing.pt2")
    cmd = [sys.executable, "-m", "fastlower", "lower", missing, "-o", str(tmp_path / "x.pte")]
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2] / "src")) \
        if os.environ.get("FASTLOWER_TEST_SRC") == "1" else None
    plain = python_children.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    assert plain.returncode == 2
    assert plain.stderr == f"fastlower lower: error: {missing}: no such file\n"
    debug = python_children.run(cmd[:3] + ["--debug"] + cmd[3:], capture_output=True, text=True,
                                timeout=120, env=env)
    assert debug.returncode == 2 and "Traceback" in debug.stderr and "UsageError" in debug.stderr
    junk = python_children.run(cmd[:4] + [str(files["junk"])] + cmd[5:], capture_output=True,
                               text=True, timeout=120, env=env)
    assert junk.returncode == 2 and junk.stderr.count("\n") == 1, junk.stderr
    assert junk.stderr.startswith(f"fastlower lower: error: {files['junk']}: not a program")


def test_cache_info_is_fast_silent_and_human(tmp_path):
    """In a fresh process, `cache info` imports no torch, prints no warning, shows sizes in
    binary units and honours --only; -v and --debug may follow the subcommand."""
    folder = tmp_path / "cache"
    with diskcache.Cache(str(folder), size_limit=2 * 1024 ** 3) as cache:
        cache.set("a", b"x" * 40000)
        cache.set("lowering:c", b"z" * 100, tag="lowering")
    probe = ("import sys, fastlower.frontends.cli as c; code = c.main(sys.argv[1:]); "
             "print('torch imported' if 'torch' in sys.modules else 'no torch'); "
             "sys.exit(code)")
    result = python_children.run([sys.executable, "-c", probe, "cache", "info", "--only",
                                  "preprocess", "-v", "--debug", "--cache-dir", str(folder)],
                                 capture_output=True, text=True, timeout=60, real=True)
    assert result.returncode == 0 and result.stderr == ""
    assert result.stdout.splitlines() == [
        f"cache: {folder}", "preprocess cache: 1 entries, 39.1 KiB",
        "total: 2 entries, 39.2 KiB of 2.0 GiB", "no torch"]


def test_version_names_fastlower_torch_and_executorch(capsys):
    from importlib.metadata import version

    with pytest.raises(SystemExit) as done:
        cli.main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out.strip() == (
        f"fastlower {version('fastlower')} (torch {version('torch')}, "
        f"executorch {version('executorch')})")
    import fastlower

    assert fastlower.__version__ == version("fastlower")


def test_output_options_may_follow_the_subcommand(capsys):
    parsed = cli.build_parser().parse_args(["cache", "info", "-vv", "--debug"])
    assert (parsed.verbose, parsed.debug, parsed.quiet) == (2, True, 0)
    parsed = cli.build_parser().parse_args(["-q", "cache", "info"])
    assert (parsed.verbose, parsed.debug, parsed.quiet) == (0, False, 1)


def test_check_tolerances_and_the_mismatch_exit_code(files, tmp_path, capsys, preprocess_env):
    """XNNPACK's float results differ from eager's in the last bits: with no tolerance the
    check fails with its own exit code (3), not a lowering error's (1)."""
    pte = tmp_path / "small.pte"
    code, out, err = _run(capsys, "lower", files["small"], "-o", pte, "--check",
                          "--atol", 0, "--rtol", 0, "--workers", 1)
    assert code == cli.EXIT_MISMATCH == 3, (out, err)
    assert "check: FAILED: output 0 differs" in out
    code, out, err = _run(capsys, "lower", files["small"], "-o", pte, "--check",
                          "--atol", "1e-2", "--workers", 1)
    assert code == 0 and "check: ok" in out
    code, out, err = _run(capsys, "lower", files["small"], "-o", pte, "--check", "--rtol", -1)
    assert code == 2 and "--rtol must be >= 0" in err


def test_partitioners_with_arguments_in_order_and_the_llm_preset(files, tmp_path, capsys,
                                                                 preprocess_env):
    """--partitioner takes literal arguments and repeats; --backend xnnpack-llm is export_llm's
    pair. Each .pte is ExecuTorch's own for the same partitioners."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import (
        XnnpackDynamicallyQuantizedPartitioner, XnnpackPartitioner,
    )
    from executorch.exir import to_edge_transform_and_lower

    import fastlower.patch

    xnn = "executorch.backends.xnnpack.partition.xnnpack_partitioner:"
    cases = {
        "per_op": (["--partitioner", xnn + "XnnpackPartitioner(per_op_mode=True)"],
                   [XnnpackPartitioner(per_op_mode=True)]),
        "llm": (["--backend", "xnnpack-llm"],
                [XnnpackDynamicallyQuantizedPartitioner(), XnnpackPartitioner()]),
        "two": (["--partitioner", xnn + "XnnpackDynamicallyQuantizedPartitioner",
                 "--partitioner", xnn + "XnnpackPartitioner()"],
                [XnnpackDynamicallyQuantizedPartitioner(), XnnpackPartitioner()]),
    }
    for name, (options, partitioners) in cases.items():
        pte = tmp_path / f"{name}.pte"
        code, out, err = _run(capsys, "lower", files["small"], "-o", pte, "--no-cache",
                              "--workers", 1, *options)
        assert code == 0, err
        with fastlower.patch.reference():
            reference = to_edge_transform_and_lower(torch.export.load(files["small"]),
                                                    partitioner=partitioners)
            assert pte.read_bytes() == bytes(reference.to_executorch().buffer), name


@pytest.mark.parametrize("options, message", [
    (["--partitioner", "json:JSONDecoder(object_hook=open)"], "must be Python literals"),
    (["--partitioner", "json:JSONDecoder(**{})"], "**arguments are not supported"),
    (["--partitioner", "json:JSONDecoder(("], "not CLASS or CLASS(ARGS)"),
    (["--partitioner", "json:a.b"], "expected MODULE:CLASS or MODULE:CLASS(ARGS)"),
    (["--backend", "xnnpack", "--partitioner", "json:JSONDecoder"], "not both"),
    (["--backend", "qnn-llm"], "unknown backend 'qnn-llm'"),
])
def test_bad_partitioner_specs_are_usage_errors(files, capsys, options, message):
    code, out, err = _run(capsys, "report", files["small"], *options)
    assert code == 2 and message in err and err.count("\n") == 1, err


def test_verbose_lowering_says_each_phase_and_its_time(files, tmp_path, capsys, preprocess_env):
    code, out, err = _run(capsys, "lower", files["small"], "-o", tmp_path / "s.pte", "-v",
                          "--no-cache", "--workers", 1)
    assert code == 0, err
    lines = [line for line in err.splitlines() if line.startswith("fastlower: INFO: ")]
    said = [line[len("fastlower: INFO: "):] for line in lines]
    starts = [s for s in said if s.endswith(" ...")]
    assert starts == ["to_edge_transform_and_lower ...",
                      "edge stage (ExecuTorch's decompositions and passes) ...",
                      "to_backend ...", "to_executorch ..."], said
    timed = [s.split(":")[0] for s in said if re.fullmatch(r"[\w ]+: \d+\.\d s", s)]
    assert timed[:4] == ["edge stage", "to_backend", "to_edge_transform_and_lower",
                         "to_executorch"], said


def test_phase_lines_are_shown_only_while_asked(capsys):
    import logging

    from fastlower.base import phases
    from fastlower.frontends.console import phase_lines

    with phase_lines(True), phases.edge_stage("to_edge_transform_and_lower"):
        phases.edge_stage_done()
    shown = capsys.readouterr().err.splitlines()
    assert shown[0] == "fastlower: to_edge_transform_and_lower ..."
    assert re.fullmatch(r"fastlower: edge stage: \d+\.\d s", shown[2])
    with phase_lines(False), phases.phase("to_executorch"):
        pass
    assert capsys.readouterr().err == ""
    assert logging.getLogger("fastlower.base.phases").handlers == []
