"""How llama.cpp loads a model on this CPU: without its AMX weight buffers where the CPU has AMX.

llama.cpp repacks a model's weights into "extra" buffer types when it loads them
(``llama_model_params.use_extra_bufts``, on by default): on a CPU with Intel AMX (Sapphire
Rapids and later Xeons) that is its AMX buffer, whose matrix product crashes the process with a
segmentation fault on the first decode on some of these machines (llama.cpp issue #20824, PR
#26954: worker threads run tile instructions without the kernel's per-thread AMX permission).
Seen here with llama-cpp-python 0.3.36 and the embedded Gemma 3 270M Q4_K_M on a 2-core
"Intel(R) Xeon(R) Processor" VM: ``llama_cpp.Llama(...).create_completion`` died at once; with
``use_extra_bufts = False`` it answers. So on a CPU whose ``/proc/cpuinfo`` flags name AMX,
lmra loads GGUF models with the extra buffer types off (the plain CPU buffers: no repacking);
elsewhere llama.cpp's default is kept. ``LMRA_LLAMA_EXTRA_BUFFERS=1`` keeps them on an AMX CPU
too (``0`` turns them off anywhere).

:func:`load_llama` builds a ``llama_cpp.Llama`` that way; ``python -m
lmra.providers.llama_server`` runs llama-cpp-python's OpenAI-compatible server that way.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Iterator

#: environment variable: "1" keeps llama.cpp's extra buffer types, "0" turns them off
EXTRA_BUFFERS_ENV = "LMRA_LLAMA_EXTRA_BUFFERS"

_AMX_FLAGS = frozenset({"amx_tile", "amx_int8", "amx_bf16"})
_patch_lock = threading.Lock()


def cpu_has_amx(cpuinfo: str = "/proc/cpuinfo") -> bool:
    """True when the CPU's ``flags`` line in ``cpuinfo`` names an AMX feature (``amx_tile``,
    ``amx_int8``, ``amx_bf16``); False when it names none or the file cannot be read (not Linux)."""
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.startswith("flags"):
                    return not _AMX_FLAGS.isdisjoint(line.partition(":")[2].split())
    except OSError:
        return False
    return False


def use_extra_buffers(cpuinfo: str = "/proc/cpuinfo") -> bool:
    """Whether llama.cpp may repack weights into its extra buffer types here: ``LMRA_LLAMA_EXTRA_BUFFERS``
    when set (on: ``1``, ``true``, ``yes``, ``on``; off: ``0``, ``false``, ``no``, ``off``), else
    not on a CPU with AMX (:func:`cpu_has_amx`), else yes.

    Raises:
        LmraInputError: the variable is set to anything else (:func:`lmra.envflags.env_switch`)."""
    from lmra.envflags import env_switch

    setting = env_switch(EXTRA_BUFFERS_ENV)
    if setting is not None:
        return setting
    return not cpu_has_amx(cpuinfo)


_local = threading.local()  # .extra_buffers: this thread's setting while model_params() lasts
_process_setting: list[bool | None] = [None]  # patch_process()'s setting, for every thread


def _install() -> None:
    """Wrap ``llama_cpp.llama_model_default_params`` (once per process) so that the params it
    returns get ``use_extra_bufts`` from this thread's :func:`model_params`, else from
    :func:`patch_process`, else llama.cpp's own default. The wrapper stays: nothing is swapped
    back and forth, so a load in another thread, or a wrapper someone installs later, is not
    affected."""
    import llama_cpp.llama_cpp as ll

    with _patch_lock:
        current = ll.llama_model_default_params
        if getattr(current, "lmra_wrapper", False):
            return

        def params():
            p = current()
            setting = getattr(_local, "extra_buffers", None)
            if setting is None:
                setting = _process_setting[0]
            if setting is not None:
                p.use_extra_bufts = setting
            return p

        params.lmra_wrapper = True
        params.lmra_default = current  # the factory it wraps
        ll.llama_model_default_params = params


@contextmanager
def model_params(extra_buffers: bool) -> Iterator[None]:
    """While it lasts, the models ``llama_cpp.Llama`` loads **in this thread** get
    ``use_extra_bufts = extra_buffers`` (``Llama.__init__`` reads
    ``llama_cpp.llama_model_default_params()``; no argument of its own sets it); other
    threads' loads are not affected. May be nested."""
    _install()
    before = getattr(_local, "extra_buffers", None)
    _local.extra_buffers = extra_buffers
    try:
        yield
    finally:
        _local.extra_buffers = before


def load_llama(**kwargs):
    """``llama_cpp.Llama(**kwargs)`` loaded with :func:`use_extra_buffers`'s setting (see the
    module docstring). Raises what ``Llama`` raises (``ValueError`` for a file it cannot load)."""
    from llama_cpp import Llama

    with model_params(use_extra_buffers()):
        return Llama(**kwargs)


def patch_process() -> None:
    """Every model loaded later in this process, in any thread, gets :func:`use_extra_buffers`'s
    setting (unless a :func:`model_params` block says otherwise in its thread): for a process
    that only serves a model, :mod:`lmra.providers.llama_server`."""
    _install()
    _process_setting[0] = use_extra_buffers()


__all__ = ["EXTRA_BUFFERS_ENV", "cpu_has_amx", "load_llama", "model_params", "patch_process", "use_extra_buffers"]
