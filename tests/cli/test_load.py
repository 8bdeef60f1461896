"""``fastlower lower`` on ``.pt2`` files whose trees name types a new process cannot rebuild:
Hugging Face ``ModelOutput`` (GPT-2 and Llama), a namedtuple input, a
dataclass output, a nested dict output, a custom container registered by a module.

Each program is exported, saved and lowered in memory in one process
(``exporter.py``, whose types live in its ``__main__``), then lowered by the CLI
in another: the ``.pte`` must be the exporting process's, byte for byte, and
``--check`` must pass. The two processes share a preprocess cache folder (the
CLI's partitions hit the exporter's entries only when the programs given to the
backends are the same); one case runs with ``--no-cache``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch.utils import _pytree as pytree

from fastlower.frontends import cli
from fastlower.base.loading import ProgramLoadError, load, standins
from tests import python_children

REPO = Path(__file__).resolve().parents[2]
EXPORTER = Path(__file__).with_name("exporter.py")
#: exported, saved and lowered by one process (the module's fixture)
CASES = ["gpt2", "llama", "namedtuple_input", "dataclass_output", "nested_dict_output", "boxed"]
#: the type each case's file names that this process cannot import (None: it can)
REPLACED = {"gpt2": None, "llama": None, "namedtuple_input": "__main__.Pair",
            "dataclass_output": "__main__.Result", "nested_dict_output": None}
#: the CLI with transformers not importable, as where it is not installed
WITHOUT_TRANSFORMERS = ("import sys; sys.modules['transformers'] = None; "
                        "from fastlower.frontends.cli import main; "
                        "raise SystemExit(main(sys.argv[1:]))")

pytest.importorskip("transformers")


def _env(cache: Path) -> dict:
    paths = [str(REPO)] + ([str(REPO / "src")] if os.environ.get("FASTLOWER_TEST_SRC") == "1"
                           else [])
    return dict(os.environ, PYTHONPATH=os.pathsep.join(paths), FASTLOWER_CACHE_DIR=str(cache))


def _export(folder: Path, *cases: str) -> Path:
    """The cases exported, saved and lowered in one process of their own."""
    done = python_children.run([sys.executable, str(EXPORTER), str(folder), *cases],
                               capture_output=True, text=True, timeout=900,
                               env=_env(folder / "cache"))
    assert done.returncode == 0, done.stderr[-3000:]
    return folder


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    return _export(tmp_path_factory.mktemp("saved"), *CASES)


def _cli(folder: Path, *argv, without_transformers: bool = False) -> subprocess.CompletedProcess:
    head = ([sys.executable, "-c", WITHOUT_TRANSFORMERS] if without_transformers
            else [sys.executable, "-m", "fastlower"])
    return python_children.run(head + [str(a) for a in argv], capture_output=True, text=True,
                               timeout=600, env=_env(folder / "cache"), cwd=folder)


def _warnings(stderr: str) -> list:
    return [line for line in stderr.splitlines() if line.startswith("fastlower: WARNING: ")]


@pytest.mark.parametrize("case", ["gpt2", "llama", "namedtuple_input", "dataclass_output",
                                  "nested_dict_output"])
def test_cli_lowers_the_saved_program_as_the_exporting_process_did(saved, case, tmp_path):
    pte, doc = tmp_path / f"{case}.pte", tmp_path / "r.json"
    extra = ["--no-cache"] if case == "dataclass_output" else []  # one real preprocess
    done = _cli(saved, "lower", f"{case}.pt2", "-o", pte, "--check", "--report-json", doc, *extra)
    assert done.returncode == 0, done.stderr[-3000:]
    assert pte.read_bytes() == (saved / f"{case}.ref.pte").read_bytes()
    assert "check: ok" in done.stdout and "leaf by leaf" in done.stdout
    notes = json.loads(doc.read_text())["notes"]
    replaced = REPLACED[case]
    if replaced is None:  # rebuilt as the real type (Hugging Face: its module imported)
        assert _warnings(done.stderr) == [] and notes == []
    else:  # said once on stderr, and in the report
        [warning] = _warnings(done.stderr)
        assert f"type {replaced} is not available here" in warning
        assert "returns the flattened leaves in the same order" in warning
        [note] = notes
        assert note.startswith(f"{replaced} was replaced by a generic container")
        assert f"note: {note}" in done.stdout
    if case == "namedtuple_input":  # its saved example inputs were rebuilt, not dropped
        assert "no example inputs" not in done.stderr


def test_hugging_face_output_stands_in_where_transformers_is_not_installed(saved, tmp_path):
    pte = tmp_path / "gpt2.pte"
    done = _cli(saved, "lower", "gpt2.pt2", "-o", pte, "--check", without_transformers=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert pte.read_bytes() == (saved / "gpt2.ref.pte").read_bytes()
    [warning] = _warnings(done.stderr)
    assert ("output type transformers.modeling_outputs.CausalLMOutputWithCrossAttentions is not "
            "available here (package 'transformers' is not installed)") in warning
    assert "keeps its keys (logits) in order" in warning
    assert "check: ok, 1 output(s) (['logits']) match" in done.stdout


def test_import_option_rebuilds_a_type_its_module_registers(saved, tmp_path):
    """``my_boxes.Box`` is no module path: a stand-in, unless ``--import`` names the module
    that registers it. The same ``.pte`` either way."""
    reference = (saved / "boxed.ref.pte").read_bytes()
    plain = _cli(saved, "lower", "boxed.pt2", "-o", tmp_path / "a.pte")
    assert plain.returncode == 0, plain.stderr[-3000:]
    [warning] = _warnings(plain.stderr)
    assert "output type my_boxes.Box is not available here (package 'my_boxes' is not " \
           "installed)" in warning
    imported = _cli(saved, "lower", "boxed.pt2", "-o", tmp_path / "b.pte", "--check",
                    "--import", "tests.cli.box_types")
    assert imported.returncode == 0, imported.stderr[-3000:]
    assert _warnings(imported.stderr) == [] and "check: ok, 2 output(s)" in imported.stdout
    assert (tmp_path / "a.pte").read_bytes() == reference == (tmp_path / "b.pte").read_bytes()


# ----------------------------------------------------------------------------- in process
def test_load_program_api_gives_stand_ins_that_keep_the_saved_structure(saved):
    loaded = load(saved / "dataclass_output.pt2")
    [replacement] = loaded.replaced
    assert replacement.type_name == "__main__.Result" and replacement.keys == ["hidden", "scores"]
    program = loaded.program
    args, kwargs = program.example_inputs
    result = program.module()(*args, **kwargs)
    assert list(result.keys()) == ["hidden", "scores"] and result.extra is None
    assert result["scores"] is result.scores and result[0] is result.hidden
    assert torch.allclose(result.scores.sum(-1), torch.ones(2))
    # the tree flattens and dumps to the very text that was saved
    saved_spec = json.loads(_saved_json(saved / "dataclass_output.pt2"))
    out_spec = saved_spec["graph_module"]["module_call_graph"][0]["signature"]["out_spec"]
    assert pytree.treespec_dumps(pytree.tree_flatten(result)[1]) == out_spec
    import fastlower

    assert fastlower.load_program(saved / "nested_dict_output.pt2").call_spec.out_spec \
        .type is dict


def test_example_inputs_naming_a_stand_in_are_rebuilt(saved):
    program = load(saved / "namedtuple_input.pt2").program
    (pair, scale), kwargs = program.example_inputs
    assert type(pair).__name__ == "Pair" and pair._fields == ("field0", "field1")
    assert isinstance(pair.field0, torch.Tensor) and kwargs == {}
    program.module()(pair, scale)  # the module's input check accepts them


def test_report_command_notes_the_stand_in(saved, tmp_path, capsys):
    doc = tmp_path / "r.json"
    code = cli.main(["report", str(saved / "dataclass_output.pt2"), "--report-json", str(doc)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    [note] = json.loads(doc.read_text())["notes"]
    assert note.startswith("__main__.Result was replaced by a generic container")
    assert f"note: {note}" in captured.out


def test_import_of_a_missing_module_is_exit_code_2(saved, capsys):
    code = cli.main(["report", str(saved / "gpt2.pt2"), "--import", "no_such_module_xyz"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("fastlower report: error: cannot import "
                                        "no_such_module_xyz (ModuleNotFoundError")
    with pytest.raises(ProgramLoadError, match="cannot import no_such_module_xyz"):
        load(saved / "gpt2.pt2", imports=["no_such_module_xyz"])


def _saved_json(pt2: Path) -> str:
    import zipfile

    with zipfile.ZipFile(pt2) as archive:
        [entry] = [n for n in archive.namelist() if n.endswith("/models/model.json")]
        return archive.read(entry).decode()


# ----------------------------------------------------------------------------- stand-ins
@pytest.mark.parametrize("context, keys, kind", [
    ('["logits", "hidden_states"]', ["logits", "hidden_states"], "mapping"),  # ModelOutput
    ('[["a", "b"], ["c"]]', ["a", "b"], "attribute"),  # register_dataclass: kept, None
    ('{"names": ["x", "y"], "kind": "box"}', [0, 1], "index"),  # a custom context
])
def test_a_stand_in_dumps_its_saved_spec_unchanged(context, keys, kind):
    name = f"test_standins.Kind_{kind}"
    spec = json.dumps([1, {"type": name, "context": context, "children_spec": [
        {"type": None, "context": None, "children_spec": []}] * 2}])
    cls = standins.container(name, "a test", [context])
    tree = pytree.tree_unflatten([torch.zeros(1), torch.ones(1)], pytree.treespec_loads(spec))
    assert type(tree) is cls and tree.keys() == keys
    leaves, again = pytree.tree_flatten(tree)
    assert pytree.treespec_dumps(again) == spec and len(leaves) == 2
    paths = [pytree.keystr(p) for p, _ in pytree.tree_flatten_with_path(tree)[0]]
    assert len(paths) == 2 and all(paths)


def test_failures_that_name_a_type_say_what_to_do(tmp_path):
    from fastlower.base.loading import _load_failure

    message = _load_failure("m.pt2", tmp_path / "m.pt2",
                            NotImplementedError("Deserializing mypkg.Thing in pytree is not "
                                                "registered."))
    assert message.startswith("m.pt2: cannot be loaded here (NotImplementedError: ")
    assert "--import MODULE" in message and "export a wrapper that returns tensors" in message
