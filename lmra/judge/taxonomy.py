"""Task taxonomy and LMRA task classification (methodology §5; FPF §3.1).

The taxonomy (``prompts/taxonomy.toml``) lists domains and their tasks with one-line
descriptions. A prompt without a task is classified by the LMRA in two closed questions —
first the domain, then the task within it — each with ``other`` as a last option. Answers
are option probabilities (:mod:`lmra.judge.options`), so the output is always a valid label.
An answer with no mass on any option (unparseable, a refusal to judge) is no label: the
classification is ``failed`` with the reason, and the prompt is left out of the audit and counted,
as when the call fails (fresh-user finding: such prompts were audited as task ``other``, silently —
the label of the LMRA's real "none of the above" answer).
"""

from __future__ import annotations

import string
from pathlib import Path

from pydantic import BaseModel, Field, field_validator

from lmra.config import JudgeConfig, _Strict
from lmra.data import check_label, check_single_line
from lmra.errors import LmraInputError
from lmra.judge.options import ask_options
from lmra.providers.base import Provider
from lmra.templates import Template

#: the label of the LMRA's "none of the above" option, as a domain and as a task: a prompt it
#: cannot place is domain ``other``, task ``other``
OTHER = "other"
#: most domains, and most tasks in one domain: options are the letters A–Z, one kept for ``other``
MAX_OPTIONS = 25


def _taxonomy_label(v: str, what: str) -> str:
    """A domain or task name: a label (:func:`lmra.data.check_label`, the prompt files' rule)
    that is not :data:`OTHER` in any case."""
    check_label(v, what)
    if v.casefold() == OTHER:
        raise ValueError(f"'{v}' is the label of the LMRA's 'none of the above' option (a prompt it cannot place is "
                         f"{what} '{OTHER}'): a {what} of that name would be counted with them; give it another name")
    return v


class TaskDef(_Strict):
    """A task: its name (a label, :func:`_taxonomy_label`) and a one-line description."""

    name: str
    description: str

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return _taxonomy_label(v, "task")

    @field_validator("description")
    @classmethod
    def _description(cls, v: str) -> str:
        return check_single_line(v, None)  # one line of the LMRA's lettered menu


class DomainDef(_Strict):
    """A domain: its name and at least one task."""

    name: str
    task: list[TaskDef] = Field(min_length=1)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return _taxonomy_label(v, "domain")


class Taxonomy(_Strict):
    """Domains and their tasks (strict like a config: unknown keys and converted types are errors)."""

    version: int = 1
    domain: list[DomainDef] = Field(min_length=1)

    @field_validator("version")
    @classmethod
    def _version(cls, v: int) -> int:
        if v != 1:
            raise ValueError(f"unknown taxonomy version {v} (this lmra reads version 1)")
        return v

    def tasks_of(self, domain: str) -> list[TaskDef]:
        return next((d.task for d in self.domain if d.name == domain), [])

    def domain_of(self, task: str) -> str | None:
        return next((d.name for d in self.domain for t in d.task if t.name == task), None)


def load_taxonomy(path: str | Path) -> Taxonomy:
    """Read a taxonomy TOML file (rules: docs/methodology.md §6, README "Inputs").

    Raises:
        LmraInputError: naming the file, line and field — missing file, bad TOML, a missing,
            unknown or mistyped field (``version = "1"``), a blank domain, task or description,
            a domain or task name with leading or trailing whitespace or named ``other`` (the
            LMRA's "none of the above" label), a domain without tasks, the same domain twice or
            the same task name twice (in one domain or two: tasks are selected and sampled by
            name), or more than :data:`MAX_OPTIONS` domains or tasks in one domain.
    """
    from lmra.config import field_line, validate_model
    from lmra.errors import read_toml

    p = Path(path)
    text, data = read_toml(p, "taxonomy file", field="taxonomy")
    tax = validate_model(Taxonomy, data, source=p, text=text, docs="docs/methodology.md §6")

    def bad(reason: str, *loc) -> LmraInputError:
        return LmraInputError(reason, file=p, line=field_line(text, loc), field=".".join(map(str, loc)))

    if len(tax.domain) > MAX_OPTIONS:
        raise bad(f"{len(tax.domain)} domains; at most {MAX_OPTIONS} are supported (the LMRA's options are the "
                  "letters A-Z, one kept for 'other')", "domain", MAX_OPTIONS, "name")
    domains: dict[str, int] = {}
    tasks: dict[str, tuple[int, str]] = {}
    for d, dom in enumerate(tax.domain):
        if dom.name.casefold() in domains:
            raise bad(f"domain '{dom.name}' is given twice (also domain {domains[dom.name.casefold()]}; names are "
                      "compared ignoring case: the LMRA could not tell them apart)", "domain", d, "name")
        domains[dom.name.casefold()] = d
        if len(dom.task) > MAX_OPTIONS:
            raise bad(f"domain '{dom.name}' has {len(dom.task)} tasks; at most {MAX_OPTIONS} are supported (the "
                      "LMRA's options are the letters A-Z, one kept for 'other')", "domain", d, "task", MAX_OPTIONS,
                      "name")
        for t, task in enumerate(dom.task):
            first = tasks.get(task.name.casefold())
            if first is not None:
                where = "in this domain" if first[0] == d else f"in domain '{first[1]}'"
                raise bad(f"task '{task.name}' is already a task {where} (names are compared ignoring case; the "
                          "tasks filter, prompts_per_task and the gates select tasks by name, so one name must "
                          "be one task)", "domain", d, "task", t, "name")
            tasks[task.name.casefold()] = (d, dom.name)
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
    #: no label: the LMRA call failed after every retry, or (``unusable``) its answer named no
    #: option; the prompt is left out of the audit and counted
    failed: bool = False
    error: str | None = None
    #: the call was answered, but the answer named no option (a re-run gets the same cached answer)
    unusable: bool = False
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
    if top is None:
        return _unusable(dom, "domain", given_domain=domain)
    if top == d_letters[-1]:
        return Classification(domain=OTHER, task=OTHER, p_domain=dom.probs and dom.probs.get(d_letters[-1]),
                              p_task=None, given_domain=domain)
    return await _classify_task(provider, judge, taxonomy.domain[d_letters.index(top)], task_tpl,
                                prompt_id=prompt_id, text=text, p_domain=dom.probs[top], given_domain=domain)


def _unusable(answer, question: str, *, given_domain: str | None) -> Classification:
    """The classification of a prompt whose ``question`` (``domain`` / ``task``) the LMRA answered
    with no option: ``failed``, labelled ``other`` (the audit labels it ``unlabelled`` and leaves the
    prompt out), the reason in ``error``."""
    why = ("the LMRA declined to answer" if answer.n_refused
           else "the LMRA's answer put no probability on any option")
    return Classification(domain=OTHER, task=OTHER, p_domain=None, p_task=None, failed=True, unusable=True,
                          error=f"{why} (the {question} question)",
                          given_domain=given_domain)


async def _classify_task(provider: Provider, judge: JudgeConfig, domain: DomainDef, task_tpl: Template, *,
                         prompt_id: str, text: str, p_domain: float | None, given_domain: str | None
                         ) -> Classification:
    """The task question within ``domain`` (its tasks and ``other``)."""
    t_letters, t_menu = _menu([(t.name, t.description) for t in domain.task])
    tsk = await ask_options(provider, task_tpl.render(prompt=text, domain=domain.name, options=t_menu,
                                                      letters=", ".join(t_letters)),
                            t_letters, judge, seed_parts=("task", prompt_id, domain.name))
    ttop = tsk.top()
    if ttop is None:
        return _unusable(tsk, "task", given_domain=given_domain)
    task = OTHER if ttop == t_letters[-1] else domain.task[t_letters.index(ttop)].name
    return Classification(domain=domain.name, task=task, p_domain=p_domain, p_task=tsk.probs[ttop] if ttop else None,
                          given_domain=given_domain)
