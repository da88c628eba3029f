"""Lessons in other languages (lessons/<code>/): each words file has every English key with the same fields; a
translated lesson has the English lesson's steps, views, settings and questions, with its own words; a question
asked in Spanish or Chinese on a live model has the English question's answer, value and choices count, in other
words; a missing or broken translation falls back to English with a reason; ``?lang=`` is read and bounded, and the
Lessons page speaks the language."""
import shutil
import string
import tomllib
from pathlib import Path

import pytest
from apphelp import ROOT
from streamlit.testing.v1 import AppTest

from gptviz import GPT, encode_batch, get_tokenizer, preset, trace
from gptviz.present import lessons as L
from gptviz.present import url_params

LANGS = ["es", "zh"]
ALL = ["01_text_to_token_ids", "02_one_attention_head", "03_initial_loss", "04_what_training_changes",
       "05_logits_to_text", "06_attention_is_not_explanation", "07_routes_neurons_features",
       "08_tracing_a_circuit"]
# the lessons translated so far, by language
TRANSLATED = {"es": ALL, "zh": ALL}
TEXT = "the cat sat on the mat. the dog sat on the log."


def _names(template: str) -> set[str]:
    """A template's fields, read with the standard library's own parser (not gptviz's)."""
    return {n.split(".")[0].split("[")[0] for _, n, _, _ in string.Formatter().parse(template) if n}


@pytest.mark.parametrize("lang", LANGS)
def test_each_words_file_has_every_key_with_the_english_fields(lang):
    table = tomllib.loads((ROOT / "lessons" / lang / "_words.toml").read_text(encoding="utf-8"))
    assert set(table) == set(L.ENGLISH)
    for key, english in L.ENGLISH.items():
        assert _names(table[key]) == _names(english), key
        if key not in ("language",) and len(english) > 12:
            assert table[key] != english, f"{lang}: {key} is not translated"
    assert L.languages()[lang] == table["language"]


@pytest.mark.parametrize("lang,lid", [(lang, lid) for lang, ids in TRANSLATED.items() for lid in ids])
def test_a_translation_keeps_the_english_steps_views_settings_and_questions(lang, lid):
    english = L.load_file(ROOT / "lessons" / f"{lid}.toml")
    raw = tomllib.loads((ROOT / "lessons" / lang / f"{lid}.toml").read_text(encoding="utf-8"))
    ours, why = L.translate(english, lang)
    assert why == ""
    assert len(ours.steps) == len(english.steps) == len(raw["steps"])
    assert ours.title == raw["title"] != english.title and ours.id == english.id
    assert ours.summary == raw["summary"] != english.summary  # the file's own summary, not the English one
    for k, (a, b) in enumerate(zip(ours.steps, english.steps)):
        assert (a.view, a.settings, a.options, a.question) == (b.view, b.settings, b.options, b.question), k
        assert a.title == raw["steps"][k]["title"] != b.title
        assert a.text.strip() and a.text == raw["steps"][k]["text"]
        # the same formulas and code: every $…$ and `…` of the English text is in the translation
        for piece in [p for p in b.text.split("$") if "\\" in p] + b.text.split("`")[1::2]:
            assert piece in a.text, (k, piece)


@pytest.fixture(scope="module")
def live():
    tok = get_tokenizer("char-bpe", num_merges=20, lowercase=True)
    cfg = preset("default", vocab_size=tok.vocab_size)
    model = GPT(cfg)
    b = encode_batch(tok, TEXT, cfg.block_size)
    return L.live_from_trace(trace(model, b.x, targets=b.y, attention_mask=b.attention_mask), tok, layer=1,
                             model=model)


SPECS = [{"kind": "most_attended", "query": -1}, {"kind": "uniform_loss"}, {"kind": "loss_vs_uniform"},
         {"kind": "greedy_next"}, {"kind": "nucleus_size", "top_p": 0.5, "temperature": 2.0}, {"kind": "target_prob"},
         {"kind": "token_count"}, {"kind": "target_at", "pos": 2}, {"kind": "target_at", "pos": -1},
         {"kind": "best_head", "behaviour": "previous"}, {"kind": "best_head", "behaviour": "induction"}]


@pytest.mark.parametrize("lang", LANGS)
@pytest.mark.parametrize("spec", SPECS, ids=lambda s: "-".join(map(str, s.values())))
def test_a_question_in_another_language_has_the_same_answer(live, lang, spec):
    en, other = L.ask(spec, live, "en"), L.ask(spec, live, lang)
    assert (other.correct, len(other.choices), other.highlight) == (en.correct, len(en.choices), en.highlight)
    assert other.value == en.value
    assert other.prompt != en.prompt and other.explanation != en.explanation
    assert "{" not in other.prompt + other.explanation  # every field filled
    words = tomllib.loads((ROOT / "lessons" / lang / "_words.toml").read_text(encoding="utf-8"))
    kind = spec["kind"]
    head = words[f"{kind}.prompt"].split("{")[0]
    assert other.prompt.startswith(head)


def test_every_lesson_file_is_listed_and_no_translation_lacks_its_english_lesson():
    assert sorted(p.stem for p in (ROOT / "lessons").glob("*.toml")) == ALL
    for lang in LANGS:
        have = sorted(p.stem for p in (ROOT / "lessons" / lang).glob("*.toml") if p.name != "_words.toml")
        assert have == sorted(TRANSLATED[lang]), lang


def test_a_missing_or_broken_translation_falls_back_to_english(tmp_path):
    english = L.load_file(ROOT / "lessons" / "06_attention_is_not_explanation.toml")
    (tmp_path / "fr").mkdir()
    assert L.translate(english, "fr", tmp_path) == (english, "missing")
    good = (ROOT / "lessons" / "es" / f"{english.id}.toml").read_text(encoding="utf-8")
    path = tmp_path / "fr" / f"{english.id}.toml"
    path.write_text(good.replace('[[steps]]\ntitle = "Por qué no coinciden"', '[[bad]]\ntitle = "x"'), "utf-8")
    lesson, why = L.translate(english, "fr", tmp_path)
    assert lesson is english and "bad" in why
    path.write_text(good.rsplit("[[steps]]", 1)[0], "utf-8")
    lesson, why = L.translate(english, "fr", tmp_path)
    assert lesson is english and "4 steps" in why and "has 5" in why
    path.write_text(good.replace('title = "Dónde mira una cabeza"', 'title = "x"\nview = "hook_embed"'), "utf-8")
    assert "title and a text only" in L.translate(english, "fr", tmp_path)[1]
    assert L.translate(english, "../es", tmp_path)[0] is english  # a code is never a path


def test_a_words_file_without_a_key_or_with_a_misspelt_field_reads_in_english(tmp_path):
    (tmp_path / "fr").mkdir()
    (tmp_path / "fr" / "_words.toml").write_text('language = "Français"\nreveal = "Révéler"\n'
                                                 'step_of = "Étape {j} sur {n}"\n', "utf-8")
    w = L.words("fr", tmp_path)
    assert (w.name, w("reveal"), w("next")) == ("Français", "Révéler", "Next ▶")
    assert w("step_of", i=3, n=5) == "Step 3 of 5"
    assert L.languages(tmp_path) == {"en": "English", "fr": "Français"}


def test_the_address_carries_a_known_language_and_only_that():
    s, notes = url_params.read({"lang": "zh"})
    assert s["lang"] == "zh" and not notes
    for bad in ("xx", "../es", "<b>es</b>", "e" * 5000):
        s, notes = url_params.read({"lang": bad})
        assert s["lang"] == "en" and len(notes) == 1


def _page(**query) -> AppTest:
    at = AppTest.from_file(str(ROOT / "app_pages" / "lessons.py"), default_timeout=180)
    for k, v in {"preset": "default", **query}.items():
        at.query_params[k] = v
    at.run()
    assert not at.exception and not at.error, [e.message for e in at.exception]
    return at


def test_the_lessons_page_speaks_spanish_with_the_same_answer():
    at = _page(lang="es", lesson="01_text_to_token_ids", lstep="1")
    es = tomllib.loads((ROOT / "lessons" / "es" / "01_text_to_token_ids.toml").read_text(encoding="utf-8"))
    assert any(es["steps"][0]["title"] in m.value for m in at.markdown)
    assert {b.label for b in at.button} >= {"◀ Anterior", "Siguiente ▶", "Revelar"}
    radio = at.radio(key="lessons.answer.01_text_to_token_ids.0")
    en = _page(lesson="01_text_to_token_ids", lstep="1").radio(key="lessons.answer.01_text_to_token_ids.0")
    assert radio.options == en.options  # token counts: the same choices
    radio.set_value(0).run()  # pick the first choice, reveal, and read the verdict in Spanish
    at.button(key="lessons.reveal.01_text_to_token_ids.0").click().run()
    said = " ".join(m.value for m in at.markdown)
    assert "**¡Correcto!**" in said or "No exactamente" in said
    assert any(b.label == "Preguntar de nuevo" for b in at.button)


def test_a_lesson_not_yet_translated_shows_english_with_a_notice(monkeypatch):
    """Every lesson is translated now, so the page is shown a translation that is missing (as a new lesson's is)."""
    from gptviz.present.lessons import translations

    real = translations.read_translation

    def missing_for_lesson_5(lesson, lang, *args, **kwargs):
        if lesson.id == "05_logits_to_text":
            raise FileNotFoundError(lesson.id)
        return real(lesson, lang, *args, **kwargs)

    monkeypatch.setattr(translations, "read_translation", missing_for_lesson_5)
    at = _page(lang="zh", lesson="05_logits_to_text", lstep="1")
    assert any("这节课还没有中文译文" in c.value for c in at.caption)
    assert any("Logits become probabilities" in m.value for m in at.markdown)
    assert any(b.label == "下一步 ▶" for b in at.button)


@pytest.mark.parametrize("lang, notice", [("es", "aún no está traducida"), ("zh", "这节课还没有中文译文")],
                         ids=["es", "zh"])
def test_a_broken_translation_shows_english_with_a_notice_saying_what_is_wrong(tmp_path, monkeypatch, lang, notice):
    """The page reads a copy of lessons/ in which this language's lesson 3 is broken (a step too few): it shows the
    English lesson (its first step's title and summary, read with tomllib from the English file) and, in the
    class's language, a notice that it is not translated with the reason (the step counts)."""
    from gptviz.present.lessons import translations

    folder = tmp_path / "lessons"
    shutil.copytree(ROOT / "lessons", folder)
    lid = "03_initial_loss"
    path = folder / lang / f"{lid}.toml"
    path.write_text(path.read_text(encoding="utf-8").rsplit("[[steps]]", 1)[0], "utf-8")  # drop the last step
    real = translations.read_translation
    monkeypatch.setattr(translations, "read_translation",
                        lambda lesson, code, *args, **kwargs: real(lesson, code, folder))
    english = tomllib.loads((ROOT / "lessons" / f"{lid}.toml").read_text(encoding="utf-8"))
    n = len(english["steps"])
    at = _page(lang=lang, lesson=lid, lstep="1")
    assert any(english["steps"][0]["title"] in m.value for m in at.markdown)
    assert english["summary"] in [c.value for c in at.caption]
    notes = [c.value for c in at.caption if notice in c.value]
    assert len(notes) == 1 and f"{n - 1} steps" in notes[0] and f"has {n}" in notes[0], [c.value for c in at.caption]
    words = tomllib.loads((ROOT / "lessons" / lang / "_words.toml").read_text(encoding="utf-8"))
    assert words["language"] in notes[0]  # names the language
    # the other lessons of the language are untouched: lesson 1 still reads translated, with no notice
    at = _page(lang=lang, lesson="01_text_to_token_ids", lstep="1")
    raw = tomllib.loads((folder / lang / "01_text_to_token_ids.toml").read_text(encoding="utf-8"))
    assert any(raw["steps"][0]["title"] in m.value for m in at.markdown)
    assert not any(notice in c.value for c in at.caption)


def test_a_teacher_adds_a_language_as_data(tmp_path, monkeypatch):
    """A new folder with a words file and one lesson: the language appears, and that lesson reads in it."""
    folder = tmp_path / "lessons"
    shutil.copytree(ROOT / "lessons", folder)
    (folder / "fr").mkdir()
    (folder / "fr" / "_words.toml").write_text('language = "Français"\n', "utf-8")
    english = L.load_file(folder / "03_initial_loss.toml")
    steps = "".join(f'[[steps]]\ntitle = "Étape {k}"\ntext = "…"\n' for k in range(len(english.steps)))
    (folder / "fr" / "03_initial_loss.toml").write_text(f'title = "La perte initiale"\n{steps}', "utf-8")
    assert L.languages(folder)["fr"] == "Français"
    lesson, why = L.translate(english, "fr", folder)
    assert why == "" and lesson.title == "La perte initiale" and lesson.steps[1].title == "Étape 1"
    assert Path(folder / "fr").is_dir()


@pytest.mark.parametrize("lang", ["es", "zh"])
@pytest.mark.parametrize("lid", ALL)
def test_every_lesson_opens_in_every_language(lang, lid):
    """Each lesson's first and last steps open on the Lessons page in the language, titled as its translation says,
    with the translation's own summary on the first step and no notice of a missing translation."""
    raw = tomllib.loads((ROOT / "lessons" / lang / f"{lid}.toml").read_text(encoding="utf-8"))
    for k in (1, len(raw["steps"])):
        at = _page(lang=lang, lesson=lid, lstep=str(k))
        assert any(raw["steps"][k - 1]["title"] in m.value for m in at.markdown), (lang, lid, k)
        if k == 1:  # the summary under the first step's title: the translation's own, read with tomllib
            english = tomllib.loads((ROOT / "lessons" / f"{lid}.toml").read_text(encoding="utf-8"))["summary"]
            shown = [c.value for c in at.caption]
            assert raw["summary"] in shown and english not in shown, (lang, lid)
        assert not any("这节课还没有中文译文" in c.value or "aún no está traducida" in c.value for c in at.caption)


def test_the_languages_follow_their_folders_without_listing_an_unchanged_one_again(tmp_path, monkeypatch):
    """The sidebar asks for the languages on every run: the lessons folder is listed again only when its stamp
    changes (a language's folder made or removed), and a words file added to or removed from a language's folder
    counts at once."""
    import os

    from gptviz.present.lessons import wording

    folder = tmp_path / "lessons"
    (folder / "es").mkdir(parents=True)
    (folder / "es" / "_words.toml").write_text('language = "Español"\n', "utf-8")
    (folder / "fr").mkdir()  # a folder without its words file yet
    listed = []
    real_iterdir = type(folder).iterdir

    def iterdir(self):
        listed.append(self)
        return real_iterdir(self)

    monkeypatch.setattr(type(folder), "iterdir", iterdir)
    assert L.languages(folder) == {"en": "English", "es": "Español"}
    assert L.languages(folder) == {"en": "English", "es": "Español"} and len(listed) == 1
    (folder / "fr" / "_words.toml").write_text('language = "Français"\n', "utf-8")
    assert L.languages(folder) == {"en": "English", "es": "Español", "fr": "Français"} and len(listed) == 1
    (folder / "de").mkdir()
    (folder / "de" / "_words.toml").write_text('language = "Deutsch"\n', "utf-8")
    os.utime(folder, ns=(0, os.stat(folder).st_mtime_ns + 1_000_000_000))  # a coarse clock still sees the change
    assert list(L.languages(folder)) == ["en", "de", "es", "fr"] and len(listed) == 2
    (folder / "es" / "_words.toml").unlink()
    assert list(L.languages(folder)) == ["en", "de", "fr"]
    wording._subfolders.pop(folder, None)


def test_what_counts_as_a_language_folder(tmp_path):
    """Only a folder named by a language code with a words file is a language (a file named like a code, or a folder
    named otherwise, is not); "en" is always English's own words; a words file without a language name is called by its
    code; at most 50 languages are read; a lessons folder that is missing gives English alone."""
    from gptviz.present.lessons import wording

    folder = tmp_path / "lessons"
    folder.mkdir()
    (folder / "fr").write_text("a file, not a folder", "utf-8")
    (folder / "not_a_code").mkdir()
    (folder / "not_a_code" / "_words.toml").write_text('language = "Nope"\n', "utf-8")
    (folder / "en").mkdir()
    (folder / "en" / "_words.toml").write_text('language = "Anglais"\n', "utf-8")
    (folder / "de").mkdir()
    (folder / "de" / "_words.toml").write_text('title = "Titel"\n', "utf-8")  # no language name
    assert L.languages(folder) == {"en": "English", "de": "de"}
    many = tmp_path / "many"
    for a in "abc":
        for b in "abcdefghijklmnopqrstuvwxyz":
            (many / f"{a}{b}").mkdir(parents=True)
            (many / f"{a}{b}" / "_words.toml").write_text(f'language = "L{a}{b}"\n', "utf-8")
    got = L.languages(many)
    assert len(got) == 51 and list(got)[-1] == "bx"  # English and the first 50 by code: aa … az, ba … bx
    assert L.languages(tmp_path / "missing") == {"en": "English"}
    for f in (folder, many, tmp_path / "missing"):
        wording._subfolders.pop(f, None)
