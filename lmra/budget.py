"""Cost and call budgets: a price table, token and cost accounting, and a clean stop before a limit.

* :class:`PriceTable` — USD per 1M input / output tokens per provider and model, loaded from a
  user-editable TOML file (default: the shipped ``prompts/prices.toml``, whose values are
  examples to edit).
* :func:`cost_of` — the estimated USD cost of one call's :class:`~lmra.providers.base.Usage`.
* :class:`Budget` — optional ``max_calls`` / ``max_cost`` limits plus a per-provider-and-model
  ledger of calls and tokens, fresh vs cached, and their estimated cost.
* :class:`BudgetedProvider` — wraps a :class:`~lmra.cache.CachedProvider`. Cached calls are
  free and never blocked. Before a *fresh* call it books the call and its worst-case cost
  (estimated prompt tokens + ``max_tokens`` at the output price); when that booking would pass
  a limit it raises :class:`BudgetExceeded` instead of calling. After the call the booking is
  replaced by the real usage.

The stop is sticky: once a limit is hit every further fresh call raises the same
:class:`BudgetExceeded`, so concurrent work stops at once, while cached calls still succeed.
Calls that finished before the stop are in the cache (the run writes the cache's last
batch before it ends), so re-running with a higher limit resumes from there. The refusal never reaches the cache
layer, so :attr:`lmra.cache.CallStats.failed` counts provider failures only.

Wrapping order for one model::

    BudgetedProvider(CachedProvider(RateLimitedProvider(provider), cache, stats), budget)
"""

from __future__ import annotations

import fnmatch
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lmra.errors import LmraInputError, find_key_line, read_toml
from lmra.providers.base import ChatRequest, ChatResult, Provider, Usage, billed_usage, wrap_identity
from lmra.providers.ratelimit import estimate_prompt_tokens

PER_TOKENS = 1_000_000  # prices are USD per this many tokens


@dataclass(frozen=True)
class Price:
    """Price of one model in USD per 1M tokens (both ≥ 0)."""

    input: float
    output: float


def missing_price_words(prices: "PriceTable", provider: str, model: str, role: str, max_cost: float,
                        caller: str = "the audit") -> str:
    """Why a cost limit cannot be kept: ``prices`` has no price for ``model`` under ``provider``
    (the ``role``'s model), and what to do — add it to the user's own table, or, when the table is
    the one lmra ships, give a table of one's own (``prices = "my_prices.toml"``) rather than edit
    the installed file."""
    from lmra.resources import resource_dir

    own = resource_dir("prompts") / "prices.toml"
    try:  # lmra's own table, installed or a checkout's copy of it (read from the working folder's prompts/)
        shipped = Path(prices.source).resolve() == own.resolve() or Path(prices.source).read_bytes() == own.read_bytes()
    except OSError:
        shipped = False
    where = (f"lmra's shipped price table ({prices.source}) has no price for it: give a table of your own with "
             f"prices = \"my_prices.toml\" holding [prices.{provider}] \"{model}\" = {{ input = …, output = … }} "
             "(USD per 1M tokens; docs/config.md)" if shipped
             else f"the price table {prices.source} has no price for it: add [prices.{provider}] \"{model}\" there")
    return (f"max_cost = {max_cost:g} USD needs the price of every model {caller} calls, and the {role}'s, "
            f"provider '{provider}' model '{model}', is not priced — {where}, or drop the cost limit")


def require_priced(prices: "PriceTable", models: list[tuple[str, Any]], max_cost: float | None,
                   config_path: str | Path | None = None, caller: str = "the audit") -> None:
    """Before anything is written: with a cost limit set, check that ``prices`` prices every
    model a command will call — the limit is kept by pricing each call before it is made.

    Args:
        prices: the price table in force.
        models: ``(role, provider)`` pairs ("target", "judge", "judge2"); each provider's ``name``
            and ``model_id`` are looked up.
        max_cost: the cost limit in USD (None: no limit, nothing to check).
        config_path: the config file read, if any: the error names its ``max_cost`` line when the
            limit is the file's, else the option ``--max-cost`` that set or replaced it.
        caller: what calls the models, in the message ("the audit", "lmra axes").

    Raises:
        LmraInputError: a model without a price — naming the role, provider and model, the price
            table and what to do (:func:`missing_price_words`), and the field that set the limit.
    """
    if max_cost is None:
        return
    from lmra.config import config_sets

    for role, provider in models:
        if prices.lookup(provider.name, provider.model_id) is None:
            in_config = config_sets(config_path, "max_cost", max_cost)
            raise LmraInputError(missing_price_words(prices, provider.name, provider.model_id, role, max_cost, caller),
                                 file=config_path if in_config else None,
                                 field="max_cost" if in_config else "--max-cost")


class PriceTable:
    """USD prices per provider and model.

    Args:
        prices: ``{provider: {model id or glob pattern: Price}}``; within a provider the exact
            id wins, then the patterns in insertion (file) order.
        batch_multiplier: ``{provider: factor}`` applied to batch-API calls (e.g. 0.5); 1.0
            when a provider is absent.
        source: where the table came from (shown in messages).
    """

    def __init__(self, prices: dict[str, dict[str, Price]], batch_multiplier: dict[str, float] | None = None,
                 source: str = "<prices>"):
        self.prices = prices
        self.batch_multiplier = batch_multiplier or {}
        self.source = source
        self._found: dict[tuple[str, str], Price | None] = {}  # lookup's answers (the table is not changed)

    @classmethod
    def load(cls, path: str | Path | None = None) -> "PriceTable":
        """Read a price table TOML file (None = the shipped ``prompts/prices.toml``).

        Raises:
            LmraInputError: missing file (or not a regular file, e.g. ``/dev/null``), TOML
                syntax error, a table without any price, or a price that is not a
                non-negative number (message names the file, line and field).
        """
        from lmra.resources import resolve_resource

        p = resolve_resource(path or "prompts/prices.toml", "prompts")
        text, data = read_toml(p, "price table", field="prices")
        table = cls.from_dict(data, source=str(p), text=text)
        if not table.prices:
            raise LmraInputError("the price table has no prices: it needs [prices.<provider>] tables of "
                                 "model = { input = USD per 1M tokens, output = USD per 1M tokens } (see the shipped "
                                 "prompts/prices.toml)", file=p, field="prices")
        return table

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, source: str = "<prices>", text: str = "") -> "PriceTable":
        """Build a table from the TOML structure (see ``prompts/prices.toml``).

        Raises:
            LmraInputError: unknown top-level keys or invalid prices.
        """
        def bad(reason: str, key: str, section: str | None) -> LmraInputError:
            line = find_key_line(text, key, section) if text else None
            return LmraInputError(reason, file=source, line=line, field=f"{section}.{key}" if section else key)

        unknown = set(data) - {"prices", "batch_multiplier"}
        if unknown:
            k = sorted(unknown)[0]
            raise bad("unknown key (expected [prices.<provider>] tables and [batch_multiplier])", k, None)
        prices: dict[str, dict[str, Price]] = {}
        for provider, models in (data.get("prices") or {}).items():
            if not isinstance(models, dict):
                raise bad("must be a table of model = { input = …, output = … }", provider, "prices")
            prices[provider] = {}
            for model, entry in models.items():
                sec = f"prices.{provider}"
                if not isinstance(entry, dict) or set(entry) != {"input", "output"}:
                    raise bad("must be { input = USD per 1M tokens, output = USD per 1M tokens }", model, sec)
                vals = []
                for k in ("input", "output"):
                    v = entry[k]
                    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                        raise bad(f"'{k}' must be a non-negative number of USD per 1M tokens", model, sec)
                    vals.append(float(v))
                prices[provider][model] = Price(*vals)
        mult: dict[str, float] = {}
        for provider, v in (data.get("batch_multiplier") or {}).items():
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= 1:
                raise bad("must be a number in [0, 1]", provider, "batch_multiplier")
            mult[provider] = float(v)
        return cls(prices, mult, source)

    def lookup(self, provider: str, model: str) -> Price | None:
        """The price of ``model`` under ``provider``, or None when the table has none (found once
        per provider and model: every call of a run asks it)."""
        key = (provider, model)
        if key in self._found:
            return self._found[key]
        price = self._found[key] = self._lookup(provider, model)
        return price

    def _lookup(self, provider: str, model: str) -> Price | None:
        table = self.prices.get(provider)
        if not table:
            return None
        if model in table:
            return table[model]
        for pattern, price in table.items():
            if pattern != "*" and fnmatch.fnmatchcase(model, pattern):
                return price
        return table.get("*")


_DEFAULT_TABLE: PriceTable | None = None


def default_prices() -> PriceTable:
    """The shipped example price table (loaded once)."""
    global _DEFAULT_TABLE
    if _DEFAULT_TABLE is None:
        _DEFAULT_TABLE = PriceTable.load(None)
    return _DEFAULT_TABLE


def cost_of(usage: Usage, provider: str, model: str, *, prices: PriceTable | None = None,
            batch: bool = False) -> float | None:
    """Estimated USD cost of one call.

    Args:
        usage: its token counts.
        provider, model: the provider name and model id it went to.
        prices: price table (default: the shipped example table).
        batch: True for a call made through a batch API (the table's ``batch_multiplier``).

    Returns:
        ``(prompt_tokens·input + completion_tokens·output) / 1e6`` USD (× the batch
        multiplier), ≥ 0; None when the table has no price for this provider and model.
    """
    table = prices or default_prices()
    price = table.lookup(provider, model)
    if price is None:
        return None
    usd = (usage.prompt_tokens * price.input + usage.completion_tokens * price.output) / PER_TOKENS
    if batch:
        usd *= table.batch_multiplier.get(provider, 1.0)
    return usd


class BudgetExceeded(RuntimeError):
    """A fresh call was refused because it could pass a budget limit.

    Not a :class:`~lmra.providers.base.ProviderError`: the run stops instead of recording
    failed pairs. The message names the limit, e.g. ``"budget limit max_cost=2.0 USD …"``.

    Attributes:
        limit: ``"max_calls"`` or ``"max_cost"``.
        value: the configured limit (calls, or USD).
        used: calls made, or USD spent, when the call was refused (finished calls only).
        booked: calls or USD booked by calls still in flight.
        needed: what the refused call would have added (1 call, or its worst-case USD).
    """

    def __init__(self, limit: str, value: float, used: float, booked: float, needed: float):
        self.limit, self.value, self.used, self.booked, self.needed = limit, value, used, booked, needed
        if limit == "max_cost":
            def fmt(x):
                return f"{x:.4f} USD"
        else:
            def fmt(x):
                return f"{int(x)} call" + ("" if int(x) == 1 else "s")
        super().__init__(
            f"budget limit {limit}={fmt(value) if limit != 'max_cost' else f'{value:g} USD'} reached: {fmt(used)} "
            f"used, {fmt(booked)} in flight, next fresh call needs up to {fmt(needed)}. Finished calls are in the "
            f"cache; raise the limit and re-run to continue.")


@dataclass
class ModelLedger:
    """Calls, tokens and estimated cost of one provider and model during a run.

    ``cost_usd`` covers fresh calls (live and batch); None when the model has no price.
    ``cost_saved_usd`` is what the cached calls would have cost fresh.
    """

    provider: str
    model: str
    calls_fresh: int = 0
    calls_batch: int = 0
    calls_cached: int = 0
    calls_failed: int = 0
    prompt_tokens_fresh: int = 0
    completion_tokens_fresh: int = 0
    prompt_tokens_cached: int = 0
    completion_tokens_cached: int = 0
    cost_usd: float | None = 0.0
    cost_saved_usd: float | None = 0.0

    def as_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class Reservation:
    """A fresh call booked against a budget (see :meth:`Budget.reserve`); ``cost_usd`` is its
    worst-case cost (0 when the budget has no cost limit, which is the only use of it)."""

    provider: str
    model: str
    n_calls: int
    cost_usd: float
    batch: bool = False
    settled: bool = field(default=False, repr=False)


class Budget:
    """Limits on fresh calls and their cost, plus the run's token and cost ledger.

    Args:
        max_calls: at most this many fresh calls (live or batch, failed ones included,
            since a provider may bill them), ≥ 0; None = no limit.
        max_cost: at most this many estimated USD of fresh calls, ≥ 0; None = no limit.
        prices: price table (default: the shipped example table).

    Raises:
        ValueError: a negative limit.
    """

    def __init__(self, max_calls: int | None = None, max_cost: float | None = None,
                 prices: PriceTable | None = None):
        if max_calls is not None and max_calls < 0:
            raise ValueError("max_calls must be >= 0")
        if max_cost is not None and (max_cost < 0 or not math.isfinite(max_cost)):
            raise ValueError("max_cost must be a finite number >= 0")
        self.max_calls = max_calls
        self.max_cost = max_cost
        self.prices = prices or default_prices()
        self.calls_used = 0
        self.cost_used = 0.0
        self.calls_booked = 0
        self.cost_booked = 0.0
        self.exceeded: BudgetExceeded | None = None
        self._ledger: dict[tuple[str, str], ModelLedger] = {}

    # -- accounting ----------------------------------------------------------------------
    def ledger(self, provider: str, model: str) -> ModelLedger:
        """The ledger row of ``provider``/``model`` (created empty on first use)."""
        key = (provider, model)
        if key not in self._ledger:
            self._ledger[key] = ModelLedger(provider, model)
        return self._ledger[key]

    def require_price(self, provider: str, model: str) -> None:
        """Check that a cost limit can be enforced for this model.

        Raises:
            LmraInputError: ``max_cost`` is set and the price table has no price for it.
        """
        if self.max_cost is not None and self.prices.lookup(provider, model) is None:
            raise LmraInputError(
                f"no price for provider '{provider}' model '{model}', so max_cost cannot be enforced; add it "
                f"under [prices.{provider}] or drop the cost limit", file=self.prices.source)

    def estimate_cost(self, provider: str, model: str, prompt_tokens: int, max_output_tokens: int,
                      *, batch: bool = False) -> float:
        """Worst-case USD of a call (0 when unpriced and no cost limit is set).

        Raises:
            LmraInputError: unpriced model while ``max_cost`` is set.
        """
        self.require_price(provider, model)
        # trusted counts (an estimate ≥ 0 and a validated max_tokens): no validation on this per-call path
        c = cost_of(Usage.model_construct(prompt_tokens=prompt_tokens, completion_tokens=max_output_tokens), provider,
                    model, prices=self.prices, batch=batch)
        return c or 0.0

    def reserve(self, provider: str, model: str, requests: list[ChatRequest], *, batch: bool = False) -> Reservation:
        """Book fresh calls before making them.

        Args:
            provider, model: where the calls go.
            requests: the calls (one for a live call; all of a batch for a batch submission).
            batch: the calls go through a batch API (priced with the batch multiplier).

        Returns:
            A :class:`Reservation` to pass to :meth:`settle` (or :meth:`release`).

        Raises:
            BudgetExceeded: the calls could pass ``max_calls`` or ``max_cost`` (their worst-case
                cost: estimated prompt tokens plus ``max_tokens``), or a limit was already hit.
            LmraInputError: ``max_cost`` is set and the model has no price.
        """
        if self.exceeded is not None:
            raise self.exceeded
        n = len(requests)
        # the worst-case cost is only needed against a cost limit (the ledger books real usage)
        cost = 0.0 if self.max_cost is None else sum(
            self.estimate_cost(provider, model, estimate_prompt_tokens(r), r.max_tokens, batch=batch) for r in requests)
        if self.max_calls is not None and self.calls_used + self.calls_booked + n > self.max_calls:
            self.exceeded = BudgetExceeded("max_calls", self.max_calls, self.calls_used, self.calls_booked, n)
            raise self.exceeded
        if self.max_cost is not None and self.cost_used + self.cost_booked + cost > self.max_cost:
            self.exceeded = BudgetExceeded("max_cost", self.max_cost, self.cost_used, self.cost_booked, cost)
            raise self.exceeded
        self.calls_booked += n
        self.cost_booked += cost
        return Reservation(provider, model, n, cost, batch)

    def _unbook(self, r: Reservation) -> None:
        if r.settled:
            raise RuntimeError("reservation settled twice")
        r.settled = True
        self.calls_booked -= r.n_calls
        self.cost_booked -= r.cost_usd

    def release(self, r: Reservation) -> None:
        """Cancel a booking whose calls were not made (e.g. served from the cache after all)."""
        self._unbook(r)

    def settle(self, r: Reservation, usages: list[Usage], n_failed: int = 0) -> None:
        """Replace a booking by what the calls really used.

        Args:
            r: the booking from :meth:`reserve`.
            usages: the usage of each call that returned a result.
            n_failed: calls of the booking that failed (counted as calls, cost 0).
        """
        self._unbook(r)
        self.account(r.provider, r.model, usages, n_failed, batch=r.batch)

    def account(self, provider: str, model: str, usages: list[Usage], n_failed: int = 0, *,
                batch: bool = False) -> None:
        """Count finished fresh calls that were not booked here (e.g. batches downloaded
        after a restart). ``usages``: one per call with a result; ``n_failed``: calls without."""
        row = self.ledger(provider, model)
        row.calls_failed += n_failed
        self.calls_used += len(usages) + n_failed
        for u in usages:
            if batch:
                row.calls_batch += 1
            else:
                row.calls_fresh += 1
            row.prompt_tokens_fresh += u.prompt_tokens
            row.completion_tokens_fresh += u.completion_tokens
            c = cost_of(u, provider, model, prices=self.prices, batch=batch)
            if c is None:
                row.cost_usd = None
            else:
                self.cost_used += c
                if row.cost_usd is not None:
                    row.cost_usd += c

    def record_cached(self, provider: str, model: str, usage: Usage) -> None:
        """Count a call served from the cache (free; its would-be cost is recorded as saved)."""
        self.record_cached_calls(provider, model, (usage,))

    def record_cached_calls(self, provider: str, model: str, usages) -> None:
        """:meth:`record_cached` of each of ``usages`` in turn (one ledger row looked up: the pair
        memo's replay counts a pair's calls of one model at once; the same sums, in the same order)."""
        row = self.ledger(provider, model)
        for usage in usages:
            row.calls_cached += 1
            row.prompt_tokens_cached += usage.prompt_tokens
            row.completion_tokens_cached += usage.completion_tokens
            c = cost_of(usage, provider, model, prices=self.prices)
            if c is None:
                row.cost_saved_usd = None
            elif row.cost_saved_usd is not None:
                row.cost_saved_usd += c

    def report(self) -> dict:
        """JSON-able summary for ``manifest.json``: limits, use, stop reason, per-model ledger."""
        # a model without a price leaves the cost unknown whether its calls were fresh or cached
        # (fresh-user finding: a fresh run said "no price", its cached re-run "$0.0000")
        priced = all(r.cost_usd is not None and r.cost_saved_usd is not None for r in self._ledger.values())
        return {
            "max_calls": self.max_calls,
            "max_cost_usd": self.max_cost,
            "calls_used": self.calls_used,
            "cost_usd": self.cost_used if priced else None,
            "cost_usd_priced_models": self.cost_used,
            "stopped_by": self.exceeded.limit if self.exceeded else None,
            "stop_message": str(self.exceeded) if self.exceeded else None,
            "price_table": self.prices.source,
            "per_model": [r.as_dict() for r in self._ledger.values()],
        }


class BudgetedProvider:
    """Enforce a :class:`Budget` on fresh calls through a cached provider.

    Args:
        inner: a :class:`~lmra.cache.CachedProvider` (anything with its ``lookup(request)`` and
            ``complete(request, lookup=...)``); any other provider works too, but then every
            call is treated as fresh before it is made (a result with ``from_cache=True`` is
            still counted as cached afterwards).
        budget: the budget shared by all providers of the run.
        batch: count fresh calls as batch-API calls (batch prices).

    Attributes:
        name, model_id, base_url, supports_logprobs: those of ``inner``.
    """

    def __init__(self, inner: Provider, budget: Budget, *, batch: bool = False):
        self.budget = budget
        self.batch = batch
        wrap_identity(self, inner)  # inner, name, model_id, base_url, supports_logprobs
        #: the cache wrapper's one lookup per call (:meth:`lmra.cache.CachedProvider.lookup`), or None
        self._lookup = getattr(inner, "lookup", None)

    async def complete(self, request: ChatRequest) -> ChatResult:
        """Serve from the cache for free, or book, call and settle.

        Whether the call is cached is the cache wrapper's answer to its one lookup of the call
        (passed on to it, so the key is computed and the cache read once per call); the budget
        never reads the cache database itself. A budget without limits books nothing before the
        call and counts it after (the same ledger).

        Raises:
            BudgetExceeded: before a fresh call that could pass a limit (no call is made).
            LmraInputError: ``max_cost`` set and the model has no price.
            whatever ``inner`` raises (the booking is settled as one failed call).
        """
        lookup = self._lookup(request) if self._lookup is not None else None
        if lookup is not None and lookup.hit is not None:
            result = await self.inner.complete(request, lookup=lookup)
            self.budget.record_cached(self.name, self.model_id, result.usage)
            return result
        budget = self.budget
        if budget.max_calls is None and budget.max_cost is None:  # nothing to enforce: no booking
            try:
                result = await (self.inner.complete(request) if lookup is None
                                else self.inner.complete(request, lookup=lookup))
            except BaseException:
                budget.account(self.name, self.model_id, [], 1, batch=self.batch)
                raise
            if result.from_cache:  # an identical call finished meanwhile
                budget.record_cached(self.name, self.model_id, result.usage)
            else:
                budget.account(self.name, self.model_id, billed_usage(result), batch=self.batch)
            return result
        booking = self.budget.reserve(self.name, self.model_id, [request], batch=self.batch)
        try:
            result = await (self.inner.complete(request) if lookup is None
                            else self.inner.complete(request, lookup=lookup))
        except BaseException:
            self.budget.settle(booking, [], n_failed=1)
            raise
        if result.from_cache:  # an identical call finished meanwhile
            self.budget.release(booking)
            self.budget.record_cached(self.name, self.model_id, result.usage)
        else:
            self.budget.settle(booking, billed_usage(result))
        return result

    async def aclose(self) -> None:
        await self.inner.aclose()
