"""The SERP* and PRAG* normalisation conventions (methodology §6; FaiRLLM, Zhang et al. 2023,
§3.2), in a module of their own so that ``lmra recsys --help`` lists them without loading
numpy and pandas. :func:`lmra.recsys.metrics.serp` and :func:`~lmra.recsys.metrics.prag`
document what each one means.
"""

from typing import Literal

Convention = Literal["paper", "paper-k", "fairllm-code"]
#: ``paper`` (the paper's formulas), ``paper-k`` (normalised by K even for short lists),
#: ``fairllm-code`` (the reference code's normalisation)
CONVENTIONS: tuple[str, ...] = ("paper", "paper-k", "fairllm-code")
