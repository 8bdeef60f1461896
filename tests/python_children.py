"""Python children for the tests, forked from an interpreter that has imported torch.

Most tests that run fastlower in another process spend ~4 s of that process's CPU importing
torch and ``executorch.exir`` (measured: docs/testing.md). :func:`run` and :func:`popen` take
the arguments of ``subprocess.run`` and ``subprocess.Popen`` for a ``python`` command line
(``sys.executable`` with ``-m MODULE``, ``-c CODE`` or a script, or a console script of this
environment) and start it as a fork of a pre-imported interpreter (multiprocessing's
``forkserver``, which imports :data:`PRELOAD` once per pytest worker): the child gets the
command's argv, environment, working folder, standard streams, ``sys.path`` and exit code as
``python`` would give them, and runs its at-exit handlers. It is a separate process, sharing
nothing with its siblings but the modules imported before the fork.

What a fork cannot give, a real ``python`` is started for (the same call, ``subprocess``):
``real=True`` (a test about a fresh interpreter: hash seeds, start-up), interpreter options,
standard input, and an environment that differs from the forkserver's in a variable read when
the preloaded modules are imported or the interpreter starts (:data:`READ_AT_START`).
``FASTLOWER_TEST_REAL_PYTHON=1`` starts every child as a real ``python``.
"""

from __future__ import annotations

import atexit
import io
import json
import multiprocessing
import os
import runpy
import subprocess
import sys
import tempfile
import threading
import traceback
import types
from multiprocessing import reduction
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

PRELOAD = ["torch", "executorch.exir", "executorch.backends.xnnpack.partition.xnnpack_partitioner"]

# variables read when the interpreter starts or the preloaded modules are imported: a child
# whose environment changes one of them gets a real interpreter
READ_AT_START = ("PYTHON", "TORCH", "PYTORCH", "OMP_", "MKL_", "KMP_", "LD_", "CUDA", "MALLOC")
# ... but these, which are read each time they are used, so a fork reads the child's value:
# torch reads (and, when unset, writes) TORCHINDUCTOR_CACHE_DIR whenever it needs the folder
# (torch/_inductor/runtime/cache_dir_utils.py's cache_dir)
READ_WHEN_USED = ("TORCHINDUCTOR_CACHE_DIR",)
_PATH_VARIABLE = "PYTHONPATH"  # read at start too, but applied to the child's sys.path

_lock = threading.Lock()
_state: Dict[str, Any] = {}


# the environment the forkserver starts with: the session's, as tests/conftest.py recorded it
# when the pytest process started (None: this process's when the server starts). A library
# imported by a test before the server's first use may have written os.environ (scikit-learn
# sets KMP_DUPLICATE_LIB_OK), and the conftest puts the session's back after each module.
SESSION_ENV: Optional[Dict[str, str]] = None


def _forkserver() -> Tuple[Any, Dict[str, str], List[str]]:
    """The forkserver context, the environment it started with and the interpreter's own
    ``sys.path`` (no PYTHONPATH, no script folder); started on first use."""
    with _lock:
        if not _state:
            env = dict(os.environ if SESSION_ENV is None else SESSION_ENV)
            probe = "import sys, json; print(json.dumps(sys.path))"
            bare = subprocess.run([sys.executable, "-c", probe],
                                  env={k: v for k, v in env.items() if k != _PATH_VARIABLE},
                                  capture_output=True, text=True, check=True, cwd="/")
            context = multiprocessing.get_context("forkserver")
            context.set_forkserver_preload(PRELOAD)
            _start_server(env)
            _state.update(context=context, env=env, path=json.loads(bare.stdout)[1:])
        return _state["context"], _state["env"], _state["path"]


def replace_environ(env: Dict[str, str]) -> None:
    """``os.environ`` made ``env``, but pytest's own ``PYTEST_*`` variables (set and removed by
    pytest around each test) left as they are."""
    own = {k: v for k, v in os.environ.items() if k.startswith("PYTEST_")}
    os.environ.clear()
    os.environ.update(env)
    os.environ.update(own)


def _start_server(env: Dict[str, str]) -> None:
    """Starts multiprocessing's forkserver with ``env`` as its environment (it inherits
    ``os.environ``, so that is ``env`` for the moment of the start)."""
    from multiprocessing import forkserver

    current = dict(os.environ)
    replace_environ(env)
    try:
        forkserver.ensure_running()
    finally:
        replace_environ(current)


def _command(args: Sequence[Any]) -> Optional[Tuple[str, str, List[str]]]:
    """``(kind, target, rest)`` of a python command line a fork can run, else None: kind is
    ``-m``, ``-c`` or ``script``."""
    argv = [os.fspath(a) for a in args]
    if not argv:
        return None
    head = argv[0]
    if head != sys.executable:
        if Path(head).parent != Path(sys.executable).parent or not _is_python_script(head):
            return None
        return "script", head, argv[1:]
    if len(argv) >= 3 and argv[1] in ("-m", "-c"):
        return argv[1], argv[2], argv[3:]
    if len(argv) >= 2 and not argv[1].startswith("-"):
        return "script", argv[1], argv[2:]
    return None


def _is_python_script(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            first = f.readline()
    except OSError:
        return False
    return first.strip() == b"#!" + os.fsencode(sys.executable)


# why python commands started as real interpreters in this process: reason -> count
# (the session's summary line, tests/conftest.py)
REAL_STARTS: Dict[str, int] = {}


def why_real(args: Sequence[Any], env: Optional[Dict[str, str]], stdin: Any, real: bool,
             server_env: Dict[str, str]) -> Optional[str]:
    """Why this call needs a real interpreter, or None when a fork can run it."""
    if real:
        return "real=True"
    if os.environ.get("FASTLOWER_TEST_REAL_PYTHON") == "1":
        return "FASTLOWER_TEST_REAL_PYTHON=1"
    if stdin not in (None, subprocess.DEVNULL):
        return "standard input"
    if _command(args) is None:
        return "interpreter options" if _is_python(args) else "not python"
    wanted = dict(os.environ if env is None else env)
    for name in sorted(set(wanted) | set(server_env)):
        if name != _PATH_VARIABLE and name not in READ_WHEN_USED \
                and name.startswith(READ_AT_START) and wanted.get(name) != server_env.get(name):
            return f"start-up variable {name} changed"
    return None


def _is_python(args: Sequence[Any]) -> bool:
    """Whether ``args`` starts this environment's python (itself or a console script)."""
    head = os.fspath(args[0]) if args else ""
    return head == sys.executable or (Path(head).parent == Path(sys.executable).parent
                                      and _is_python_script(head))


def _real_start(args: Sequence[Any], reason: str) -> None:
    """Count a python command started as a real interpreter, by reason."""
    if _is_python(args):
        with _lock:
            REAL_STARTS[reason] = REAL_STARTS.get(reason, 0) + 1


class _Fd:
    """A file descriptor handed to the child through the forkserver (pickled as multiprocessing
    pickles a Connection)."""

    def __init__(self, fd: int):
        self.fd = fd

    def __reduce__(self):
        return _inherit, (reduction.DupFd(self.fd),)


def _inherit(dup: Any) -> int:
    return dup.detach()


def _sys_path(kind: str, target: str, cwd: str, env: Dict[str, str], bare: List[str]) -> List[str]:
    if kind == "script":
        first = os.path.dirname(os.path.realpath(os.path.join(cwd, target)))
    else:
        first = cwd if kind == "-m" else ""
    extra = [os.path.join(cwd, p) for p in env.get(_PATH_VARIABLE, "").split(os.pathsep) if p]
    return [first, *extra, *bare]


def _exit_code(exc: SystemExit) -> int:
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _child(command: Tuple[str, str, List[str]], env: Dict[str, str], cwd: str,
           fds: Tuple[int, int, int], path: List[str]) -> None:
    """The forked child: becomes ``python`` running ``command``, then exits as it would."""
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    for target, fd in zip((0, 1, 2), fds):
        os.dup2(fd, target)
    for fd in set(fds) - {0, 1, 2}:
        os.close(fd)
    sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False))
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    kind, target, rest = command
    sys.path[:] = path
    code = 0
    try:
        _run(kind, target, rest)
    except SystemExit as exc:
        code = _exit_code(exc)
    except BaseException as exc:  # noqa: BLE001 - printed, exit code 1, as python does
        tb = exc.__traceback__
        for _ in range(2):  # not this frame nor _run's: python's traceback starts below them
            tb = tb.tb_next if tb is not None and tb.tb_next is not None else tb
        traceback.print_exception(type(exc), exc, tb)
        code = 1
    threading._shutdown()  # type: ignore[attr-defined]  # python waits for its threads
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def _run(kind: str, target: str, rest: List[str]) -> None:
    if kind == "-m":
        sys.argv = ["-m", *rest]
        runpy._run_module_as_main(target, alter_argv=True)  # type: ignore[attr-defined]
        return
    main = types.ModuleType("__main__")
    sys.modules["__main__"] = main
    if kind == "-c":
        sys.argv = ["-c", *rest]
        code = compile(target, "<string>", "exec")
    else:
        sys.argv = [target, *rest]
        main.__file__ = target
        code = compile(Path(target).read_bytes(), target, "exec")
        main.__cached__ = None  # type: ignore[attr-defined]
    exec(code, main.__dict__)


class ForkedChild:
    """The part of ``subprocess.Popen`` the tests use, for a forked child."""

    def __init__(self, args: Sequence[Any], process: Any):
        self.args = list(args)
        self._process = process
        self.pid: int = process.pid
        self.returncode: Optional[int] = None

    def poll(self) -> Optional[int]:
        if self.returncode is None and self._process.exitcode is not None:
            self.returncode = self._process.exitcode
        return self.returncode

    def wait(self, timeout: Optional[float] = None) -> int:
        self._process.join(timeout)
        if self.poll() is None:
            raise subprocess.TimeoutExpired(self.args, timeout)
        return self.returncode  # type: ignore[return-value]

    def send_signal(self, signal: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, signal)

    def kill(self) -> None:
        if self.poll() is None:
            self._process.kill()

    def terminate(self) -> None:
        if self.poll() is None:
            self._process.terminate()

    def __enter__(self) -> "ForkedChild":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.wait()


def _stream_fd(stream: Any, default: int) -> int:
    if stream is None:
        return default
    if stream == subprocess.DEVNULL:
        return os.open(os.devnull, os.O_RDWR)
    return stream if isinstance(stream, int) else stream.fileno()


def popen(args: Sequence[Any], *, env: Optional[Dict[str, str]] = None, cwd: Any = None,
          stdin: Any = None, stdout: Any = None, stderr: Any = None, real: bool = False,
          **kwargs: Any) -> Any:
    """``subprocess.Popen(args, ...)``: a forked child where it can be, else a real one."""
    context, server_env, bare = _forkserver()
    command = _command(args)
    # a pipe's reader is Popen's; the tests use files
    reason = ("a pipe to read" if subprocess.PIPE in (stdout, stderr)
              else why_real(args, env, stdin, real, server_env))
    if reason is not None:  # also whenever command is None (why_real says why)
        _real_start(args, reason)
        return subprocess.Popen(args, env=env, cwd=cwd, stdin=stdin, stdout=stdout,
                                stderr=stderr, **kwargs)
    out = _stream_fd(stdout, 1)
    err = out if stderr == subprocess.STDOUT else _stream_fd(stderr, 2)
    where = os.path.abspath(os.fspath(cwd) if cwd is not None else os.getcwd())
    child_env = dict(os.environ if env is None else env)
    devnull = os.open(os.devnull, os.O_RDONLY)
    try:
        process = context.Process(target=_child, args=(
            command, child_env, where, (_Fd(devnull), _Fd(out), _Fd(err)),
            _sys_path(command[0], command[1], where, child_env, bare)))
        process.start()
    finally:
        os.close(devnull)
        for fd, given in ((out, stdout), (err, stderr)):
            if given == subprocess.DEVNULL and fd not in (1, 2):
                try:
                    os.close(fd)
                except OSError:
                    pass
    return ForkedChild(args, process)


def run(args: Sequence[Any], *, capture_output: bool = False, text: bool = False,
        timeout: Optional[float] = None, check: bool = False, env: Optional[Dict[str, str]] = None,
        cwd: Any = None, stdout: Any = None, stderr: Any = None, real: bool = False,
        input: Any = None, **kwargs: Any) -> "subprocess.CompletedProcess[Any]":
    """``subprocess.run(args, ...)``: a forked child where it can be, else a real one."""
    _, server_env, _ = _forkserver()
    reason = ("standard input" if input is not None
              else why_real(args, env, kwargs.get("stdin"), real, server_env))
    if reason is not None:
        _real_start(args, reason)
        return subprocess.run(args, capture_output=capture_output, text=text, timeout=timeout,
                              check=check, env=env, cwd=cwd, stdout=stdout, stderr=stderr,
                              input=input, **kwargs)
    with tempfile.TemporaryFile() as out_file, tempfile.TemporaryFile() as err_file:
        out = out_file if capture_output or stdout == subprocess.PIPE else stdout
        err = err_file if capture_output or stderr == subprocess.PIPE else stderr
        child = popen(args, env=env, cwd=cwd, stdout=out, stderr=err, **kwargs)
        try:
            child.wait(timeout)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
            raise
        captured = [_read(f, text, kwargs) if f in (out, err) else None
                    for f in (out_file, err_file)]
    done = subprocess.CompletedProcess(args, child.returncode, captured[0], captured[1])
    if check:
        done.check_returncode()
    return done


def _read(f: Any, text: bool, kwargs: Dict[str, Any]) -> Any:
    f.seek(0)
    data = f.read()
    if not text:
        return data
    return data.decode(kwargs.get("encoding") or "utf-8", kwargs.get("errors") or "strict")
