"""The config reference documents every field."""

from pathlib import Path

from lmra.config import (AuditConfig, AxesConfig, FilterConfig, GatesConfig, Group, JudgeCheckConfig, JudgeConfig,
                         PlaceboConfig, QualityConfig, RefusalConfig, ReportConfig, TaskGatesConfig)

DOC = (Path(__file__).resolve().parents[1] / "docs" / "config.md").read_text()


def test_every_config_field_is_documented():
    for model in (AuditConfig, JudgeConfig, Group, QualityConfig, RefusalConfig, FilterConfig, AxesConfig,
                  JudgeCheckConfig, PlaceboConfig, ReportConfig, GatesConfig, TaskGatesConfig):
        for name in model.model_fields:
            assert f"| `{name}` |" in DOC, f"{model.__name__}.{name} missing from docs/config.md"
