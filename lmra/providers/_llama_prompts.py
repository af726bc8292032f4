"""How chat messages become the text prompt of an in-process GGUF model.

Two formats (``ModelConfig.prompt_format``):

* ``chat`` — the model's own chat turns (Gemma 3: ``<start_of_turn>user … <end_of_turn>``,
  :func:`lmra.providers.llamacpp.render_gemma`), for chat-tuned models.
* ``transcript`` — a plain-text conversation for *base* models, which were never trained on
  chat-turn tokens and answer them with gibberish (the embedded Gemma 3 270M base model
  wrote "If you have questions, please e-mail: Мне Email me: …"). A base model continues
  text, so the prompt is the start of a document it has seen many of::

      The following is a conversation between a user and a helpful assistant.

      You are a helpful assistant.                     ← system text that is not about the user
      User profile: Preferred name: Ashley             ← the personalization's facts

      User: Write a story about a dragon.
      Assistant:                                       ← the model continues here

  and the answer ends where the model starts the next turn (:data:`TRANSCRIPT_STOP`).

``auto`` picks ``chat`` when the GGUF file carries a chat template
(``tokenizer.chat_template`` in its metadata: chat-tuned models ship one, base models do
not) and ``transcript`` otherwise.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Literal

from lmra.providers.base import Message, ProviderError

PromptFormat = Literal["chat", "transcript"]

#: First line of every transcript prompt.
TRANSCRIPT_INTRO = "The following is a conversation between a user and a helpful assistant."
#: Where a transcript answer ends: the model starting the user's next turn (or inventing one).
TRANSCRIPT_STOP: tuple[str, ...] = ("\nUser:", "\nAssistant:", "\nUser profile:", "\nUser's ", "\nUser’s ")
#: GGUF metadata key of the chat template (present in chat-tuned models).
CHAT_TEMPLATE_KEY = "tokenizer.chat_template"

# a fact about the user in a personalization message: a list item ("- The user's name is
# Ashley.") or a "Field: value" line ("Preferred name: Ashley", "About me: I am deaf …")
_BULLET = re.compile(r"^\s*[-*•]\s+(?P<fact>\S.*)$")
_FIELD = re.compile(r"^\s*(?P<fact>[A-Z][A-Za-z' ]{0,40}:\s+\S.*)$")


def resolve_prompt_format(setting: str, metadata: Mapping[str, str]) -> PromptFormat:
    """The prompt format a model uses.

    Args:
        setting: ``auto``, ``chat`` or ``transcript`` (``ModelConfig.prompt_format``).
        metadata: the GGUF file's metadata (``Llama.metadata``: key → string value).

    Returns:
        ``chat`` or ``transcript``; ``auto`` gives ``chat`` exactly when the file has a
        non-blank ``tokenizer.chat_template``.
    """
    if setting in ("chat", "transcript"):
        return setting  # type: ignore[return-value]
    return "chat" if (metadata.get(CHAT_TEMPLATE_KEY) or "").strip() else "transcript"


def profile_facts(text: str) -> list[str]:
    """The facts about the user in a system message, or [] when it states none.

    A fact is a list item (``- The user's name is Ashley.``) or a ``Field: value`` line
    (``Preferred name: Ashley``). The shipped personalization styles state the user's name
    or profile that way; the surrounding instructions ("Use this information to personalize
    your responses …") are for chat models and are left out of a transcript.
    """
    facts = []
    for line in text.splitlines():
        m = _BULLET.match(line) or _FIELD.match(line)
        if m:
            facts.append(m.group("fact").strip())
    return facts


def render_transcript(messages: Sequence[Message], prefill: str | None = None) -> str:
    """Render chat messages as a plain-text transcript ending where the assistant speaks.

    System messages that state facts about the user (:func:`profile_facts`) become one
    ``User profile:`` line (facts joined by "; "); other system messages are kept as they
    are, as paragraphs before it. User and assistant turns become ``User: …`` and
    ``Assistant: …`` lines, in order. The prompt ends with ``Assistant:`` followed by
    ``prefill`` (the start of the answer, e.g. ``"Here are 5 song titles:\\n1."``) when given.

    Raises:
        ProviderError: no user or assistant turn after the system messages.
    """
    notes: list[str] = []
    facts: list[str] = []
    turns: list[str] = []
    for m in messages:
        if m.role == "system":
            found = profile_facts(m.content)
            if found:
                facts.extend(found)
            elif m.content.strip():
                notes.append(m.content.strip())
        else:
            who = "User" if m.role == "user" else "Assistant"
            turns.append(f"{who}: {m.content.strip()}")
    if not turns:
        raise ProviderError("a transcript prompt needs a user message")
    head = [TRANSCRIPT_INTRO]
    context = notes + ([f"User profile: {'; '.join(facts)}"] if facts else [])
    if context:
        head.append("\n".join(context))
    answer = "Assistant:" + (f" {prefill.lstrip()}" if prefill else "")
    return "\n\n".join(head) + "\n\n" + "\n".join(turns) + "\n" + answer
