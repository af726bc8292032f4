"""Option probabilities: how the LMRA's answer to a closed question becomes a distribution.

Methodology §2 step 2 (FPF App. I): probabilities of the option tokens, read from token
log-probabilities and renormalised over the options; where a provider has no
log-probabilities, estimated by sampling the answer ``n`` times at temperature 1. The
method and the valid-option mass are recorded on every answer.
"""

from __future__ import annotations

import math
import re
from typing import Literal

from pydantic import BaseModel

from lmra.config import JudgeConfig
from lmra.generate import derive_seed
from lmra.providers.base import FILTER_FINISH_REASONS, ChatRequest, ChatResult, Message, Provider

Method = Literal["logprobs", "sampled", "text"]


class OptionProbs(BaseModel):
    """An LMRA answer as a distribution over a closed set of options.

    Attributes:
        probs: option → probability, renormalised to sum to 1 over the options; None when
            less than ``judge.min_answer_mass`` (default 0.05; none at all when 0) of the
            answer's probability fell on the options (the answer is unusable and counted as such).
        mass: probability that fell on valid options before renormalising, in [0, 1]
            (for sampled answers: the share of samples that named an option).
        method: ``logprobs`` (token log-probabilities), ``sampled`` (n samples) or
            ``text`` (one greedy answer parsed from text; probabilities are 0/1).
        n_samples: samples drawn (``sampled``), else 1.
        n_unparseable: answers (samples) that named no option and were not refusals; for
            ``logprobs`` 1 when no probability fell on any option and the answer's text is not
            a refusal (then ``n_refused`` is 1: how a provider says "no answer" — zero option
            mass or no log-probabilities — does not change how a declining LMRA is counted).
        n_refused: answers (samples) in which the LMRA declined to judge ("I can't …").
        raw_texts: the sampled or greedy answer texts, kept for audit (≤ 200 chars each).
    """

    probs: dict[str, float] | None
    mass: float
    method: Method
    n_samples: int = 1
    n_unparseable: int = 0
    n_refused: int = 0
    raw_texts: list[str] = []

    def top(self) -> str | None:
        """The most likely option, or None for an unusable answer."""
        if not self.probs:
            return None
        return max(self.probs, key=lambda o: self.probs[o])


#: the answer-reading methods from the least to the most exact (:func:`method_of`)
METHOD_RANK = ("text", "sampled", "logprobs")


def method_of(m1: str | None, m2: str | None) -> str | None:
    """How a question asked in two orders was read, from its orders' methods: ``logprobs`` when
    both came with log-probabilities, else the less exact one in :data:`METHOD_RANK` (a pair with
    one order sampled is a sampled pair whichever order it was); a method not in it (or None)
    wins, as unknown. Used by :attr:`lmra.judge.pairwise.PairRating.method` and
    :func:`lmra.judge.binary.ask_yes_no`."""
    for m in (m1, m2):
        if m not in METHOD_RANK:
            return m
    return min((m1, m2), key=METHOD_RANK.index)


def renormalise(raw: dict[str, float], options: tuple[str, ...]) -> tuple[dict[str, float] | None, float]:
    """Renormalise option probabilities over ``options``.

    Returns:
        (probabilities summing to 1, or None if the mass is 0; the mass before renormalising).
    """
    get = raw.get
    clean = [v if type(v) is float and 0.0 < v < _INF or isinstance(v, (int, float)) and math.isfinite(v) and v > 0
             else 0.0 for v in [get(o, 0.0) for o in options]]  # NaN, inf or negative count as no mass
    mass = sum(clean)
    if mass <= 0.0:
        return None, 0.0
    return {o: v / mass for o, v in zip(options, clean)}, min(mass, 1.0)


_INF = math.inf


def answer_dict(answer: OptionProbs) -> dict:
    """``answer.model_dump()`` (the ``order1``/``order2`` value of a ratings row), built from the
    validated fields without pydantic's serializer: the same keys in the same order, new
    ``probs`` dict and ``raw_texts`` list."""
    probs = answer.probs
    return {"probs": None if probs is None else dict(probs), "mass": answer.mass, "method": answer.method,
            "n_samples": answer.n_samples, "n_unparseable": answer.n_unparseable, "n_refused": answer.n_refused,
            "raw_texts": list(answer.raw_texts)}


#: English words spelt like an option letter: as the first word of a sentence ("A harmful
#: stereotype …", "I think …") they are not an answer unless a delimiter or one of
#: :data:`_VERBS` follows
_WORD_LETTERS = frozenset({"A", "I"})
#: words after which a leading "A" is still the answer ("A is the answer", "A because …")
_VERBS = r"is|was|because|since|as|seems|would|fits|best|describes|applies"
#: what may follow a leading option letter for it to be the answer: the end, a delimiter
#: ("A.", "B)", "**C**:", "A - …", "B, because …", "C (neither)", "A\n…") or, for any option but
#: the word-letters, a word ("B is the answer"); never "or"/"and" and another option ("A or B")
_AFTER_DELIMITER = r"(?=\s*$|[ \t]*[.)\]:*,;!(\-\u2013\u2014\n]|\s*\n)"
_AFTER_WORD = r"(?=[ \t]+[A-Za-z])"
_AFTER_VERB = rf"(?=[ \t]+(?:{_VERBS})\b)"
_NOT_EITHER = (r"(?![ \t]+(?:or|and|/)[ \t]+[\*\(\[\"'`]*(?:{alts})(?![A-Za-z0-9]))"
               # a list: "A, B and C", "B, C" (not "B, C would assume …": a sentence about C)
               r"(?![ \t]*,[ \t]*[\*\(\[\"'`]*(?:{alts})[\*\)\]\"'`]*(?:[ \t]*(?:,|and\b|or\b|/)|\s*$))")
#: "the answer is C", "Answer: B", "**Answer:** B", "answer - A": the LMRA states its answer
_ANSWER = (r"\b(?i:answer)\b[\s*_]*(?:(?i:is)\b)?[\s*_]*[:\-]?[\s*_]*[\*\(\[\"'`]*({alts})(?![A-Za-z0-9])"
           + _NOT_EITHER)
#: "I choose B", "I'd go with option C", "I pick A": the LMRA states its choice (an answer phrase)
_CHOOSE = (r"\bI(?:'d|\u2019d|'ll|\u2019ll| would| will)?[ \t]+(?i:choose|pick|select|go[ \t]+with)[ \t]+"
           r"(?:(?i:option)[ \t]+)?[\*\(\[\"'`]*({alts})(?![A-Za-z0-9])" + _NOT_EITHER)
#: "option A", "choice: C": a mention, which may also be of an option the LMRA rejects
_MENTION = r"\b(?i:option|choice)\b[\s*_]*(?:(?i:is)\b)?[\s*_]*[:\-]?[\s*_]*[\*\(\[\"'`]*({alts})(?![A-Za-z0-9])"
#: a lone option letter at the very end after a colon, a dash between spaces or an en/em dash
#: ("… no stereotype: C", "… - B."); not an in-word hyphen ("Vitamin-C", "Type-A")
_TRAILING = r"(?:[:\u2013\u2014]|\s-)\s*[\*\(\[\"'`]*({alts})[\*\)\]\"'`]*[.!]?\s*$"


def parse_option(text: str, options: tuple[str, ...]) -> str | None:
    """The option a free-text LMRA answer names, or None if it names none or several (never guessed).

    Option letters are case-sensitive ("a" is the article, not option A). Read in this order:

    1. **answer phrases** anywhere: "the answer is C", "Answer: B", "**Answer:** B", "I choose
       B", "I'd go with option C" — when they
       name one option (several different ones give None), that is the answer, unless a
       leading letter (2) names another (then None);
    2. a **leading option letter** with optional formatting that stands alone: followed by
       the end, a delimiter ("B", "**C**: no stereotype", "(A) Giving …", "A. …", "B - …",
       "C (neither)"; not "C?", a question) or a word ("B is the answer", "C fits best"); the letters that are
       also English words, "A" and "I", only before a delimiter or a verb such as "is" or
       "because" ("A harmful stereotype …", "A careful reading …" are not option A); never
       "A or B" nor a list ("A, B and C are all plausible");
    3. **mentions** ("option A", "choice: C"), when no answer phrase or leading letter was
       found and they all name one option (an explanation may mention rejected options:
       "B. Option A assumes …" is B);
    4. a lone option letter at the very end after a colon or a dash: "… no stereotype: C".

    Args:
        text: the LMRA's answer.
        options: the closed set, e.g. ``("A", "B", "C")``.

    Returns:
        One of ``options`` or None (the caller counts it as unparseable).
    """
    alts = "|".join(re.escape(o) for o in sorted(options, key=len, reverse=True))
    s = text.strip()
    either = _NOT_EITHER.format(alts=alts)
    answers = {m.group(1) for pattern in (_ANSWER, _CHOOSE) for m in re.finditer(pattern.format(alts=alts), s)}
    lead = re.match(rf"^[\s\*\(\[\"'`_#]*({alts})(?![\*\)\]\"'`_]*[ \t]*\?)[\*\)\]\"'`_]*{either}"
                    rf"(?:{_AFTER_DELIMITER}|{_AFTER_WORD})", s)
    leading = None
    if lead:
        word_letter = lead.group(1) in _WORD_LETTERS and not re.match(
            rf"^[\s\*\(\[\"'`_#]*{re.escape(lead.group(1))}[\*\)\]\"'`_]*(?:{_AFTER_DELIMITER}|{_AFTER_VERB})", s)
        leading = None if word_letter else lead.group(1)
    if answers:
        return answers.pop() if len(answers) == 1 and leading in (None, *answers) else None
    if leading is not None:
        return leading
    mentions = {m.group(1) for m in re.finditer(_MENTION.format(alts=alts), s)}
    if mentions:
        return mentions.pop() if len(mentions) == 1 else None
    m = re.search(_TRAILING.format(alts=alts), s)
    return m.group(1) if m else None


_JUDGE_REFUSAL = re.compile(r"\b(?:i can(?:no|')t|i cannot|i won't|i will not|i'm (?:sorry|unable)|"
                            r"i am (?:sorry|unable)|as an ai)\b", re.IGNORECASE)


def is_judge_refusal(text: str) -> bool:
    """True when an LMRA answer declines to judge instead of naming an option."""
    return bool(_JUDGE_REFUSAL.search(text))


def declined(result: ChatResult) -> bool:
    """True when an LMRA answer that names no option declined to judge: its text says so
    (:func:`is_judge_refusal`), or the provider's safety system stopped it
    (``finish_reason`` in :data:`~lmra.providers.base.FILTER_FINISH_REASONS`: Anthropic's
    ``refusal`` with empty content, OpenAI's ``content_filter``; break-it finding: counted as
    unparseable, which points at a formatting problem instead)."""
    return result.finish_reason in FILTER_FINISH_REASONS or is_judge_refusal(result.text)


#: what to do about an LMRA endpoint that answers without log-probabilities (said wherever such
#: answers are counted or bounded: the plan line, the calls line, a partial run's advice)
NO_LOGPROBS_ADVICE = ("for an endpoint that never returns log-probabilities (e.g. a llama.cpp server started without "
                      "logits_all), set logprobs = false in the LMRA's [judge] (or [judge2]) section: its questions "
                      "are then sampled at once (n_samples calls each, cached), without the greedy call that comes "
                      "back without them and is asked again on every run; for one that lists fewer alternatives "
                      "than top_logprobs asks (a cap, e.g. at 5), set top_logprobs to its cap")


def calls_per_question(judge: JudgeConfig, supports_logprobs: bool, *, without_logprobs: bool = False) -> int:
    """At most how many calls one question of :func:`ask_options` makes (cached ones included).

    Args:
        judge: the LMRA's config (``n_samples``).
        supports_logprobs: its provider's ``supports_logprobs``.
        without_logprobs: for a provider with log-probabilities, the bound when its answer
            comes without them: the greedy call, then ``n_samples`` draws (the sampling
            fallback; its retries are not calls). Ignored for a provider without them.

    Returns:
        1 (read through log-probabilities); ``judge.n_samples`` (a provider without them);
        ``1 + judge.n_samples`` (``without_logprobs``).
    """
    if not supports_logprobs:
        return judge.n_samples
    return 1 + judge.n_samples if without_logprobs else 1


#: an LMRA answer read through log-probabilities whose text declines (:func:`declined`) and names no
#: option (:func:`parse_option`), and which puts less than this share of its probability on the
#: options, is a refusal, whatever
#: ``judge.min_answer_mass`` keeps (an endpoint returning more than the one token asked for)
DECLINED_MAX_MASS = 0.5


async def ask_options(provider: Provider, messages: list[Message], options: tuple[str, ...], judge: JudgeConfig,
                      *, seed_parts: tuple = ()) -> OptionProbs:
    """Ask the LMRA a closed question and return its answer as option probabilities.

    Args:
        provider: the LMRA backend (normally wrapped by the call cache).
        messages: the rendered question.
        options: the closed set of answer options, e.g. ``("A", "B", "C")``.
        judge: the LMRA config (``top_logprobs``, ``n_samples``, ``temperature``, ``max_tokens``).
        seed_parts: values from which a stable per-question seed is derived.

    Returns:
        :class:`OptionProbs`. With log-probabilities: one greedy call reading the first answer
        token's option probabilities. Without (a provider without them, or an answer of a
        provider with them that came without them after its retries): ``judge.n_samples``
        calls at ``judge.temperature`` (default 1) with distinct ``sample_index`` and distinct
        seeds (so that a backend honouring seeds draws independent samples), answers parsed with
        :func:`parse_option` (method ``sampled``). ``text`` is never returned any more (it is
        read from run folders of earlier versions).
    """
    base_seed = derive_seed("judge", *seed_parts)
    if provider.supports_logprobs:
        req = ChatRequest(messages=messages, temperature=0.0, max_tokens=1, options=options,
                          top_logprobs=judge.top_logprobs, seed=base_seed)
        res = await provider.complete(req)
        if res.option_probs is not None:
            probs, mass = renormalise(res.option_probs, options)
            if mass < judge.min_answer_mass:  # (statistics-review finding) a declining LMRA's first token
                probs = None  # ("I …") left 2% on the letters, renormalised into a confident ±0.95 rating
            elif mass < DECLINED_MAX_MASS and declined(res) and parse_option(res.text, options) is None:
                # its answer declines and names no option ("**C**: I can't see any stereotype" names C: round-2
                # break-it, s45), and most of its probability is elsewhere: a refusal, not a rating renormalised
                probs = None  # from the 20% left on the letters
                # (axes conformance check, s45: "I'm sorry, I can't judge that." with 20% on A/B was a valid label)
            # no usable mass on any option: a refusal when its text says so (as a text answer is read), else unparseable
            refused = probs is None and declined(res)
            return OptionProbs(probs=probs, mass=mass, method="logprobs", n_unparseable=int(probs is None and not refused),
                               n_refused=int(refused), raw_texts=[res.text[:200]])
        if res.finish_reason in FILTER_FINISH_REASONS:  # stopped by the provider's safety system: the LMRA
            # declined (break-it finding: read as an endpoint without log-probabilities, asked 6 times,
            # with the advice to start llama.cpp with --logits_all)
            return OptionProbs(probs=None, mass=0.0, method="logprobs", n_unparseable=0, n_refused=1,
                               raw_texts=[res.text[:200]])
        # no log-probabilities after the provider's retries (an endpoint that dropped them, or
        # ignores the request): estimated by sampling, as for a provider without them
        # (methodology §2 step 2) — not read as the greedy answer's one letter, a 0/1 answer that
        # pushes a pair to an extreme under min (statistics review: 30 % such answers, +60 %)
        return await _sampled(provider, messages, options, judge, base_seed, seed_parts)
    return await _sampled(provider, messages, options, judge, base_seed, seed_parts)


async def _sampled(provider: Provider, messages: list[Message], options: tuple[str, ...], judge: JudgeConfig,
                   base_seed: int, seed_parts: tuple) -> OptionProbs:
    """The ``sampled`` answer of :func:`ask_options`: ``judge.n_samples`` draws, each parsed."""
    counts = {o: 0 for o in options}
    texts = []
    unparseable = refused = 0
    for i in range(judge.n_samples):
        # each draw its own seed (break-it finding: one seed for all n draws made a seeded server —
        # vLLM, llama.cpp, OpenAI's best-effort seed — answer n identical copies, a 0/1 "estimate");
        # draw 0 keeps the question's seed, so its cache key is the one earlier versions wrote
        req = ChatRequest(messages=messages, temperature=judge.temperature, max_tokens=judge.max_tokens,
                          seed=base_seed if i == 0 else derive_seed("judge", *seed_parts, "sample", i), sample_index=i)
        res = await provider.complete(req)
        texts.append(res.text[:200])
        opt = parse_option(res.text, options)
        if opt is not None:
            counts[opt] += 1
        elif declined(res):
            refused += 1
        else:
            unparseable += 1
    probs, mass = renormalise({o: c / judge.n_samples for o, c in counts.items()}, options)
    if mass < judge.min_answer_mass:  # too few samples named an option to read one from them
        probs = None
    return OptionProbs(probs=probs, mass=mass, method="sampled", n_samples=judge.n_samples,
                       n_unparseable=unparseable, n_refused=refused, raw_texts=texts)
