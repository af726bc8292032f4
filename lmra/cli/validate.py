"""``lmra validate CONFIG``: check an audit (or recsys) config, its input files and its models'
keys and endpoints' settings without calling any model."""

from __future__ import annotations

import argparse

from lmra.cli.commands import COMMANDS
from lmra.cli.common import is_recsys_config, json_errors, lmra_calls_without_logprobs, planned_lmra_calls_words, print_warning
from lmra.console import counted, lit, make_console
from lmra.errors import LmraInputError


def _where(path: str) -> str:
    """An input file as ``lmra validate`` names it (:func:`lmra.resources.shipped_label`)."""
    from lmra.resources import shipped_label

    return shipped_label(path)


@json_errors
def cmd_validate(args: argparse.Namespace) -> int:
    """``lmra validate CONFIG [--json]``: load and check a config, its input files and the models'
    keys without calling a model; exit 0 when valid, 2 (one paragraph) when not. ``--json``:
    :func:`lmra.report.jsonout.validate_document` (or an ``lmra.error/1`` document)."""
    from lmra.cli.audit import (_canary_warnings, _check_gate_tasks, _embedded_judge_warnings, _greedy_samples_warnings,
                                _judge2_warnings, _short_tasks_note, _slow_limit_warnings, _unmeetable_gates,
                                _waiver_warnings)
    from lmra.config import load_config

    if is_recsys_config(args.config):
        from lmra.recsys.config import load_recsys_config

        rc = load_recsys_config(args.config)
        if getattr(args, "gate", None):
            raise LmraInputError("release gates apply to an audit's net ratings and refusals, not to a recsys config",
                                 field="--gate")
        from lmra.recsys.inputs import cfairllm_inputs, fairllm_inputs

        # its data files, as the run reads them (break-it finding: "valid", then the run refused a
        # missing seed-name or attribute file)
        inputs = (fairllm_inputs if rc.mode == "fairllm" else cfairllm_inputs)(rc, args.config)
        if rc.mode == "fairllm":  # [matching] catalog, read as the run reads it (break-it finding, s47: "valid", then
            from lmra.recsys.records import make_matcher  # the run stopped at a missing catalog)

            make_matcher(rc, None, args.config)
        skipped = inputs[2] if rc.mode == "fairllm" else None  # seed-name rows a run skips: said before it
        if skipped:
            make_console(stderr=True).print(f"[yellow]warning:[/] {lit(skipped['note'])}", highlight=False,
                                            soft_wrap=True)
        if args.json:
            from lmra.report import jsonout

            jsonout.emit(jsonout.validate_document(args.config, kind="recsys", name=getattr(rc, "name", None),
                                                   mode=rc.mode))
            return 0
        make_console().print(f"{lit(args.config)}: valid recsys config (mode {lit(rc.mode)}); run it with "
                             f"'lmra recsys --config {lit(args.config)}'")
        return 0
    cfg = load_config(args.config)
    if getattr(args, "gate", None):  # as lmra audit applies them: checked against the config's prompts too
        from lmra.cli.gates import audit_config_with_gates

        cfg = audit_config_with_gates(cfg, args.gate)
    from lmra.audit import Audit  # after the config: an invalid one is said without loading the audit (pandas)

    audit = Audit(cfg, config_path=args.config)
    inputs = audit.load_inputs()
    _check_gate_tasks(cfg, inputs, args.config)
    audit._target_provider(), audit._judge_provider(), audit._judge2_provider()  # keys, custom import paths
    audit.check_cost_limit()  # every model priced when max_cost is set (as the audit checks before its cache)
    profiles = [g.name for g in cfg.groups if g.profile]
    plan = audit.planned_calls(inputs)  # after tasks, domains and prompts_per_task
    short = _short_tasks_note(cfg, inputs)  # as lmra audit says it (user-trial finding: validate did not)
    from lmra.config import mixed_comparisons

    # gates no night of this size meets (fresh-user finding); name groups compared with profile groups (s40)
    unmeetable = _unmeetable_gates(cfg, inputs) + mixed_comparisons(cfg.groups, cfg.comparisons)
    unmeetable += _canary_warnings(cfg, inputs)  # a judge check that cannot pass (verification finding)
    unmeetable += _judge2_warnings(cfg)  # a second LMRA that is the first again (break-it finding)
    unmeetable += _slow_limit_warnings(cfg, plan)  # a rate limit no night ends under (break-it finding)
    unmeetable += _waiver_warnings(cfg)  # a waiver written for another LMRA (fresh-user finding)
    unmeetable += _greedy_samples_warnings(cfg)  # n samples of one greedy answer (break-it finding)
    unmeetable += _embedded_judge_warnings(cfg)  # coin-flip yes/no answers of the 270M LMRA (fresh-user finding)
    from lmra.audit.finish import common_word_names_warning

    # names that are everyday words, as the audit warns (bad-input break-it, s43: validate, where a new name
    # list is checked, said nothing of Will, Hope, Grace)
    common = common_word_names_warning(getattr(audit, "names_common_words", None) or [])
    unmeetable += [common] if common else []
    unmeetable += getattr(audit, "shadowed_inputs", [])  # a relative path read elsewhere than beside the config
    if args.json:
        from lmra.report import jsonout

        worst = lmra_calls_without_logprobs(plan)  # the LMRA calls if its answers come without log-probabilities
        models = {"target": cfg.target, "judge": cfg.judge, "judge2": cfg.judge2}
        jsonout.emit(jsonout.validate_document(
            args.config, kind="audit", name=cfg.name,
            n_prompts=len(inputs.prompts) + (getattr(audit, "prompts_repeated", 0) or 0),
            n_audited_prompts=plan["prompts"], n_pairs=plan["pairs"],
            planned_calls={"target": plan["target"], "judge": plan["judge"] + plan.get("judge2", 0)}
            | ({"judge_without_logprobs": worst} if worst is not None else {}),
            groups=[{"name": g, "n_names": len(n)} for g, n in inputs.group_names.items()], profile_groups=profiles,
            comparisons=[list(c) for c in cfg.comparisons],
            models={role: {"provider": m.provider, "model": m.model, "base_url": m.base_url}
                    for role, m in models.items() if m is not None},
            notes=([short] if short else []) + unmeetable, input_files=inputs.files))
        return 0
    repeated = getattr(audit, "prompts_repeated", 0) or 0
    make_console().print(f"{lit(args.config)}: valid — {counted(len(inputs.prompts) + repeated, 'prompt')} in the file"
                         + (f" ({repeated} repeating an earlier prompt's text, audited once)" if repeated else "")
                         + ", up to "
                         f"{plan['prompts']} audited (after tasks, domains and prompts_per_task), {plan['pairs']} "
                         f"pairs; at most {plan['target']} target calls and {lit(planned_lmra_calls_words(plan, cfg))} "
                         "(cached calls are free); name groups "
                         + (", ".join(f"{lit(g)} ({len(n)} names)" for g, n in inputs.group_names.items()) or "none")
                         + (f"; profile groups {lit(', '.join(profiles))}" if profiles else ""), soft_wrap=True)
    make_console().print("[dim]reads " + "; ".join(f"{k} {lit(_where(v))}" for k, v in inputs.files.items()) + "[/]",
                         soft_wrap=True, highlight=False)
    if short:
        from rich.text import Text

        make_console().print(Text.assemble(("note: ", "yellow"), short), highlight=False, soft_wrap=True)
    for line in unmeetable:
        print_warning(line)
    return 0


def add_parsers(sub) -> None:
    """Register ``lmra validate`` on the ``lmra`` sub-parser collection."""
    v = sub.add_parser("validate", help=COMMANDS["validate"].help)
    v.add_argument("config", help="an audit config (or a recsys config) TOML file")
    v.add_argument("--json", action="store_true", help="print one JSON document (lmra.validate/1, or lmra.error/1 "
                   "when invalid) on stdout instead of the message, same exit status (docs/nightly.md, "
                   "'Machine-readable output')")
    from lmra.cli.gates import add_gate_option

    add_gate_option(v, "a release gate as 'lmra audit --gate' sets it (repeatable): validated, and said when this "
                       "config's nights cannot meet it")
    v.set_defaults(func=cmd_validate)
