"""``fastlower.patch``: who runs what under any interleaving of threads, tasks and nesting.

The scopes (``installed()``, ``install()``/``uninstall()``, ``preview_export``) overlap
across threads in orders forced with events; the lowerings themselves are serialised
(``_SERIAL``): torch.export and ExecuTorch's edge passes are not thread-safe, with or
without fastlower. Which implementation ran is read from the call stack of the
partitioner (``_Spy``): fastlower's lowering, the reference's ``backend_api`` or the
preview called it; nothing is inferred from timing.
"""

from __future__ import annotations

import asyncio
import copy
import sys
import threading
import types
import warnings
from typing import Callable, Dict, List, Optional

import pytest
import torch
from executorch.exir import to_edge, to_edge_transform_and_lower
from executorch.exir.backend import backend_api
from executorch.exir.program import _program

import fastlower
import fastlower.patch as patch
import fastlower.preprocess as pp
from fastlower.frontends.preview import preview_export
from tests.models.partitioners import TargetsPartitioner
from tests.report.toy import ADD_MUL, AddMulSin, FastlowerToyBackend

REFERENCE = patch.reference_of("to_backend")
TIMEOUT = 60  # seconds per wait: a broken ordering fails, never hangs

# the module that calls the partitioner, for each implementation
_CALLERS = {"fastlower.lowering.steps": "fastlower",
            "executorch.exir.backend.backend_api": "reference",
            "fastlower.frontends.preview": "preview"}
_SERIAL = threading.Lock()  # one lowering at a time


class _Spy(TargetsPartitioner):
    """Tags add/mul for the toy backend and records which implementation called it."""

    def __init__(self, ran: List[str], hold: Optional[Callable[[], None]] = None) -> None:
        super().__init__(ADD_MUL, FastlowerToyBackend.__name__)
        self.ran, self.hold = ran, hold

    def partition(self, exported_program):
        frame = sys._getframe(1)
        while frame is not None and frame.f_globals.get("__name__") not in _CALLERS:
            frame = frame.f_back
        self.ran.append(_CALLERS[frame.f_globals["__name__"]] if frame else "unknown")
        if self.hold is not None:
            self.hold()
        return super().partition(exported_program)


_ATEN = torch.export.export(AddMulSin(), (torch.randn(3, 4),))
_EDGE = to_edge(copy.deepcopy(_ATEN))


def _lower_manager() -> str:
    """``EdgeProgramManager.to_backend`` (ExecuTorch's own call of ``to_backend``)."""
    ran: List[str] = []
    with _SERIAL, pp.options(workers=1), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lowered = copy.deepcopy(_EDGE).to_backend(_Spy(ran))
    assert "executorch_call_delegate" in lowered.exported_program().graph_module.code
    assert len(ran) == 1, ran
    return ran[0]


def _lower_etl() -> str:
    """``to_edge_transform_and_lower`` on an ATen program."""
    ran: List[str] = []
    with _SERIAL, pp.options(workers=1), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lowered = to_edge_transform_and_lower(copy.deepcopy(_ATEN), partitioner=[_Spy(ran)])
    assert "executorch_call_delegate" in lowered.exported_program().graph_module.code
    assert len(ran) == 1, ran
    return ran[0]


def _dispatcher_sites() -> List[str]:
    dispatcher = patch.ENTRY_POINTS[0].dispatcher
    return [name for name, module in list(sys.modules.items())
            if getattr(module, "__dict__", {}).get("to_backend") is dispatcher]


def _assert_reference_everywhere() -> None:
    assert backend_api.to_backend is REFERENCE
    assert _program.to_backend is REFERENCE
    assert _dispatcher_sites() == []
    import executorch.exir as exir

    etl = patch.reference_of("to_edge_transform_and_lower")
    assert exir.to_edge_transform_and_lower is etl and _program.to_edge_transform_and_lower is etl
    assert _program.EdgeProgramManager.__dict__["to_executorch"] is \
        patch.reference_of("to_executorch")


def _wait(event: threading.Event) -> None:
    if not event.wait(TIMEOUT):
        raise TimeoutError("the forced interleaving did not happen in time")


def _run_threads(**bodies: Callable[[], None]) -> None:
    """Runs each body in its own thread; re-raises the first failure."""
    errors: Dict[str, BaseException] = {}

    def run(name: str, body: Callable[[], None]) -> None:
        try:
            body()
        except BaseException as exc:  # noqa: BLE001 - reported in the main thread
            errors[name] = exc

    threads = [threading.Thread(target=run, args=(n, b), name=n) for n, b in bodies.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT * 3)
    assert not any(t.is_alive() for t in threads), "a thread is stuck"
    for name, exc in errors.items():
        raise AssertionError(f"thread {name} failed: {exc!r}") from exc


@pytest.fixture(autouse=True)
def _clean_process():
    _assert_reference_everywhere()
    yield
    patch.uninstall()
    _assert_reference_everywhere()


@pytest.fixture(scope="module", autouse=True)
def _warm():
    # the first lowering of a process pays one-off imports: not inside the forced orders
    assert _lower_manager() == "reference"
    with patch.installed():
        assert _lower_manager() == "fastlower"


def test_installed_scopes_overlapping_in_three_threads():
    """A enters, B enters, A exits, B lowers (fastlower); C, which asked for nothing,
    lowers while B is inside (reference); B exits: every binding is the reference's."""
    a_in, b_in, a_out, b_lowered, c_done = (threading.Event() for _ in range(5))
    ran: Dict[str, str] = {}

    def thread_a():
        with patch.installed():
            a_in.set()
            _wait(b_in)
        a_out.set()

    def thread_b():
        _wait(a_in)
        with patch.installed():
            b_in.set()
            _wait(a_out)
            ran["B"] = _lower_manager()
            ran["B etl"] = _lower_etl()
            b_lowered.set()
            _wait(c_done)

    def thread_c():
        _wait(b_lowered)
        ran["C"] = _lower_manager()
        ran["C etl"] = _lower_etl()
        c_done.set()

    _run_threads(A=thread_a, B=thread_b, C=thread_c)
    assert ran == {"B": "fastlower", "B etl": "fastlower", "C": "reference", "C etl": "reference"}
    _assert_reference_everywhere()
    assert _lower_manager() == "reference"
    assert _lower_etl() == "reference"


def test_install_and_uninstall_interleaved_with_installed():
    """A installs, B enters installed(), C lowers (fastlower: process-wide), A uninstalls,
    B lowers (fastlower), C lowers while B is inside (reference), B exits."""
    installed, b_in, c_first, uninstalled, b_lowered, c_done = (
        threading.Event() for _ in range(6))
    ran: Dict[str, str] = {}

    def thread_a():
        patch.install()
        assert patch.is_installed()
        installed.set()
        _wait(c_first)
        patch.uninstall()
        uninstalled.set()

    def thread_b():
        _wait(installed)
        with patch.installed():
            b_in.set()
            _wait(uninstalled)
            ran["B"] = _lower_manager()
            b_lowered.set()
            _wait(c_done)

    def thread_c():
        _wait(b_in)
        ran["C installed"] = _lower_manager()
        with patch.reference():  # an explicit request beats install()
            ran["C reference()"] = _lower_manager()
        c_first.set()
        _wait(b_lowered)
        ran["C uninstalled"] = _lower_etl()
        c_done.set()

    _run_threads(A=thread_a, B=thread_b, C=thread_c)
    assert ran == {"C installed": "fastlower", "C reference()": "reference", "B": "fastlower",
                   "C uninstalled": "reference"}
    assert not patch.is_installed()
    _assert_reference_everywhere()
    assert _lower_manager() == "reference"


def test_preview_export_swaps_nothing_other_threads_see():
    """While A's preview is inside its partitioner, B lowers under installed() (fastlower)
    and C lowers with nothing asked (reference, and it succeeds); then A finishes."""
    a_in, b_done, c_done = (threading.Event() for _ in range(3))
    ran: Dict[str, str] = {}
    previewed: List[str] = []

    def hold():
        a_in.set()
        _SERIAL.release()  # let the others lower while this preview is paused inside
        try:
            _wait(c_done)
        finally:
            _SERIAL.acquire()

    def thread_a():
        with _SERIAL, pp.options(workers=1), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            report = preview_export(copy.deepcopy(_ATEN), _Spy(previewed, hold))
        assert report.preview and report.delegated_nodes == 4

    def thread_b():
        _wait(a_in)
        with patch.installed():
            ran["B"] = _lower_etl()
        b_done.set()

    def thread_c():
        _wait(b_done)
        ran["C"] = _lower_etl()
        ran["C manager"] = _lower_manager()
        c_done.set()

    _run_threads(A=thread_a, B=thread_b, C=thread_c)
    assert previewed == ["preview"]
    assert ran == {"B": "fastlower", "C": "reference", "C manager": "reference"}
    _assert_reference_everywhere()
    assert _lower_etl() == "reference"


def test_asyncio_tasks_keep_their_own_choice():
    async def main() -> Dict[str, str]:
        ran: Dict[str, str] = {}
        a_in, b_done = asyncio.Event(), asyncio.Event()

        async def task_a():
            with patch.installed():
                a_in.set()
                await b_done.wait()
                ran["A"] = _lower_manager()

        async def task_b():
            await a_in.wait()
            ran["B"] = _lower_manager()
            b_done.set()

        await asyncio.wait_for(asyncio.gather(task_a(), task_b()), TIMEOUT)
        return ran

    assert asyncio.run(main()) == {"A": "fastlower", "B": "reference"}


def test_nesting_and_reference_blocks():
    with patch.installed():
        with patch.installed():
            assert patch.implementation() is fastlower.to_backend
        assert patch.implementation() is fastlower.to_backend
        with patch.reference():
            assert patch.implementation() is REFERENCE
            assert _lower_manager() == "reference"
        assert _lower_manager() == "fastlower"
        assert backend_api.to_backend is patch.ENTRY_POINTS[0].dispatcher
    _assert_reference_everywhere()
    patch.install()
    patch.install()  # idempotent
    with patch.installed():
        pass
    assert backend_api.to_backend is patch.ENTRY_POINTS[0].dispatcher
    patch.uninstall()
    patch.uninstall()
    _assert_reference_everywhere()


def test_scope_exit_on_error_restores():
    with pytest.raises(RuntimeError, match="boom"):
        with patch.installed():
            raise RuntimeError("boom")
    _assert_reference_everywhere()
    with pytest.raises(KeyError, match="no entry point"):
        with patch.routed({"not_an_entry_point": print}):
            pass
    _assert_reference_everywhere()


def test_dispatcher_identity():
    dispatcher = patch.ENTRY_POINTS[0].dispatcher
    assert dispatcher.__wrapped__ is REFERENCE
    assert dispatcher.__name__ == REFERENCE.__name__ == "to_backend"
    assert dispatcher.__module__ == REFERENCE.__module__
    assert dispatcher.__doc__ == REFERENCE.__doc__
    assert dispatcher.registry is REFERENCE.registry  # singledispatch's attributes
    assert patch.reference_of() is REFERENCE


def test_modules_imported_before_and_after_are_rebound_and_restored():
    before = types.ModuleType("user_probe_before")
    before.to_backend = backend_api.to_backend  # `from backend_api import to_backend` earlier
    sys.modules[before.__name__] = before
    try:
        patch.install()
        dispatcher = patch.ENTRY_POINTS[0].dispatcher
        assert before.to_backend is dispatcher
        after = types.ModuleType("executorch_probe_after")
        after.to_backend = backend_api.to_backend  # the same import, while installed
        sys.modules[after.__name__] = after
        assert after.to_backend is dispatcher
        patch.uninstall()
        assert before.to_backend is REFERENCE and after.to_backend is REFERENCE
    finally:
        sys.modules.pop("user_probe_before", None)
        sys.modules.pop("executorch_probe_after", None)


def test_lowering_cache_entry_points_are_bound_and_restored():
    """``to_edge_transform_and_lower`` (module attributes) and
    ``EdgeProgramManager.to_executorch`` (a class attribute) follow the same rules."""
    import executorch.exir as exir
    import fastlower.cache

    manager_class = _program.EdgeProgramManager
    by_name = {entry.name: entry for entry in patch.ENTRY_POINTS}
    etl, to_et = by_name["to_edge_transform_and_lower"], by_name["to_executorch"]
    assert etl.reference.__module__ == "executorch.exir.program._program"
    assert to_et.reference is manager_class.__dict__["to_executorch"]  # nothing installed yet
    with patch.installed():
        assert exir.to_edge_transform_and_lower is etl.dispatcher
        assert _program.to_edge_transform_and_lower is etl.dispatcher
        assert sys.modules[__name__].to_edge_transform_and_lower is etl.dispatcher
        assert manager_class.__dict__["to_executorch"] is to_et.dispatcher
        assert patch.implementation("to_edge_transform_and_lower") is \
            fastlower.cache.to_edge_transform_and_lower
        assert patch.implementation("to_executorch") is fastlower.cache.to_executorch
        with patch.reference():
            assert patch.implementation("to_executorch") is to_et.reference
    assert to_edge_transform_and_lower is etl.reference  # this module's own import
    _assert_reference_everywhere()


def test_reference_validation_switch_reaches_fastlower():
    """ExecuTorch's ``backend_api.validation_disabled()`` (``executorch.export`` uses it)
    is no longer patched: fastlower reads the reference's switch as well as its own."""
    from fastlower.base import state

    assert state.validation_enabled()
    with backend_api.validation_disabled():
        assert not state.validation_enabled()
    with fastlower.validation_disabled():
        assert not state.validation_enabled()
    assert state.validation_enabled()


def test_pytest_plugin_check_reference_runs_the_reference_under_install():
    """``lower_benchmark(check_reference=True)`` compares with ExecuTorch's own
    ``to_backend`` even while ``install()`` routes ``backend_api.to_backend`` to fastlower."""
    from fastlower.frontends.pytest_plugin import _check_reference

    ran: List[str] = []
    program = copy.deepcopy(_EDGE).exported_program()
    patch.install()
    try:
        with pp.options(workers=1), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ours = backend_api.to_backend(copy.deepcopy(program), _Spy(ran))
            assert _check_reference(program, lambda: _Spy(ran), ours)
    finally:
        patch.uninstall()
    assert ran == ["fastlower", "reference"]
