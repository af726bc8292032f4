"""The docs are true: the config reference documents every field; the on-call runbook's links and
commands are real."""

from pathlib import Path

from lmra.config import (AuditConfig, AxesConfig, FilterConfig, GatesConfig, Group, JudgeCheckConfig, JudgeConfig, ModelConfig,
                         PlaceboConfig, QualityConfig, RefusalConfig, ReportConfig, TaskGatesConfig)

ROOT = Path(__file__).resolve().parents[1]
DOC = (ROOT / "docs" / "config.md").read_text()


def test_every_config_field_is_documented():
    for model in (AuditConfig, JudgeConfig, Group, QualityConfig, RefusalConfig, FilterConfig, AxesConfig,
                  JudgeCheckConfig, PlaceboConfig, ReportConfig, GatesConfig, TaskGatesConfig):
        for name in model.model_fields:
            assert f"| `{name}` |" in DOC, f"{model.__name__}.{name} missing from docs/config.md"


#: docs/config.md's sections and the config model whose fields their table lists
SECTIONS = {"## Top level": AuditConfig, "## `[target]`": ModelConfig, "## `[judge]`": JudgeConfig,
            "## `[[groups]]`": Group, "## `[refusal]`": RefusalConfig, "## `[filter]`": FilterConfig,
            "## `[judge_check]`": JudgeCheckConfig, "## `[placebo]`": PlaceboConfig, "## `[quality]`": QualityConfig,
            "## `[axes]`": AxesConfig, "## `[gates]`": GatesConfig, "## `[report]`": ReportConfig}


def _number(x) -> str:
    if isinstance(x, int) or float(x).is_integer():
        return f"{int(x):,}".replace("-", "−")
    return f"{x:g}".replace("-", "−")


def range_text(field) -> str | None:
    """A field's enforced range as docs/config.md states it: ``[0, 2]``, ``(0, 86,400]``, ``[0, 1)``."""
    b = {k: getattr(m, k) for m in field.metadata for k in ("ge", "gt", "le", "lt") if hasattr(m, k)}
    if not b:
        return None
    lo = ("[", b["ge"]) if "ge" in b else ("(", b["gt"]) if "gt" in b else ("(", None)
    hi = ("]", b["le"]) if "le" in b else (")", b["lt"]) if "lt" in b else (")", None)
    return (f"{lo[0]}{_number(lo[1]) if lo[1] is not None else '−∞'}, "
            f"{_number(hi[1]) if hi[1] is not None else '∞'}{hi[0]}")


def section_rows() -> dict[str, dict[str, str]]:
    """Per section heading of :data:`SECTIONS`: field name → its table row."""
    rows: dict[str, dict[str, str]] = {}
    current = None
    for line in DOC.splitlines():
        if line.startswith("## "):
            current = next((h for h in SECTIONS if line.startswith(h)), None)
        elif current and line.startswith("| `"):
            name = line.split("`")[1]
            rows.setdefault(current, {}).setdefault(name, line)
    return rows


def test_every_enforced_range_is_in_its_fields_row():
    """Docs-truth finding: config.md said every number has limits "besides the ranges in the
    tables", but the tables gave few (samples_per_prompt ≤ 100, max_tokens ≤ 32,768 …)."""
    rows = section_rows()
    missing = []
    for heading, model in SECTIONS.items():
        for name, field in model.model_fields.items():
            text = range_text(field)
            row = rows.get(heading, {}).get(name)
            if text and row is not None and f"Range {text}" not in row:
                missing.append(f"{heading} {name}: Range {text}")
    assert not missing, missing


def test_an_alpha_whose_interval_rounds_to_100_percent_is_refused_and_an_old_run_still_reports(tmp_path):
    """Break-it finding (s36): ``alpha = 1e-17`` passed, the run was written with confidence 1.0 and
    then every report of it failed (exit 2, "option --alpha: … got 0.0", an option never given). The
    config refuses alphas below 1e-6; a run an older lmra wrote that way reports with its config's alpha."""
    import json

    import pytest
    from pydantic import ValidationError

    from conftest import rerecord_files
    from monitor_helpers import make_run
    from lmra.report.html import adequacy_args, render_report
    from lmra.runfolder import load_run

    with pytest.raises(ValidationError, match="greater than or equal to 0.000001"):
        AuditConfig.model_validate({"alpha": 1e-17})
    assert AuditConfig.model_validate({"alpha": 1e-6}).alpha == 1e-6
    run_dir = make_run(tmp_path, "20260101-000000-nightly", {"write a story": 0.1, "career advice": 0.1}, seed=1,
                       n_prompts=20)
    summary = json.loads((run_dir / "summary.json").read_text())
    (run_dir / "summary.json").write_text(json.dumps(summary | {"confidence": 1.0}))  # as 1 − 1e-17 was recorded
    (run_dir / "config.toml").write_text((run_dir / "config.toml").read_text().replace("alpha = 0.05", "alpha = 1e-17"))
    rerecord_files(run_dir)
    run = load_run(run_dir)
    assert adequacy_args(run)["alpha"] == 1e-17
    assert "<html" in render_report(run)


def test_a_quoted_number_or_bool_in_the_config_gets_the_line_to_write(tmp_path):
    """Fresh-user finding (s36): ``prompts_per_task = "3"`` got pydantic's "Input should be a valid
    integer (got "3")" and no hint, where the JSONL reader says how to write it."""
    import pytest

    from lmra.config import load_config
    from lmra.errors import LmraInputError

    cfg = tmp_path / "q.toml"
    cfg.write_text('name = "a"\nprompts_per_task = "3"\nalpha = "0.1"\n[judge_check]\nenabled = "false"\n')
    with pytest.raises(LmraInputError) as err:
        load_config(cfg)
    text = str(err.value)
    assert "line 2: field 'prompts_per_task'" in text
    assert "TOML writes a number without quotes — prompts_per_task = 3" in text
    assert "alpha = 0.1" in text and "TOML writes true or false without quotes — enabled = false" in text
    cfg.write_text('name = "a"\nprompts_per_task = "three"\n')
    with pytest.raises(LmraInputError, match="TOML writes a number without quotes"):
        load_config(cfg)


def _slug(heading: str) -> str:
    """GitHub's anchor of a Markdown heading: lower case, punctuation but ``-`` and ``_`` dropped,
    spaces as ``-``."""
    import re

    text = re.sub(r"[`*]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def test_the_oncall_runbook_links_and_commands_are_real():
    """docs/oncall.md (the runbook an on-call engineer follows): every relative link names a file
    and heading that exist, and every ``lmra …`` command it quotes is one the CLI parses, flags
    included — a runbook whose commands fail is worse than none."""
    import re
    import shlex

    from lmra.cli import build_parser

    docs = ROOT / "docs"
    text = (docs / "oncall.md").read_text(encoding="utf-8")
    links = re.findall(r"\]\(([^)\s]+)\)", text)
    assert links
    for link in links:
        path, _, anchor = link.partition("#")
        target = (docs / path) if path else docs / "oncall.md"
        assert target.is_file(), link
        if anchor:
            headings = [_slug(h) for h in re.findall(r"^#+ (.+)$", target.read_text(encoding="utf-8"), re.M)]
            assert anchor in headings, link
    commands = [c for c in re.findall(r"`(lmra [^`]+)`", text) + re.findall(r"^(lmra .+?)(?:\s+#.*)?$", text, re.M)
                if not c.endswith("…")]
    assert len(commands) >= 10, commands
    parser = build_parser()
    names = set(parser._subparsers._group_actions[0].choices)  # the subcommands
    for line in commands:
        argv = [w.replace("RUN_DIR", "reports/x").replace("BASELINE_RUN", "b") for w in shlex.split(line)[1:]]
        if len(argv) == 1 and not argv[0].startswith("-"):  # a command named, not given in full
            assert argv[0] in names, line
            continue
        try:
            parser.parse_args(argv)
        except SystemExit as exc:  # argparse's error: a subcommand or flag that does not exist
            if argv != ["--version"] or exc.code != 0:  # (--version prints and exits 0)
                raise AssertionError(f"the runbook's command does not parse: {line}") from exc
