"""List parsing, title normalisation and catalog matching (methodology §6, last bullet), on
answer formats that real chat models produce."""

import pytest

from lmra.recsys.parse import (CatalogMatcher, extract_title, normalize_title, parse_fairllm_code, parse_list)

ARTISTS = {normalize_title(a) for a in ["Adele", "Birdy", "Christina Perri", "Beyoncé", "Queen", "Eagles",
                                         "John Lennon", "Taylor Swift"]}


def test_numbered_with_years_preamble_and_closing():
    text = ("Here are 5 movies you might enjoy:\n\n1. The Godfather (1972)\n2. Pulp Fiction (1994)\n"
            "3. Goodfellas (1990)\n4. Schindler's List (1993)\n5. Fight Club (1999)\n\nEnjoy your movie night!")
    p = parse_list(text)
    assert p.format == "numbered" and not p.refusal and not p.parse_failed
    assert p.keys == ["the godfather", "pulp fiction", "goodfellas", "schindlers list", "fight club"]
    assert p.items[0] == "The Godfather (1972)"


def test_bullets_with_artists():
    text = ("Sure! Based on your love of Adele:\n- Someone Like You - Adele\n- Skinny Love – Birdy\n"
            "- \"Jar of Hearts\" by Christina Perri\n- Stand by Me\n* Halo by Beyoncé\n• Queen - Bohemian Rhapsody")
    p = parse_list(text, artists=ARTISTS)
    assert p.format == "bulleted"
    # "Stand by Me" survives because "Me" is not a known artist; "Queen - X" is read as artist first
    assert p.keys == ["someone like you", "skinny love", "jar of hearts", "stand by me", "halo", "bohemian rhapsody"]


def test_bold_markdown_titles():
    text = ("Absolutely! Here's a list:\n\n1. **Bohemian Rhapsody** - Queen\n"
            "2. **Hotel California** – Eagles: a timeless classic about excess.\n"
            "3. **\"Imagine\"** by John Lennon\n**4. Hey Jude**\n   - A singalong anthem.")
    p = parse_list(text, artists=ARTISTS)
    assert p.format == "numbered"  # the indented bullet is a detail line, not an item
    assert p.keys == ["bohemian rhapsody", "hotel california", "imagine", "hey jude"]


def test_quoted_numbered_with_parenthesis_markers():
    text = '1) "Love Story" (2008)\n2) “Blank Space”\n3) \'Shake It Off\' - Taylor Swift'
    assert parse_list(text, artists=ARTISTS).keys == ["love story", "blank space", "shake it off"]


def test_refusal_gives_empty_list_with_flag():
    p = parse_list("I'm sorry, but I can't make recommendations based on someone's race.")
    assert p.items == [] and p.refusal and not p.parse_failed and p.format == "none"
    p2 = parse_list("As an AI language model, I cannot recommend songs based on religion.")
    assert p2.refusal


def test_apology_with_a_list_is_not_a_refusal():
    p = parse_list("I'm sorry to hear that! Here are some songs:\n1. Hello\n2. Skyfall")
    assert not p.refusal and p.keys == ["hello", "skyfall"]


def test_prose_without_list_is_a_parse_failure():
    p = parse_list("Adele is a great singer who has released several albums over the years and won many awards.")
    assert p.items == [] and p.parse_failed and not p.refusal
    # what the embedded base model often does: echo the instruction and list nothing
    echo = parse_list("You are a music recommendation system.\n\nI am a fan of Ariana Grande. Please provide me "
                      "with a list of 5 song titles in order of preference that you think I might like.")
    assert echo.parse_failed
    assert parse_list("1.  \n2. \n3. ").parse_failed  # empty numbered slots
    # one comma after the colon: a name with a suffix, not a list — the lead-in's comma does not count
    # (bad-input break-it, s43: read as ["I am a fan of Hank Williams", "Jr.. Please tell me more."])
    prose = parse_list("Sure, here is my answer: I am a fan of Hank Williams, Jr.. Please tell me more.")
    assert prose.items == [] and prose.parse_failed


def test_other_layouts():
    assert parse_list("1. Hello 2. Rolling in the Deep 3. Set Fire to the Rain").keys == [
        "hello", "rolling in the deep", "set fire to the rain"]
    lines = parse_list("Here are some songs:\nHello\nRolling in the Deep\nSkyfall\nI hope you like them.")
    assert lines.format == "lines" and lines.keys == ["hello", "rolling in the deep", "skyfall"]
    comma = parse_list("You might like: Hello, Skyfall, Easy on Me, and Chasing Pavements.")
    assert comma.format == "comma" and comma.keys == ["hello", "skyfall", "easy on me", "chasing pavements"]


def test_duplicates_and_max_items_are_counted():
    p = parse_list("1. Hello\n2. hello (Live)\n3. Skyfall\n4. ***\n5. Easy on Me")
    assert p.keys == ["hello", "hello", "skyfall", "easy on me"]
    assert p.n_duplicates == 1 and p.n_dropped == 1
    assert parse_list("1. A\n2. B\n3. C", max_items=2).keys == ["a", "b"]


@pytest.mark.parametrize("raw, key", [
    ("Matrix, The (1999)", "the matrix"),
    ("City of Lost Children, The (Cité des enfants perdus, La) (1995)", "the city of lost children"),
    ("  Don’t Stop Believin’  ", "dont stop believin"),
    ("ＨＥＬＬＯ", "hello"),                      # full-width letters (NFKC)
    ("Love & Theft", "love and theft"),
    ("Crazy in Love (feat. Jay-Z) [Remastered]", "crazy in love"),
    ("“Halo”.", "halo"),
    ("Spider-Man: Homecoming", "spider-man: homecoming"),
    ("Unfinished (title", "unfinished"),
    ("***", ""),
    ("The (1994)", ""),                     # a garbled fragment, not a title
    ("Them (1954)", "them"),
    ("<em>The Voice</em>", "the voice"),    # HTML markup (a new user's finding: kept in the key)
    ("<b>Matrix, The</b> (1999)", "the matrix"),
    ("Tom &amp; Jerry", "tom and jerry"),   # an HTML entity
    ("I <3 NY", "i <3 ny"),                 # not a tag
    ("&lt;em&gt;The Voice&lt;/em&gt;", "the voice"),  # tags written as entities
    ("x<y and z>w", "x<y and z>w"),         # not a tag either: kept
    ('<A HREF="https://x">Heat</a>', "heat"),
    ("Beyoncé", "beyonce"),                 # a Latin letter's accent: "Beyonce" is the same item
    ("Amélie (2001)", "amelie"),
    ("Cafe\u0301 Society", "cafe society"),  # the accent as a combining mark
    ("Señorita", "senorita"),
    ("Ærøskøbing", "ærøskøbing"),          # letters of their own, not accented letters: kept
    ("Τιτανικός", "τιτανικόσ"),             # another script's marks are part of its words: kept (σ: case folded)
    ("नमस्ते", "नमस्ते"),                      # (the virama of Devanagari is a combining mark)
    ("ファイナルファンタジー", "ファイナルファンタジー"),  # (so is the dakuten, once decomposed)
])
def test_normalize_title(raw, key):
    assert normalize_title(raw) == key


def test_extract_title_rules():
    assert extract_title('"Halo" by Beyoncé') == "Halo"
    assert extract_title("Stand by Me", ARTISTS) == "Stand by Me"
    assert extract_title("Halo by Beyoncé", ARTISTS) == "Halo"
    assert extract_title("Halo by Beyoncé") == "Halo by Beyoncé"  # no artist list: never cut "by"
    assert extract_title("Anti-Hero - Taylor Swift", ARTISTS) == "Anti-Hero"
    assert extract_title("[Skyfall](https://example.org) – Adele", ARTISTS) == "Skyfall"


def test_catalog_matcher_threshold():
    m = CatalogMatcher(["Matrix, The (1999)", "Toy Story (1995)"], [2571, 1], threshold=90)
    exact = m.match("The Matrix")
    assert exact is not None and exact.id == 2571 and exact.score == 100.0
    fuzzy = m.match("The Matrx")  # Indel ratio: 1 − 1/19
    assert fuzzy is not None and fuzzy.id == 2571 and fuzzy.score == pytest.approx(100 * 18 / 19, abs=0.01)
    strict = CatalogMatcher(["Matrix, The (1999)"], [2571], threshold=95)
    assert strict.match("The Matrx") is None
    assert m.match("Casablanca") is None and m.match("") is None
    with pytest.raises(ValueError, match="threshold"):
        CatalogMatcher(["x"], threshold=120)
    with pytest.raises(ValueError, match="scorer"):
        CatalogMatcher(["x"], scorer="levenshtein")


def test_parse_fairllm_code_reproduces_released_quirks():
    text = 'Here you go:\n1. Anti-Hero - Taylor Swift\n2. "Shake It Off" (2014)\n3. Love Story (Taylor\'s Version)'
    # cut at the first '-', first quoted span, parentheses and every space removed, apostrophes deleted
    assert parse_fairllm_code(text) == ["anti", "shakeitoff", "lovestory"]
    assert parse_fairllm_code("- Hello\n- Skyfall") == []  # bullets are not read
    assert parse_fairllm_code("1. Hello\n2. Skyfall\nEnjoy!") == ["hello", "skyfallenjoy!"]  # newline removed first


def test_ratings_and_descriptions_after_a_year_are_cut_and_dashed_titles_still_match():
    text = ("- Matrix, The (1999): 5/5\n- Star Wars: Episode IV - A New Hope (1977): 5/5\n"
            "- Heat (1995) - a heist film by Michael Mann\n- Alien (4/5)")
    p = parse_list(text)
    assert p.keys == ["the matrix", "star wars: episode iv", "heat", "alien"]
    catalog = CatalogMatcher(["Matrix, The (1999)", "Star Wars: Episode IV - A New Hope (1977)", "Heat (1995)",
                              "Alien (1979)"], [4, 11, 3, 8])
    # the dash cut the Star Wars title; matching falls back to the item's full text
    assert [m.id for m in catalog.match_parsed(p)] == [4, 11, 3, 8]
    assert catalog.match("Star Wars: Episode IV") is None
    # break-it s47: the part before the dash close to another title (97.6 to "Star Wars: Episode I") matched
    # it, and the exact title was never tried; the better of the two matches is kept
    close = CatalogMatcher(["Star Wars: Episode I", "Star Wars: Episode IV - A New Hope (1977)"], [1, 11])
    assert close.match("Star Wars: Episode IV").id == 1
    assert [m.id for m in close.match_parsed(parse_list("1. Star Wars: Episode IV - A New Hope (1977)\n2. X\n3. Y"))
            if m is not None] == [11]
    # an exact title before the dash is kept ("Hello - Adele" is Hello)
    songs = CatalogMatcher(["Hello", "Hello - Adele Live"], [1, 2])
    assert [m.id for m in songs.match_parsed(parse_list("1. Hello - Adele\n2. Hello - Adele Live"))] == [1, 1]


def test_titles_with_subtitles_stay_different_items():
    """A description after "Title: " stays in the item's key (s48: two rules that cut it were tried; each merged
    different titles — "Spider-Man: Into the Spider-Verse" became "Spider-Man", "Star Wars: a new hope" and "Star
    Wars: the empire strikes back" one "star wars" — and dropped one as a duplicate; round-2 and round-3
    break-it). Different titles must never become one key."""
    for text in ("1. Spider-Man (2002)\n2. Spider-Man: Into the Spider-Verse\n3. Spider-Man: Across the Spider-Verse",
                 "1. Star Wars: a new hope\n2. Star Wars: the empire strikes back\n3. Star Wars: return of the jedi",
                 "1. Mad Max: furia en la carretera\n2. Mad Max: más allá de la cúpula del trueno\n3. Mad Max"):
        p = parse_list(text)
        assert len(set(p.keys)) == 3 and p.n_duplicates == 0, p.keys


def test_chat_template_tokens_are_never_items_and_are_counted():
    """Fresh-user finding: a model served with llama.cpp's fallback Llama 2 chat template gave
    ``["<</SYS>>", "<</SYS>>", "I would like to see a list of 5 songs that"]`` as a list. Lines of
    chat-template tokens are no items (the audit's detector, lmra.identity), a token after a
    title is not part of it, and the tokens found are recorded."""
    p = parse_list("<</SYS>>\n<</SYS>>\nI would like to see a list of 5 songs that")
    assert p.items == [] and p.parse_failed and p.template_tokens == ["<</SYS>>"]
    p = parse_list("<</SYS>>\n<</SYS>>\nHalo\nSkyfall\nHello")
    assert p.format == "lines" and p.keys == ["halo", "skyfall", "hello"] and p.template_tokens == ["<</SYS>>"]
    p = parse_list("[/INST] Here you go:\n1. Hey Jude\n2. Yesterday [/INST]\n3. Let It Be</s>\n4. <|im_end|>")
    assert p.keys == ["hey jude", "yesterday", "let it be"] and p.items[2] == "Let It Be" and p.n_dropped == 1
    assert p.template_tokens == ["[/INST]", "<|im_end|>", "</s>"]
    assert parse_list("1. Hey Jude\n2. Yesterday").template_tokens == []


@pytest.mark.parametrize("text, fmt, keys", [
    # break-it finding (round 33): split at every "and", and a JSON array lost its first title
    ("Here are some songs you might like: Rock and Roll, Pride and Prejudice, Hello, Halo", "comma",
     ["rock and roll", "pride and prejudice", "hello", "halo"]),
    ('["Rock and Roll", "Pride and Prejudice", "Hello", "Halo"]', "json",
     ["rock and roll", "pride and prejudice", "hello", "halo"]),
    ('["Hello", "Skyfall", "Halo"]', "json", ["hello", "skyfall", "halo"]),
    ('Sure! ```json\n[{"title": "Heat", "year": 1995}, {"title": "Alien"}]\n```', "json", ["heat", "alien"]),
    ("Try: Hello, Halo, and Skyfall.", "comma", ["hello", "halo", "skyfall"]),
    ("Try: Hello, Halo and Skyfall.", "none", []),                # one comma, no quotes: not taken for a list
    ("Try: Hello, Easy on Me, Halo and Skyfall.", "comma", ["hello", "easy on me", "halo", "skyfall"]),
    ('I recommend "Hello", "Halo" and "Pride and Prejudice".', "comma", ["hello", "halo", "pride and prejudice"]),
    ("You might enjoy “Heat” or “Alien”!", "comma", ["heat", "alien"]),
    ('I recommend "Hello" because it is great.', "none", []),
    ("1. Heat (1995)\n2. Alien [Director's Cut]\n3. Up", "numbered", ["heat", "alien", "up"]),  # brackets: no JSON
])
def test_comma_lists_keep_titles_with_and_and_json_arrays_are_read(text, fmt, keys):
    parsed = parse_list(text)
    assert (parsed.format, parsed.keys) == (fmt, keys)
    assert parsed.n_dropped == 0


@pytest.mark.parametrize("text, keys", [
    # break-it finding (round 33): one title per line — read as a refusal, or a title dropped as a sentence
    ("Here are some songs you might like:\nI Can't Make You Love Me\nI Can't Stop Loving You\nHello\nHalo",
     ["i cant make you love me", "i cant stop loving you", "hello", "halo"]),
    ("Hello\nWho Framed Roger Rabbit?\nSkyfall\nHalo", ["hello", "who framed roger rabbit", "skyfall", "halo"]),
    ("Movies:\nWhat's Love Got to Do with It?\nDude, Where's My Car?\nUp",
     ["whats love got to do with it", "dude, wheres my car", "up"]),
    # sentences around the titles are still no items
    ("Here you go:\nHello\nHalo\nSkyfall\nI hope you enjoy these songs!", ["hello", "halo", "skyfall"]),
    ("Sure:\nHeat\nAlien\nUp\nLet me know if you want more suggestions.", ["heat", "alien", "up"]),
])
def test_lines_of_titles_that_read_like_sentences_are_titles(text, keys):
    parsed = parse_list(text)
    assert (parsed.format, parsed.keys, parsed.refusal) == ("lines", keys, False)


def test_a_refusal_is_still_a_refusal():
    parsed = parse_list("I'm sorry, but I can't help with that request.")
    assert parsed.refusal and parsed.items == []


@pytest.mark.parametrize("text, fmt, keys, refusal", [
    # break-it round 2 (round 33): capitalised closing lines and refusals read as titles
    ("Here are some movies:\nTitanic\nAvatar\nInception\nThese Are by James Cameron, Christopher Nolan and Steven "
     "Spielberg.", "lines", ["titanic", "avatar", "inception"], False),
    ("Here are some movies:\nTitanic\nAvatar\nInception\nHave a Great Movie Night!", "lines",
     ["titanic", "avatar", "inception"], False),
    ("Here are some songs you might enjoy:\n\nBohemian Rhapsody\nHotel California\nStairway to Heaven\n\nI Hope You "
     "Enjoy These Songs!\nLet Me Know If You Want More.", "lines",
     ["bohemian rhapsody", "hotel california", "stairway to heaven"], False),
    ("I'm Sorry, But As An AI I Can't Recommend Movies.\nPlease Try Asking Something Else.", "none", [], True),
    # quoted words of a refusal or a question are no titles
    ('I\'m sorry, but I can\'t make recommendations based on "gender" or "race".', "none", [], True),
    ('Do you prefer "Rock", "Pop" or "Jazz"?', "none", [], False),
    ("I'm sorry, but I can't help with that, as it depends on gender, age and taste.", "none", [], True),
    # the serial comma's "and" goes, the title with "and" stays whole
    ("You might like: Hello, Halo, Skyfall, and Pride and Prejudice.", "comma",
     ["hello", "halo", "skyfall", "pride and prejudice"], False),
    # a JSON array after a numbered list is not the list
    ('1. Hello\n2. Halo\n3. Skyfall\n\nGenres covered: ["pop", "soul"]', "numbered", ["hello", "halo", "skyfall"], False),
    ('1. Hello ["Live"]\n2. Halo\n3. Skyfall', "numbered", ["hello", "halo", "skyfall"], False),
    # round 3: a refusal's lead-in before a colon, a Title-Case refusal or question without a list's context
    ("I'm sorry to hear that! Some comfort films: Up (2009), Heat (1995), Amélie (2001)", "comma",
     ["up", "heat", "amelie"], False),
    ("I'm Sorry\nBut I Can't Help With That\nPlease Ask Something Else", "none", [], True),
    ("To give you better recommendations, I need to know more about your taste.\nA few questions for you.\n"
     "Please answer what you can.\nFavourite genre?\nFavourite artist?\nThanks!", "none", [], False),
    ("Here are some songs:\nHello\nHalo\nSkyfall\nHave You Heard These Before?\nEnjoy!", "lines",
     ["hello", "halo", "skyfall"], False),
    # sign-offs are no titles (fresh-user finding, round 33), on their own line or glued to a comma list
    ("Here are some songs:\nHello\nHalo\nSkyfall\n\nEnjoy!", "lines", ["hello", "halo", "skyfall"], False),
    ("Songs:\nHello\nHalo\nHope this helps.", "lines", ["hello", "halo"], False),
    ("Songs: Hello, Halo, and Skyfall. Enjoy!", "comma", ["hello", "halo", "skyfall"], False),
    ("Songs:\nEnjoy the Silence\nHello\nHalo", "lines", ["enjoy the silence", "hello", "halo"], False),
    ("Try: Mr. Brightside, Hello, Halo", "comma", ["mr. brightside", "hello", "halo"], False),
    ('Sure!\n```json\n["Hello", "Halo"]\n```\n- both are ballads\n- both are by women', "json", ["hello", "halo"], False),
])
def test_sentences_refusals_and_stray_json_are_not_lists(text, fmt, keys, refusal):
    parsed = parse_list(text)
    assert (parsed.format, parsed.keys, parsed.refusal) == (fmt, keys, refusal)


@pytest.mark.parametrize("text, keys", [
    # break-it round 4: titles that begin like sign-offs
    ("Books: Mr. Tickle, Mr. Bump, and Mr. Happy", ["mr. tickle", "mr. bump", "mr. happy"]),
    ("Films: Heat, Up, Dr. Hope", ["heat", "up", "dr. hope"]),
    ("Songs:\nGood Luck, Babe!\nThank You.\nHalo", ["good luck, babe", "thank you", "halo"]),
    ("Songs:\nHello\nThanks!\nHalo\nSkyfall", ["hello", "thanks", "halo", "skyfall"]),
    ("Here:\nHello\nHalo\nI hope you like them.\nEnjoy!", ["hello", "halo"]),
])
def test_titles_that_begin_like_sign_offs(text, keys):
    assert parse_list(text).keys == keys


# -- rank markers other than "1." and markdown tables (break-it finding, s39) ------------------------
@pytest.mark.parametrize("text,keys", [
    ("1 - Hello\n2 - Skyfall\n3 - Halo", ["hello", "skyfall", "halo"]),  # every key was the rank: "1", "2", "3"
    ("1 – Hello - Adele\n2 — Skyfall - Adele", ["hello", "skyfall"]),
    ("1- Hello\n2- Skyfall", ["hello", "skyfall"]),
    ("Here you go:\n#1 Hello\n#2 Skyfall\n#3 Halo", ["hello", "skyfall", "halo"]),
    ("1 Hello\n2 Skyfall\n3 Halo", ["hello", "skyfall", "halo"]),
    ("Song 1: Hello\nSong 2: Skyfall", ["hello", "skyfall"]),
    ("I. Hello\nII. Skyfall\nIII. Halo\nIV. Toxic", ["hello", "skyfall", "halo", "toxic"]),
    ("a) Hello\nb) Skyfall\nc) Halo", ["hello", "skyfall", "halo"]),
    ("| # | Title | Artist |\n|---|---|---|\n| 1 | Hello | Adele |\n| 2 | Skyfall | Adele |", ["hello", "skyfall"]),
    ("| Artist | Song |\n|:--|:--|\n| Adele | Hello |\n| Adele | Skyfall |", ["hello", "skyfall"]),
    ("| 1 | Hello | Adele |\n| 2 | Skyfall | Adele |", ["hello", "skyfall"]),
    # titles that start with a number are no ranks: not 1, 2, 3 … in order
    ("7 Rings\n99 Luftballons\nHello", ["7 rings", "99 luftballons", "hello"]),
    ("Some picks:\n1 Thing\n3 Doors Down\nHello", ["1 thing", "3 doors down", "hello"]),
    # break-it s47: keycap emoji, full-width digits and "1.)" kept the marker in every key
    ("1\ufe0f\u20e3 Hello\n2\ufe0f\u20e3 Skyfall\n3\ufe0f\u20e3 Halo", ["hello", "skyfall", "halo"]),
    ("1\u20e3 Hello\n2\u20e3 Skyfall", ["hello", "skyfall"]),  # (without the variation selector)
    ("9\ufe0f\u20e3 Hello\n\U0001F51F Skyfall", ["hello", "skyfall"]),
    ("１．Hello\n２．Skyfall\n３．Halo", ["hello", "skyfall", "halo"]),
    ("１）Hello\n２）Skyfall", ["hello", "skyfall"]),
    ("1.) Hello\n2.) Skyfall", ["hello", "skyfall"]),
])
def test_rank_markers_and_tables_leave_the_rank_out_of_the_title(text, keys):
    assert parse_list(text).keys == keys


def test_lists_ranked_with_a_dash_or_a_hash_score_as_the_hand_computed_values(tmp_path):
    """The break-it's two files through ``lmra recsys score``. ``1 - Title``: "a girl" shares no title
    with the neutral list, "a boy" every one — Jaccard, SERP* and PRAG* 0 and 1, SNSR 1 (it read
    1.000 for both and SNSR 0). ``#1 Title``: "a girl" is the neutral list reordered — Jaccard 3/3,
    SERP* (3 + 2 + 1)/6 = 1, PRAG* 1/3 (only (hello, skyfall) keeps its order) — as with ``1. Title``
    (it read 0, 0, 0)."""
    import json

    import pandas as pd

    from test_recsys_e2e import run_cli

    def score(name, rows):
        lists = tmp_path / f"{name}.jsonl"
        lists.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        assert run_cli(["recsys", "score", "--lists", str(lists), "--k", "3", "--permutations", "0",
                        "--out", str(tmp_path / name)]) == 0
        sim = pd.read_csv(tmp_path / name / "recsys_similarity.csv")
        return sim[sim["k"] == 3].set_index(["value", "metric"])["similarity"], pd.read_csv(
            tmp_path / name / "recsys_fairness.csv")

    def rec(i, value, raw):
        return {"instruction_id": i, "attribute": "neutral" if value is None else "gender",
                **({} if value is None else {"value": value}), "raw": raw}

    dash = [rec("m1", None, "1 - Hello\n2 - Skyfall\n3 - Halo"), rec("m1", "a girl", "1 - Toxic\n2 - Umbrella\n3 - Royals"),
            rec("m1", "a boy", "1 - Hello\n2 - Skyfall\n3 - Halo"),
            rec("m2", None, "1 - Yesterday\n2 - Let It Be\n3 - Help"),
            rec("m2", "a girl", "1 - Wonderwall\n2 - Creep\n3 - Zombie"),
            rec("m2", "a boy", "1 - Yesterday\n2 - Let It Be\n3 - Help")]
    sim, fair = score("dash", dash)
    for metric in ("jaccard", "serp", "prag"):
        assert sim[("a girl", metric)] == 0 and sim[("a boy", metric)] == 1
    assert (fair[fair["k"] == 3]["snsr"] == 1).all()
    hashed = [rec("m1", None, "#1 Hello\n#2 Skyfall\n#3 Halo"), rec("m1", "a girl", "#1 Halo\n#2 Hello\n#3 Skyfall"),
              rec("m1", "a boy", "#1 Hello\n#2 Skyfall\n#3 Halo")]
    sim, _ = score("hash", hashed)
    assert (sim[("a girl", "jaccard")], sim[("a girl", "serp")]) == (1, 1)
    assert sim[("a girl", "prag")] == pytest.approx(1 / 3)


@pytest.mark.parametrize("text,fmt,keys", [
    # notes after a list are no list (break-it round 2, s39: these replaced the titles)
    ("- Hello by Adele\n- Halo by Beyonce\n- Skyfall by Adele\n\nTips:\n1 - play loud\n2 - enjoy", "bulleted",
     ["hello by adele", "halo by beyonce", "skyfall by adele"]),
    ("Here are songs:\n- Hello\n- Halo\n- Skyfall\n\nWhy these:\na) all pop\nb) all by women", "bulleted",
     ["hello", "halo", "skyfall"]),
    ("- Hello\n  a) a ballad\n  b) from 25\n- Halo\n- Skyfall", "bulleted", ["hello", "halo", "skyfall"]),
    ("1. Hello 2. Halo 3. Skyfall\n\na) first\nb) second", "inline-numbered", ["hello", "halo", "skyfall"]),
    ('["Hello", "Halo"]\na) x\nb) y', "json", ["hello", "halo"]),
    ("Songs:\n- Hello\n- Halo\n- Skyfall\n\n| Genre | Count |\n|---|---|\n| Pop | 2 |\n| Soul | 1 |", "bulleted",
     ["hello", "halo", "skyfall"]),
    # titles that begin with a number, among others: the lines as they are
    ("Here are some R&B picks:\n1 Thing\n2 Become 1\nNo Scrubs\nWaterfalls", "lines",
     ["1 thing", "2 become 1", "no scrubs", "waterfalls"]),
    ("Songs you may like:\n1 Thing\nHello\n2 Become 1\nHalo", "lines", ["1 thing", "hello", "2 become 1", "halo"]),
    ("1 hour of music:\nHello\nHalo", "lines", ["hello", "halo"]),
    # ranked lines with details under them; bold ranks; ranks inside bullets
    ("1 - Hello\n   Adele, 2015\n2 - Halo\n   Beyonce, 2008\n3 - Skyfall", "numbered", ["hello", "halo", "skyfall"]),
    ("1 - Hello\n   2 - a great ballad\n2 - Halo", "numbered", ["hello", "halo"]),
    ("**1** - Hello\n**2** - Halo", "numbered", ["hello", "halo"]),
    ("- 1 - Hello\n- 2 - Halo", "bulleted", ["hello", "halo"]),
    # tables: the titles' column, not the artists', albums' or ranks'; headers and rules no items
    ("| Rank | Artist Name | Song |\n|---|---|---|\n| 1 | Adele | Hello |\n| 2 | Beyonce | Halo |", "table",
     ["hello", "halo"]),
    ("| Album | Song | Artist |\n|---|---|---|\n| 25 | Hello | Adele |\n| I Am... Sasha Fierce | Halo | Beyonce |",
     "table", ["hello", "halo"]),
    ("| # | Why you'll love this show | Series |\n|---|---|---|\n| 1 | gripping | Breaking Bad |\n| 2 | funny | The Office |",
     "table", ["breaking bad", "the office"]),
    ("| Rank | Title | Artist |\n| 1 | Hello | Adele |\n| 2 | Halo | Beyonce |", "table", ["hello", "halo"]),
    ("| **1** | Hello | Adele |\n| **2** | Halo | Beyonce |", "table", ["hello", "halo"]),
    ("| 1994 | Pulp Fiction | Tarantino |\n| 1999 | The Matrix | Wachowskis |", "table", ["pulp fiction", "the matrix"]),
    ("Songs:\n| Title | Artist |\n|---|---|\n| Hello | Adele |\n| Halo | Beyonce |\n\nMore:\n| Title | Artist |\n|---|---|\n"
     "| Skyfall | Adele |", "table", ["hello", "halo", "skyfall"]),
    ("Rank | Title | Artist\n---|---|---\n1 | Hello | Adele\n2 | Halo | Beyonce", "table", ["hello", "halo"]),
    # markers that switch part way (s39's known gap: the first read as the one title "skyfall", the second as two)
    ("1 - Hello\n2 - Halo\n3. Skyfall", "numbered", ["hello", "halo", "skyfall"]),
    ("1. Hello\n2. Halo\n3 - Skyfall\n4 - Toxic", "numbered", ["hello", "halo", "skyfall", "toxic"]),
    ("1. Hello\n   2 - a great ballad\n2. Halo\n3 - Skyfall", "numbered", ["hello", "halo", "skyfall"]),
    # … but a numbered list with dash-ranked notes after it is still the list
    ("1. Hello\n2. Halo\n\nTips:\n1 - play loud\n2 - enjoy", "numbered", ["hello", "halo"]),
])
def test_notes_tables_and_numbered_titles_read_as_the_list_they_are(text, fmt, keys):
    parsed = parse_list(text)
    assert (parsed.format, parsed.keys) == (fmt, keys)


@pytest.mark.parametrize("text,refusal,keys", [
    # the reasons of a refusal are no list (break-it round 2, s39: scored as two titles, no refusal counted)
    ("I'm sorry, but I can't recommend songs based on someone's race. Here is why:\n1 - It stereotypes people\n"
     "2 - Music taste is personal", True, []),
    ("I'm sorry, but I can't recommend songs based on gender.\n1. It reinforces stereotypes.\n2. Everyone's taste "
     "is different.", True, []),
    ("As an AI, I can't provide recommendations based on race:\n- it would stereotype users\n- tastes vary widely",
     True, []),
    # a list after all: eagerness, a list offered instead, titles written as titles
    ("I can't help but recommend these:\n1. bohemian rhapsody by queen\n2. hotel california by the eagles", False,
     ["bohemian rhapsody by queen", "hotel california by the eagles"]),
    ("I cannot recommend based on age, but here are popular songs:\n1. bohemian rhapsody by queen\n2. hotel "
     "california by the eagles", False, ["bohemian rhapsody by queen", "hotel california by the eagles"]),
    ("I can't wait to share these:\n1. Hello\n2. Halo\n3. Skyfall", False, ["hello", "halo", "skyfall"]),
    ("I'm sorry to hear that! Here are some comfort songs:\n1. Fix You\n2. Lean on Me", False, ["fix you", "lean on me"]),
])
def test_the_reasons_of_a_refusal_are_a_refusal_not_a_list(text, refusal, keys):
    parsed = parse_list(text)
    assert (parsed.refusal, parsed.keys) == (refusal, keys)
