"""The config ``lmra axes`` runs with on a finished run: the run's resolved config with the
``[axes]``, ``[judge]``, cache, concurrency, alpha and budget keys of an ``--config`` file
and command-line overrides applied."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lmra.config import AuditConfig, parse_config
from lmra.errors import LmraInputError, find_key_line

#: Keys of an ``--config`` file that ``lmra axes`` applies over the run's config.
OVERRIDE_KEYS = ("axes", "judge", "cache", "concurrency", "alpha", "max_calls", "max_cost", "prices")


def check_axes_temperature(cfg: AuditConfig, config_path: str | Path | None = None) -> None:
    """Refuse an ``[axes] temperature`` the LMRA's provider does not accept (break-it finding:
    with an anthropic LMRA, 1.5 was capped at 1.0 without a word, then — once the cap was gone —
    failed every brainstorm call with the API's error), before any call.

    Raises:
        LmraInputError: naming ``config_path`` and the field ``axes.temperature``.
    """
    from lmra.providers import max_temperature

    limit = max_temperature(cfg.judge)
    if limit is not None and cfg.axes.temperature > limit:
        raise LmraInputError(f"the LMRA's provider ({cfg.judge.provider}) takes a temperature from 0 to {limit:g}, "
                             f"got [axes] temperature = {cfg.axes.temperature:g}",
                             file=str(config_path) if config_path else None, field="axes.temperature")


def axes_config(run_cfg: AuditConfig, path: str | Path | None = None, **overrides: Any) -> AuditConfig:
    """The config ``lmra axes`` runs with: the run's resolved config, then the ``[axes]``
    section (merged field by field), ``[judge]`` (replacing the run's judge), ``cache``,
    ``concurrency``, ``alpha`` and the budget (``max_calls``, ``max_cost``, ``prices``) of
    ``path`` (a full audit config is accepted; its other fields describe how the run was made
    and are ignored; the run's own budget limits are not inherited), then
    ``overrides`` (``axes.<field>`` keys, e.g. ``{"axes.max_axes": 5}``; None values skipped).

    Raises:
        LmraInputError: unreadable TOML or an invalid field (naming the file, line, field), or an
            ``[axes] temperature`` the LMRA's provider does not accept (:func:`check_axes_temperature`).
    """
    data = run_cfg.model_dump()
    data["axes"] = dict(data.get("axes") or {})
    # the run's budget limited the audit that made it; this command's budget is its own
    data["max_calls"] = data["max_cost"] = None
    text = ""
    if path is not None:
        from lmra.errors import read_toml, require_settings

        p = Path(path)
        text, extra = read_toml(p, "config file")
        require_settings(extra, p)
        for key in OVERRIDE_KEYS:
            if key not in extra:
                continue
            if key == "axes":
                if not isinstance(extra["axes"], dict):
                    raise LmraInputError("must be a table [axes]", file=p, line=find_key_line(text, "axes"),
                                         field="axes")
                data["axes"] |= extra["axes"]
            else:
                data[key] = extra[key]
    data["axes"]["enabled"] = True
    given = {key: value for key, value in overrides.items() if value is not None}
    for key, value in given.items():
        section, _, leaf = key.partition(".")
        if section == "axes" and leaf:
            data["axes"][leaf] = value
        else:
            data[key] = value
    try:
        cfg = parse_config(data, source=path or "command line", text=text)
    except LmraInputError as exc:
        if path is None or exc.field not in given:
            raise
        # a bad option's value is the command line's, not a line of the (valid) file (break-it finding:
        # --max-axes 0 blamed line 33 of the file); an option still overrides a bad value of the file
        cfg = parse_config(data, source="command line", text="")
    check_axes_temperature(cfg, path)
    return cfg
