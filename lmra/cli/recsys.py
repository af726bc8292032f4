"""The ``lmra recsys`` subcommand (wired into :mod:`lmra.cli` with ``add_parsers(sub)``).

``lmra recsys --config recsys.toml`` runs a FaiRLLM or CFaiRLLM audit of the target;
``lmra recsys score --lists lists.jsonl`` scores lists that already exist. Input errors are
raised as :class:`~lmra.errors.LmraInputError` so that the CLI exits with status 2 and a
one-paragraph message (never a traceback); a target endpoint that never answered stops the run
with :class:`~lmra.providers.endpoint.EndpointUnreachable`, and a rejected key (HTTP 401/403) at
its first rejected call with :class:`~lmra.providers.keys.KeyRejected`: exit status 1 and the
one-paragraph ``failure:`` message of ``lmra audit`` (:func:`lmra.cli.report_failure`).
"""

from __future__ import annotations

import argparse
import datetime as _dt
from pathlib import Path


from lmra.cli.commands import COMMANDS
from lmra.cli.common import model_shorthand, model_words, print_warning, rich_progress, whole_number
from lmra.console import lit, make_console
from lmra.errors import LmraInputError, read_input_text
from lmra.fileio import write_csv
from lmra.recsys.conventions import CONVENTIONS  # (no numpy/pandas: the package is lazy)


def cmd_recsys(args: argparse.Namespace) -> int:
    """Run ``lmra recsys --config …``."""
    from lmra.recsys.config import load_recsys_config
    from lmra.recsys.report import render_recsys
    from lmra.recsys.run import RecsysRun

    console = make_console()
    if args.config is None:
        from lmra.resources import resolve_resource

        args.config = str(resolve_resource("examples/recsys.toml", "examples"))
    cfg = load_recsys_config(args.config)
    overrides = {k: v for k, v in (("output_dir", args.output_dir), ("seed", args.seed), ("name", args.name),
                                   ("convention", args.convention)) if v is not None}
    if args.target is not None:  # (fresh-user finding: 'lmra recsys --target …' was an argparse riddle)
        overrides["target"] = model_shorthand(args.target, cfg.model_dump()["target"], option="--target")
    if overrides:
        from lmra.recsys.config import parse_recsys_config

        cfg = parse_recsys_config(cfg.model_dump() | overrides, source="command line")
    run = RecsysRun(cfg, config_path=args.config)
    try:  # the target's client built before anything is written (a bad key or URL: exit 2 now)
        run._target_provider()
    except LmraInputError as exc:  # a model given on the command line is the option's fault, not the file's
        if args.target is not None and (exc.field or "").split(".")[0] in ("target", "provider", "model"):
            raise LmraInputError(exc.reason, file=exc.file, field="--target") from None
        raise
    args.call_stats = run.stats  # (an interrupt says how many answered calls are kept: lmra.cli.main)
    run.on_notice = lambda msg: print_warning(msg)
    instructions = run.instructions()
    families = len({i.instruction_id for i in instructions})
    console.print(f"[bold]lmra recsys[/] '{lit(cfg.name)}' ({cfg.mode}): {families} instruction families, "
                  f"{len(instructions)} instructions → up to {len(instructions)} target calls (cached calls are "
                  f"free). Target: {lit(model_words(run._target_provider()))}; K = {cfg.k}; convention: {cfg.convention}.")
    if run.seed_names_skipped:
        console.print(f"[yellow]{lit(run.seed_names_skipped['note'])}.[/]", highlight=False)
    with rich_progress(console, not args.no_progress) as progress:
        run.progress = progress
        result = run.run()
    render_recsys(console, result.similarity, result.fairness, result.summary, result.manifest, result.bias_summary)
    return _nothing_scored_exit(result)


def _nothing_scored_exit(result) -> int:
    """1 with the reason on stderr when no sensitive list could be scored, or no unfairness measured
    from those that were (status ``failed``), or an attribute meant to compare two values or more
    was measured by nothing (status ``partial``: :func:`lmra.recsys.scoring.unmeasured_attributes`), else
    0; either way the final line names the exit status, as ``lmra audit``'s does (fresh-user
    finding: recsys ended without one)."""
    from lmra.cli.exits import print_final_status
    from lmra.recsys.scoring import nothing_scored, nothing_scored_message, partial_message, unmeasured_attributes

    if not nothing_scored(result.summary):
        unmeasured = unmeasured_attributes(result.summary)
        if not unmeasured:
            return print_final_status(make_console(), {})
        # an attribute measured by nothing: partial, as an audit that lost its pairs (break-it finding: exit 0)
        make_console(stderr=True).print(f"[bold red]partial run:[/] {lit(partial_message(unmeasured))}",
                                        highlight=False, soft_wrap=True)
        return print_final_status(make_console(), {1: f"the run is partial: {', '.join(unmeasured)} not measured"})
    called = "source" not in result.manifest  # (lmra recsys score: lists read from a file, no call made)
    why = nothing_scored_message(result.summary, result.lists, called=called)
    make_console(stderr=True).print(f"[bold red]failure:[/] {lit(why)}", highlight=False, soft_wrap=True)
    final = ("the run failed: no unfairness could be measured (no attribute has two values with a defined "
             "similarity)" if result.summary.get("sensitive_scored") else
             "the run failed: no sensitive list could be scored")  # (break-it finding: said after 3 were scored)
    return print_final_status(make_console(), {1: final})


def _no_model_options(args: argparse.Namespace, sub: str) -> None:
    """``lmra recsys --target … score|bias``: the option is lmra recsys's own, and these call no
    model (break-it finding: it was ignored without a word).

    Raises:
        LmraInputError: ``--target`` was given."""
    if getattr(args, "target", None) is not None:
        raise LmraInputError(f"applies to 'lmra recsys' itself (it asks a model for lists); 'lmra recsys {sub}' "
                             "calls no model: leave it out", field="--target")


def cmd_recsys_score(args: argparse.Namespace) -> int:
    """Run ``lmra recsys score --lists …``."""
    _no_model_options(args, "score")
    from lmra.recsys.config import DEFAULT_PERMUTATIONS, MAX_K, MAX_PERMUTATIONS
    from lmra.config import MAX_SEED, MIN_SEED
    from lmra.recsys.report import render_recsys
    from lmra.recsys.run import score_lists

    beside = Path(args.lists).parent / "manifest.json"  # a run's lists: its own K, convention and seed by default
    if args.k is None:  # (fresh-user finding: a K = 5 run was re-scored at K = 20, its numbers changed silently)
        args.k = _run_value(beside, "k", 20, bounds=(1, MAX_K))
    if not 1 <= args.k <= MAX_K:
        raise LmraInputError(f"--k must be between 1 and {MAX_K} (as the config's k), got {args.k}", field="k")
    # a run's own permutation count, so that its p-values come out again (break-it finding: a run made
    # with 99 was re-scored with 1999); a run recorded before its manifest held it: its config.toml's
    permutations = (args.permutations if args.permutations is not None
                    else _run_value(beside, "permutations", None, bounds=(0, MAX_PERMUTATIONS)))
    if permutations is None:
        permutations = _config_permutations(beside.parent / "config.toml", DEFAULT_PERMUTATIONS)
    if not 0 <= permutations <= MAX_PERMUTATIONS:
        raise LmraInputError(f"--permutations must be between 0 and {MAX_PERMUTATIONS} (as the config's permutations), "
                             f"got {permutations}", field="--permutations")
    if args.seed is None:
        args.seed = _run_value(beside, "seed", 0, bounds=(MIN_SEED, MAX_SEED))
    if not MIN_SEED <= args.seed <= MAX_SEED:
        raise LmraInputError(f"--seed must be between {MIN_SEED} and {MAX_SEED}, got {args.seed}", field="--seed")
    out = args.out
    if out is None:  # a folder of its own, as lmra recsys's (claimed when the scores are written)
        stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        out = Path(getattr(args, "output_dir", None) or "reports") / f"{stamp}-score"
    elif Path(out).exists() and not Path(out).is_dir():
        raise LmraInputError("is a file: --out names the folder that receives the output files", file=out,
                             field="--out")
    else:
        _refuse_run_folder(Path(out), "manifest.json, summary.json, recsys_similarity.csv and recsys_fairness.csv",
                           scores_ok=True)
    convention = getattr(args, "convention", None) or _run_value(beside, "convention", "paper", str)
    if convention not in CONVENTIONS:  # (a manifest's value this version does not know)
        raise LmraInputError(f"the run manifest beside the lists file has convention '{convention}', which this "
                             f"version does not know ({', '.join(CONVENTIONS)}): give --convention", file=beside,
                             field="convention")
    # the names the run's parser cut from titles ("Hello by Adele"), so that its lists parse again as it parsed
    # them (break-it finding, s39: re-parsed without them, its tables differed)
    artists = _run_value(beside, "parse_artists", [], list) if args.parser == "lmra" else []
    from lmra.recsys.parse import normalize_title
    if not all(isinstance(a, str) for a in artists):
        raise LmraInputError("the run manifest beside the lists file has parse_artists that are not all names (text): "
                             "score a copy of the lists file in another folder", file=beside, field="parse_artists")
    artists = {normalize_title(a) for a in artists} - {""}
    result = score_lists(args.lists, k=args.k, convention=convention,
                         parser=args.parser, normalize=not args.no_normalize, out_dir=out,
                         permutations=permutations, seed=args.seed, new_dir=args.out is None, artists=artists)
    render_recsys(make_console(), result.similarity, result.fairness, result.summary, result.manifest)
    return _nothing_scored_exit(result)


def _refuse_run_folder(out: Path, files: str, scores_ok: bool = False) -> None:
    """An input error when ``--out`` is the folder of a run (its ``manifest.json`` not one
    ``lmra recsys score`` wrote — with ``scores_ok`` — or unreadable): the command would replace
    its ``files`` with another input's results (break-it finding: ``recsys score --out RUN``
    replaced a recsys run's manifest, summary and tables, exit 0; its status, target and call
    counts gone, and a later re-score read K from the new manifest)."""
    import json

    from lmra.warehouse import TABLES as WAREHOUSE_TABLES

    def partitions(folder: Path) -> bool:  # a warehouse table's folder: run=… partitions
        return folder.is_dir() and any(c.name.startswith("run=") for c in folder.iterdir())

    if (out / "history.sqlite").exists() or partitions(out) or any(partitions(out / t) for t in WAREHOUSE_TABLES):
        # (break-it round 2: a reports folder or the warehouse took a manifest and CSVs, and the warehouse
        # could no longer be read as one Parquet dataset)
        what = "a reports folder (it holds the run history)" if (out / "history.sqlite").exists() else "the warehouse"
        raise LmraInputError(f"is {what}: this command's files belong in a folder of their own; give --out another "
                             "folder (by default a new <output-dir>/<timestamp>-… folder)", file=out, field="--out")
    manifest = out / "manifest.json"
    if not manifest.exists():
        return
    try:
        ours = scores_ok and "source" in json.loads(manifest.read_text(encoding="utf-8"))
    except (OSError, ValueError, TypeError):
        ours = False
    if not ours:
        raise LmraInputError(f"is a run folder: writing here would replace its {files} with this command's results; "
                             "give --out another folder (by default a new <output-dir>/<timestamp>-… folder)",
                             file=out, field="--out")


def _config_permutations(config: Path, default: int):
    """``permutations`` of a recsys run's ``config.toml`` (the run folder the lists came from, for
    runs whose manifest predates it), else ``default`` (no such file, not TOML, no whole number)."""
    import tomllib

    try:
        value = tomllib.loads(config.read_text(encoding="utf-8")).get("permutations") if config.is_file() else None
    except (OSError, ValueError):
        return default
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _run_value(manifest: Path, key: str, default, kind: type = int, bounds: tuple | None = None):
    """The ``key`` (``seed``, ``k``, ``convention``, ``permutations``) of a recsys run's ``manifest.json`` (the folder
    ``lists.jsonl`` came from), else ``default`` (no manifest, or no such key in it).

    Raises:
        LmraInputError: the manifest cannot be read as a JSON object, or its ``key`` is not a
            ``kind`` value (break-it finding: a damaged manifest was passed over in silence, K
            falling back to 20 while the seed still came from it) or lies outside ``bounds``
            (named as the manifest's, not as an option not given: break-it round 2); give the
            option instead."""
    import json

    if not manifest.exists() and not manifest.is_symlink():
        return default
    option = {"k": "--k", "seed": "--seed", "convention": "--convention", "permutations": "--permutations",
              "parse_artists": "--parser stored, or score a copy of the lists file in another folder"}.get(key, key)
    try:
        doc = json.loads(read_input_text(manifest, "run manifest beside the lists file"))
    except (ValueError, LmraInputError) as exc:
        why = exc.reason if isinstance(exc, LmraInputError) else f"not JSON: {exc}"
        raise LmraInputError(f"the run manifest beside the lists file cannot be read ({why}), so this run's {key} "
                             f"is unknown: give {option}, or score a copy of the lists file in another folder",
                             file=manifest, field=key) from None
    if not isinstance(doc, dict) or key not in doc:
        if isinstance(doc, dict):
            return default
        raise LmraInputError(f"the run manifest beside the lists file is not a JSON object, so this run's {key} is "
                             f"unknown: give {option}", file=manifest, field=key)
    value = doc[key]
    if not isinstance(value, kind) or isinstance(value, bool):
        raise LmraInputError(f"the run manifest beside the lists file has {key} = {json.dumps(value)}, not a "
                             f"{'whole number' if kind is int else 'list' if kind is list else 'text'}: give {option}",
                             file=manifest, field=key)
    if bounds is not None and not bounds[0] <= value <= bounds[1]:
        raise LmraInputError(f"the run manifest beside the lists file has {key} = {value}, not between {bounds[0]} "
                             f"and {bounds[1]}: give {option}", file=manifest, field=key)
    return value


def cmd_recsys_bias(args: argparse.Namespace) -> int:
    """Run ``lmra recsys bias …``: bias disparity of any recommender's output files."""
    _no_model_options(args, "bias")
    from lmra.recsys.report import render_bias
    from lmra.recsys.run import bias_from_files

    table, summary, coverage, counts = bias_from_files(args.train, args.recs, args.items, args.users,
                                                       group_by=args.group_by, k=args.k, unprotected=args.unprotected,
                                                       protected=args.protected)
    from lmra.fileio import output_folder
    from lmra.runstate import claim_run_dir

    if args.out:
        out = Path(args.out)
        output_folder(out, "--out")
        _refuse_run_folder(out, "recsys_bias_disparity.csv and recsys_bias_summary.csv")
    else:  # a folder of its own: two runs started in the same second get two (break-it finding: one was lost)
        out = claim_run_dir(Path(getattr(args, "output_dir", None) or "reports") / (
            _dt.datetime.now().strftime("%Y%m%d-%H%M%S") + "-bias"))
    write_csv(table, out / "recsys_bias_disparity.csv")
    write_csv(summary, out / "recsys_bias_summary.csv")
    console = make_console()
    render_bias(console, summary, coverage)
    for note in summary.attrs.get("notes", []):
        console.print(f"[yellow]{lit(note)}[/]")
    if counts:
        cut = f"top-{args.k}" if args.k else "top-K"
        console.print(f"{counts['unmatched_top_k']} unmatched titles in the {counts['lists']} {cut} lists (not in the "
                      "catalogue): counted as no recommendation, not replaced by titles ranked below the cut.")
    console.print(f"Per group and genre: [bold]{lit(out / 'recsys_bias_disparity.csv')}[/]")
    return 0


def add_parsers(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register ``recsys`` (and its ``score`` sub-command) on an argparse sub-parser set.

    Returns:
        The ``recsys`` parser.
    """
    r = subparsers.add_parser(
        "recsys", help=COMMANDS["recsys"].help,
        description="Send neutral and sensitive recommendation instructions to the target, parse the lists and "
                    "report similarity to neutral and unfairness per sensitive attribute. See docs/recsys.md.")
    r.add_argument("--config", "-c", help="recsys config TOML (default: the shipped examples/recsys.toml, a small "
                                          "FaiRLLM music audit on the embedded model)")
    r.add_argument("--output-dir", help="override output_dir")
    r.add_argument("--target", metavar="PROVIDER:MODEL",
                   help="the recommender (your chatbot) instead of the config's [target], as in lmra audit: "
                        "openai:MODEL, anthropic:MODEL, llamacpp[:GGUF path] or custom:package.module:factory[:MODEL] "
                        "(the same provider keeps the section's other fields; another starts from the defaults)")
    r.add_argument("--seed", type=whole_number, help="override seed")
    r.add_argument("--name", help="override the run name")
    r.add_argument("--convention", choices=list(CONVENTIONS),
                   help="override the metric convention (paper-k: normalise by K even for lists shorter than K)")
    r.add_argument("--no-progress", action="store_true", help="no progress bar")
    r.set_defaults(func=cmd_recsys)
    rsub = r.add_subparsers(dest="recsys_command", metavar="{score,bias}")
    s = rsub.add_parser("score", help="score existing lists (lists.jsonl) without calling any model",
                        description="Compute recsys_similarity.csv and recsys_fairness.csv from a lists.jsonl "
                                    "(a previous run's, or your own recommender's).")
    s.add_argument("--lists", required=True, help="JSONL file, one list per line (see docs/recsys.md)")
    s.add_argument("--k", type=whole_number, default=None,
                   help="largest cut-off K (default: the k in the manifest.json beside the lists file — the run's "
                        "own —, else 20)")
    s.add_argument("--convention", choices=list(CONVENTIONS), default=argparse.SUPPRESS,
                   help="metric convention (default: the run's, from the manifest.json beside the lists, else "
                        "paper: lists shorter than K are normalised by the longer list; paper-k: by K)")
    s.add_argument("--parser", choices=["lmra", "fairllm-code"], default=None,
                   help="re-parse every record's 'raw' text with this parser (default: use the stored lists)")
    s.add_argument("--no-normalize", action="store_true", help="compare 'items' lists exactly as written")
    s.add_argument("--permutations", type=whole_number, default=None,
                   help="permutations of the SNSR/SNSV test per attribute (default: the run's, for a run's "
                        "lists; else 1999; 0 = no test)")
    s.add_argument("--seed", type=whole_number, default=None,
                   help="seed of the permutation test (default: the seed in the manifest.json beside the lists "
                        "file — a run's own, so that its p-values come out again — else 0)")
    s.add_argument("--out", help="output folder (default: <output-dir>/<timestamp>-score)")
    s.add_argument("--output-dir", default=argparse.SUPPRESS,
                   help="parent of the default output folder (default reports)")
    s.set_defaults(func=cmd_recsys_score)
    b = rsub.add_parser("bias", help="bias disparity (Mansoury et al. 2019) of any recommender's output files",
                        description="Preference ratio, bias and bias disparity per user group and item category, "
                                    "average disparity and item coverage. See docs/recsys.md §5.")
    b.add_argument("--train", required=True, help="input preferences: ratings.dat or CSV user_id,item_id")
    b.add_argument("--recs", required=True, help="recommendations: CSV user_id,item_id[,variant] or a cfairllm "
                                                 "lists.jsonl")
    b.add_argument("--items", required=True, help="categories: movies.dat or CSV item_id,genres (| separated)")
    b.add_argument("--users", required=True, help="groups: users.dat or CSV user_id,<group column>")
    b.add_argument("--group-by", default="gender", help="users column defining groups (default gender)")
    b.add_argument("--k", type=whole_number, default=None,
                   help="cut-off: the first k rows per user of a CSV; the catalogue-matched items among the top-k "
                        "list of a lists.jsonl (default: all rows; the run's top-K list)")
    b.add_argument("--unprotected", default=None, help="unprotected group label (adds a difference row; default "
                                                       "male when grouping by gender)")
    b.add_argument("--protected", default=None, help="protected group label (default female when grouping by gender)")
    b.add_argument("--out", help="output folder (default: <output-dir>/<timestamp>-bias)")
    b.add_argument("--output-dir", default=argparse.SUPPRESS, help="parent of the default output folder")
    b.set_defaults(func=cmd_recsys_bias)
    return r
