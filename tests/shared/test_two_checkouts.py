"""Two checkouts at different paths share entries through one store (issue 48, item 2).

An export script and its model (``tests/cache/checkout``) are copied into two
checkouts at different absolute paths (and depths), and a library module the model
calls (``tests/cache/checkout_env``) into two folders standing for two virtual
environments (on ``PYTHONPATH``, a base directory through ``FASTLOWER_CACHE_BASE_DIR``):
every node's ``stack_trace`` names files of both. Each checkout's process has its own
empty local folder; both share one directory store. The second process hits the
first one's entry: its ``.pte`` is the first one's and ExecuTorch's, and the meta of
its returned programs (``stack_trace``, ``nn_module_stack``, ``source_fn_stack``) is
that of ExecuTorch's own lowering at its own paths, not the writer's. Verify mode
(``FASTLOWER_CACHE_VERIFY=1``: a fresh lowering compared with the hit, meta included)
agrees.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any, Dict
from tests import python_children

SOURCES = Path(__file__).resolve().parents[1] / "cache"


def _checkout(root: Path) -> Dict[str, Path]:
    repo, env = root / "repo", root / "env-site"
    shutil.copytree(SOURCES / "checkout", repo)
    shutil.copytree(SOURCES / "checkout_env", env)
    return {"repo": repo, "env": env, "local": root / "local-cache"}


def _export(where: Dict[str, Path], team: Path, out: Path, fresh: bool = False,
            verify: bool = False) -> Dict[str, Any]:
    environ = {k: v for k, v in os.environ.items()
               if not k.startswith("FASTLOWER_") and k != "PYTHONPATH"}
    environ.update(PYTHONPATH=str(where["env"]), FASTLOWER_CACHE_BASE_DIR=str(where["env"]),
                   FASTLOWER_CACHE_DIR=str(where["local"]), FASTLOWER_WORKERS="1",
                   FASTLOWER_SHARED_CACHE=f"file://{team}")
    if verify:
        environ["FASTLOWER_CACHE_VERIFY"] = "1"
    argv = [sys.executable, str(where["repo"] / "export_small.py"), str(out)]
    done = python_children.run(argv + ["--fresh"] * fresh, cwd=where["repo"], env=environ,
                               capture_output=True, timeout=600)
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-5000:]
    result = json.loads(out.read_text())
    result["pte"] = Path(f"{out}.pte").read_bytes()
    if fresh:
        result["fresh_pte"] = Path(f"{out}.fresh.pte").read_bytes()
    return result


def test_a_checkout_at_another_path_hits_with_its_own_meta(tmp_path):
    team = tmp_path / "team-store"
    team.mkdir()
    first = _checkout(tmp_path / "a")
    second = _checkout(tmp_path / "bb" / "elsewhere")
    writer = _export(first, team, tmp_path / "first.json")
    reader = _export(second, team, tmp_path / "second.json", fresh=True)
    assert writer["lowering_cache"] == "miss"
    assert (reader["lowering_cache"], reader["key"]) == ("hit", writer["key"])
    assert reader["pte"] == writer["pte"] == reader["fresh_pte"]
    traces = [row[2] for row in reader["meta"] if row[2]]
    assert any(str(second["repo"]) in t for t in traces), "no stack trace names the checkout"
    assert any(str(second["env"]) in t for t in traces), "no stack trace names the library"
    assert not any(str(tmp_path / "a") in t for t in traces), "the writer's paths came back"
    assert reader["meta"] == reader["fresh_meta"], "the hit's meta is not this caller's own"
    again = dict(second, local=tmp_path / "bb" / "verify-cache")
    verified = _export(again, team, tmp_path / "verify.json", verify=True)
    assert verified["lowering_cache"] == "verified" and verified["pte"] == writer["pte"]
