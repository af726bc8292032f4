"""lmra: audit a chatbot for first-person fairness and recommendation fairness, with a
language model as research assistant (LMRA).

Python API::

    from lmra import Audit, load_config
    result = Audit(load_config("examples/smoke.toml")).run()
    result.per_task  # pandas DataFrame
"""

__version__ = "0.1.0"

from lmra.audit import Audit, AuditResult  # noqa: E402
from lmra.config import AuditConfig, load_config  # noqa: E402

__all__ = ["Audit", "AuditConfig", "AuditResult", "load_config", "__version__"]
