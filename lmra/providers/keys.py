"""API keys: where a model's key comes from, and what happens when its endpoint rejects it.

* :func:`resolve_api_key` — the key an SDK provider sends. A key is needed unless the config
  says ``api_key_required = false`` (a local server that needs none); a needed key whose
  variable is unset or blank is an input error (exit status 2) raised when the provider is
  built, i.e. by ``lmra validate`` and by ``lmra audit`` before anything is written — with or
  without ``base_url``.
* :func:`resolve_base_url` — the endpoint an SDK provider calls, as lmra records it: the config's
  ``base_url``, else the SDK's own environment variable (``OPENAI_BASE_URL``,
  ``ANTHROPIC_BASE_URL``) when set, else ``""`` (the SDK's default endpoint).
* :class:`KeyGuard` — an audit's wrapper around one model (target, judge, judge2): the first
  call that fails with kind ``auth`` (HTTP 401/403) stops the run with :class:`KeyRejected`
  instead of recording thousands of failed pairs; later calls through the same guard fail at
  once without reaching the server.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from lmra.errors import LmraInputError
from lmra.providers.base import ChatRequest, ChatResult, Provider, ProviderError, wrap_identity

if TYPE_CHECKING:
    from lmra.config import ModelConfig

#: the key an SDK is given when the config says the endpoint needs none (the SDKs refuse an
#: empty key; such servers ignore it)
NO_KEY_PLACEHOLDER = "no-key-needed"


def resolve_api_key(cfg: "ModelConfig", provider: str, default_env: str) -> tuple[str, str]:
    """The key a provider sends, and words naming where it came from (for error messages).

    Args:
        cfg: the model's config: ``api_key_env`` (the variable, default ``default_env``) and
            ``api_key_required`` (False: the endpoint needs no key; only with ``base_url``).
        provider: the provider name, for the message (``openai``, ``anthropic``).
        default_env: the SDK's own variable (``OPENAI_API_KEY``, ``ANTHROPIC_API_KEY``).

    Returns:
        (key, source): e.g. ``("sk-…", "the key in OPENAI_API_KEY")``, or
        ``(NO_KEY_PLACEHOLDER, "no key (api_key_required = false)")``.

    Raises:
        LmraInputError: a key is needed and its variable is unset or blank, or holds a key
            that cannot be sent (whitespace, control or non-ASCII characters:
            :func:`unusable_key_reason`) (field ``api_key_env``; the message names the variable,
            never the key, and how to declare a keyless local server).
    """
    if not cfg.api_key_required:
        return NO_KEY_PLACEHOLDER, "no key (the config says api_key_required = false)"
    env = cfg.api_key_env or default_env
    key = os.environ.get(env, "")
    if not key.strip():
        where = f"the endpoint {cfg.base_url}" if cfg.base_url else f"the {provider} API"
        default = "" if cfg.api_key_env else f" (the default of provider '{provider}'; set api_key_env to use another)"
        state = "is empty" if env in os.environ else "is not set"
        keyless = (", or, if this local server needs no key, write api_key_required = false in this model's "
                   "section") if cfg.base_url else (
            "; a local or in-house endpoint needs its base_url in the model's section of a config "
            "('--target/--judge PROVIDER:MODEL' keep a section's base_url only when its provider is the same)")
        # (s48 fresh user: --target openai:MODEL for a local server)
        raise LmraInputError(
            f"environment variable {env}{default} {state}, and {where} needs an API key: export {env} in the "
            f"environment that runs lmra (cron and CI jobs do not read your shell profile){keyless}",
            field="api_key_env")
    bad = unusable_key_reason(key)
    if bad:
        raise LmraInputError(
            f"environment variable {env} holds a key that cannot be sent: it {bad}. An HTTP header carries only "
            f"visible ASCII characters; export {env} again without them (e.g. no newline at the end of a key read "
            "from a file)", field="api_key_env")
    return key, f"the key in {env}"


#: the SDKs' own endpoint variables, which they follow when no base_url is given
BASE_URL_ENV = {"openai": "OPENAI_BASE_URL", "anthropic": "ANTHROPIC_BASE_URL"}


def resolve_base_url(cfg: "ModelConfig", env: str) -> str:
    """The endpoint a provider calls, as lmra records it — in the call cache's keys, the manifest,
    the comparability checks and messages: the config's ``base_url``; else the SDK's environment
    variable ``env`` (``OPENAI_BASE_URL``, ``ANTHROPIC_BASE_URL``), which the SDK would follow,
    when it is set (fresh-user finding: it redirected ``--target openai:MODEL`` to another server
    while the manifest said ``base_url: ""``, so a staging and a production endpoint shared cache
    answers and read as one chatbot); else ``""`` (the SDK's default endpoint). Pass the result to
    the SDK as its ``base_url`` (None for ``""``).

    Raises:
        LmraInputError: the variable is set but blank (the SDK would call ``""``), or holds what
            ``base_url`` may not (not an http(s) URL, a look-alike character, a user name or
            password; :func:`lmra.config.ModelConfig`'s rules), naming the variable (the error's field).
    """
    if cfg.base_url:
        return cfg.base_url
    if env not in os.environ:
        return ""
    value = os.environ[env].strip()
    if not value:  # (break-it finding: the SDK called '' — "unreachable", blaming a base_url the config had not)
        raise LmraInputError(f"environment variable {env} is set but blank: the SDK would call that instead of its "
                             f"default endpoint; unset it (unset {env}), or give base_url in the config", field=env)
    from lmra.config import check_base_url

    try:
        return check_base_url(value)
    except ValueError as exc:
        raise LmraInputError(f"environment variable {env} (which the SDK would call instead of its default "
                             f"endpoint): {exc}; fix or unset it, or give base_url in the config", field=env) from None


def unusable_key_reason(key: str) -> str | None:
    """Why ``key`` cannot be sent in an HTTP ``Authorization`` header, or None when it can.

    A header value must be visible ASCII (``!`` to ``~``): a key with whitespace (a newline
    left by ``$(cat keyfile)`` or an env file), a control character or a non-ASCII character
    makes every call fail (a connection error or ``UnicodeEncodeError``). The words never
    contain the key itself.

    Returns:
        e.g. ``"contains whitespace (a newline at position 8 of 8)"``, or None.
    """
    for i, ch in enumerate(key, start=1):
        if "!" <= ch <= "~":
            continue
        names = {"\n": "a newline", "\r": "a carriage return", "\t": "a tab", " ": "a space"}
        if ch in names or ch.isspace():
            what = f"contains whitespace ({names.get(ch, f'U+{ord(ch):04X}')} at position {i} of {len(key)})"
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            what = f"contains a control character (U+{ord(ch):04X} at position {i} of {len(key)})"
        else:
            what = f"contains a non-ASCII character (U+{ord(ch):04X} at position {i} of {len(key)})"
        return what
    return None


class KeyRejected(RuntimeError):
    """An endpoint rejected a model's key (HTTP 401/403): the audit stops.

    Not a :class:`~lmra.providers.base.ProviderError`: the stages record ProviderErrors as
    failed pairs and go on, whereas no later call can succeed with a rejected key. The run's
    ``manifest.json`` gets status ``failed`` and this message as its ``stop_reason``; the CLI
    prints it and exits 1.

    Attributes:
        role: ``target``, ``judge`` or ``judge2``.
        error: the call's :class:`ProviderError` (kind ``auth``; its message names the
            variable, or says the config declared no key, and the endpoint).
    """

    def __init__(self, role: str, error: ProviderError):
        self.role = role
        self.error = error
        #: the account's quota is exhausted (HTTP 429 insufficient_quota), not a rejected key
        self.quota = error.kind == "quota"
        if self.quota:
            super().__init__(f"the {role}'s endpoint says its account's quota is exhausted, so lmra stopped at the "
                             f"first such call: {error}. Add credit or raise the quota (or use another key in "
                             f"[{role}]), then run the same command again; answered calls are kept in the cache")
            return
        super().__init__(f"the {role}'s endpoint does not accept its key, so lmra stopped at the first rejected "
                         f"call: {error}. Fix the key (or api_key_env / api_key_required in [{role}]) and run the "
                         "same command again; answered calls are kept in the cache")


class KeyGuard:
    """Stop an audit at the first call whose key the endpoint rejects.

    Args:
        inner: the model's provider chain (budget → cache → rate limit → backend); the
            cache below counts the failed call (kind ``auth``) like any other failure.
        role: ``target``, ``judge`` or ``judge2`` (named in the message).

    Attributes:
        name, model_id, base_url, supports_logprobs: those of ``inner``.
        rejected: the :class:`KeyRejected` raised, once a call was rejected (later calls
            raise it again without calling).
    """

    def __init__(self, inner: Provider, role: str):
        self.role = role
        wrap_identity(self, inner)  # inner, name, model_id, base_url, supports_logprobs
        self.rejected: KeyRejected | None = None

    async def complete(self, request: ChatRequest) -> ChatResult:
        """Call ``inner``.

        Raises:
            KeyRejected: this call, or an earlier one, failed with kind ``auth`` (or ``quota``: the
                account's quota is exhausted, HTTP 429 insufficient_quota).
            ProviderError: any other failure (recorded by the stages as a failed call).
        """
        if self.rejected is not None:
            raise KeyRejected(self.role, self.rejected.error)
        try:
            return await self.inner.complete(request)
        except ProviderError as exc:
            if exc.kind not in ("auth", "quota"):
                raise
            rejected = KeyRejected(self.role, exc)
            if self.rejected is None:
                self.rejected = rejected
            raise rejected from exc

    async def aclose(self) -> None:
        await self.inner.aclose()
