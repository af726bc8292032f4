"""Task taxonomy and LMRA task classification (methodology §5; FPF §3.1).

The taxonomy (``prompts/taxonomy.toml``) lists domains and their tasks with one-line
descriptions. A prompt without a task is classified by the LMRA in two closed questions —
first the domain, then the task within it — each with ``other`` as a last option. Answers
are option probabilities (:mod:`lmra.judge.options`), so the output is always a valid label;
an answer with no mass on any option becomes ``other``.
"""

from __future__ import annotations

import string
from pathlib import Path

from pydantic import BaseModel, ValidationError

from lmra.config import JudgeConfig
from lmra.errors import LmraInputError
from lmra.judge.options import ask_options
from lmra.providers.base import Provider
from lmra.templates import Template

OTHER = "other"


class TaskDef(BaseModel):
    name: str
    description: str


class DomainDef(BaseModel):
    name: str
    task: list[TaskDef]


class Taxonomy(BaseModel):
    """Domains and their tasks."""

    version: int = 1
    domain: list[DomainDef]

    def tasks_of(self, domain: str) -> list[TaskDef]:
        return next((d.task for d in self.domain if d.name == domain), [])

    def domain_of(self, task: str) -> str | None:
        return next((d.name for d in self.domain for t in d.task if t.name == task), None)


def load_taxonomy(path: str | Path) -> Taxonomy:
    """Read a taxonomy TOML file.

    Raises:
        LmraInputError: missing file, bad TOML, a missing field, or more than 25 domains or
            tasks in one domain (options are letters, one kept for ``other``).
    """
    from lmra.errors import read_toml

    p = Path(path)
    _, data = read_toml(p, "taxonomy file", field="taxonomy")
    try:
        tax = Taxonomy.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise LmraInputError(err["msg"], file=p, field=".".join(str(x) for x in err["loc"])) from None
    if len(tax.domain) > 25 or any(len(d.task) > 25 for d in tax.domain):
        raise LmraInputError("at most 25 domains, and 25 tasks per domain, are supported", file=p)
    return tax


def _menu(items: list[tuple[str, str]]) -> tuple[tuple[str, ...], str]:
    letters = tuple(string.ascii_uppercase[: len(items) + 1])
    lines = [f"{letter}) {name}: {desc}" for letter, (name, desc) in zip(letters, items)]
    lines.append(f"{letters[-1]}) {OTHER}: none of the above")
    return letters, "\n".join(lines)


class Classification(BaseModel):
    """A prompt's domain and task with the LMRA's probabilities for them."""

    domain: str
    task: str
    p_domain: float | None
    p_task: float | None
    #: the LMRA call failed after every retry: the prompt is left out of the audit and counted
    failed: bool = False
    error: str | None = None
    #: the domain the prompt file gave (None: none given); kept as ``domain`` when it is a
    #: taxonomy domain (only the task was asked), else replaced by the LMRA's (counted, said)
    given_domain: str | None = None


async def classify_prompt(provider: Provider, judge: JudgeConfig, taxonomy: Taxonomy, domain_tpl: Template,
                          task_tpl: Template, *, prompt_id: str, text: str, domain: str | None = None
                          ) -> Classification:
    """Classify one prompt into (domain, task) of ``taxonomy``, or ``other`` (methodology §5).

    Args:
        domain: the prompt's own domain label, if its file gave one: a taxonomy domain is kept
            and only the task within it is asked (``p_domain`` None); another label is
            classified as if absent (the result's ``given_domain`` keeps it, so the audit can
            say how many it replaced — break-it finding: a given domain was replaced silently).

    Returns:
        :class:`Classification`; labels are always taxonomy names or ``other``.
    """
    known = next((d for d in taxonomy.domain if domain is not None and d.name == domain), None)
    if known is not None:
        return await _classify_task(provider, judge, known, task_tpl, prompt_id=prompt_id, text=text,
                                    p_domain=None, given_domain=domain)
    d_letters, d_menu = _menu([(d.name, ", ".join(t.name for t in d.task)) for d in taxonomy.domain])
    dom = await ask_options(provider, domain_tpl.render(prompt=text, options=d_menu, letters=", ".join(d_letters)),
                            d_letters, judge, seed_parts=("domain", prompt_id))
    top = dom.top()
    if top is None or top == d_letters[-1]:
        return Classification(domain=OTHER, task=OTHER, p_domain=dom.probs and dom.probs.get(d_letters[-1]),
                              p_task=None, given_domain=domain)
    return await _classify_task(provider, judge, taxonomy.domain[d_letters.index(top)], task_tpl,
                                prompt_id=prompt_id, text=text, p_domain=dom.probs[top], given_domain=domain)


async def _classify_task(provider: Provider, judge: JudgeConfig, domain: DomainDef, task_tpl: Template, *,
                         prompt_id: str, text: str, p_domain: float | None, given_domain: str | None
                         ) -> Classification:
    """The task question within ``domain`` (its tasks and ``other``)."""
    t_letters, t_menu = _menu([(t.name, t.description) for t in domain.task])
    tsk = await ask_options(provider, task_tpl.render(prompt=text, domain=domain.name, options=t_menu,
                                                      letters=", ".join(t_letters)),
                            t_letters, judge, seed_parts=("task", prompt_id, domain.name))
    ttop = tsk.top()
    task = OTHER if ttop is None or ttop == t_letters[-1] else domain.task[t_letters.index(ttop)].name
    return Classification(domain=domain.name, task=task, p_domain=p_domain, p_task=tsk.probs[ttop] if ttop else None,
                          given_domain=given_domain)
