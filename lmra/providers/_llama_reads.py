"""Next-token reads on llama.cpp contexts that keep the KV cache of a shared prompt prefix.

An LMRA option read needs the logits of one position: the end of the prompt. Questions
about the same pair share everything up to the question, and every question of a template
shares its instructions, so a :class:`PrefixReader` keeps the KV cache of its previous
prompt and evaluates only what follows the longest shared prefix. A :class:`ReaderPool`
runs several readers side by side (each its own context and worker thread, one llama.cpp
thread each by default); a reader that is free takes, among the oldest waiting reads, the
one sharing the longest prefix with the prompt it holds — so the two presentation orders of
a pair, or the quality criteria of a pair, tend to be read one after another on the same
context.

Evaluating a prompt in two parts (cached prefix + rest) instead of one can change float
rounding slightly (measured by ``bench/bench_prefix_reuse.py``); which part a read reuses
depends on the reads before it.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from lmra.providers._llama_futures import settle

#: A free reader chooses among this many of the oldest waiting reads.
WINDOW = 16


class PrefixReader:
    """One llama.cpp context (sequence 0) reading the logits after a prompt.

    Args:
        ctx: a ``llama_context`` pointer of the model (owned by the caller when ``owned`` is
            False, e.g. the context of a ``llama_cpp.Llama``; freed by :meth:`close` otherwise).
        n_vocab: vocabulary size (length of a logits row).
        n_batch: tokens per ``llama_decode`` call (the context's ``n_batch``).
        owned: free ``ctx`` on :meth:`close`.
    """

    def __init__(self, ctx, n_vocab: int, n_batch: int, *, owned: bool):
        import llama_cpp

        self._ll = llama_cpp
        self.ctx = ctx
        self.n_vocab = n_vocab
        self.n_batch = n_batch
        self.owned = owned
        self.tokens: list[int] = []  # the prompt whose KV cache the context holds
        self.target: list[int] = []  # the prompt being read, or the last one read (set by the pool)
        self.reuse_prefix = True  # False: evaluate every prompt from scratch (benchmarks)
        self.reads = 0  # prompts read, and tokens evaluated for them (the rest came from the KV cache)
        self.evaluated = 0
        self._batch = llama_cpp.llama_batch_init(n_batch, 0, 1)

    def shared_prefix(self, toks: Sequence[int]) -> int:
        """Length of the prefix ``toks`` shares with the prompt held in the KV cache."""
        return _common(self.tokens, toks)

    def logits(self, toks: Sequence[int]) -> np.ndarray:
        """float64 logits of the next token after ``toks`` (≥ 1 token, within the context).

        Raises:
            RuntimeError: ``llama_decode`` failed.
        """
        ll = self._ll
        common = min(self.shared_prefix(toks), len(toks) - 1) if self.reuse_prefix else 0
        ll.llama_memory_seq_rm(ll.llama_get_memory(self.ctx), 0, common, -1)
        self.tokens = list(toks[:common])
        b = self._batch
        for start in range(common, len(toks), self.n_batch):
            chunk = toks[start:start + self.n_batch]
            for i, tok in enumerate(chunk):
                b.token[i] = tok
                b.pos[i] = start + i
                b.n_seq_id[i] = 1
                b.seq_id[i][0] = 0
                b.logits[i] = 0
            b.logits[len(chunk) - 1] = 1
            b.n_tokens = len(chunk)
            rc = ll.llama_decode(self.ctx, b)
            if rc != 0:
                self.tokens = []
                ll.llama_memory_seq_rm(ll.llama_get_memory(self.ctx), 0, -1, -1)
                raise RuntimeError(f"llama_decode failed (status {rc}) on a prompt of {len(toks)} tokens")
            self.tokens.extend(chunk)
        self.reads += 1
        self.evaluated += len(toks) - common
        ptr = ll.llama_get_logits_ith(self.ctx, -1)
        return np.ctypeslib.as_array(ptr, shape=(self.n_vocab,)).astype(np.float64)

    def close(self) -> None:
        """Free the batch (and the context when owned)."""
        self._ll.llama_batch_free(self._batch)
        if self.owned:
            self._ll.llama_free(self.ctx)


@dataclass
class _Read:
    toks: list[int]
    order: int
    future: concurrent.futures.Future = field(default_factory=concurrent.futures.Future)
    passed_over: int = 0


class ReaderPool:
    """Readers working side by side on waiting reads (one worker thread per reader).

    Args:
        readers: the pool's readers (≥ 1).
    """

    def __init__(self, readers: Sequence[PrefixReader]):
        self.readers = list(readers)
        self._waiting: list[_Read] = []
        self._cond = threading.Condition()
        self._order = itertools.count()
        self._workers: list[threading.Thread] = []
        self._closed = False

    def submit(self, toks: Sequence[int]) -> concurrent.futures.Future:
        """Queue a read; its future gives the float64 logits after ``toks`` (or the error).

        Raises:
            RuntimeError: the pool is closed.
        """
        read = _Read(list(toks), next(self._order))
        with self._cond:
            if self._closed:
                raise RuntimeError("the reader pool is closed")
            if not self._workers:
                self._workers = [threading.Thread(target=self._run, args=(r,), name="lmra-llama-read", daemon=True)
                                 for r in self.readers]
                for w in self._workers:
                    w.start()
            self._waiting.append(read)
            self._cond.notify()
        return read.future

    def _take(self, reader: PrefixReader) -> _Read:
        """The waiting read for a free reader (called with the condition held, reads waiting).

        Among the :data:`WINDOW` oldest reads: first those that share no longer a prefix with
        the prompt another reader is reading (or read last) than with this reader's — the
        other presentation order of the pair another reader is busy with is left to it —
        then the longest prefix shared with this reader's prompt, then the oldest. The oldest
        read is taken once it has been passed over WINDOW times.
        """
        oldest = self._waiting[0]
        if oldest.passed_over >= WINDOW:
            best = oldest
        else:
            others = [r.target for r in self.readers if r is not reader]

            def score(read: _Read) -> tuple:
                own = reader.shared_prefix(read.toks)
                theirs = max((_common(t, read.toks) for t in others), default=0)
                return own >= theirs, own, -read.order

            best = max(self._waiting[:WINDOW], key=score)
        self._waiting.remove(best)
        if best is not oldest:
            oldest.passed_over += 1
        reader.target = best.toks
        return best

    def _run(self, reader: PrefixReader) -> None:
        while True:
            with self._cond:
                while not self._waiting and not self._closed:
                    self._cond.wait()
                if not self._waiting:
                    return
                read = self._take(reader)
            if read.future.cancelled():
                continue
            try:
                result = reader.logits(read.toks)
            except BaseException as exc:  # noqa: BLE001 — the caller gets the error
                settle(read.future, error=exc)
            else:
                settle(read.future, result)

    def close(self) -> None:
        """Fail the waiting reads, let the running ones finish, stop the workers and close the
        readers."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            waiting, self._waiting = self._waiting, []
            self._cond.notify_all()
        for read in waiting:
            settle(read.future, error=RuntimeError("the reader pool was closed before this read"))
        for w in self._workers:
            w.join()
        for r in self.readers:
            r.close()


def _common(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the common prefix of two token lists."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n
