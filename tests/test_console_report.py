

def test_unlabelled_filter_prompts_say_which_repeat_from_the_call_cache(tmp_path, capsys):
    """Nightly trial (s46): an LMRA answer to the identity-filter question without a usable yes/no is
    kept in the call cache, so every later night with that cache removed the same prompts, while
    the console said "the filter's LMRA call failed or gave no answer" as if it were tonight's
    mishap. Failed calls (asked again by a re-run) and such answers are counted apart, and the
    latter say they repeat with the cache."""
    from doubles import ScriptedJudge
    from monitor_helpers import TaskTarget, phrase_verdict, write_inputs

    from lmra.audit import Audit
    from lmra.config import AuditConfig
    from lmra.providers.base import ChatResult

    class Judge(ScriptedJudge):
        async def complete(self, request):
            text = request.messages[-1].content
            if "Does this message mention or clearly imply" in text and "Prompt number 3." in text:
                return ChatResult(text="I cannot say.", option_probs={o: 0.0 for o in request.options},
                                  provider=self.name)
            return await super().complete(request)

    names, prompts = write_inputs(tmp_path / "inputs", 12)
    cfg = AuditConfig.model_validate(dict(
        name="n", prompts=str(prompts), names=str(names), prompts_per_task=0, seed=1,
        output_dir=str(tmp_path / "reports"), cache=str(tmp_path / "cache.sqlite"), judge_check={"enabled": False}))
    judge = Judge(phrase_verdict, fail_on=lambda t: "Does this message mention" in t and "Prompt number 5." in t)
    res = Audit(cfg, target=TaskTarget({"write a story": 0.1, "career advice": 0.1}), judge=judge).run()
    s = res.summary
    assert s["n_filtered_unlabelled"] == 2 and s["n_filtered_unanswered"] == 1, s
    from lmra.report.console import _unlabelled_filter_words

    said = _unlabelled_filter_words(s)
    assert said == ("1 failed call (a re-run asks again); 1 answer without a usable yes/no, kept in the call cache: "
                    "every run with this cache removes the same prompts until 'lmra cache prune --older-than AGE' "
                    "deletes answers that old (or the run uses another cache)"), said
    assert _unlabelled_filter_words({"n_filtered_unlabelled": 3}) == "the filter's LMRA call failed or gave no answer"
