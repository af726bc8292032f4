"""Paced background imports (lmra.warmup): the importing thread leaves the interpreter to the
event loop most of the time until the run needs the modules, then imports at once."""

from __future__ import annotations

import sys
import threading
import time

import pytest

from lmra import warmup

WORK_S = 0.06  # each fake module's import busies the interpreter this long


@pytest.fixture
def fake_modules(tmp_path, monkeypatch):
    """Modules ``lmra_fake_0`` … ``lmra_fake_3`` whose import spins WORK_S of the importing
    thread's CPU time, and ``lmra_fake_bad`` that raises."""
    names = [f"lmra_fake_{i}_{tmp_path.name[-6:]}" for i in range(4)]
    for n in names:
        (tmp_path / f"{n}.py").write_text(f"import time\nt = time.thread_time()\nwhile time.thread_time() - t < {WORK_S}:\n"
                                          "    pass\n")
    bad = f"lmra_fake_bad_{tmp_path.name[-6:]}"
    (tmp_path / f"{bad}.py").write_text("raise RuntimeError('broken module')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(warmup, "_next_at", 0.0)
    yield names, bad
    for n in (*names, bad):
        sys.modules.pop(n, None)


def test_imports_are_paced_at_the_duty_share_until_hurried(fake_modules):
    names, _ = fake_modules
    t0 = time.monotonic()
    assert warmup.import_paced(names, warmup.Pace(), duty=0.25) is None
    took = time.monotonic() - t0
    assert all(n in sys.modules for n in names)
    # 4 imports of WORK_S, each followed by 3 × its time of waiting except after the last: ≥ 13 × WORK_S
    assert took >= 4 * WORK_S + 3 * 3 * WORK_S * 0.9


def test_a_long_import_is_sliced_so_the_other_thread_keeps_the_interpreter(tmp_path, monkeypatch):
    """One module whose import is 0.3 s of the importing thread's CPU time: unhurried, while the
    main thread is busy too, it is run in slices of SLICE_S with pauses (duty 0.25: at least
    0.3 / 0.25 s of wall time, during which the main thread gets most of the interpreter);
    hurried, at full speed; while the main thread sleeps (nobody waits for the interpreter),
    without pauses."""
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(warmup, "_next_at", 0.0)
    slicers = []

    class Recorded(warmup._Slicer):  # the import's pauses, measured where they happen (wall times
        __slots__ = ()  # stretch with the machine's load; pauses do not)

        def __init__(self, *a):
            super().__init__(*a)
            slicers.append(self)

    monkeypatch.setattr(warmup, "_Slicer", Recorded)
    work = 0.3
    results = {}
    for label, hurried in (("sliced", False), ("hurried", True), ("idle", False)):
        name = f"lmra_fake_long_{label}_{tmp_path.name[-6:]}"
        (tmp_path / f"{name}.py").write_text(
            f"import time\nt = time.thread_time()\nwhile time.thread_time() - t < {work}:\n    sum(range(50))\n")
        pace = warmup.Pace(sliced=True)
        if hurried:
            pace.hurry()
        monkeypatch.setattr(warmup, "_next_at", 0.0)  # no wait left over from the case before
        done = threading.Event()

        def importer():
            warmup.import_paced([name], pace, duty=0.25)
            done.set()

        t0, main0, proc0 = time.monotonic(), time.thread_time(), time.process_time()
        threading.Thread(target=importer).start()
        while not done.is_set():  # the main thread's own work meanwhile (pure Python, as an event loop's)
            if label == "idle":
                done.wait(0.01)
                continue
            sum(range(50))
        took = time.monotonic() - t0
        # the main thread's share of the process's CPU time while the import ran: what the
        # slicing gives it, whatever other processes take of the machine's cores meanwhile
        share = (time.thread_time() - main0) / max(time.process_time() - proc0, 1e-9)
        results[label] = (took, share, sum(sl.paused for sl in slicers))
        slicers.clear()
        sys.modules.pop(name, None)
        assert sys.getprofile() is None  # the hook is the importing thread's only, and removed
    assert results["sliced"][0] >= 0.9 * work / 0.25  # pauses: at least 1.2 s of wall time for 0.3 s of work
    assert results["sliced"][2] >= 0.5 * (work / 0.25 - work)  # most of the 0.9 s the duty asks for
    assert results["hurried"][2] == 0  # hurried: no pause at all
    assert results["idle"][2] < 0.25 * results["sliced"][2]  # (almost) no pauses when nobody waits
    # the main thread had more of the interpreter while the import was sliced than while it ran at
    # full speed (a share of CPU time, not a speed: a busy machine slows both runs alike)
    assert results["sliced"][1] > 1.2 * results["hurried"][1], results


def test_hurry_imports_at_once(fake_modules):
    names, _ = fake_modules
    pace = warmup.Pace()
    pace.hurry()
    t0 = time.monotonic()
    assert warmup.import_paced(names, pace, duty=0.01) is None
    assert time.monotonic() - t0 < 4 * WORK_S + 2.0  # not the 99 × WORK_S of waiting per import


def test_hurry_set_while_waiting_ends_the_wait(fake_modules):
    names, _ = fake_modules
    pace = warmup.Pace()
    threading.Timer(2 * WORK_S, pace.hurry).start()
    t0 = time.monotonic()
    warmup.import_paced(names, pace, duty=0.01)  # unhurried: about 6 s of waiting after the first import
    assert time.monotonic() - t0 < 2.0
    assert all(n in sys.modules for n in names)


def test_abandon_imports_nothing_more(fake_modules):
    """A run that stops (Ctrl-C, a failure) does not wait for modules it will not use."""
    names, _ = fake_modules
    pace = warmup.Pace()
    threading.Timer(2 * WORK_S, pace.abandon).start()  # while waiting after the first import
    t0 = time.monotonic()
    assert warmup.import_paced(names, pace, duty=0.01) is None
    assert time.monotonic() - t0 < 2.0
    assert names[0] in sys.modules and not any(n in sys.modules for n in names[1:])
    pace.hurry()  # hurried after: still nothing more
    assert warmup.import_paced(names[1:], pace) is None and names[1] not in sys.modules


def test_a_failing_name_is_returned_and_a_failing_step_skipped(fake_modules, monkeypatch):
    names, bad = fake_modules
    pace = warmup.Pace()
    pace.hurry()
    monkeypatch.setitem(warmup.STEPS, names[1], (bad, names[0]))  # a step that fails, then one that works
    assert warmup.import_paced([names[1], names[2]], pace) is None
    assert names[0] in sys.modules and names[2] in sys.modules
    assert warmup.import_paced([bad, names[3]], pace) == bad  # a wanted module: reported, nothing after it
    assert names[3] not in sys.modules


def test_switch_interval_is_restored(fake_modules):
    names, _ = fake_modules
    before = sys.getswitchinterval()
    seen = []
    pace = warmup.Pace()
    pace.hurry()
    real = warmup.importlib.import_module

    def spy(name):
        seen.append(sys.getswitchinterval())
        return real(name)

    warmup.importlib.import_module, saved = spy, real
    try:
        warmup.import_paced(names[:2], pace)
    finally:
        warmup.importlib.import_module = saved
    assert seen == [pytest.approx(min(before, warmup.SWITCH_INTERVAL_S))] * 2
    assert sys.getswitchinterval() == before


def test_steps_come_first_once_each_in_order():
    order = list(warmup.steps(["statsmodels.stats.proportion", "statsmodels.api"]))
    assert len(order) == len(set(order))
    assert order.index("scipy.linalg") < order.index("scipy.stats") < order.index("statsmodels.base.model")
    assert order.index("statsmodels.base.model") < order.index("statsmodels.stats.proportion")
    assert order.index("statsmodels.stats.proportion") < order.index("statsmodels.api")
    assert order[-1] == "statsmodels.api"


def test_a_profile_function_set_by_the_module_itself_is_kept(tmp_path, monkeypatch):
    """The import's slicing hook (a pace with a rate limit only) is removed afterwards, but not a
    profile function the imported module set on purpose; one set before the import is restored."""
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(warmup, "_next_at", 0.0)
    name = f"lmra_fake_prof_{tmp_path.name[-6:]}"
    (tmp_path / f"{name}.py").write_text("import sys\nseen = sys.getprofile()\ndef mine(frame, event, arg):\n"
                                          "    pass\nsys.setprofile(mine)\n")
    plain = f"lmra_fake_plain_{tmp_path.name[-6:]}"
    (tmp_path / f"{plain}.py").write_text("import sys\nseen = sys.getprofile()\n")
    try:
        warmup.import_paced([name], warmup.Pace(sliced=True))
        assert isinstance(sys.modules[name].seen, warmup._Slicer)  # sliced while importing …
        assert sys.getprofile() is sys.modules[name].mine  # … and the module's own function kept
        before = lambda frame, event, arg: None  # noqa: E731
        sys.setprofile(before)
        warmup.import_paced(["lmra_fake_none_" + tmp_path.name[-6:]], warmup.Pace(sliced=True))  # missing: skipped
        assert sys.getprofile() is before
        sys.setprofile(None)
        warmup.import_paced([plain], warmup.Pace())  # a run without a rate limit: no hook
        assert sys.modules[plain].seen is None and sys.getprofile() is None
    finally:
        sys.setprofile(None)
        sys.modules.pop(name, None)
        sys.modules.pop(plain, None)

