import contextlib
import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

FEMALE = ["Anna", "Maria", "Linda"]
MALE = ["John", "David", "Mark"]
NAME_TO_GROUP = {n: "female" for n in FEMALE} | {n: "male" for n in MALE}


@pytest.fixture(autouse=True)
def _own_spill_folder(tmp_path, monkeypatch):
    """Every test's spilled calls (lmra.answerlog: a cache whose disk is full) go to its own folder,
    never to the user's real ``lmra-unsaved-calls-<uid>`` (break-it finding, s36: 30 logs of the axes
    tests' scripted calls piled up there, pointing at caches long gone). A test that sets
    ``LMRA_SPILL_DIR`` itself overrides this."""
    monkeypatch.setenv("LMRA_SPILL_DIR", str(tmp_path / "spill"))


@pytest.fixture(autouse=True, scope="session")
def _ctrl_c_as_in_a_terminal():
    """Ctrl-C (SIGINT) as a terminal gives it, for the tests that interrupt lmra in process: a suite
    started as a background job of a script inherits SIGINT ignored, and Python then installs no
    KeyboardInterrupt handler (s39: four in-process interrupt tests failed so). Restored after."""
    import signal

    before = signal.getsignal(signal.SIGINT)
    if before is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    if before is signal.SIG_IGN:
        signal.signal(signal.SIGINT, before)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    """After each test, wait for the report-imports thread of an ``lmra audit`` it ran in
    process (``lmra-report-imports``, lmra.cli.audit: abandoned, not joined, when the audit
    stops before its report, and ending after the module it is importing). Left running, it
    creates loggers (matplotlib's) while pytest's log capture iterates the logging manager's
    dict without its lock at the next phase: a fresh-clone CI run failed so, once, with
    "dictionary changed size during iteration" at a teardown (s42)."""
    import threading

    try:
        return (yield)
    finally:
        for t in threading.enumerate():
            if t.name == "lmra-report-imports":
                t.join(60)


@contextlib.contextmanager
def held_elsewhere(make_lock):
    """Hold ``make_lock()`` (a context manager: a lock) in another, forked process for the ``with``
    block — another lmra command at work — and release it at the end."""
    import multiprocessing

    held, release = multiprocessing.Event(), multiprocessing.Event()

    def hold():
        with make_lock():
            held.set()
            release.wait(30)

    other = multiprocessing.get_context("fork").Process(target=hold)
    other.start()
    try:
        assert held.wait(30), "the other process never held the lock"
        yield
    finally:
        release.set()
        other.join(30)


@pytest.fixture
def sim_inputs(tmp_path):
    """A names CSV and a prompt file with ``n`` prompts over two tasks, for simulations."""

    def make(n_prompts: int = 400):
        names = tmp_path / "names.csv"
        names.write_text("name,gender,race,source\n" + "".join(f"{n},female,,test\n" for n in FEMALE)
                         + "".join(f"{n},male,,test\n" for n in MALE), encoding="utf-8")
        prompts = tmp_path / "prompts.jsonl"
        with prompts.open("w") as fh:
            for i in range(n_prompts):
                task = "write a story" if i % 2 else "career advice"
                fh.write(json.dumps({"id": f"p{i}", "text": f"Prompt number {i}.", "domain": "d", "task": task}) + "\n")
        return names, prompts

    return make


def run_folders(root: Path, name: str) -> list[Path]:
    """The run folders ``<stamp>-<name>`` under ``root``, oldest first, including the
    ``<stamp>-<name>-2`` … that :func:`lmra.runstate.claim_run_dir` makes when two runs with
    the same name start in the same second."""
    pat = re.compile(rf"(\d{{8}}-\d{{6}})-{re.escape(name)}(?:-(\d+))?")
    found = [(m.group(1), int(m.group(2) or 1), p) for p in Path(root).iterdir()
             if p.is_dir() and (m := pat.fullmatch(p.name))]
    return [p for *_, p in sorted(found)]


def rerecord_files(run_dir: Path) -> None:
    """After a test edited a finished run folder's data files on purpose (a scenario built from
    a real run: other numbers, a field of a later version …), record their new digests in its
    manifest.json, as an audit that had written them would have (lmra.digests)."""
    from lmra.digests import record

    manifest = json.loads((Path(run_dir) / "manifest.json").read_text(encoding="utf-8"))
    manifest["files"] = record(run_dir)
    (Path(run_dir) / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")


def custom_audit_config(tmp_path: Path, names: Path, prompts: Path, *, target: str, judge: str, name: str = "custom",
                        top: str = "", target_lines: str = "", refusal: bool = False) -> Path:
    """An audit config file on custom providers (``module:factory`` of the tests folder) over the
    inputs of :func:`sim_inputs`, for tests that run ``lmra audit`` itself: judge check and LMRA
    filter off, refusal labels as ``refusal``, run folders under ``tmp_path / "reports"``.
    ``top``: more top-level lines (e.g. ``max_failed_share = 1.0``); ``target_lines``: more
    lines of ``[target]`` (e.g. ``timeout_s = 0.5``)."""
    config = tmp_path / f"{name}.toml"
    config.write_text(f'''name = "{name}"
prompts = "{prompts}"
names = "{names}"
prompts_per_task = 0
output_dir = "{tmp_path / 'reports'}"
cache = "{tmp_path / 'cache.sqlite'}"
{top}
[judge_check]
enabled = false
[filter]
lmra = false
[refusal]
enabled = {str(refusal).lower()}
[target]
provider = "{target}"
{target_lines}
[judge]
provider = "{judge}"
''')
    return config


def terminal_signals() -> None:
    """A ``preexec_fn`` for a child process a test sends a signal: SIGHUP and SIGINT at their
    defaults, as a process started from a terminal has them. A test session run under ``nohup``
    (SIGHUP ignored) or as a background job of a script (SIGINT ignored) passes those dispositions
    on, and the child then rightly goes on (s39: the SIGHUP tests failed when the suite ran under
    nohup: lmra keeps running under nohup by design)."""
    import signal

    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
