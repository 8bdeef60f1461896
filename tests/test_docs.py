"""The README's and docs/'s code blocks run, and their links resolve.

Convention (an HTML comment on the line right before a fenced block):

* ``<!-- test: ID [file=NAME] [exit=N] [slow] -->``: the block is part of test ``ID``
  of its document. The blocks of one ID run in document order in one fresh temporary
  folder: a block with ``file=NAME`` is written to ``NAME`` there; any other
  ``python`` block runs with this interpreter, a ``bash`` block with ``bash -euo
  pipefail``, with this interpreter's ``bin`` folder first on ``PATH`` (``fastlower``,
  ``pytest``, ``python``) and ``HOME`` in that folder (so ``~/.cache/fastlower`` and the
  cache key are the test's own). A block must exit with ``N`` (default 0). ``slow`` on any
  block marks the whole test slow.
* ``<!-- not run: REASON -->``: a block that is shown but not run (the two set-up
  commands, which CI runs itself; commands that take minutes or need another machine).

Every ``python``, ``bash``, ``sh`` and ``shell`` block carries one of the two, so a new
block is either run or says why not. Output transcripts use no info string or ``text``.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from tests import python_children

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]
RUNNABLE = {"python", "bash", "sh", "shell"}
TIMEOUT = 600

_FENCE = re.compile(r"^(?P<indent> *)(?P<fence>```+)(?P<info>[^`\n]*)$")
_MARK = re.compile(r"^<!--\s*(?P<kind>test|not run):\s*(?P<body>.*?)\s*-->$")


@dataclass
class Block:
    path: Path
    line: int          # 1-based line of the opening fence
    info: str
    text: str
    mark: str | None   # the comment right before the fence, if any


@dataclass
class Step:
    block: Block
    file: str | None = None
    exit: int = 0


@dataclass
class DocTest:
    path: Path
    name: str
    steps: list[Step] = field(default_factory=list)
    slow: bool = False

    @property
    def id(self) -> str:
        return f"{self.path.relative_to(ROOT)}::{self.name}"


def blocks(path: Path) -> list[Block]:
    lines = path.read_text().split("\n")
    found, i = [], 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        start, fence, indent = i, m["fence"], len(m["indent"])
        i += 1
        body = []
        while i < len(lines) and lines[i].strip() != fence:
            body.append(lines[i][indent:])
            i += 1
        i += 1
        prev = lines[start - 1].strip() if start > 0 else ""
        found.append(Block(path, start + 1, m["info"].strip().split(" ")[0], "\n".join(body) + "\n",
                           prev if _MARK.match(prev) else None))
    return found


def doc_tests() -> list[DocTest]:
    tests: dict[tuple[Path, str], DocTest] = {}
    for path in DOCUMENTS:
        for block in blocks(path):
            m = _MARK.match(block.mark or "")
            if not m or m["kind"] != "test":
                continue
            name, *options = shlex.split(m["body"])
            test = tests.setdefault((path, name), DocTest(path, name))
            step = Step(block)
            for option in options:
                key, _, value = option.partition("=")
                if key == "slow":
                    test.slow = True
                elif key == "file":
                    step.file = value
                elif key == "exit":
                    step.exit = int(value)
                else:
                    raise ValueError(f"{path}:{block.line}: unknown option {option!r}")
            test.steps.append(step)
    return list(tests.values())


def _params():
    return [pytest.param(t, id=t.id, marks=[pytest.mark.slow] if t.slow else [])
            for t in doc_tests()]


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def run_doc_test(test: DocTest, folder: Path) -> None:
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    for name in ("FASTLOWER_CACHE_DIR", "FASTLOWER_CACHE_KEY_FILE",
                 "XDG_CACHE_HOME", "XDG_CONFIG_HOME"):
        env.pop(name, None)
    for name in [name for name in env if name.startswith("PYTEST_")]:
        env.pop(name)  # an outer xdist worker's PYTEST_XDIST_WORKER turns pytest-benchmark off
    env["HOME"] = str(folder / "home")  # "~/.cache/fastlower" and the cache key stay in here
    (folder / "home").mkdir(exist_ok=True)
    for step in test.steps:
        block = step.block
        where = f"{_rel(block.path)}:{block.line}"
        if step.file:
            (folder / step.file).write_text(block.text)
            continue
        if block.info == "python":
            command = [sys.executable, "-c", block.text]
        elif block.info in {"bash", "sh", "shell"}:
            command = ["bash", "-euo", "pipefail", "-c", block.text]
        else:
            raise AssertionError(f"{where}: a test block is python or bash, not {block.info!r}")
        done = python_children.run(command, cwd=folder, env=env, capture_output=True, text=True,
                                   timeout=TIMEOUT)
        assert done.returncode == step.exit, (
            f"{where}: exit code {done.returncode}, expected {step.exit}\n"
            f"--- stdout\n{done.stdout[-4000:]}\n--- stderr\n{done.stderr[-4000:]}")


@pytest.mark.parametrize("test", _params())
def test_block_runs(test: DocTest, tmp_path: Path) -> None:
    run_doc_test(test, tmp_path)


def test_every_runnable_block_is_run_or_says_why_not():
    unmarked = [f"{b.path.relative_to(ROOT)}:{b.line}" for path in DOCUMENTS for b in blocks(path)
                if b.info in RUNNABLE and b.mark is None]
    assert unmarked == []


def test_there_are_runnable_blocks():
    names = {t.id for t in doc_tests()}
    assert len([n for n in names if n.startswith("README.md::")]) >= 3, names


def test_a_broken_block_fails(tmp_path: Path):
    doc = tmp_path / "broken.md"
    doc.write_text("<!-- test: broken -->\n```python\nraise SystemExit(3)\n```\n")
    (test,) = [DocTest(doc, "broken", [Step(b)]) for b in blocks(doc)]
    with pytest.raises(AssertionError, match="exit code 3, expected 0"):
        run_doc_test(test, tmp_path)


# Links -----------------------------------------------------------------------

_LINK = re.compile(r"\]\((?P<target>[^)\s]+)\)")


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    text = path.read_text()
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    return {_slug(m[1]) for m in re.finditer(r"^#+\s+(.*)$", text, re.M)}


def test_links_resolve():
    broken = []
    for path in DOCUMENTS:
        text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
        for m in _LINK.finditer(text):
            target = m["target"]
            if re.match(r"[a-z]+:", target):
                continue
            file, _, anchor = target.partition("#")
            dest = (path.parent / file).resolve() if file else path
            if not dest.exists():
                broken.append(f"{path.relative_to(ROOT)}: {target}")
            elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
                broken.append(f"{path.relative_to(ROOT)}: {target} (no such heading)")
    assert broken == []


def test_no_tracker_numbers():
    """Readers cannot see the tracker: say what an issue was about, not its number."""
    found = []
    for path in DOCUMENTS:
        text = re.sub(r"\([^)\s]*#[^)\s]*\)", "", path.read_text())  # link targets
        for m in re.finditer(r"\bissues?[ -]#?\d+|\(#\d+\)", text, re.I):
            found.append(f"{path.relative_to(ROOT)}: {m[0]}")
    assert found == []


def test_no_merge_leftovers_or_placeholders():
    """A merge's conflict markers in a tracked text file, or a placeholder left in a
    document, would ship as text no reader can use."""
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True)
    if tracked.returncode != 0:
        pytest.skip("not a git checkout")
    conflict = re.compile(r"^(<{7} |>{7} |={7}$)", re.M)
    placeholder = re.compile(r"\b[A-Z]+_PLACE" r"HOLDER\b")
    found = []
    for name in tracked.stdout.splitlines():
        path = ROOT / name
        if path.suffix not in {".md", ".py", ".toml", ".txt", ".cpp", ".h"} or not path.is_file():
            continue
        text = path.read_text(errors="replace")
        hits = list(conflict.finditer(text))
        if path.suffix == ".md":
            hits += placeholder.finditer(text)
        for m in hits:
            line = text.count("\n", 0, m.start()) + 1
            found.append(f"{name}:{line}")
    assert found == []


def test_readme_stays_a_front_page():
    """The README is a front page (at most 250 lines): reference material goes to docs/."""
    lines = (ROOT / "README.md").read_text().count("\n")
    assert lines <= 250, f"README.md has {lines} lines; move reference material to docs/"
