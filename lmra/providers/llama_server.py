"""``python -m lmra.providers.llama_server …``: llama-cpp-python's OpenAI-compatible server
(``python -m llama_cpp.server``, the same arguments) with the model loaded as lmra loads it
(:mod:`lmra.providers._llama_cpu`: no AMX weight buffers on a CPU with AMX, where llama.cpp
can crash on the first request). Needs ``llama-cpp-python[server]`` (installed with lmra)."""

from __future__ import annotations

import runpy

from lmra.providers._llama_cpu import patch_process


def main() -> None:
    """Run ``llama_cpp.server`` as ``__main__`` in this process after :func:`patch_process`."""
    patch_process()
    runpy.run_module("llama_cpp.server", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
