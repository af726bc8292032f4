"""Next-token reads on llama.cpp contexts that keep the KV cache of a shared prompt prefix.

An LMRA option read needs the logits of one position: the end of the prompt. Questions
about the same pair share everything up to the question, and every question of a template
shares its instructions, so a :class:`PrefixReader` keeps the KV cache of its previous
prompt and evaluates only what follows the longest shared prefix. A :class:`ReaderPool`
holds several readers (each its own context, one thread each by default) so that reads run
side by side on several cores, and gives each read the free reader whose previous prompt
shares the longest prefix with it.

Evaluating a prompt in two parts (cached prefix + rest) instead of one changes float
rounding slightly (measured by ``bench/bench_prefix_reuse.py``); which part a read reuses
depends on the reads before it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import numpy as np


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
        self.reuse_prefix = True  # False: evaluate every prompt from scratch (benchmarks)
        self.reads = 0  # prompts read, and tokens evaluated for them (the rest came from the KV cache)
        self.evaluated = 0
        self._batch = llama_cpp.llama_batch_init(n_batch, 0, 1)

    def shared_prefix(self, toks: Sequence[int]) -> int:
        """Length of the prefix ``toks`` shares with the prompt held in the KV cache."""
        n = 0
        for a, b in zip(self.tokens, toks):
            if a != b:
                break
            n += 1
        return n

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


class ReaderPool:
    """Readers working side by side; :meth:`reader` lends the best free one.

    Args:
        readers: the pool's readers (≥ 1).
    """

    def __init__(self, readers: Sequence[PrefixReader]):
        self.readers = list(readers)
        self._free = list(self.readers)
        self._cond = threading.Condition()

    @contextmanager
    def reader(self, toks: Sequence[int]) -> Iterator[PrefixReader]:
        """Wait for a free reader and lend the one sharing the longest prefix with ``toks``."""
        with self._cond:
            while not self._free:
                self._cond.wait()
            best = max(self._free, key=lambda r: r.shared_prefix(toks))
            self._free.remove(best)
        try:
            yield best
        finally:
            with self._cond:
                self._free.append(best)
                self._cond.notify()

    def close(self) -> None:
        """Close every reader (none may be lent out)."""
        for r in self.readers:
            r.close()
