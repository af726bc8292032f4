"""Message templates stored as text files in ``prompts/``.

Format: optional ``#`` comment lines, then one or more sections headed ``### system``,
``### user`` or ``### assistant`` (any case); each section becomes one chat message, none may be
empty, and a line that reads as a misspelt header (``### Human``, ``### user:``) is refused (not
read as text); other headings (``### Instructions``) are text of the message. Placeholders use
``str.format`` syntax (``{name}``); literal braces are written ``{{`` and ``}}``.
"""

from __future__ import annotations

import re
import string
from functools import lru_cache
from pathlib import Path

from lmra.errors import LmraInputError, read_input_text
from lmra.providers.base import Message
from lmra.resources import resolve_resource

_HEADER = re.compile(r"^###\s+(system|user|assistant)\s*$", re.IGNORECASE)
#: a line that reads as a misspelt section header — a role-like word (``### Human``, ``### robot``,
#: ``### user:``): refused, not folded into the previous message as text (break-it finding); other
#: one-word headings (``### Instructions``, ``### Context``) are markdown inside a message
_NEAR_HEADER = re.compile(r"^###\s+(system|user|assistant|human|ai|bot|robot|chatbot|model|developer|tool|"
                          r"function|agent|customer|me|you|sys|usr|asst)\s*:\s*$|^###\s+(human|ai|bot|robot|"
                          r"chatbot|model|developer|tool|function|agent|customer|sys|usr|asst)\s*$", re.IGNORECASE)


class Template:
    """A parsed message template.

    Attributes:
        path: the file it was read from.
        sections: list of (role, text) in order.
        fields: the placeholder names used.
        placeholders: (name, format spec, conversion) of each placeholder, in order.
    """

    def __init__(self, path: Path, sections: list[tuple[str, str]]):
        self.path = path
        self.sections = sections
        self.placeholders = [(f, spec, conv) for _, t in sections for _, f, spec, conv in string.Formatter().parse(t)
                             if f is not None]
        self.fields = {f for f, _, _ in self.placeholders if f}

    def render(self, **values: str) -> list[Message]:
        """Fill the placeholders and return the messages.

        Raises:
            LmraInputError: a placeholder has no value.
        """
        missing = self.fields - values.keys()
        if missing:
            raise LmraInputError(f"template needs values for {sorted(missing)}", file=self.path)
        return [Message(role=role, content=text.format(**values)) for role, text in self.sections]


@lru_cache(maxsize=64)
def _load(path: Path) -> Template:
    text = read_input_text(path, "template file")
    sections: list[tuple[str, list[str], int]] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        m = _HEADER.match(line)
        if m:
            sections.append((m.group(1).lower(), [], lineno))
        elif _NEAR_HEADER.match(line):
            raise LmraInputError(f"'{line.strip()}' is not a section header: the sections are '### system', "
                                 "'### user' and '### assistant' (one word, no colon)", file=path, line=lineno)
        elif sections:
            sections[-1][1].append(line)
        elif line.strip() and not line.startswith("#"):
            raise LmraInputError("text before the first '### system|user|assistant' header", file=path, line=lineno)
    if not sections:
        raise LmraInputError("no '### system|user|assistant' section", file=path)
    for role, lines, lineno in sections:  # an empty message is refused by some APIs, and says nothing
        if not "".join(lines).strip():
            raise LmraInputError(f"the '### {role}' section is empty", file=path, line=lineno)
    parsed = [(role, "\n".join(lines).strip("\n")) for role, lines, _ in sections]
    try:
        tpl = Template(path, parsed)
        for field, spec, conversion in tpl.placeholders:  # plain {name} only: a spec could fill the memory
            if spec or conversion:
                bad = "{" + field + (f"!{conversion}" if conversion else "") + (f":{spec}" if spec else "") + "}"
                raise ValueError(f"{bad} has a {'format spec' if spec else 'conversion'}")
        tpl.render(**{f: "x" for f in tpl.fields})
    except (ValueError, KeyError, IndexError, AttributeError) as exc:
        raise LmraInputError(f"bad placeholder syntax ({exc}); placeholders are {{name}}, literal braces are "
                             "written {{ and }}", file=path) from None
    return tpl


def load_template(name_or_path: str | Path, folder: str = "") -> Template:
    """Load a template by path, or by name from the shipped ``prompts/<folder>/<name>.txt``.

    Raises:
        LmraInputError: missing file or malformed template.
    """
    p = Path(name_or_path)
    if p.suffix != ".txt" and not p.exists():
        p = Path("prompts") / folder / f"{name_or_path}.txt"
    return _load(resolve_resource(p, "prompts").resolve())
