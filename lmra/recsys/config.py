"""Pydantic models for ``lmra recsys``: the only place where its defaults live.

A config is a TOML file; every field has a default and a description, unknown fields are
rejected, and :func:`load_recsys_config` turns any problem into an
:class:`~lmra.errors.LmraInputError` naming the file, line and field (same conventions as
:mod:`lmra.config`).
"""

from __future__ import annotations

import unicodedata

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, PlainValidator, field_validator, model_validator

from lmra.config import (MAX_PAIRS, MAX_SEED, MIN_SEED, ModelConfig, OutputPathOrBlank, _concurrency_value, _Strict,
                         load_toml_model, validate_model)
from lmra.recsys.instructions import FAIRLLM_ATTRIBUTES
from lmra.errors import LmraInputError


class RecsysModelConfig(ModelConfig):
    """The target of a recommendation-fairness run: :class:`lmra.config.ModelConfig` with
    FaiRLLM's decoding as the defaults of a ``[target]`` table too (the benchmark decodes
    greedily, temperature 0; 20 titles need a few hundred tokens), so that naming the model
    does not switch to an audit's sampling defaults (temperature 1, 160 tokens)."""

    temperature: float = Field(0.0, ge=0.0, le=2.0,
                               description="Sampling temperature (recsys: 0, greedy, as in FaiRLLM).")
    max_tokens: int = Field(400, ge=1, le=32768,
                            description="Maximum tokens per answer (recsys: 400, room for 20 titles).")


def _no_repeat(items: list[str], what: str, why: str = "", key=lambda x: x) -> None:
    """Raise ValueError naming the first item of ``items`` that repeats an earlier one (the same
    ``key(item)``: e.g. the same name written in another case)."""
    seen: dict = {}
    for x in items:
        k = key(x)
        if k in seen:
            same = "" if seen[k] == x else f" (as '{seen[k]}')"
            raise ValueError(f"{what} repeats '{x}'{same}{why}")
        seen[k] = x


def _name_key(name: str) -> str:
    """A seed name as one person: NFKC, format characters (zero-width spaces …) dropped, runs of
    spaces as one, case folded (break-it findings: "Adele"/"adele ", "Taylor  Swift", "Ade\u200ble")."""
    text = "".join(ch for ch in unicodedata.normalize("NFKC", name) if unicodedata.category(ch) != "Cf")
    return " ".join(text.split()).casefold()


#: Largest cut-off K (list length) accepted anywhere (the metrics' work grows with the lists'
#: lengths squared and linearly with K; see lmra.recsys.metrics.score_pairs).
MAX_K = 200
#: permutations of the SNSR/SNSV test per attribute by default (p-values in steps of 1/2000), and at most
DEFAULT_PERMUTATIONS = 1999
MAX_PERMUTATIONS = 100_000


class FairLLMConfig(_Strict):
    """FaiRLLM benchmark instructions (FaiRLLM §3)."""

    domain: Literal["music", "movie"] = Field("music", description="'music' (singers) or 'movie' (directors).")
    names: str | None = Field(
        None,
        description="CSV of seed names (default: the shipped prompts/recsys/fairllm/singers.csv or directors.csv).")
    names_column: str | None = Field(None, description="Name column in the CSV (default: 'name', else 'Director').")
    n_names: int = Field(500, ge=0, le=MAX_PAIRS, description="Use the first n names of the file (FaiRLLM: 500; 0 = all).")
    names_list: list[str] = Field(default_factory=list, description="Explicit seed names (overrides names/n_names).")
    attributes_file: str = Field("prompts/recsys/fairllm/sensitive_attributes.json",
                                 description="JSON {attribute: [phrases]} (FaiRLLM's sst_json format).")
    attributes: list[str] = Field(default_factory=lambda: list(FAIRLLM_ATTRIBUTES),
                                  description="Attributes to test (default: the benchmark's 8).")
    values: dict[str, list[str]] = Field(
        default_factory=dict,
        description="Optional subset of phrases per attribute, e.g. {gender = ['a boy', 'a girl']}.")
    intersections: list[list[str]] = Field(
        default_factory=list, description="Attribute combinations for intersectional groups, e.g. [['age', 'gender']].")
    neutral_template: str | None = Field(
        None, description="Template name in prompts/recsys/ or a path (default by domain).")
    sensitive_template: str | None = Field(None, description="Template name in prompts/recsys/ or a path.")

    @field_validator("names_list")
    @classmethod
    def _names(cls, v: list[str]) -> list[str]:
        if any(not n.strip() for n in v):
            raise ValueError("names_list contains an empty name")
        from lmra.data import check_text

        for n in v:  # a name reaches the model's prompt (break-it finding, s35: a NUL was sent)
            check_text(n, f"names_list name {n!r}", format_chars=True)  # (Cf: a zero-width space is a duplicate)
        # one person however written (break-it finding: "Adele" and "adele " made two instruction families)
        _no_repeat(v, "names_list", " (each name is one instruction family; case and surrounding spaces aside)",
                   key=_name_key)
        return v

    @field_validator("attributes")
    @classmethod
    def _attributes(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError("attributes is empty: give at least one sensitive attribute to compare with neutral")
        if any(not a.strip() for a in v):
            raise ValueError("attributes contains an empty name")
        if "neutral" in v:
            raise ValueError("'neutral' is not a sensitive attribute (the neutral list is always sent)")
        _no_repeat(v, "attributes")
        return v

    @field_validator("values")
    @classmethod
    def _values(cls, v: dict[str, list[str]]) -> dict[str, list[str]]:
        for a, vals in v.items():
            if not vals:
                raise ValueError(f"values.{a} is empty (leave the attribute out of values to use all its phrases)")
            _no_repeat(vals, f"values.{a}")
        return v

    @field_validator("intersections")
    @classmethod
    def _pairs(cls, v: list[list[str]]) -> list[list[str]]:
        seen: dict[frozenset, list[str]] = {}
        for combo in v:
            if len(combo) < 2 or len(set(combo)) != len(combo):
                raise ValueError("each intersection lists two or more different attributes")
            if frozenset(combo) in seen:
                # the same users in another word order: the calls twice, one group counted as two
                raise ValueError(f"intersection {combo} repeats {seen[frozenset(combo)]} (the same attributes in "
                                 "another order; the order only sets the order of the phrases in the prompt)")
            seen[frozenset(combo)] = combo
        return v


class CFairLLMConfig(_Strict):
    """CFaiRLLM on MovieLens-format data (Deldjoo & Di Noia 2024, §3–4)."""

    data: str = Field("examples/movielens_sample",
                      description="Folder with ratings.dat, movies.dat, users.dat (point it at the real ML-1M folder).")
    encoding: str = Field("latin-1", description="Text encoding of the .dat files (ML-1M is ISO-8859-1).")
    n_users: int = Field(100, ge=0, le=MAX_PAIRS, description="Audit this many users (seeded choice; 0 = all).")
    strategy: Literal["random", "top-rated", "recent"] = Field("top-rated", description="Profile sampling strategy.")
    profile_size: int = Field(10, ge=1, le=200, description="Items per profile (N).")
    passion_profile: bool = Field(True, description="Add the favourite-genres/year-range sentence.")
    like_threshold: int = Field(
        4, ge=1, le=5, description="Ratings ≥ this count as liked (passion profile, true preference).")
    split: list[float] = Field(default_factory=lambda: [0.8, 0.1, 0.1], description="Per-user train/valid/test shares.")
    split_method: Literal["random", "temporal"] = Field("random", description="Seeded random or temporal split.")
    attributes: list[Literal["gender", "age"]] = Field(
        default_factory=lambda: ["gender", "age"],
        description="Recorded user attributes injected in sensitive prompts.")
    intersectional: bool = Field(True, description="Also send the gender × age intersectional prompt.")
    bias_groups: list[Literal["gender", "age"]] = Field(
        default_factory=lambda: ["gender"], description="User attributes defining groups for bias disparity.")
    drop_profile_items: bool = Field(
        True, description="Leave out listed movies that are in the user's own prompt profile (the prompt asks for "
                          "other movies); they are counted as profile echoes either way.")
    unprotected: str | None = Field(
        "male", description="Unprotected group G_U of the average disparity (Mansoury et al. 2019, eq. 4).")
    protected: str | None = Field(
        "female", description="Protected group G_P of the average disparity (Mansoury et al. 2019, eq. 4).")

    @field_validator("split")
    @classmethod
    def _split(cls, v: list[float]) -> list[float]:
        if len(v) != 3 or any(x < 0 for x in v) or abs(sum(v) - 1) > 1e-6:
            raise ValueError("split must be three non-negative shares summing to 1, e.g. [0.8, 0.1, 0.1]")
        if v[0] == 0 or v[2] == 0:
            raise ValueError("split needs a train share (profiles) and a test share (true preference) above 0")
        return v

    @field_validator("encoding")
    @classmethod
    def _encoding(cls, v: str) -> str:
        import codecs

        try:
            codecs.lookup(v)
        except LookupError:
            raise ValueError(f"unknown text encoding '{v}' (e.g. 'latin-1', 'utf-8')") from None
        return v

    @field_validator("attributes", "bias_groups")
    @classmethod
    def _no_repeats(cls, v: list[str]) -> list[str]:
        _no_repeat(v, "the list")
        return v

    @model_validator(mode="after")
    def _labels(self) -> "CFairLLMConfig":
        if (self.unprotected is None) != (self.protected is None):
            raise ValueError("set both unprotected and protected (or neither)")
        if self.unprotected is not None and self.unprotected == self.protected:
            raise ValueError(f"unprotected and protected are both '{self.protected}': the average disparity "
                             "compares two different groups")
        return self


class MatchingConfig(_Strict):
    """Optional fuzzy matching of parsed titles to a catalog (methodology §6)."""

    catalog: str | None = Field(
        None, description="Catalog file: a CSV with a 'title' column (optional 'id'), or a MovieLens movies.dat. "
        "cfairllm mode always matches to its movies.dat.")
    threshold: float = Field(90.0, ge=0, le=100, description="Minimum RapidFuzz score (0-100) for a match.")
    scorer: Literal["ratio", "token_sort_ratio", "token_set_ratio", "partial_ratio", "WRatio"] = Field(
        "ratio", description="RapidFuzz scorer.")
    use_matches: bool = Field(
        True,
        description="Compare lists by matched catalog ids when a catalog is used (unmatched titles keep their key).")


class RecsysConfig(_Strict):
    """A recommendation-fairness run (methodology §6, §7)."""

    name: str = Field("recsys", pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$", max_length=100,
                      description="Run name (letters, digits, '.', '_', '-'); the run folder is "
                                  "reports/<timestamp>-<name>.")
    mode: Literal["fairllm", "cfairllm"] = Field(
        "fairllm", description="'fairllm' (seed names) or 'cfairllm' (MovieLens users). A [cfairllm] table in a "
        "'fairllm' config is an input error (a forgotten mode line would run FaiRLLM).")
    target: RecsysModelConfig = Field(
        default_factory=RecsysModelConfig, description="The chatbot under audit (greedy by default).")
    k: int = Field(20, ge=1, le=MAX_K, description="List length asked for and largest cut-off K.")
    convention: Literal["paper", "paper-k", "fairllm-code"] = Field(
        "paper", description="Metric convention: 'paper' (lists shorter than K normalised by the longer list's "
                             "length), 'paper-k' (normalised by K, literally) or 'fairllm-code' (the authors' "
                             "released code); see docs/recsys.md.")
    parser: Literal["lmra", "fairllm-code"] = Field(
        "lmra", description="'lmra' (robust parser + normalisation) or 'fairllm-code' (the authors' released parsing).")
    seed: int = Field(0, ge=MIN_SEED, le=MAX_SEED,
                      description="Seed for user choice, splits, random profiles, sampled decoding and the "
                                  "permutation test (64-bit).")
    permutations: int = Field(DEFAULT_PERMUTATIONS, ge=0, le=MAX_PERMUTATIONS,
                              description="Permutations of the test of SNSR and SNSV per attribute (p-values in "
                                          "steps of 1/(permutations + 1)); 0 = no test.")
    concurrency: Annotated[int | Literal["auto"], PlainValidator(_concurrency_value)] = Field(
        "auto", description="Maximum model calls in flight, or 'auto' (as in an audit): with requests_per_minute or "
        "tokens_per_minute, limit × observed latency × 1.25 calls in flight (at most max_concurrency or 256); "
        "without, max_concurrency, else the calls the provider serves at once (the embedded model: 34 on 2 cores), "
        "else 2.")
    output_dir: OutputPathOrBlank = Field(
        "reports", description="Folder under which run folders are written ('~' is your home folder; an "
        "environment variable such as $HOME is refused, not expanded).")
    cache: OutputPathOrBlank = Field("reports/cache.sqlite",
                              description="SQLite call cache shared by runs ('~' expanded; $VARIABLES refused).")
    fairllm: FairLLMConfig = Field(
        default_factory=FairLLMConfig, description="FaiRLLM instructions (mode = 'fairllm').")
    cfairllm: CFairLLMConfig = Field(default_factory=CFairLLMConfig, description="MovieLens users (mode = 'cfairllm').")
    matching: MatchingConfig = Field(
        default_factory=MatchingConfig, description="Fuzzy matching of titles to a catalog.")

    @model_validator(mode="after")
    def _check(self) -> "RecsysConfig":
        if self.mode == "cfairllm" and self.parser != "lmra":
            raise ValueError("cfairllm mode matches titles to movies.dat and needs parser = 'lmra'")
        return self


def parse_recsys_config(data: dict[str, Any], *, source: str | Path = "<config>", text: str = "") -> RecsysConfig:
    """Validate a recsys config mapping; errors name the file, line and field.

    Raises:
        LmraInputError: on any unknown or invalid field.
    """
    return validate_model(RecsysConfig, data, source=source, text=text, docs="docs/recsys.md")


def load_recsys_config(path: str | Path | None) -> RecsysConfig:
    """Read and validate a recsys config TOML file (None = all defaults, i.e. the full
    FaiRLLM music benchmark; the CLI uses the shipped ``examples/recsys.toml`` instead).

    Raises:
        LmraInputError: missing file, TOML syntax error (with line) or invalid field.
    """
    if path is None:
        return RecsysConfig()
    cfg = load_toml_model(RecsysConfig, path, docs="docs/recsys.md")
    if cfg.mode == "fairllm" and Path(path).is_file():
        # (break-it finding, s47: a [cfairllm] table without mode = "cfairllm" was read as FaiRLLM, the table
        # ignored without a word — a forgotten mode line)
        import tomllib

        text = Path(path).read_text(encoding="utf-8-sig")  # (read and parsed once already: valid TOML)
        if "cfairllm" in tomllib.loads(text):
            at = next((i for i, ln in enumerate(text.splitlines(), 1)
                       if ln.strip().startswith(("[cfairllm", "cfairllm"))), None)
            raise LmraInputError("a [cfairllm] table is read in mode = 'cfairllm' only, and this config's mode is "
                                 "'fairllm' (the default): set mode = \"cfairllm\", or remove the table", file=path,
                                 line=at, field="cfairllm")
    return cfg
