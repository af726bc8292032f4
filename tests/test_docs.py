"""The config reference documents every field."""

from pathlib import Path

from lmra.config import (AuditConfig, AxesConfig, FilterConfig, GatesConfig, Group, JudgeCheckConfig, JudgeConfig, ModelConfig,
                         PlaceboConfig, QualityConfig, RefusalConfig, ReportConfig, TaskGatesConfig)

DOC = (Path(__file__).resolve().parents[1] / "docs" / "config.md").read_text()


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
