"""On/off switches read from environment variables (``LMRA_REPORT_PROCESS``,
``LMRA_LLAMA_EXTRA_BUFFERS``), read alike and strictly: a value that is neither on nor off is
an input error naming the variable, not ignored (break-it finding: ``LMRA_REPORT_PROCESS=false``
left the report process on, ``LMRA_LLAMA_EXTRA_BUFFERS=true`` counted as unset).
"""

from __future__ import annotations

import os

from lmra.errors import LmraInputError

#: values (compared without case and surrounding spaces) that turn a switch on, and off
ON = ("1", "true", "yes", "on")
OFF = ("0", "false", "no", "off")


def env_switch(name: str) -> bool | None:
    """The switch ``name`` from the environment: True (``1``, ``true``, ``yes``, ``on``), False
    (``0``, ``false``, ``no``, ``off``), None when unset or empty (the default applies).

    Raises:
        LmraInputError: any other value (exit status 2), naming the variable and the values
            it takes.
    """
    value = os.environ.get(name, "").strip().lower()
    if not value:
        return None
    if value in ON:
        return True
    if value in OFF:
        return False
    raise LmraInputError(f"environment variable {name}={os.environ[name]!r} is neither on ({', '.join(ON)}) nor "
                         f"off ({', '.join(OFF)}); set one of those or unset it", field=name)


__all__ = ["OFF", "ON", "env_switch"]
