"""Personalization, name draws and scrubbing (methodology §1)."""

import pytest

from lmra.config import Group
from lmra.data import NameRecord
from lmra.errors import LmraInputError
from lmra.generate import derive_seed, draw_name, names_for_group, personalized_messages, scrub_name
from lmra.providers.llamacpp import render_gemma
from lmra.templates import load_template


@pytest.mark.parametrize("style", ["custom_instructions", "memory", "intro_turn"])
def test_name_reaches_the_exact_gemma_prompt(style):
    tpl = load_template(style, "personalization")
    msgs = personalized_messages("Write a story about a dragon.", tpl, name="Ashley",
                                 system_prompt="You are a helpful assistant.")
    prompt = render_gemma(msgs)
    assert "Ashley" in prompt
    assert "You are a helpful assistant." in prompt
    assert prompt.rstrip().endswith("<start_of_turn>model")
    assert prompt.index("You are a helpful assistant.") < prompt.index("Ashley") < prompt.index("dragon")
    assert msgs[-1].role == "user" and msgs[-1].content == "Write a story about a dragon."


def test_gemma_rendering_matches_gemma3_template():
    from lmra.providers.base import Message

    msgs = [Message(role="system", content="SYS"), Message(role="user", content="U1"),
            Message(role="assistant", content="A1"), Message(role="user", content="U2")]
    assert render_gemma(msgs) == ("<start_of_turn>user\nSYS\n\nU1<end_of_turn>\n<start_of_turn>model\nA1<end_of_turn>\n"
                                  "<start_of_turn>user\nU2<end_of_turn>\n<start_of_turn>model\n")


def test_profile_template():
    tpl = load_template("custom_instructions_profile", "personalization")
    msgs = personalized_messages("Hi", tpl, profile="I am deaf and live in Canada")
    assert "I am deaf and live in Canada" in msgs[0].content


def test_scrub_name_whole_word_case_insensitive_possessive():
    text = "Dear Ann, ANN's plan: Anna and Annie are not Ann. ann!"
    assert scrub_name(text, "Ann") == "Dear [NAME], [NAME]'s plan: Anna and Annie are not [NAME]. [NAME]!"
    assert scrub_name("Hello Jo-Ann", "Jo-Ann") == "Hello [NAME]"
    assert scrub_name("text", "") == "text"


def test_name_draws_are_seeded_and_cover_the_list():
    names = ["A1", "A2", "A3", "A4"]
    draws = [draw_name(names, 0, f"p{i}", "female", "female vs male", 0) for i in range(200)]
    assert draws == [draw_name(names, 0, f"p{i}", "female", "female vs male", 0) for i in range(200)]
    assert set(draws) == set(names)
    assert draws != [draw_name(names, 1, f"p{i}", "female", "female vs male", 0) for i in range(200)]
    assert derive_seed(1, "x") == derive_seed(1, "x") != derive_seed(1, "y")


def test_names_for_group_filters():
    recs = [NameRecord(name="A", gender="female", race="Black"), NameRecord(name="B", gender="female", race="White"),
            NameRecord(name="C", gender="male", race="Black")]
    assert names_for_group(recs, Group(name="bf", gender="female", race="Black")) == ["A"]
    assert names_for_group(recs, Group(name="f", gender="female")) == ["A", "B"]
    with pytest.raises(LmraInputError):
        names_for_group(recs, Group(name="x", gender="male", race="White"))


def test_scrub_name_matches_any_apostrophe_hyphen_and_accent_composition():
    """Break-it finding: "O'Neil" (as the name file spells it) left "O’Neil" (as models write
    it) in the text the LMRA reads, and so did a name typed with a combining accent."""
    import unicodedata

    from lmra.judge.filter import lexical_hits

    assert scrub_name("Hello O’Neil, and O'Neil’s plan", "O'Neil") == "Hello [NAME], and [NAME]’s plan"
    assert scrub_name("Dear O'Neil", "O’Neil") == "Dear [NAME]"
    nfd, nfc = unicodedata.normalize("NFD", "José"), unicodedata.normalize("NFC", "José")
    assert nfd != nfc
    assert scrub_name(f"Hello {nfc} and Jose", nfd) == "Hello [NAME] and [NAME]"
    assert scrub_name(f"Hello {nfd}", nfc) == "Hello [NAME]"
    assert scrub_name("Mary\u2010Jane said; mary-jane agreed", "Mary-Jane") == "[NAME] said; [NAME] agreed"
    assert scrub_name("Oneil and O Neil", "O'Neil") == "Oneil and O Neil"  # an apostrophe is still required
    assert lexical_hits("Hi, I’m O’Neil", ("O'Neil",)) == ["I’m O’Neil"]


def test_scrub_name_catches_markdown_emphasis_dashes_spacing_and_full_width_letters():
    """Break-it finding: "_Zoë_" and "__Jean-Luc__" (Markdown emphasis: the underscore counted
    as a letter of the word), "Mary–Jane" with an en dash, "Jean‒Luc" with a figure dash, "Jo Ann"
    with two spaces, a line break or a no-break space, and a full-width "Ａｉｓｈａ" all reached the
    LMRA unscrubbed. Letters and digits still end a word: "Anna", "Ann2" keep their text."""
    from lmra.judge.filter import lexical_hits

    assert scrub_name("_Zoë_ and __Zoë__ and *Zoë*", "Zoë") == "_[NAME]_ and __[NAME]__ and *[NAME]*"
    assert scrub_name("__Jean-Luc__, Jean–Luc, Jean‒Luc, Jean—Luc", "Jean-Luc") == "__[NAME]__, [NAME], [NAME], [NAME]"
    assert scrub_name("Mary–Jane", "Mary-Jane") == "[NAME]"
    assert scrub_name("Jo  Ann, Jo\nAnn, Jo\xa0Ann, JoAnn", "Jo Ann") == "[NAME], [NAME], [NAME], JoAnn"
    assert scrub_name("Ａｉｓｈａ says hi to Aishah", "Aisha") == "[NAME] says hi to Aishah"
    assert scrub_name("Anna, Ann2, Ann", "Ann") == "Anna, Ann2, [NAME]"
    assert lexical_hits("Thanks, _Zoë_", ("Zoë",)) == ["Thanks, _Zoë"]  # the filter's self-introduction check too
    # … but not inside an identifier (break-it finding: "Ann_Arbor" became "[NAME]_Arbor" in the
    # response of the user named Ann only, a difference the LMRA could see)
    for text, name in [("Ann_Arbor is nice", "Ann"), ("set grace_period = 5", "Grace"), ("mark_as_read()", "Mark"),
                       ("see file my_ann.txt", "Ann"), ("will_do", "Will"), ("a__ann__b", "Ann")]:
        assert scrub_name(text, name) == text, text
    assert lexical_hits("this is Ann_Arbor", ("Ann",)) == []


def test_names_in_scripts_written_without_spaces_are_scrubbed_where_they_are_written():
    """Break-it finding (s48): Han, kana and Hangul are letters, so a name inside Chinese or Japanese text (no
    spaces) or with a Korean particle attached ("민수님") was never a whole word: the LMRA read "你好王芳" for
    one group and "你好张伟" for the other. Such names are matched wherever they are written; Latin names keep
    their word boundaries."""
    from lmra.generate import names_to_draw

    assert scrub_name("你好王芳，这是你的计划。王芳さん、がんばって。", "王芳") == "你好[NAME]，这是你的计划。[NAME]さん、がんばって。"
    assert scrub_name("こんにちは、さくらさん", "さくら") == "こんにちは、[NAME]さん"
    assert scrub_name("민수님, 안녕하세요. 민수야!", "민수") == "[NAME]님, 안녕하세요. [NAME]야!"
    assert scrub_name("สวัสดีสมชาย ครับ", "สมชาย") == "สวัสดี[NAME] ครับ"
    assert scrub_name("Dear 王芳, here", "王芳") == "Dear [NAME], here"
    assert scrub_name("你好张伟", "王芳") == "你好张伟"
    assert scrub_name("Annabel and Anna", "Anna") == "Annabel and [NAME]"  # a Latin name: whole words still
    # the prompt that mentions a listed name does not draw it (the same pattern)
    assert list(names_to_draw(["王芳", "李娜"], "给王芳写一张生日卡")) == ["李娜"]
    # round-2 break-it (s48): a name ending in the iteration mark; a space between family and given name in the
    # list but not in the text, or the reverse
    assert scrub_name("奈々さん、こんにちは", "奈々") == "[NAME]さん、こんにちは"
    assert list(names_to_draw(["奈々", "王芳"], "奈々さんへの手紙")) == ["王芳"]
    assert scrub_name("佐藤さくらさん、こんにちは", "佐藤 さくら") == "[NAME]さん、こんにちは"
    assert scrub_name("王 芳，你好", "王芳") == "[NAME]，你好"
    assert scrub_name("Jo  Ann, JoAnn", "Jo Ann") == "[NAME], JoAnn"  # Latin: a space is still needed
    # the identity filter's self-introduction check finds them too
    from lmra.judge.filter import lexical_hits

    assert lexical_hits("I'm 王芳です", ["王芳"]) == ["I'm 王芳"]
    assert lexical_hits("this is 민수님", ["민수"]) == ["this is 민수"]
    assert lexical_hits("this is Ann_Arbor", ("Ann",)) == []
    # round 3 (s48): a Latin name inside CJK text is a word of its own; a Thai name is not matched inside a syllable
    assert scrub_name("亲爱的Anna，你好", "Anna") == "亲爱的[NAME]，你好"
    assert scrub_name("Annaさん, Maria님", "Anna") == "[NAME]さん, Maria님"
    assert list(names_to_draw(["Anna", "Maria"], "给Anna写一张卡")) == ["Maria"]
    assert scrub_name("กรุณาสมัครสมาชิก", "สม") == "กรุณาสมัครสมาชิก"
    assert scrub_name("เสม", "สม") == "เสม"


def test_a_bad_placeholder_message_shows_the_escape_a_user_types(tmp_path):
    from lmra.errors import LmraInputError
    from lmra.templates import load_template

    bad = tmp_path / "p.txt"
    bad.write_text("### user\nHello {} there {name}\n")
    with pytest.raises(LmraInputError) as err:
        load_template(bad)
    assert "literal braces are written {{ and }}" in str(err.value) and "{{{{" not in str(err.value)


def test_a_name_matches_with_or_without_its_accents_and_nfd_introductions_match():
    """Review findings: the self-introduction check did not match "Hi, I'm José." written with
    a combining accent (no word boundary after U+0301), and "Jose" was scrubbed out of "José"
    (NFD), leaving a stray accent. Break-it finding: a model that wrote "Jesús" for a user named
    Jesus (or "Jose" for José) left the name in the text the LMRA read: Latin letters now match
    with or without accents, composed or decomposed, and no accent is left behind."""
    import unicodedata

    from lmra.judge.filter import lexical_hits

    nfd = unicodedata.normalize("NFD", "José")
    assert lexical_hits(f"Hi, I'm {nfd}.", ("José",)) == [f"Hi, I'm {nfd}"]
    assert lexical_hits("Hi, I'm José.", (nfd,)) == ["Hi, I'm José"]
    assert lexical_hits(f"Hi, I'm {nfd}.", ("Jose",)) == [f"Hi, I'm {nfd}"]  # the phrase as written
    assert lexical_hits("Thanks, Zoë", ("Zoe",)) == ["Thanks, Zoë"]
    assert scrub_name(f"{nfd} and Jose", "Jose") == "[NAME] and [NAME]"  # no stray accent left
    assert scrub_name("JOSÉ, josé's plan, Joseph, Josée", "Jose") == "[NAME], [NAME]'s plan, Joseph, Josée"
    assert scrub_name("Hi Jesús, and Jesus", "Jesus") == scrub_name("Hi Jesús, and Jesus", "Jesús") == \
        "Hi [NAME], and [NAME]"
    assert scrub_name("Łukasz, Lukasz, Søren, Soren", "Lukasz") == "[NAME], [NAME], Søren, Soren"
    assert scrub_name("Łukasz, Lukasz, Søren, Soren", "Søren") == "Łukasz, Lukasz, [NAME], [NAME]"
    renee = unicodedata.normalize("NFD", "Renée")
    assert scrub_name(renee, "Rene") == renee and scrub_name(renee, "Renée") == "[NAME]"  # another name
    assert scrub_name("René", "Rene") == "[NAME]"
    # other scripts: as written, in either normal form ("й" is not "и")
    andrei = "Андрей"
    assert scrub_name(f"{andrei} Андреи {unicodedata.normalize('NFD', andrei)}", andrei) == "[NAME] Андреи [NAME]"
    assert scrub_name("王芳 说", "王芳") == "[NAME] 说"


def test_fold_latin_keeps_every_span():
    """The scrub matches in folded text and replaces in the original: each character folds to
    one character (an accented Latin letter to its letter, a combining mark to one mark)."""
    import random
    import unicodedata

    from lmra.generate import fold_latin

    rng = random.Random(7)
    alphabet = "aeiouAEIOU éÉèüÜñÑçłŁøØ" + "".join(map(chr, range(0x0300, 0x0310))) + "Андрей王芳’—-"
    for _ in range(500):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        folded = fold_latin(text)
        assert len(folded) == len(text)
        assert all(a == b or unicodedata.combining(b) or not b.isascii() for a, b in zip(folded, text))
    assert fold_latin("plain ASCII text") == "plain ASCII text"
    assert fold_latin("José Łukasz Ærø") == "Jose Lukasz Æro"


def test_names_a_prompt_mentions_are_not_drawn_for_it():
    """Break-it finding: a prompt about a third person whose name the user was drawn ("Write a
    card for David" for the user David) had every mention of that person scrubbed in one
    group's response alone, "[NAME]" against "David" in the pair the LMRA read."""
    from lmra.generate import names_to_draw

    names = ["Michael", "David", "José", "Mary-Jane", "Hope"]
    assert names_to_draw(names, "Write a card for michael and DAVID.") == ["José", "Mary-Jane", "Hope"]
    assert names_to_draw(names, "Thank JOSE for me") == ["Michael", "David", "Mary-Jane", "Hope"]
    assert names_to_draw(names, "I hope you can help") == ["Michael", "David", "José", "Mary-Jane"]
    assert names_to_draw(names, "Mary-Jane's party") == ["Michael", "David", "José", "Hope"]
    # not whole words, or not the whole name: drawn as before (the same list object)
    for text in ("Michaelangelo's Davidson", "mary jane", "nothing here"):
        assert names_to_draw(names, text) is names
    assert names_to_draw(["David"], "David and me") == ["David"]  # never an empty list
    # the draw is unchanged for a prompt that mentions no name
    assert draw_name(names_to_draw(names, "plan my week"), 3, "p1", "g", "c", 0) == draw_name(names, 3, "p1", "g",
                                                                                               "c", 0)


def test_an_audit_never_draws_a_name_its_prompt_mentions(tmp_path, sim_inputs):
    import json

    from conftest import NAME_TO_GROUP
    from doubles import ScriptedJudge, ScriptedTarget
    from lmra import Audit
    from lmra.config import AuditConfig

    names, prompts = sim_inputs(0)
    prompts.write_text("".join(json.dumps({"id": f"p{i}", "text": f"Write a birthday card for David and Anna, #{i}.",
                                           "domain": "d", "task": "write"}) + "\n" for i in range(30)))
    cfg = AuditConfig.model_validate(dict(
        name="mention", prompts=str(prompts), names=str(names), prompts_per_task=0, samples_per_prompt=2,
        output_dir=str(tmp_path / "reports"), cache=str(tmp_path / "cache.sqlite"), judge_check={"enabled": False},
        refusal={"enabled": False}, filter={"lmra": False}))
    res = Audit(cfg, target=ScriptedTarget(NAME_TO_GROUP, lambda g, rng: "Happy birthday, David and Anna!"),
                judge=ScriptedJudge(lambda a, b: {"C": 1.0})).run()
    rows = [json.loads(line) for line in (res.run_dir / "responses.jsonl").read_text().splitlines()]
    assert len(rows) == 120 and not {r["name"] for r in rows} & {"David", "Anna"}
    assert {r["name"] for r in rows} == {"Maria", "Linda", "John", "Mark"}
    assert all(r["scrubbed"] == "Happy birthday, David and Anna!" for r in rows)  # alike in every pair


def test_marks_of_other_scripts_are_not_folded_and_every_apostrophe_splits_a_name():
    """Break-it findings: folding every combining mark to one made "Андрей" (й = и + breve)
    match "Андреи́" (и + acute); and "OʼNeil" (U+02BC, a letter to \\w) was scrubbed but still
    drawn for the prompt that mentions it."""
    import unicodedata

    from lmra.generate import fold_latin, names_to_draw

    andrei = unicodedata.normalize("NFD", "Андрей")
    assert scrub_name("Андреи\u0301 and " + andrei, "Андрей") == "Андреи\u0301 and [NAME]"
    assert fold_latin("и\u0306 e\u0308") == "и\u0306 e\u0301"  # a Latin letter's accent only
    assert names_to_draw(["O'Neil", "Amy"], "Write a letter to O\u02bcNeil") == ["Amy"]
    assert scrub_name("Write a letter to O\u02bcNeil", "O'Neil") == "Write a letter to [NAME]"


def test_a_template_header_naming_no_role_is_refused_not_read_as_text(tmp_path):
    """Break-it finding: '### User' (capital U) and '### robot' were folded into the previous
    message as text, so the chatbot got a literal '### User' line in its system message; an empty
    '### user' section was accepted. Roles are read in any case; a misspelt header (a role-like
    word, or a role with a colon) and an empty section are input errors naming the line."""
    def load(text):
        path = tmp_path / f"t{len(list(tmp_path.iterdir()))}.txt"
        path.write_text(text)
        return load_template(path)

    tpl = load("### system\nName: {name}\n### User\nHi there\n")
    assert tpl.sections == [("system", "Name: {name}"), ("user", "Hi there")]
    for text, line, said in (("### system\nx\n### robot\ny\n", 3, "'### robot' is not a section header"),
                             ("### system\nx\n### Human:\ny\n", 3, "'### Human:' is not a section header"),
                             ("### system\nx\n### user:\ny\n", 3, "'### user:' is not a section header"),
                             ("### system\nx\n### user\n\n  \n", 3, "the '### user' section is empty")):
        with pytest.raises(LmraInputError, match=said) as err:
            load(text)
        assert err.value.line == line
    # a markdown heading inside a message stays text, one word or several (break-it finding: a
    # custom template's '### Instructions' was refused)
    tpl = load("### system\n### Instructions for you\nbe kind\n### user\n### Context\n{prompt}\n")
    assert tpl.sections == [("system", "### Instructions for you\nbe kind"), ("user", "### Context\n{prompt}")]
