"""The embedded path (issue 14): the plain-text transcript format for base GGUF models, the
answer prefill, batched decoding with per-request seeded sampling, the prefix-reusing read
pool and the thread rule. The model tests run the real embedded Gemma 3 270M."""

from __future__ import annotations

import asyncio
import re

import pytest

from lmra.config import ModelConfig
from lmra.generate import personalized_messages
from lmra.providers._llama_batch import GenerationJob
from lmra.providers._llama_prompts import (TRANSCRIPT_INTRO, TRANSCRIPT_STOP, profile_facts, render_transcript,
                                           resolve_prompt_format)
from lmra.providers.base import ChatRequest, Message, ProviderError, request_key
from lmra.providers.llamacpp import BATCH_SEQUENCES, LlamaCppProvider, render_gemma, thread_plan
from lmra.recsys.instructions import list_prefill, template_for
from lmra.recsys.parse import parse_list
from lmra.templates import load_template

STORY = "Write a story about a dragon."


# --- the transcript format (no model needed) ---------------------------------------------------

@pytest.mark.parametrize("style", ["custom_instructions", "memory", "intro_turn"])
def test_name_reaches_the_exact_transcript_prompt(style):
    """Every personalization style puts the user's name into the transcript, after the target's
    own system prompt and before the request, and the prompt ends where the assistant speaks."""
    tpl = load_template(style, "personalization")
    msgs = personalized_messages(STORY, tpl, name="Ashley", system_prompt="You are a helpful assistant.")
    prompt = render_transcript(msgs)
    assert prompt.startswith(TRANSCRIPT_INTRO + "\n\n")
    assert prompt.index("You are a helpful assistant.") < prompt.index("Ashley") < prompt.index("dragon")
    assert prompt.endswith(f"User: {STORY}\nAssistant:")
    assert "<start_of_turn>" not in prompt


@pytest.mark.parametrize("style", ["custom_instructions_profile", "memory_profile", "intro_turn_profile"])
def test_profile_reaches_the_transcript_prompt(style):
    msgs = personalized_messages("Hi", load_template(style, "personalization"), profile="I am deaf and live in Canada")
    assert "I am deaf and live in Canada" in render_transcript(msgs)


def test_transcript_rendering_exactly():
    """System text about the user becomes one profile line, other system text stays a
    paragraph, turns become User:/Assistant: lines, the prefill follows the last Assistant:."""
    msgs = [Message(role="system", content="You are a music recommendation system."),
            Message(role="system", content="Facts:\n- The user's name is Ann.\nPreferred name: Ann\nUse them."),
            Message(role="user", content="Hi"), Message(role="assistant", content="Hello!"),
            Message(role="user", content="List songs.")]
    assert render_transcript(msgs, prefill="Here are 5 song titles:\n1.") == (
        f"{TRANSCRIPT_INTRO}\n\nYou are a music recommendation system.\n"
        "User profile: The user's name is Ann.; Preferred name: Ann\n\n"
        "User: Hi\nAssistant: Hello!\nUser: List songs.\nAssistant: Here are 5 song titles:\n1.")
    assert profile_facts("Use this information when relevant.") == []
    with pytest.raises(ProviderError):
        render_transcript([Message(role="system", content="only a system message")])


def test_gemma_prefill_follows_the_model_turn():
    msgs = [Message(role="user", content="U")]
    assert render_gemma(msgs, "Here") == "<start_of_turn>user\nU<end_of_turn>\n<start_of_turn>model\nHere"


def test_prompt_format_from_metadata_and_config():
    assert resolve_prompt_format("auto", {}) == "transcript"
    assert resolve_prompt_format("auto", {"tokenizer.chat_template": "{% for m in messages %}…"}) == "chat"
    assert resolve_prompt_format("auto", {"tokenizer.chat_template": "  "}) == "transcript"
    assert resolve_prompt_format("chat", {}) == "chat"
    assert resolve_prompt_format("transcript", {"tokenizer.chat_template": "x"}) == "transcript"
    with pytest.raises(ValueError):
        ModelConfig(prompt_format="gemma")


def test_prefill_is_in_the_cache_key_only_when_set():
    """A request without a prefill keeps the key it had before the field existed (computed with
    the code of commit 9467abd); a prefill makes another key."""
    r = ChatRequest(messages=[Message(role="system", content="S"), Message(role="user", content="Hi")],
                    temperature=0.7, max_tokens=32, seed=5)
    assert "prefill" not in r.cache_payload()
    assert request_key("llamacpp", "", "m", r) == "4f326e25314b7cdd7f130d8ea809310b1e61a31db4ae8a688d95402275cf5e70"
    with_prefill = r.model_copy(update={"prefill": "Here are"})
    assert with_prefill.cache_payload()["prefill"] == "Here are"
    assert request_key("llamacpp", "", "m", with_prefill) != request_key("llamacpp", "", "m", r)


def test_list_prefill_names_the_domain_and_k():
    assert list_prefill("music", 5) == "Here are 5 song titles:\n1."
    assert list_prefill("movielens", 20) == "Here are 20 movie titles:\n1."


def test_thread_rule():
    """Single-threaded contexts by default: a reader per core, a batch decoder per two cores;
    n_threads set means one of each with that many threads (the user's explicit choice)."""
    assert thread_plan(None, cores=2) == (2, 1, 1, 1)
    assert thread_plan(None, cores=8) == (8, 1, 4, 1)
    assert thread_plan(None, cores=1) == (1, 1, 1, 1)
    assert thread_plan(3, cores=2) == (1, 3, 1, 3)


# --- the embedded model -----------------------------------------------------------------------

@pytest.fixture(scope="module")
def embedded():
    return LlamaCppProvider.shared(ModelConfig())


def test_embedded_base_model_gets_the_transcript_format(embedded):
    assert "tokenizer.chat_template" not in embedded.metadata
    assert embedded.prompt_format == "transcript" and embedded.model_id.endswith(":transcript")
    chat = LlamaCppProvider.shared(ModelConfig(prompt_format="chat"))
    assert chat is not embedded and chat._llm is embedded._llm  # one loaded model, two formats
    assert chat.prompt_format == "chat" and not chat.model_id.endswith(":transcript")
    assert chat.model_id.split(":")[0] == embedded.model_id.split(":")[0]
    req = ChatRequest(messages=[Message(role="user", content="Hi")])
    assert chat.render(req).endswith("<start_of_turn>model\n") and embedded.render(req).endswith("Assistant:")
    # option reads start the answer with a cue; a request's own prefill wins
    read = req.model_copy(update={"options": ("A", "B", "C")})
    assert embedded.render(read).endswith("Assistant: The answer is")
    assert embedded.render(read.model_copy(update={"prefill": "Answer:"})).endswith("Assistant: Answer:")


def _requests(n: int, seed0: int = 100) -> list[ChatRequest]:
    tpl = load_template("custom_instructions", "personalization")
    topics = ["a dragon", "a lighthouse", "a job interview", "a trip to Rome", "a birthday party", "a cover letter",
              "stress at work", "a packing list", "a lost cat", "a garden"]
    return [ChatRequest(messages=personalized_messages(f"Write a short story about {t}.", tpl, name="Ashley"),
                        temperature=1.0, max_tokens=24, seed=seed0 + i) for i, t in enumerate(topics[:n])]


async def _all(provider, reqs):
    return await asyncio.gather(*(provider.complete(r) for r in reqs))


def test_a_request_gives_the_same_text_alone_and_in_any_batch(embedded):
    """Seeded sampling per sequence and a fixed decoding shape: a request's text does not
    depend on which requests share its batch (or its decoder)."""
    reqs = _requests(10)
    together = asyncio.run(_all(embedded, reqs))
    alone = [asyncio.run(embedded.complete(r)) for r in reqs[:3]]
    other_mix = asyncio.run(_all(embedded, [reqs[2]] + _requests(5, seed0=900)))
    assert [r.text for r in alone] == [r.text for r in together[:3]]
    assert other_mix[0].text == together[2].text
    assert len({r.text for r in together}) >= 8  # different seeds and prompts: different texts
    assert all(0 < r.usage.completion_tokens <= 24 for r in together)
    # another seed changes the draw
    reseeded = asyncio.run(embedded.complete(reqs[0].model_copy(update={"seed": 7})))
    assert reseeded.text != together[0].text


def test_the_demo_answers_in_sentences(embedded):
    """The base model prompted as a transcript answers in words, stops at the next turn and
    does not echo the personalization or write chat-turn tokens (it did all three with Gemma
    chat turns)."""
    res = asyncio.run(_all(embedded, _requests(8, seed0=0)))
    assert sum(r.finish_reason == "stop" for r in res) >= 4  # the answer ended at the next turn
    for r in res:
        assert r.text and not any(s.strip() in r.text for s in TRANSCRIPT_STOP if s.strip().endswith(":"))
        assert "<start_of_turn>" not in r.text and "<end_of_turn>" not in r.text
        assert "The user has provided the following information" not in r.text
    worded = [r for r in res if len(re.findall(r"[A-Za-z]{2,}", r.text)) >= 3
              and sum(c.isascii() for c in r.text) >= 0.9 * len(r.text)]
    assert len(worded) >= 6, [r.text for r in res]


def test_prefill_makes_the_base_model_write_a_list(embedded):
    msgs = template_for("music", "neutral").render(name="Adele", k="5")
    prefill = list_prefill("music", 5)
    res = asyncio.run(embedded.complete(ChatRequest(messages=msgs, temperature=0.0, max_tokens=48, seed=1,
                                                    prefill=prefill)))
    assert res.text.startswith(prefill)
    assert len(parse_list(res.text).items) >= 3, res.text


def test_option_reads_use_the_read_pool_and_reuse_prefixes(embedded):
    tpl = load_template("harmful_stereotype", "judge")
    reqs = [ChatRequest(messages=tpl.render(group_a="female", group_b="male", task="write a story",
                                            prompt="Tell a story.", response_1=f"Story {i} about a knight.",
                                            response_2="A story about a cook."),
                        temperature=0.0, max_tokens=1, options=("A", "B", "C")) for i in range(4)]
    res = asyncio.run(_all(embedded, reqs))
    for r in res:
        assert set(r.option_probs) == {"A", "B", "C"} and 0 < sum(r.option_probs.values()) <= 1
    assert len(embedded._readers.readers) == embedded.threads.readers
    # a read after a read of a prompt sharing its prefix gives the same probabilities as from scratch
    again = asyncio.run(embedded.complete(reqs[1]))
    for reader in embedded._readers.readers:
        reader.reuse_prefix = False
    try:
        fresh = asyncio.run(embedded.complete(reqs[1]))
    finally:
        for reader in embedded._readers.readers:
            reader.reuse_prefix = True
    # the same up to the rounding of llama.cpp's quantized kernels, which depends on how the prompt
    # is split into batches (prefix, then suffix): seen up to 0.005 apart in a full test run on an
    # Intel Xeon VM, 0.011 on an AMD EPYC VM (s47) — where the same prompt read from scratch in
    # chunks of 37 tokens instead of 512, no prefix reused, moved p(A) by 0.025 (0.2816 → 0.2563)
    assert again.option_probs == pytest.approx(fresh.option_probs, abs=0.03)


def test_decoder_limits_cancellation_and_close(embedded):
    too_long = ChatRequest(messages=[Message(role="user", content="word " * 5000)], max_tokens=4)
    with pytest.raises(ProviderError, match="does not fit the context window"):
        asyncio.run(embedded.complete(too_long))
    llm = embedded._llm
    from lmra.providers._llama_batch import BatchDecoder

    dec = BatchDecoder(llm._model.model, llm._model.vocab, llm.detokenize, n_seq=BATCH_SEQUENCES,
                       n_ctx_seq=512, n_threads=1)
    toks = llm.tokenize(b"User: Count to fifty.\nAssistant:", add_bos=True)
    jobs = [GenerationJob(tokens=toks, max_tokens=200, temperature=1.0, seed=i) for i in range(3)]
    futures = [dec.submit(j) for j in jobs]
    futures[0].cancel()
    done = futures[1].result(timeout=300)
    assert done.completion_tokens > 0 and done.finish_reason in {"stop", "length"}
    dec.close(cancel=True)
    assert futures[0].cancelled()
    assert futures[2].done()  # finished, or failed by the close
    if futures[2].exception() is not None:
        assert isinstance(futures[2].exception(), RuntimeError)
    with pytest.raises(RuntimeError, match="closed"):
        dec.submit(GenerationJob(tokens=toks, max_tokens=2, temperature=0.0, seed=0))


def test_a_free_reader_leaves_the_sibling_of_a_busy_readers_prompt_to_it(embedded):
    """Read scheduling: a free reader takes a waiting read that shares more with its own prompt
    than with the prompt another reader holds; the other pair's read is left to that reader; a
    read passed over WINDOW times is taken first."""
    import llama_cpp

    from lmra.providers._llama_reads import WINDOW, PrefixReader, ReaderPool, _Read

    llm = embedded._llm

    def reader() -> PrefixReader:
        params = llama_cpp.llama_context_params.from_buffer_copy(llm.context_params)
        return PrefixReader(llama_cpp.llama_init_from_model(llm._model.model, params), llm.n_vocab(), llm.n_batch,
                            owned=True)

    def toks(text: str) -> list[int]:
        return llm.tokenize(text.encode(), add_bos=True)

    a, b = reader(), reader()
    pool = ReaderPool([a, b])
    try:
        pair = "Task: write a story. Request: a story about a knight and a dragon. Response 1:"
        a.logits(toks(pair + " The knight"))
        a.target = a.tokens
        b.logits(toks("Task: career advice. Request: how do I ask for a raise? Response 1:"))
        b.target = b.tokens
        sibling = _Read(toks(pair + " The dragon"), order=1)
        other = _Read(toks("Task: debug code. Request: my loop never ends. Response 1: Check"), order=2)
        pool._waiting = [sibling, other]
        assert pool._take(b) is other  # the sibling of a's prompt is left to a …
        assert pool._take(a) is sibling  # … which reuses the shared prefix
        assert a.shared_prefix(sibling.toks) > len(toks(pair)) - 2
        starved = _Read(toks("Unrelated."), order=3, passed_over=WINDOW)
        pool._waiting = [starved, _Read(toks(pair + " A knight"), order=4)]
        assert pool._take(a) is starved
    finally:
        pool.close()
