"""``tests.python_children``: a forked child is what ``python`` would have been.

Each case runs the same command as a forked child and as a real ``python``
(``real=True``) and compares what the child saw and did: argv, ``sys.path``, working
folder, environment, exit code, standard streams, at-exit handlers, threads waited for,
an uncaught exception's traceback. The fallbacks to a real interpreter are checked by the
child's parent: a forked child's parent is the forkserver, a real one's is this worker.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests import python_children

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# what the child reports: enough to tell a fork from a real interpreter, and python's view
_REPORT = (
    "import json, os, sys, threading, atexit, time\n"
    "atexit.register(lambda: print('at exit', flush=True))\n"
    "threading.Thread(target=lambda: (time.sleep(0.2), print('thread done', flush=True))).start()\n"
    "print(json.dumps({'argv': sys.argv, 'path': sys.path[:3], 'cwd': os.getcwd(),\n"
    "                  'env': os.environ.get('PC_PROBE'), 'parent': os.getppid(),\n"
    "                  'main': __name__, 'torch': 'torch' in sys.modules}))\n"
)


def _both(args, **kwargs):
    forked = python_children.run(args, capture_output=True, text=True, timeout=120, **kwargs)
    real = python_children.run(args, capture_output=True, text=True, timeout=120, real=True,
                               **kwargs)
    return forked, real


def _report(done):
    lines = done.stdout.splitlines()
    return json.loads(lines[0]), lines[1:]


@pytest.mark.parametrize("kind", ["-c", "-m", "script"])
def test_a_forked_child_sees_what_python_would(kind, tmp_path):
    (tmp_path / "probe_mod.py").write_text(_REPORT + "raise SystemExit(3)\n")
    head = {"-c": [sys.executable, "-c", _REPORT + "raise SystemExit(3)"],
            "-m": [sys.executable, "-m", "probe_mod"],
            "script": [sys.executable, str(tmp_path / "probe_mod.py")]}[kind]
    env = dict(os.environ, PC_PROBE="seen", PYTHONPATH=str(tmp_path))
    forked, real = _both(head + ["a", "b"], env=env, cwd=tmp_path)
    (seen_forked, rest_forked), (seen_real, rest_real) = _report(forked), _report(real)
    assert forked.returncode == real.returncode == 3
    assert seen_forked["parent"] != os.getpid() == seen_real["parent"]  # one fork, one real
    assert seen_forked["torch"] and not seen_real["torch"]  # the fork's preloaded modules
    for field in ("argv", "path", "cwd", "env", "main"):
        assert seen_forked[field] == seen_real[field], field
    # python waits for the child's threads, then runs its at-exit handlers
    assert rest_forked == rest_real == ["thread done", "at exit"]
    assert forked.stderr == real.stderr == ""


def test_an_uncaught_exception_prints_pythons_traceback_and_exits_1(tmp_path):
    code = "def f():\n    raise ValueError('boom')\nf()\n"
    forked, real = _both([sys.executable, "-c", code], cwd=tmp_path)
    assert forked.returncode == real.returncode == 1
    assert forked.stderr == real.stderr
    assert forked.stderr.splitlines()[1] == '  File "<string>", line 3, in <module>'


def test_streams_to_files_and_a_timeout(tmp_path):
    with open(tmp_path / "out.txt", "w+") as out:
        child = python_children.popen(
            [sys.executable, "-c", "import sys, time; print('o', flush=True); "
             "print('e', file=sys.stderr, flush=True); time.sleep(60)"],
            stdout=out, stderr=subprocess.STDOUT)
        assert isinstance(child, python_children.ForkedChild)
        with pytest.raises(subprocess.TimeoutExpired):
            child.wait(timeout=2)  # the forkserver's first start can take a few seconds
        child.kill()
        assert child.wait() == -9
        out.seek(0)
        assert sorted(out.read().split()) == ["e", "o"]


def test_a_variable_read_when_used_is_no_reason_for_a_real_interpreter(tmp_path):
    """torch writes TORCHINDUCTOR_CACHE_DIR into os.environ when it first needs the folder and
    reads it each time: a child whose environment differs there only is forked, and sees it."""
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor"))
    before = dict(python_children.REAL_STARTS)
    done = python_children.run(
        [sys.executable, "-c", "from torch._inductor.runtime.cache_dir_utils import cache_dir; "
         "import os; print(cache_dir(), os.getppid())"],
        capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    folder, parent = done.stdout.split()
    assert folder == str(tmp_path / "inductor") and int(parent) != os.getpid()  # a fork
    assert python_children.REAL_STARTS == before


@pytest.mark.parametrize("why", ["real", "PYTHONHASHSEED", "interpreter option", "not python"])
def test_what_a_fork_cannot_be_runs_a_real_interpreter(why, tmp_path):
    argv = [sys.executable, "-c", "import os; print(os.getppid())"]
    options = {}
    if why == "real":
        options["real"] = True
    elif why == "PYTHONHASHSEED":
        options["env"] = dict(os.environ, PYTHONHASHSEED="7")
    elif why == "interpreter option":
        argv = [sys.executable, "-X", "utf8", *argv[1:]]
    else:
        argv = ["sh", "-c", "echo $PPID"]
    expected = {"real": "real=True", "PYTHONHASHSEED": "start-up variable PYTHONHASHSEED changed",
                "interpreter option": "interpreter options", "not python": None}[why]
    before = dict(python_children.REAL_STARTS)
    done = python_children.run(argv, capture_output=True, text=True, timeout=120, **options)
    assert done.returncode == 0 and int(done.stdout) == os.getpid()
    # counted by reason for the session's summary line (a shell command is not counted)
    counted = {reason: n - before.get(reason, 0)
               for reason, n in python_children.REAL_STARTS.items() if n != before.get(reason, 0)}
    assert counted == ({expected: 1} if expected else {})
