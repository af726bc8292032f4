"""The LMRA questions of the axes-of-difference algorithm (methodology §4; FPF §3.4).

Four questions, each a template in ``prompts/judge/``:

* **brainstorm** (``axes_brainstorm.txt``): one discovery pair, groups hidden, presentation
  order random; the LMRA answers with a JSON list of short, general differences, each
  saying whether Response 1 or Response 2 shows more of it. An answer that is not such a
  list is asked again once with another sample; if it is still invalid it is *counted* as
  invalid and contributes no feature — never guessed.
* **consolidate** (``axes_consolidate.txt``): the LMRA merges a numbered list of features
  into at most K axes as JSON, each with the numbers of the features it absorbs (and of
  those that state its opposite). Invalid output is retried once; the caller then falls
  back to a deterministic consolidation (:mod:`lmra.axes`).
* **label** (``axes_label.txt``): on a test pair, which response shows more of one axis
  (A / B / C = about equal), in both presentation orders, combined as in §2 by
  :func:`~lmra.judge.pairwise.rate_both_orders`. Pair score ``s = q(y_A more) − q(y_B more)``.
* **harm check** (``axes_harm.txt``): would the selected difference be a harmful stereotype
  about the two groups? A yes/no question asked in both option orders
  (:func:`~lmra.judge.binary.ask_yes_no`).
"""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import BaseModel

from lmra.config import AxesConfig, JudgeConfig
from lmra.generate import derive_seed
from lmra.judge.binary import YesNo, ask_yes_no
from lmra.judge.pairwise import PairRating, rate_both_orders
from lmra.providers.base import ChatRequest, Provider
from lmra.templates import Template

#: Longest accepted feature or axis text, in characters ("short" in methodology §4).
MAX_FEATURE_CHARS = 120
#: Attempts per brainstorm or merge question: the first answer and one retry.
ATTEMPTS = 2


def extract_json_array(text: str) -> list | None:
    """The first JSON array of objects in an LMRA answer — else its first JSON array —, or None
    when there is none.

    Code fences and text around the array are ignored; the array itself must be valid JSON
    (``json.JSONDecoder.raw_decode`` from each ``[`` in turn). Nothing is repaired. An array of
    objects (what the brainstorm and consolidation prompts ask for) is preferred to an earlier
    one of other values: "Response [1] is shorter. [{…}]" is the objects (break-it finding,
    s47: ``[1]`` was taken, and a valid answer counted invalid).

    Args:
        text: the raw answer.

    Returns:
        The decoded list, or None.
    """
    dec = json.JSONDecoder()
    first = None
    end = 0
    for m in re.finditer(r"\[", text):
        if m.start() < end:  # inside an array decoded already (its nested lists are not the answer's)
            continue
        try:
            obj, stop = dec.raw_decode(text, m.start())
        except ValueError:
            continue
        if isinstance(obj, list):
            if obj and all(isinstance(x, dict) for x in obj):
                return obj
            end = stop
            first = obj if first is None else first
    return first


def _which(v: Any) -> int | None:
    """1 or 2 from a brainstorm item's ``more`` value (1, 2, "1", "Response 2" …), else None."""
    if isinstance(v, bool):
        return None
    if isinstance(v, int) and v in (1, 2):
        return v
    if isinstance(v, float) and v in (1.0, 2.0):
        return int(v)
    if isinstance(v, str):
        m = re.fullmatch(r"\s*(?:response\s*)?([12])\s*", v, re.IGNORECASE)
        if m:
            return int(m.group(1))
    return None


def _short_text(v: Any) -> str | None:
    if not isinstance(v, str):
        return None
    s = " ".join(v.split())
    return s if 0 < len(s) <= MAX_FEATURE_CHARS else None


def parse_features(text: str, max_features: int) -> tuple[list[tuple[str, int]] | None, int]:
    """Parse a brainstorm answer (methodology §4 step 2).

    Valid answer: a JSON array (possibly empty) of objects with a ``feature`` string of
    1–:data:`MAX_FEATURE_CHARS` characters and ``more`` = 1 or 2 (also "1", "Response 2").
    Malformed items are dropped and counted; items past ``max_features`` are dropped.

    Args:
        text: the LMRA's answer.
        max_features: at most this many features are kept (≥ 1).

    Returns:
        (list of (feature text, 1 | 2), or None when the answer is invalid: no JSON array, or a
        non-empty array none of whose items is well formed; number of dropped items).
    """
    arr = extract_json_array(text)
    if arr is None:
        return None, 0
    out: list[tuple[str, int]] = []
    dropped = 0
    for item in arr:
        feat = _short_text(item.get("feature")) if isinstance(item, dict) else None
        more = _which(item.get("more")) if isinstance(item, dict) else None
        if feat is None or more is None:
            dropped += 1
            continue
        out.append((feat, more))
    if arr and not out:
        return None, dropped
    if len(out) > max_features:
        dropped += len(out) - max_features
        out = out[:max_features]
    return out, dropped


class BrainstormResult(BaseModel):
    """The brainstorm answer for one discovery pair.

    Attributes:
        features: (feature text, group whose response shows more of it) pairs; empty when the
            responses do not differ or the answer was invalid.
        valid: False when both attempts were invalid (counted, never guessed).
        attempts: answers requested (1, or 2 after a retry).
        flipped: True when Response 1 was group B's response (random presentation order).
        n_dropped: malformed or surplus items dropped from the accepted answer.
        raw_texts: the answers (≤ 500 chars each), kept for audit.
    """

    features: list[tuple[str, str]]
    valid: bool
    attempts: int
    flipped: bool
    n_dropped: int = 0
    raw_texts: list[str] = []


async def brainstorm_pair(provider: Provider, axes: AxesConfig, template: Template, *, task: str, prompt: str,
                          response_a: str, response_b: str, group_a: str, group_b: str, flipped: bool,
                          seed_parts: tuple = ()) -> BrainstormResult:
    """Ask the LMRA how the two responses of a discovery pair differ (methodology §4 step 2).

    The groups are hidden: the LMRA sees Response 1 and Response 2 only. With ``flipped``
    Response 1 is ``response_b``. Each attempt is one generation at ``axes.temperature`` with
    a seed derived from ``seed_parts`` and the attempt number, and ``sample_index`` = attempt
    number, so the retry is a different sample (for providers that honour seeds) with its own
    cache entry.

    Args:
        provider: the LMRA (normally through the call cache).
        axes: settings (``max_features``, ``temperature``, ``max_tokens``).
        template: ``axes_brainstorm.txt`` (placeholders task, prompt, response_1, response_2,
            max_features).
        task, prompt: the request.
        response_a, response_b: the scrubbed responses given to group A and group B.
        group_a, group_b: group names, recorded as each feature's lean (never shown).
        flipped: presentation order (seeded by the caller).
        seed_parts: identify the pair, for stable seeds.

    Returns:
        :class:`BrainstormResult`.

    Raises:
        ProviderError: a call failed after the backend's retries.
    """
    r1, r2 = (response_b, response_a) if flipped else (response_a, response_b)
    msgs = template.render(task=task, prompt=prompt, response_1=r1, response_2=r2, max_features=str(axes.max_features))
    texts: list[str] = []
    for attempt in range(ATTEMPTS):
        res = await provider.complete(ChatRequest(messages=msgs, temperature=axes.temperature,
                                                  max_tokens=axes.max_tokens,
                                                  seed=derive_seed("axes-brainstorm", *seed_parts, attempt),
                                                  sample_index=attempt))
        texts.append(res.text[:500])
        feats, dropped = parse_features(res.text, axes.max_features)
        if feats is not None:
            lean = {1: group_b if flipped else group_a, 2: group_a if flipped else group_b}
            return BrainstormResult(features=[(f, lean[m]) for f, m in feats], valid=True, attempts=attempt + 1,
                                    flipped=flipped, n_dropped=dropped, raw_texts=texts)
    return BrainstormResult(features=[], valid=False, attempts=ATTEMPTS, flipped=flipped, raw_texts=texts)


def parse_axes(text: str, n_items: int, max_axes: int) -> tuple[list[dict] | None, dict]:
    """Parse a consolidation answer (methodology §4 step 3).

    Valid answer: a JSON array of objects with an ``axis`` string of 1–:data:`MAX_FEATURE_CHARS`
    characters and ``features`` (and optionally ``opposite``), lists of 1-based item numbers.
    Numbers outside 1..``n_items`` are ignored; an axis that absorbs no valid number is
    dropped; axes with the same (case-insensitive) text are merged; a number claimed by an
    earlier axis stays with it. If more than ``max_axes`` remain, the ones absorbing the most
    items are kept (ties: the LMRA's order).

    Args:
        text: the LMRA's answer.
        n_items: length of the numbered list it was shown.
        max_axes: K.

    Returns:
        (list of ``{"axis": str, "items": [0-based], "opposite": [0-based]}``, or None when
        no valid axis remains; counts ``{"dropped_axes", "ignored_numbers", "truncated"}``).
    """
    info = {"dropped_axes": 0, "ignored_numbers": 0, "truncated": 0}
    arr = extract_json_array(text)
    if arr is None:
        return None, info
    merged: dict[str, dict] = {}
    claimed: set[int] = set()

    def numbers(v: Any) -> list[int]:
        out = []
        for x in v if isinstance(v, list) else []:
            if isinstance(x, bool) or not isinstance(x, (int, float, str)):
                info["ignored_numbers"] += 1
                continue
            if isinstance(x, float) and x.is_integer():  # a number written 2.0 (break-it finding, s47: ignored)
                x = int(x)
            try:
                i = int(str(x).strip())
            except ValueError:
                info["ignored_numbers"] += 1
                continue
            if not 1 <= i <= n_items or (i - 1) in claimed:
                info["ignored_numbers"] += 1
                continue
            out.append(i - 1)
            claimed.add(i - 1)
        return out

    for item in arr:
        name = _short_text(item.get("axis")) if isinstance(item, dict) else None
        if name is None:
            info["dropped_axes"] += 1
            continue
        same = numbers(item.get("features"))
        opp = numbers(item.get("opposite"))
        if not same and not opp:
            info["dropped_axes"] += 1
            continue
        entry = merged.setdefault(name.lower(), {"axis": name, "items": [], "opposite": []})
        entry["items"] += same
        entry["opposite"] += opp
    axes = list(merged.values())
    if not axes:
        return None, info
    if len(axes) > max_axes:
        info["truncated"] = len(axes) - max_axes
        order = sorted(range(len(axes)), key=lambda i: (-(len(axes[i]["items"]) + len(axes[i]["opposite"])), i))
        axes = [axes[i] for i in sorted(order[:max_axes])]
    return axes, info


class MergeResult(BaseModel):
    """The LMRA's consolidation answer.

    Attributes:
        axes: parsed axes (see :func:`parse_axes`), or None when both attempts were invalid.
        attempts: answers requested (1 or 2).
        info: parse counts of the accepted answer.
        raw_texts: the answers (≤ 2000 chars each).
    """

    axes: list[dict] | None
    attempts: int
    info: dict = {}
    raw_texts: list[str] = []


async def consolidate_features(provider: Provider, axes: AxesConfig, template: Template, items: list[str],
                               *, seed_parts: tuple = ()) -> MergeResult:
    """Ask the LMRA to merge numbered feature lines into at most ``axes.max_axes`` axes.

    Args:
        provider: the LMRA.
        axes: settings (``max_axes``, ``temperature``, ``merge_max_tokens``).
        template: ``axes_consolidate.txt`` (placeholders features, max_axes).
        items: the lines to number, e.g. ``"uses simpler language ×12"`` (length ≥ 1).
        seed_parts: identify the question, for stable seeds.

    Returns:
        :class:`MergeResult`; ``axes`` None after two invalid answers (the caller falls back).

    Raises:
        ProviderError: a call failed after the backend's retries.
    """
    listing = "\n".join(f"{i}. {t}" for i, t in enumerate(items, start=1))
    msgs = template.render(features=listing, max_axes=str(axes.max_axes))
    texts: list[str] = []
    for attempt in range(ATTEMPTS):
        res = await provider.complete(ChatRequest(messages=msgs, temperature=axes.temperature,
                                                  max_tokens=axes.merge_max_tokens,
                                                  seed=derive_seed("axes-consolidate", *seed_parts, attempt),
                                                  sample_index=attempt))
        texts.append(res.text[:2000])
        parsed, info = parse_axes(res.text, len(items), axes.max_axes)
        if parsed is not None:
            return MergeResult(axes=parsed, attempts=attempt + 1, info=info, raw_texts=texts)
    return MergeResult(axes=None, attempts=ATTEMPTS, raw_texts=texts)


async def label_axis(provider: Provider, judge: JudgeConfig, template: Template, *, axis: str, task: str,
                     prompt: str, response_a: str, response_b: str, seed_parts: tuple = ()) -> PairRating:
    """Which response of a test pair shows more of ``axis``, asked in both orders (methodology §4 step 4).

    Option A: Response 1 shows it more; B: Response 2; C: about equally. Order 1 shows
    ``response_a`` as Response 1, so ``q_F`` = q(y_A more), ``q_R`` = q(y_B more) and the pair
    score ``s = h = q_F − q_R`` in [−1, 1] (None when the answer is unusable).

    Raises:
        ProviderError: a call failed after the backend's retries.
    """
    common = {"task": task, "prompt": prompt, "axis": axis}
    return await rate_both_orders(
        provider, judge,
        template.render(response_1=response_a, response_2=response_b, **common),
        template.render(response_1=response_b, response_2=response_a, **common),
        seed_parts=("axes-label", axis, *seed_parts))


async def harm_check(provider: Provider, judge: JudgeConfig, template: Template, *, axis: str, more_group: str,
                     less_group: str, seed_parts: tuple = ()) -> YesNo:
    """Would "responses to ``more_group`` users show ``axis`` more" be a harmful stereotype?

    A yes/no question in both option orders (methodology §4 step 6); ``p_yes`` in [0, 1] or
    None when either order put no mass on the options (no label from one order).

    Raises:
        ProviderError: a call failed after the backend's retries.
    """
    return await ask_yes_no(provider, judge, template, seed_parts=("axes-harm", axis, more_group, *seed_parts),
                            axis=axis, more_group=more_group, less_group=less_group)
