"""Whether two runs measure the same chatbot under the same conditions: the warnings a regression
check (``lmra check``, ``lmra audit --baseline``) prints beside its verdict.

A check's permutation test compares two nights' per-prompt scores; it cannot tell whether they
differ because the chatbot changed — the thing it is meant to see — or because the two runs
asked differently. :func:`comparability_warnings` names what the run folders record that makes
a verdict mean something else than "tonight's chatbot vs the baseline's":

* **another target**: the audited chatbot's provider or model id differs (a check of two models
  is a comparison of models, not a regression of one), or its endpoint (``base_url``, with a
  custom provider's ``#options=`` digest) does;
* **another design**: a field that changes what is measured differs — the groups, the
  comparisons, samples per prompt, redaction, the target's sampling settings (temperature,
  max_tokens, prompt format), the refusal labels and identity filter (on/off, thresholds), or
  what the names file, the personalisation style, the taxonomy and the prompt file hold (their digests in ``manifest.json`` ``design``, so that a path written another
  way is not a change and a file edited in place is);
* **a replay**: the run drew with the baseline's seed and took target answers from the call
  cache (or the pair memo) — the baseline's own answers (same prompts, names, seed and model
  give the same cache keys) — or, with another seed, took every target answer from the cache
  (an earlier night's, the seed left fixed): the check does not see what the chatbot does
  tonight (docs/nightly.md: a new seed each night).

Served-model ids and fingerprints are compared by :func:`lmra.identity.identity_changes`.
The warnings never change the check's exit status: a check of two models or designs can be
what the user wants; they are said so that nobody reads it as a night-to-night verdict.
"""

from __future__ import annotations

from typing import Any

#: config fields that change what an audit measures (compared between a run and its baseline)
MEASUREMENT_FIELDS = ("groups", "comparisons", "samples_per_prompt", "redact")
#: fields naming a file (or a built-in style): compared by the digest of what they hold
#: (``manifest.json`` ``design``, :func:`lmra.audit.inputs.design_digests`), not by the path
#: written — the same file named by another path is the same design, one changed in place is not
DIGEST_FIELDS = ("names", "personalization", "taxonomy", "prompts")
#: settings of a config section that change which pairs are rated (refusals left out, prompts that
#: reveal identity removed): break-it finding, s40 — turned off between nights, unsaid
SECTION_SETTINGS = (("refusal", ("enabled", "threshold")), ("filter", ("enabled", "lmra", "threshold")))
#: LMRA settings that change how its answers read as ratings: how little option mass still reads as one,
#: and — for an openai LMRA reading log-probabilities, the only one that asks for them — how many
#: alternatives it lists (an option outside them reads as 0)
JUDGE_SETTINGS = ("min_answer_mass", "top_logprobs")
#: target settings that change the chatbot's answers
TARGET_SETTINGS = ("temperature", "max_tokens", "prompt_format")


def _lists_alternatives(judge: dict) -> bool:
    """Whether a run's recorded ``[judge]`` asks its endpoint for ``top_logprobs`` alternatives: an
    ``openai`` LMRA with ``logprobs`` on (the embedded model reads every token's probability,
    anthropic and ``logprobs = false`` sample)."""
    return judge.get("provider") == "openai" and judge.get("logprobs", True) is not False


def _change(a: Any, b: Any) -> str:
    """``a → b`` in a line: long values (a list of groups) around their first difference, so
    that the two sides never read alike."""
    ta, tb = repr(a), repr(b)
    if len(ta) <= 60 and len(tb) <= 60:
        return f"{ta} → {tb}"
    i = next((k for k, (x, y) in enumerate(zip(ta, tb)) if x != y), min(len(ta), len(tb)))
    lo = max(0, i - 20)
    cut = lambda t: ("…" if lo else "") + t[lo:lo + 60] + ("…" if len(t) > lo + 60 else "")  # noqa: E731
    return f"{cut(ta)} → {cut(tb)}"


def target_calls(run) -> tuple[int, int] | None:
    """``(fresh, cached)``: the target calls a run made and those it took from the call cache or
    the pair memo, from its ``manifest.json`` (``calls.by_model`` under ``provider:model``, or
    ``provider:model @ base_url`` when its LMRA has that key at another URL);
    None when the run did not record them. When its LMRA is the same provider and model the
    model's counts are shared: the target's own are ``calls.by_role.target`` (recorded since s41;
    break-it finding, s40: a same-seed night whose chatbot was its LMRA's model replayed answers
    unsaid); for a run recorded before, ``(0, cached calls)`` when it made no fresh call at all
    (every target answer was replayed too), else None."""
    calls = run.manifest.get("calls") or {}
    key = f"{run.target_provider}:{run.target_model}"
    by_model = calls.get("by_model") or {}
    target = run.manifest.get("target") if isinstance(run.manifest.get("target"), dict) else {}
    judge = run.manifest.get("judge") if isinstance(run.manifest.get("judge"), dict) else {}
    if f"{key} @ {target.get('base_url')}" in by_model:  # the LMRA has the same key at another URL: apart
        key = f"{key} @ {target.get('base_url')}"
    elif key == f"{run.judge_provider}:{run.judge_model}" and f"{key} @ {judge.get('base_url')}" in by_model:
        pass  # the LMRA's counts are under its own "@ URL" key: the plain key is the target's alone (break-it s39)
    elif key == f"{run.judge_provider}:{run.judge_model}":  # one model in both roles: its counts are shared
        role = (calls.get("by_role") or {}).get("target")  # the target's apart (recorded since s41)
        if isinstance(role, dict) and all(isinstance(role.get(k), int) and not isinstance(role.get(k), bool)
                                          for k in ("fresh", "cached")):
            return int(role["fresh"]), int(role["cached"])
        fresh, cached = calls.get("fresh"), calls.get("cached")  # else only "no fresh call at all"
        return (0, int(cached)) if fresh == 0 and isinstance(cached, int) and cached > 0 else None  # tells: all
    if not isinstance(by_model.get(key), dict):
        return None
    fresh, cached = by_model[key].get("fresh"), by_model[key].get("cached")
    if not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (fresh, cached)):
        return None
    return int(fresh), int(cached)


def all_answers_replayed(run) -> bool:
    """True when the run made no fresh target call and took at least one from the call cache or the
    pair memo (:func:`target_calls`): every chatbot answer it used was replayed — the first test of
    a same-seed replay (``lmra check``, ``lmra compare`` and ``latest`` each go on to ask whose
    answers those were)."""
    counts = target_calls(run)
    return counts is not None and counts[0] == 0 and counts[1] > 0


def earlier_same_draw(history, run) -> str | None:
    """The run id of a finished earlier run (complete or partial) of the same name, seed and
    design hash in ``history`` (:class:`lmra.history.History`) — whose answers a run with no
    fresh target call replayed — or, when the history has none, of a complete run folder beside
    ``run`` that the history never registered (its process was killed, or its disk filled, after
    the folder was written: break-it finding); None when there is neither (e.g. the cache was
    filled by an interrupted run of the same night, which a re-run resumes: tonight's answers,
    not a replay)."""
    return history.finished_before(run) or _unregistered_same_draw(history, run)


def _unregistered_same_draw(history, run) -> str | None:
    """The newest complete run folder beside ``run`` (same parent, a name ending ``-<name>``)
    that ``history`` does not know, with ``run``'s name, seed and design hash, started before
    it; or None. (A run the history knows is judged by its row there.)"""
    from lmra.runfolder import load_run

    newest = None
    try:
        siblings = sorted(p for p in run.path.parent.glob(f"*-{run.name}") if p.is_dir() and p != run.path)
    except OSError:
        return None
    for p in siblings:
        if history.get(p.name) is not None:
            continue
        try:
            other = load_run(p)
            same = (other.status == "complete" and other.config.get("seed") == run.config.get("seed")
                    and other.name == run.name and other.design_hash == run.design_hash
                    and (other.started or "") <= (run.started or ""))
        except Exception:  # noqa: BLE001 — a damaged or foreign folder is simply not that night
            continue
        if same:
            newest = other.run_id
    return newest


def _endpoints_differ(a: str | None, b: str | None) -> bool:
    """Whether two recorded target endpoints (``base_url``, a custom provider's with
    ``#options=<digest>``) name different deployments. Not said when either is unrecorded or
    empty (a provider's default endpoint written out is the same endpoint), for a trailing
    ``/`` or the scheme's and host's case, nor for an options digest only one of them has (a
    run recorded before lmra keyed the options) — break-it findings: these warned every night."""
    if not a or not b:
        return False

    def split(url: str) -> tuple[str, str | None]:
        base, _, options = url.partition("#options=")
        scheme, sep, rest = base.rstrip("/").partition("://")
        host, slash, path = rest.partition("/")
        return (f"{scheme.lower()}{sep}{host.lower()}{slash}{path}" if sep else base.rstrip("/")), (options or None)

    (base_a, opt_a), (base_b, opt_b) = split(a), split(b)
    return base_a != base_b or (opt_a is not None and opt_b is not None and opt_a != opt_b)


#: the start of the warning that a check compares two chatbots or two deployments of one (a check by
#: hand so marked does not replace a night's check of the same chatbot: History.latest_check)
TARGET_DIFFERS_PREFIX = "the target differs: "
#: how the warning of a changed audit design starts (``lmra check``, ``lmra compare``)
DESIGN_DIFFERS_PREFIX = "the audit design differs: "


def comparability_warnings(baseline, run, history=None) -> list[str]:
    """Plain-text warnings, one per reason the check of ``run`` against ``baseline`` is not a
    night-to-night comparison of one chatbot (see the module docstring).

    Args:
        baseline, run: :class:`lmra.runfolder.RunFolder` objects.
        history: the open :class:`lmra.history.History` the two are registered in; needed to
            tell a replay of an earlier night with another seed than the baseline's
            (:func:`earlier_same_draw`) — without it that case is not said.

    Returns:
        A list of sentences (empty when the two runs are comparable as far as their folders say).
    """
    out: list[str] = []
    t_base = (baseline.target_provider, baseline.target_model)
    t_run = (run.target_provider, run.target_model)
    if all(t_base) and all(t_run) and t_base != t_run:
        out.append(f"{TARGET_DIFFERS_PREFIX}baseline {t_base[0]}:{t_base[1]}, run {t_run[0]}:{t_run[1]} — the check "
                   "compares two chatbots, not two nights of one")
    elif all(t_base) and t_base == t_run and _endpoints_differ(baseline.target_base_url, run.target_base_url):
        # the same model id at another endpoint, or a custom provider's options changed (docs-truth
        # finding: docs/providers.md promised the check shows it; it compared provider and model only)
        out.append(f"{TARGET_DIFFERS_PREFIX}{t_run[0]}:{t_run[1]} at {baseline.target_base_url} in the baseline, at "
                   f"{run.target_base_url} in the run — the check compares two deployments, not two nights of one")
    cb, cr = baseline.config, run.config
    changed = [f"{f} ({_change(cb.get(f), cr.get(f))})" for f in MEASUREMENT_FIELDS
               if f in cb and f in cr and cb.get(f) != cr.get(f)]
    tb, tr = cb.get("target") or {}, cr.get("target") or {}
    changed += [f"target.{f} ({_change(tb.get(f), tr.get(f))})" for f in TARGET_SETTINGS
                if f in tb and f in tr and tb.get(f) != tr.get(f)]
    for section, keys in SECTION_SETTINGS:
        sb, sr = cb.get(section), cr.get(section)
        if isinstance(sb, dict) and isinstance(sr, dict):
            changed += [f"{section}.{k} ({_change(sb.get(k), sr.get(k))})" for k in keys
                        if k in sb and k in sr and sb.get(k) != sr.get(k)]
    db, dr = baseline.manifest.get("design") or {}, run.manifest.get("design") or {}
    changed += [f"{f} ({_design_change(f, baseline, run)})"
                for f in DIGEST_FIELDS if f in db and f in dr and db[f] != dr[f]]  # (not recorded: not compared)
    for key in JUDGE_SETTINGS:
        jb, jr = (cb.get("judge") or {}).get(key), (cr.get("judge") or {}).get(key)
        if key == "top_logprobs" and not all(_lists_alternatives(c.get("judge") or {}) for c in (cb, cr)):
            continue  # (round-2 break-it, s44: said for the embedded LMRA, which reads every token's probability)
        if jb is not None and jr is not None and jb != jr:  # (a baseline from before the field: not said)
            changed.append(f"judge.{key} ({_change(jb, jr)})")
    if changed:
        out.append(DESIGN_DIFFERS_PREFIX + "; ".join(changed) + " — a change in the net ratings may be the "
                   "design's, not the chatbot's")

    counts = target_calls(run)
    seed_b, seed_r = cb.get("seed"), cr.get("seed")
    # (a change of the LMRA's settings alone leaves the chatbot's answers replayed: round-2 break-it, s44)
    chatbot_side = [c for c in changed if not c.startswith("judge.")]
    same_seed = seed_b is not None and seed_b == seed_r and t_base == t_run and not chatbot_side
    if counts and counts[1] and same_seed:
        fresh, cached = counts
        share = "every chatbot answer was" if not fresh else f"{cached} of its {fresh + cached} chatbot answers were"
        # the baseline never checked: it may be this night's own earlier attempt, stopped (killed, a CI
        # timeout) after writing its run folder, before its check — then re-running the night replays it,
        # and '--baseline last' picks that attempt (break-it finding, s41: the advice was only "give each
        # night its own seed", which the operator had; the night went unchecked)
        unchecked = (history is not None and not fresh and history.latest_check(baseline.run_id) is None)
        attempt = (f"; if {baseline.run_id} is this night's earlier attempt — stopped after writing its run folder, "
                   f"never checked — check it instead: 'lmra check {baseline.run_id} --baseline last' (or pinned, as "
                   "the night was run)" if unchecked else "")
        out.append(f"the run drew with the baseline's seed ({seed_r}) and {share} replayed from the call cache — "
                   "the answers recorded for the same prompts, names, seed and model, the baseline's own — so the "
                   "check compares the chatbot with its earlier answers, not with what it does tonight; give each "
                   f"night its own seed (--seed, docs/nightly.md){attempt}")
    elif counts and counts[1] and not counts[0] and history is not None:  # another seed, an earlier night's?
        earlier = earlier_same_draw(history, run)
        # (a seed left fixed): a night that finished complete — not a re-run resuming an interrupted
        # night, nor one completing a partial night, whose answers are its own (user-trial finding)
        if earlier is not None and ((history.get(earlier) or {}).get("status") or "complete") == "complete":
            if earlier != baseline.run_id and history.latest_check(earlier) is None:
                # a re-run of a night whose process stopped after its run folder was written (kill,
                # full disk), before its check: that night is complete, and unchecked (break-it
                # finding: the advice was to give each night its own seed, and the night went unchecked)
                out.append(f"the run made no fresh target call: every chatbot answer was replayed from the call "
                           f"cache (run {earlier}, finished earlier with the same prompts, names, seed {seed_r} and "
                           "model, and never checked — its process stopped after writing its run folder, or it ran "
                           f"without a baseline), so this check sees nothing new; check that run itself: "
                           f"'lmra check {earlier} --baseline pinned' (docs/nightly.md)")
            else:
                # checked already: a re-run of a night stopped after its check (kill -9 during its report or
                # warehouse) lands here as well as a seed left fixed (break-it finding, s42: the advice was only
                # "give each night its own seed", which the operator had; the night's verdict stood)
                check = history.latest_check(earlier) if earlier != baseline.run_id else None
                verdict = (check or {}).get("verdict")
                stood = (f"; if {earlier} is this night's earlier attempt, stopped after its check "
                         f"({VERDICT_WORDS.get(verdict, verdict)} against {check.get('baseline_id')}), the night is "
                         "audited and checked already — its verdict stands in 'lmra history', and this run adds "
                         f"nothing: 'lmra report {earlier}' and 'lmra warehouse add {earlier}' finish what it may not "
                         "have written" if verdict else "")
                out.append(f"the run made no fresh target call: every chatbot answer was replayed from the call cache "
                           f"(run {earlier}, finished earlier with the same prompts, names, seed {seed_r} and model), "
                           "so the check does not see what the chatbot does tonight; give each night its own seed "
                           f"(--seed, docs/nightly.md){stood}")
    return out


def _design_change(field: str, baseline, run) -> str:
    """Why a design digest differs, in words: the config's path changed, or the content behind it —
    for ``names``, when the two runs drew names differently (balanced draws, lmra 0.2.0: methodology
    §1 step 2), that and what to do (upgrade trial, s43: "names (its content changed)" every night
    after the upgrade, for a names file no one had touched)."""
    cb, cr = baseline.config, run.config
    if cb.get(field) != cr.get(field):
        return _change(cb.get(field), cr.get(field))
    if field == "names":
        b_bal, r_bal = baseline.summary.get("balanced_draws"), run.summary.get("balanced_draws")
        if (b_bal or {}) != (r_bal or {}):
            def said(bal, folder) -> str:
                if bal is None:
                    v = (folder.manifest.get("versions") or {}).get("lmra") or "an older version"
                    return f"from all their names (lmra {v}, before balanced draws)"
                kept = [f"{label} by {d.get('attribute')}" for label, d in bal.items() if d.get("values")]
                return "balanced: " + ", ".join(kept) if kept else "from all their names"
            return (f"the names were drawn {said(r_bal, run)} in the run, {said(b_bal, baseline)} in the baseline — "
                    "methodology §1 step 2; the names file may be unchanged: pin a night drawn as this one "
                    f"('lmra pin {run.run_id}') to compare like with like")
    return "its content changed"


#: a recorded check's verdict in words (the replay warning quotes the earlier attempt's)
VERDICT_WORDS = {"regression": "a regression", "no_regression": "no regression", "no_conclusion": "no conclusion"}

#: the starts of the warnings that say every chatbot answer was replayed (a replay's check)
REPLAY_STARTS = ("the run drew with the baseline's seed", "the run made no fresh target call")


#: the start of the comparability line of a check :func:`lmra.monitor.assert_comparable` refused
#: (:func:`lmra.monitor.refused_check`)
REFUSED_PREFIX = "nothing was checked: the baseline is not comparable — "


def system_prompt_note(baseline, run) -> str | None:
    """A note when the chatbot's ``[target] system_prompt`` differs between the two runs' configs
    (set, removed or changed; the text's sha256 prefix on each side), else None. Not a reason to
    refuse the check nor "another design": a new system prompt is a change of the chatbot, often
    the very deploy a team checks — said, so that a rise is traced to it (fresh-user finding, s36:
    a gender-role system prompt added between nights was never mentioned)."""
    import hashlib

    def prompt(folder) -> str | None:
        return (folder.config.get("target") or {}).get("system_prompt")

    a, b = prompt(baseline), prompt(run)
    if a == b:
        return None

    def digest(text: str | None) -> str:
        return "none" if text is None else f"sha256 {hashlib.sha256(text.encode()).hexdigest()[:12]}…, {len(text):,} characters"

    return (f"the chatbot's system prompt ([target] system_prompt) changed since the baseline ({digest(a)} → "
            f"{digest(b)}): the check measures the chatbot with its new system prompt — a rise may be that change's")


#: the ends of :func:`combiner_note`'s notes: the check's H columns are its 'mean' scores
COMBINER_NOTE_END = "so its H columns are those, not the runs' headlines"


def combiner_note(baseline, run) -> str | None:
    """The note of a check that compares the runs under ``mean`` (:func:`lmra.monitor.check_column`):
    a ``min`` and a ``min+mean`` run, or two ``min+mean`` runs; None otherwise. Not a warning of
    :func:`comparability_warnings`: the check is still one of two nights of one chatbot (an answer
    without log-probabilities now and then must not page anyone)."""
    from lmra.monitor import check_column

    if check_column(run.combiner, baseline.combiner) == "h" or {baseline.combiner, run.combiner} - {"min", "min+mean"}:
        return None
    if baseline.combiner == run.combiner:  # both 'min+mean': their shares of 'mean' pairs differ from night to night
        return ("both runs scored their pairs with an answer that came without log-probabilities with 'mean' (the "
                "unbiased combiner for them), the others with 'min' ('min+mean'), each in its own proportion; this "
                "check compares both runs under 'mean' (every pair's mean of its two orders, scored alike in both), "
                f"{COMBINER_NOTE_END}")
    mixed = "the run" if run.combiner == "min+mean" else "the baseline"
    return (f"the order combiner differs: baseline '{baseline.combiner}', run '{run.combiner}' — {mixed} scored its "
            "pairs with an answer that came without log-probabilities with 'mean' (the unbiased combiner for them), "
            "the others with 'min'; this check compares both runs under 'mean' (every pair's mean of its two "
            f"orders, scored alike in both), {COMBINER_NOTE_END}")


#: the change of the LMRA's position logit b̂ between two nights (logit units) above which a flagged
#: regression gets :func:`position_drift_note` (the judge check allows |b̂| ≤ 1 on each night)
POSITION_DRIFT_LOGIT = 0.25


#: a hiding note (:func:`position_drift_note`) needs a comparison's calibrated overall net rating to
#: have risen by at least this much (and the check's margin): the estimate b̂ varies 0.2–0.3 between
#: nights of one unchanged LMRA at a few hundred pairs (break-it finding, s36: 4 of 12 healthy night
#: pairs read "not evidence of no regression" on b̂ noise alone, their calibrated ratings unmoved)
POSITION_HIDDEN_RISE = 0.02


#: the smallest mean change of the LMRA's probability on "no stereotype" over the same canary pairs that
#: :func:`canary_drift_note` reports (when also significant)
CANARY_DRIFT_MIN = 0.05


def canary_drift_note(baseline, run, alpha: float) -> str | None:
    """The note of a check whose two nights' LMRA rated **the same canary pairs** differently: the
    mean probability it left on "no harmful stereotype" (``q_N``) over the canaries both nights'
    judge checks rated validly moved by at least :data:`CANARY_DRIFT_MIN` and significantly (the
    paired t-test over those canaries, scipy ``ttest_rel``, at ``alpha``); None otherwise (or when
    either night has no judge-check ratings, or fewer than 10 shared canaries).

    The canaries are fixed texts, so their ratings move only with the LMRA: an LMRA that leaves
    less probability on "no stereotype" raises every stereotyped pair's score and reads as a rise
    of the chatbot under any combiner (statistics break-it, s42: q_N 0.6 → 0.3 behind one model
    id, b̂ unchanged — so no position-drift note — gave "REGRESSION", exit 3, +0.061, for an
    unchanged chatbot; the mirror, an "improvement"). The note does not change the verdict.

    Args:
        baseline, run: the two :class:`~lmra.runfolder.RunFolder` (their ``judge_check_ratings.jsonl``).
        alpha: the test's level, in (0, 1)."""
    import json
    import math

    def ratings(folder) -> dict[str, float]:
        out = {}
        try:
            with open(folder.path / "judge_check_ratings.jsonl", encoding="utf-8") as fh:
                for line in fh:
                    r = json.loads(line)
                    q = r.get("q_N")
                    if r.get("valid") and not r.get("failed") and isinstance(q, (int, float)) and math.isfinite(q):
                        out[str(r.get("id"))] = float(q)
        except (OSError, ValueError, AttributeError):
            return {}
        return out

    a, b = ratings(baseline), ratings(run)
    shared = sorted(set(a) & set(b))
    if len(shared) < 10:
        return None
    xa, xb = [a[k] for k in shared], [b[k] for k in shared]
    diff = sum(xb) / len(xb) - sum(xa) / len(xa)
    if abs(diff) < CANARY_DRIFT_MIN:
        return None
    from scipy.stats import ttest_rel

    p = float(ttest_rel(xb, xa).pvalue)
    if not p < alpha:
        return None
    way = "less" if diff < 0 else "more"
    return (f"the LMRA rated the same {len(shared)} canary pairs differently: it left {way} probability on 'no "
            f"harmful stereotype' ({sum(xa) / len(xa):.3f} → {sum(xb) / len(xb):.3f} on average, paired t-test "
            f"p = {p:.2g}), which moves every stereotyped pair's score — a change of the net ratings may be the "
            "LMRA's, not the chatbot's (the same model id can serve another model; judge_check_ratings.jsonl of "
            "both runs)")


def position_drift_note(baseline, run, comparisons: list[str], *, hiding: bool = False,
                        margin: float = 0.0) -> str | None:
    """The note of a check that flagged a regression while the LMRA's preference for the first-shown
    response moved between the nights (|b̂ run − b̂ baseline| ≥ :data:`POSITION_DRIFT_LOGIT`, both
    estimated, the runs' combiner not ``calibrated``); None otherwise. Under ``min`` (and ``mean``)
    a stronger position preference raises the score of every pair the LMRA finds stereotyped, so an
    unchanged chatbot reads as a rise (break-it finding, s35: b̂ 0 → 0.9, within the judge check's
    bound, flagged a REGRESSION of +0.048, Holm p = 0.005, on an unchanged chatbot whose calibrated
    rating stayed +0.2414 — methodology §2, the calibrated combiner). The note names b̂ on both
    nights and each flagged comparison's overall calibrated net rating on both; it does not change
    the verdict (a drifting LMRA behind the same model id is news too).

    With ``hiding`` (a check that found no regression; break-it finding, s36): only a *fall* of the
    preference (b̂ run ≤ b̂ baseline − :data:`POSITION_DRIFT_LOGIT`) while a comparison's calibrated
    overall net rating rose by at least max(``margin``, :data:`POSITION_HIDDEN_RISE`) gives a note, which says a weaker
    preference lowers every stereotyped pair's score and can hide a rise (b̂ 0.9 → 0: the chatbot went
    from 35 % to 45 % stereotyped prompts, the calibrated rating rose +0.2414 → +0.3019, the headline
    barely moved, "No regression", exit 0, no note); :func:`lmra.monitor.no_regression_caveat` then
    calls the "no regression" no evidence.

    Args:
        baseline, run: the two :class:`~lmra.runfolder.RunFolder`; comparisons: the flagged
            comparisons (``"female vs male"``; with ``hiding``, every compared one), whose overall
            rows are quoted."""
    b_run, b_base = run.summary.get("position_logit"), baseline.summary.get("position_logit")
    try:
        b_run, b_base = float(b_run), float(b_base)
    except (TypeError, ValueError):
        return None
    if (b_run != b_run or b_base != b_base or abs(b_run - b_base) < POSITION_DRIFT_LOGIT
            or "calibrated" in {run.combiner, baseline.combiner} or (hiding and b_run > b_base)):
        return None

    def calibrated(folder) -> dict[str, float]:
        out = {}
        for o in folder.summary.get("overall") or []:
            try:
                out[f"{o['group_a']} vs {o['group_b']}"] = float(o["net_rating_calibrated"])
            except (KeyError, TypeError, ValueError):
                pass
        return out

    c_run, c_base = calibrated(run), calibrated(baseline)
    if hiding:  # only where the calibrated rating, which the preference does not move, rose
        comparisons = [c for c in comparisons if c in c_run and c in c_base
                       and c_run[c] - c_base[c] >= max(margin, POSITION_HIDDEN_RISE)]
        if not comparisons:
            return None
    quoted = [f"{c} {c_base[c]:+.4f} → {c_run[c]:+.4f}" for c in comparisons if c in c_run and c in c_base]
    under = (f"; under the calibrated combiner, which removes it, the overall net rating went {'; '.join(quoted)}"
             if quoted else "")
    if hiding:
        return (f"the LMRA's preference for the first-shown response fell between the nights (position logit "
                f"{b_base:+.2f} → {b_run:+.2f}): it lowers the score of every pair the LMRA finds stereotyped under "
                f"'{run.combiner}', so it can hide a rise of the chatbot's{under} (per_task.csv "
                "net_rating_calibrated, per task; docs/methodology.md)")
    return (f"the LMRA's preference for the first-shown response moved between the nights (position logit "
            f"{b_base:+.2f} → {b_run:+.2f}): it raises the score of every pair the LMRA finds stereotyped under "
            f"'{run.combiner}', so a rise can be the LMRA's drift rather than the chatbot's{under} "
            "(per_task.csv net_rating_calibrated, per task; docs/methodology.md)")


def short_label(warning: str) -> str:
    """Two or three words for a warning of :func:`comparability_warnings` (a table cell):
    ``replayed answers``, ``another target``, ``another design`` (else the warning's start)."""
    for start, label in ((REFUSED_PREFIX, "baseline not comparable"), (REPLAY_STARTS[0], "replayed answers"),
                         (REPLAY_STARTS[1], "replayed answers"),
                         ("the target differs", "another target"), (DESIGN_DIFFERS_PREFIX, "another design")):
        if warning.startswith(start):
            return label
    return warning[:40]

