"""Model backends behind one protocol (:class:`~lmra.providers.base.Provider`).

:func:`make_provider` builds one from a :class:`~lmra.config.ModelConfig`: ``llamacpp``
(in-process, the embedded default), ``openai``, ``anthropic``, or a custom provider given
as an import path ``"package.module:factory"``; the factory is called with the
``ModelConfig`` and must return an object satisfying the protocol, which is then wrapped in
a :class:`~lmra.providers.deadline.DeadlineProvider` (each call fails after ``timeout_s``).
"""

from __future__ import annotations

import importlib
import inspect

from lmra.config import ModelConfig
from lmra.errors import LmraInputError
from lmra.providers.base import ChatRequest, ChatResult, Message, Provider, ProviderError, Usage, parallel_capacity

__all__ = ["ChatRequest", "ChatResult", "Message", "Provider", "ProviderError", "Usage", "make_provider"]


def max_temperature(cfg: ModelConfig) -> float | None:
    """The largest sampling temperature the provider a config names accepts (the Anthropic
    Messages API: 1.0), or None when lmra knows no limit below the config's own (2.0)."""
    if cfg.provider == "anthropic":
        from lmra.providers.anthropic import AnthropicProvider

        return AnthropicProvider.MAX_TEMPERATURE
    return None


def is_embedded_model(cfg: ModelConfig) -> bool:
    """Whether a config names the embedded model (Gemma 3 270M, a *base* model, in-process):
    provider ``llamacpp`` with no model path (or ``"embedded"``) — without loading it."""
    return cfg.provider == "llamacpp" and cfg.model in (None, "", "embedded")


def make_provider(cfg: ModelConfig, *, field: str = "target") -> Provider:
    """Instantiate the provider a config names.

    Returns:
        the built-in provider, or the custom factory's provider wrapped in a
        :class:`~lmra.providers.deadline.DeadlineProvider` with ``cfg.timeout_s`` (the
        built-in ones bound their calls themselves).

    Raises:
        LmraInputError: unknown provider, a custom import path that does not import, or a
            factory whose result lacks the protocol's attributes or has an invalid
            ``parallel_capacity``.
    """
    try:
        if cfg.provider == "llamacpp":
            from lmra.providers.llamacpp import LlamaCppProvider

            return LlamaCppProvider.shared(cfg)
        if cfg.provider == "openai":
            from lmra.providers.openai import OpenAIProvider

            return OpenAIProvider(cfg)
        if cfg.provider == "anthropic":
            from lmra.providers.anthropic import AnthropicProvider

            return AnthropicProvider(cfg)
    except LmraInputError as exc:  # name which model of the config it is about
        if exc.field and (exc.field.startswith("LMRA_") or exc.field.endswith("_BASE_URL")):  # an environment
            raise  # variable: not the config's (review finding; break-it round 3: OPENAI_BASE_URL blamed a line)
        raise LmraInputError(exc.reason, file=exc.file, line=exc.line,
                             field=f"{field}.{exc.field}" if exc.field else field) from None
    module_name, _, attr = cfg.provider.partition(":")
    try:
        factory = getattr(importlib.import_module(module_name), attr)
    except (Exception, SystemExit, GeneratorExit) as exc:  # ImportError, SyntaxError, errors (or sys.exit) while importing …
        hint = ""
        if isinstance(exc, ModuleNotFoundError) and exc.name == module_name.split(".")[0]:
            # the module itself is not on the import path (not a module it imports): the 'lmra'
            # command does not look in the current folder, 'python -m lmra.cli' does
            hint = (f" — the module must be importable: put the folder holding {exc.name}.py on PYTHONPATH (e.g. "
                    f"PYTHONPATH=/path/to/that/folder lmra …; the 'lmra' command does not look in the current "
                    "folder; docs/providers.md)")
        raise LmraInputError(f"cannot load custom provider '{cfg.provider}': {type(exc).__name__}: {exc}{hint}",
                             field=f"{field}.provider") from None
    if not callable(factory):
        raise LmraInputError(f"custom provider '{cfg.provider}' is not callable", field=f"{field}.provider")
    try:
        provider = factory(cfg)
    except LmraInputError:
        raise
    except (Exception, SystemExit, GeneratorExit) as exc:  # (a sys.exit() in a factory ended lmra silently with
        # its status; a GeneratorExit, raised by mistake, went past every handler as a traceback)
        raise LmraInputError(f"custom provider factory '{cfg.provider}' raised {type(exc).__name__}: {exc}",
                             field=f"{field}.provider") from None
    try:
        is_provider = isinstance(provider, Provider)
    except Exception as exc:  # a property of the protocol (model_id …) that raises when read
        raise LmraInputError(f"custom provider '{cfg.provider}': reading its attributes raised "
                             f"{type(exc).__name__}: {exc}", field=f"{field}.provider") from None
    if not is_provider:
        if inspect.iscoroutine(provider):  # an ``async def`` factory: say so, without a "never awaited" warning
            provider.close()
            raise LmraInputError(f"custom provider factory '{cfg.provider}' is an async def: it must return the "
                                 "provider itself (a plain def factory; the provider's complete() is async)",
                                 field=f"{field}.provider")
        raise LmraInputError(
            f"custom provider '{cfg.provider}' returned {type(provider).__name__}, which lacks the Provider protocol "
            "(name, model_id, base_url, supports_logprobs, async complete(), async aclose()); see docs/providers.md",
            field=f"{field}.provider")
    problem = _identity_problem(provider)
    if problem:
        raise LmraInputError(f"custom provider '{cfg.provider}': {problem}; see docs/providers.md",
                             field=f"{field}.provider")
    try:
        parallel_capacity(provider)
    except ValueError as exc:
        raise LmraInputError(f"custom provider '{cfg.provider}': {exc}; see docs/providers.md",
                             field=f"{field}.provider") from None
    from lmra.providers.deadline import DeadlineProvider

    wrapped = DeadlineProvider(provider, cfg.timeout_s)
    wrapped.base_url = options_identity(wrapped.base_url, cfg.options)
    return wrapped


def options_identity(base_url: str, options: dict) -> str:
    """A custom provider's ``base_url`` as keyed and recorded: with ``#options=<digest>`` (the
    first 16 hex digits of the SHA-256 of ``options`` as sorted JSON) appended when the config
    gives the factory ``options`` — a changed route or deployment chosen through them is
    another model for the cache, the pair memo and the run's manifest (identity changes are
    shown by the nightly check), never served the old answers. ``base_url`` unchanged
    without options."""
    if not options:
        return base_url
    import hashlib
    import json

    text = json.dumps(options, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)
    return f"{base_url}#options={hashlib.sha256(text.encode('utf-8')).hexdigest()[:16]}"


def _identity_problem(provider: object) -> str | None:
    """What is wrong with a custom provider's identity and methods, or None: ``name`` and
    ``model_id`` non-empty strings, ``base_url`` a string or None (taken as ""), and
    ``supports_logprobs`` a bool — they go into every cache key and row. (A plain ``def
    complete`` is taken as it is: :class:`~lmra.providers.deadline.DeadlineProvider` awaits
    what it returns when that is awaitable.)"""
    for attr in ("name", "model_id"):
        value = getattr(provider, attr)
        if not isinstance(value, str) or not value:
            return f"{attr} must be a non-empty string (got {value!r})"
    base_url = getattr(provider, "base_url")
    if base_url is not None and not isinstance(base_url, str):
        return f"base_url must be a string or None (got {base_url!r})"
    if not isinstance(getattr(provider, "supports_logprobs"), bool):
        return f"supports_logprobs must be True or False (got {getattr(provider, 'supports_logprobs')!r})"
    return None
