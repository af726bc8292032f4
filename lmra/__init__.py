"""lmra: audit a chatbot for first-person fairness and recommendation fairness, with a
language model as research assistant (LMRA).

Python API::

    from lmra import Audit, load_config
    result = Audit(load_config("examples/smoke.toml")).run()
    result.per_task  # pandas DataFrame
"""

__version__ = "0.3.0"

#: the names of the Python API and the modules they come from, imported on first use (PEP 562), so
#: that ``import lmra.cli`` (every command) does not load the audit, pandas and pydantic
_API = {"Audit": "lmra.audit", "AuditResult": "lmra.audit", "AuditConfig": "lmra.config", "load_config": "lmra.config"}

__all__ = ["Audit", "AuditConfig", "AuditResult", "load_config", "__version__"]


def __getattr__(name: str):
    """``lmra.Audit`` & co. (:data:`_API`), imported when first asked for."""
    if name in _API:
        import importlib

        value = getattr(importlib.import_module(_API[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'lmra' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_API))
