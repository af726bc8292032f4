"""The ``lmra/cli/`` package: one registry of commands, parsers built lazily with the same help
as the full parser, command modules that stay light to import and never import each other in a
cycle (issue 15 goal 4, issue 14 goal 2)."""

from __future__ import annotations

import argparse
import ast
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from lmra.cli import build_parser, chosen_command
from lmra.cli.commands import COMMANDS

CLI_DIR = Path(__file__).resolve().parents[1] / "lmra" / "cli"

#: modules that must not be imported before a command's handler runs (they take 0.1–1.3 s)
HEAVY = ("pandas", "numpy", "pydantic", "scipy", "statsmodels", "pyarrow", "duckdb", "matplotlib", "asyncio",
         "lmra.audit", "lmra.config", "lmra.providers", "lmra.monitor", "lmra.history", "lmra.runfolder", "lmra.report.jsonout")


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    action = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
    return dict(action.choices) if action is not None else {}


def _helps(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> dict[tuple[str, ...], str]:
    """``--help`` text of a parser and of every (nested) subcommand under it, by command path."""
    out = {path: parser.format_help()}
    for name, child in _subparsers(parser).items():
        out |= _helps(child, path + (name,))
    return out


def test_registry_lists_every_command_in_help_order():
    parser = build_parser()  # raises RuntimeError when a module registers other commands than COMMANDS says
    subs = _subparsers(parser)
    assert list(subs) == list(COMMANDS)
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert {c.dest: c.help for c in action._choices_actions} == {n: c.help for n, c in COMMANDS.items()}
    for name, cmd in COMMANDS.items():
        assert importlib.util.find_spec(f"lmra.cli.{cmd.module}") is not None, name


def test_lazy_parser_gives_the_same_help_as_the_full_one(monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    full = _helps(build_parser())
    assert full[()] == build_parser([]).format_help()  # `lmra --help` with no command module imported
    for name in COMMANDS:
        lazy = _helps(build_parser([name]))
        assert lazy[()] == full[()]
        mine = {path: text for path, text in lazy.items() if path[:1] == (name,)}
        assert mine == {path: text for path, text in full.items() if path[:1] == (name,)}, name
        assert len(mine) >= 1


@pytest.mark.parametrize("argv, command", [(["audit", "--config", "x.toml"], "audit"), (["--help"], None),
                                           (["-h", "check"], "check"), (["bogus"], None), ([], None),
                                           (["report", "--history"], "report")])
def test_chosen_command(argv, command):
    assert chosen_command(argv) == command


def test_help_and_parsers_import_no_heavy_module():
    """``lmra --help`` imports no command module; each command's parser imports its own module
    only, and none of them loads pandas, pydantic, asyncio, the audit or the providers before its
    handler runs (``recsys`` takes its choices from the light :mod:`lmra.recsys.conventions`)."""
    code = f"""
import json, sys
from lmra.cli import build_parser, main
from lmra.cli.commands import COMMANDS
HEAVY = {HEAVY!r}
out = {{}}
try:
    main(["--help"])
except SystemExit:
    pass
out["--help"] = sorted(m for m in sys.modules if m.startswith("lmra"))
try:
    main(["gate", "--help"])
except SystemExit:
    pass
out["gate --help"] = sorted(m for m in sys.modules if m.startswith("lmra.cli."))
build_parser(list(COMMANDS))
out["heavy"] = sorted(m for m in sys.modules if m.split(".")[0] in HEAVY or m in HEAVY
                      or any(m.startswith(h + ".") for h in HEAVY))
print(json.dumps(out))
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["--help"] == ["lmra", "lmra.cli", "lmra.cli.commands"]
    assert out["gate --help"] == ["lmra.cli.commands", "lmra.cli.common", "lmra.cli.exits", "lmra.cli.gates"]
    assert out["heavy"] == []


def _cli_imports(path: Path) -> set[str]:
    """The ``lmra.cli.*`` modules a CLI module imports, at the top or inside a function."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        found |= {n.split(".")[2] for n in names if n.startswith("lmra.cli.") and (CLI_DIR / f"{n.split('.')[2]}.py").is_file()}
    return found - {path.stem}


def test_cli_modules_import_each_other_without_cycles():
    graph = {p.stem: _cli_imports(p) for p in CLI_DIR.glob("*.py") if p.stem not in ("__init__", "__main__")}
    assert graph["audit"] >= {"common", "exits", "gates", "monitor", "scale"}  # the parser sees real imports
    state: dict[str, int] = {}

    def visit(node: str, stack: list[str]) -> None:
        if state.get(node) == 1:
            raise AssertionError("import cycle: " + " -> ".join(stack[stack.index(node):] + [node]))
        if state.get(node) == 2:
            return
        state[node] = 1
        for dep in sorted(graph.get(node, ())):
            visit(dep, stack + [node])
        state[node] = 2

    for module in graph:
        visit(module, [])


def test_no_command_line_modules_left_at_the_old_paths():
    for old in ("lmra.monitor_cli", "lmra.gates_cli", "lmra.batch_cli", "lmra.axes_cli", "lmra.judge_check_cli",
                "lmra.scale_cli", "lmra.recsys.cli"):
        assert importlib.util.find_spec(old) is None, old


def test_exit_precedence_uses_the_libraries_statuses():
    from lmra.cli.exits import EXIT_PRECEDENCE
    from lmra.gates import EXIT_GATES_NOT_MET
    from lmra.judge_check import EXIT_JUDGE_FAILED

    assert EXIT_PRECEDENCE == (1, 2, EXIT_JUDGE_FAILED, EXIT_GATES_NOT_MET, 3, 0)


def test_python_dash_m_lmra_is_the_lmra_command():
    """Fresh-user finding (s40): ``python -m lmra --help`` said "No module named lmra.__main__"."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    env = dict(os.environ, PYTHONPATH=str(root))
    r = subprocess.run([sys.executable, "-m", "lmra", "--help"], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0 and "usage: lmra" in r.stdout and "audit" in r.stdout
