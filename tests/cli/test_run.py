"""``fastlower run``: an unchanged script or module, run as python runs it, with fastlower
as ExecuTorch's ``to_backend`` and one report per lowering.

Each case runs the script directly (``python run_script.py``, ``python -m ...``)
and through ``fastlower run`` in processes of their own, in folders of their
own with the same relative file names, and compares what each saw and made.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from fastlower.report import json as report_json
from fastlower.frontends.script_runner import numbered
from tests.stack_probe import CALLS
from tests import python_children

REPO = Path(__file__).resolve().parents[2]
SCRIPT = Path(__file__).with_name("run_script.py")


def _env(**extra) -> dict:
    paths = [str(REPO)] + ([str(REPO / "src")] if os.environ.get("FASTLOWER_TEST_SRC") == "1"
                           else [])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(paths))
    env.pop("FASTLOWER_CACHE_DIR", None)
    env.update(extra)
    return env


def _python(folder: Path, *argv, env=None) -> subprocess.CompletedProcess:
    folder.mkdir(exist_ok=True)
    return python_children.run([sys.executable, *map(str, argv)], capture_output=True, text=True,
                               timeout=600, cwd=folder, env=env or _env())


def test_run_script_is_the_direct_run_with_one_report_per_lowering(tmp_path):
    """Same exit code, stdout, argv/__name__/__file__/sys.path[0]/__main__ and .pte as
    ``python script.py``; two partitioners, two to_backend calls, two reports each kind,
    though the lowering runs in a thread the script leaves running when it exits;
    --no-cache with FASTLOWER_CACHE_DIR set lowers without any cache."""
    args = ["out.pte", "seen.json", "--thread", "--exit", "3"]
    direct = _python(tmp_path / "direct", SCRIPT, *args)
    cache = tmp_path / "cache"
    (tmp_path / "ours" / "pages").mkdir(parents=True)
    ours = _python(tmp_path / "ours", "-m", "fastlower", "run", "--workers", "1", "--no-cache",
                   "--report-json", "r.json", "--report-html", "pages/r.html", SCRIPT, *args,
                   env=_env(FASTLOWER_CACHE_DIR=str(cache)))
    assert direct.returncode == 3, direct.stderr[-3000:]
    assert ours.returncode == 3, ours.stderr[-3000:]
    assert ours.stdout == direct.stdout == "run_script: wrote out.pte\n"
    seen = [json.loads((tmp_path / d / "seen.json").read_text()) for d in ("direct", "ours")]
    assert seen[0] == seen[1]
    assert seen[1]["argv"] == [str(SCRIPT), *args] and seen[1]["name"] == "__main__"
    assert seen[1]["file"] == str(SCRIPT) and seen[1]["path0"] == str(SCRIPT.parent)
    assert seen[1]["main_is_me"] is True
    assert (tmp_path / "ours" / "out.pte").read_bytes() == \
        (tmp_path / "direct" / "out.pte").read_bytes()
    # one report per to_backend call, numbered in order, nothing more
    folder = tmp_path / "ours"
    reports = [json.loads((folder / f"r.{i}.json").read_text()) for i in (1, 2)]
    assert not (folder / "r.3.json").exists() and not (folder / "r.json").exists()
    assert sorted(p.name for p in (folder / "pages").iterdir()) == ["r.1.html", "r.2.html"]
    for report in reports:
        jsonschema.validate(report, report_json.schema())
        assert not report["preview"] and report["partitions"]
        # --no-cache: no cache took part, and the folder named by the environment is untouched
        assert all(p["cache_hit"] is None for p in report["partitions"])
    assert not cache.exists()
    first_ops = {op for p in reports[0]["partitions"] for op in p["ops"]}
    # the first partitioner takes linear layers (with the activation XNNPACK fuses into one)
    assert "aten.linear" in first_ops and first_ops <= {"aten.linear", "aten.relu"}
    assert "aten.sigmoid" in {op for p in reports[1]["partitions"] for op in p["ops"]}
    assert "fastlower run: 2 lowering(s), reports: r.1.json, pages/r.1.html, r.2.json, " \
           "pages/r.2.html" in ours.stderr


def test_run_module_raising_is_python_m(tmp_path):
    """``-m``: argv[0] is the module's file and sys.path[0] the current folder, as with
    ``python -m``; an exception prints the script's traceback and exits 1."""
    args = ["out.pte", "seen.json", "--skip-lowering", "--raise"]
    direct = _python(tmp_path / "direct", "-m", "tests.cli.run_script", *args)
    ours = _python(tmp_path / "ours", "-m", "fastlower", "run", "--report-json", "r.json",
                   "-m", "tests.cli.run_script", *args)
    assert direct.returncode == ours.returncode == 1
    assert direct.stderr.endswith("RuntimeError: the script failed on purpose\n")
    assert ours.stderr.endswith("RuntimeError: the script failed on purpose\n"
                                "fastlower run: the script made no lowering: no report written\n")
    for done in (direct, ours):
        assert 'run_script.py", line' in done.stderr
    assert "fastlower/frontends/script_runner.py" not in ours.stderr and "runpy" not in ours.stderr
    seen = [json.loads((tmp_path / d / "seen.json").read_text()) for d in ("direct", "ours")]
    for record, folder in zip(seen, ("direct", "ours")):
        assert record.pop("path0") == str(tmp_path / folder)  # python -m: the current folder
    assert seen[0] == seen[1] and seen[1]["argv"][0] == str(SCRIPT)


def test_run_exit_codes_and_bad_input(tmp_path):
    script = tmp_path / "exits.py"
    script.write_text("import sys\nprint('out')\nsys.exit(sys.argv[1] if sys.argv[1:] else None)\n")
    message = _python(tmp_path, "-m", "fastlower", "run", script, "bye")
    assert message.returncode == 1 and message.stdout == "out\n"
    assert message.stderr.endswith("bye\n")  # sys.exit("bye"): printed, exit code 1
    missing = _python(tmp_path, "-m", "fastlower", "run", tmp_path / "nope.py")
    assert missing.returncode == 2 and "nope.py: no such file" in missing.stderr
    empty = _python(tmp_path, "-m", "fastlower", "run")
    assert empty.returncode == 2 and "give a script" in empty.stderr


def test_run_gives_the_script_room_on_the_frame_stack(tmp_path):
    """Under ``fastlower run`` no loop of the script maps a CPython stack chunk per call,
    at any depth (python/cpython#142183; ``fastlower.in_process.stack_room``), where under plain
    ``python`` one does on this interpreter (else skip: nothing to compare)."""
    script = REPO / "tests" / "stack_probe.py"
    direct = _python(tmp_path / "direct", script, "worst.txt")
    ours = _python(tmp_path / "ours", "-m", "fastlower", "run", "--no-cache", script,
                   "worst.txt")
    assert direct.returncode == ours.returncode == 0, direct.stderr[-3000:] + ours.stderr[-3000:]
    plain, roomy = (int((tmp_path / d / "worst.txt").read_text()) for d in ("direct", "ours"))
    if plain < CALLS // 2:
        pytest.skip(f"plain python maps no stack chunk per call at any depth here ({plain})")
    assert roomy < CALLS // 20, (plain, roomy)


@pytest.mark.parametrize("pattern, index, expected", [
    ("r.json", 1, "r.1.json"), ("out/r.html", 12, "out/r.12.html"),
    ("report.v2.json", 2, "report.v2.2.json"), ("r", 3, "r.3")])
def test_report_files_are_numbered_before_the_last_suffix(pattern, index, expected):
    assert numbered(pattern, index) == Path(expected)


@pytest.mark.slow
def test_run_export_llm_module_is_the_reference_run(tmp_path):
    """ExecuTorch's own pipeline, unchanged: ``python -m executorch.extension.llm.export.
    export_llm`` at a tiny size (seeded checkpoint: deterministic weights) and through
    ``fastlower run -m``: the same ``.pte``, and one report per partitioner (2)."""
    import torch
    from executorch.examples.models.llama.llama_transformer import construct_transformer
    from executorch.examples.models.llama.model_args import ModelArgs

    params = {"dim": 64, "n_layers": 2, "n_heads": 4, "vocab_size": 256, "multiple_of": 32,
              "norm_eps": 1e-5, "hidden_dim": 128}
    (tmp_path / "params.json").write_text(json.dumps(params))
    torch.manual_seed(0)
    model = construct_transformer(ModelArgs(**params, max_seq_len=32, max_context_len=32))
    with torch.no_grad():  # RMSNorm weights are ones by default: make them distinct too
        for name, tensor in model.state_dict().items():
            if name.endswith("norm.weight"):
                tensor.uniform_(0.5, 1.5)
    torch.save(model.state_dict(), tmp_path / "weights.pth")
    args = ["base.model_class=stories110m", f"base.params={tmp_path / 'params.json'}",
            f"base.checkpoint={tmp_path / 'weights.pth'}", "model.use_kv_cache=True",
            "model.use_sdpa_with_kv_cache=True", "model.enable_dynamic_shape=True",
            "backend.xnnpack.enabled=True", "backend.xnnpack.extended_ops=True",
            "export.max_seq_length=32", "export.max_context_length=32",
            "export.output_name=model.pte"]
    module = ["-m", "executorch.extension.llm.export.export_llm"]
    direct = _python(tmp_path / "direct", *module, *args,
                     f"export.output_dir={tmp_path / 'direct'}")
    ours = _python(tmp_path / "ours", "-m", "fastlower", "run", "--cache-dir", tmp_path / "cache",
                   "--report-json", "r.json", *module, *args,
                   f"export.output_dir={tmp_path / 'ours'}")
    assert direct.returncode == 0, direct.stderr[-3000:]
    assert ours.returncode == 0, ours.stderr[-3000:]
    assert (tmp_path / "ours" / "model.pte").read_bytes() == \
        (tmp_path / "direct" / "model.pte").read_bytes()
    reports = sorted(p.name for p in (tmp_path / "ours").glob("r.*.json"))
    assert reports == ["r.1.json", "r.2.json"]
    for name in reports:
        jsonschema.validate(json.loads((tmp_path / "ours" / name).read_text()),
                            report_json.schema())
