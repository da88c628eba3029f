"""The lessons' own words in every language: the lesson page's labels and the question kinds' wording.

English is here, in ``ENGLISH``. Every other language is data beside the lessons: a folder ``lessons/<code>/``
(``es``, ``zh``, …) holding ``_words.toml`` (``language = "Español"`` and any of ENGLISH's keys, translated) and
the translated lessons. A language appears in the app once its ``_words.toml`` exists. A key a translation lacks,
or a template that does not fill (a field misspelt), reads in English: a class never sees a broken sentence.

A template is Python's ``str.format``: ``{layer}``, ``{p:.2f}``. Each translation uses the same fields as the
English (tests/test_lesson_languages.py checks it).
"""
from __future__ import annotations

import re
import string
import threading
import tomllib
from pathlib import Path
from typing import Any

from ...paths import LESSONS

WORDS_FILE = "_words.toml"
LANG_CODE = re.compile(r"[a-z]{2,3}(-[A-Za-z0-9]{2,8})?")  # BCP 47's usual shapes: es, zh, pt-BR, zh-Hant
MAX_WORDS_BYTES = 200_000  # a words file, at most

ENGLISH: dict[str, str] = {
    "language": "English",
    # the lesson page
    "lesson": "Lesson",
    "previous": "◀ Previous",
    "next": "Next ▶",
    "reveal": "Reveal",
    "reveal_help": "Pick an answer first (or press its number), then reveal the truth (R).",
    "pick_first": "Pick an answer first, then reveal it.",
    "ask_again": "Ask again",
    "right": "**Right!**",
    "not_quite": "Not quite: the answer is **{answer}**.",
    "from_live": "It comes from the live model: change the text or the model and it changes with it.",
    "answer": "Answer: {answer}",
    "unavailable": "This step's question can't be asked of this model and text: {why}.",
    "step_text": "The step's text",
    "formula_code": "Formula and PyTorch",
    "step_of": "Step {i} of {n}",
    "keys": "← and → move between steps",
    "present_hint": "presenter mode: the toggle at the top, or ?present=1 in the address",
    "presenter_mode": "Presenter mode",
    "presenter_help": "Sidebar collapsed, larger text and charts, one step per screen for a 1280×720 projector. Kept "
                      "in the address bar (?present=1). ← and → move between steps.",
    "no_translation": "This lesson has no {language} translation yet, so it is shown in English.",
    # the question kinds
    "most_attended.prompt": "Which token will layer {layer} head {head} attend to most from token {i} ('{token}'): "
                            "itself or an earlier one?",
    "most_attended.explanation": "Row {i} ('{token}') of layer {layer} head {head}'s attention weights puts "
                                 "**{p:.2f}** on position {ans} ('{ans_token}'), more than on any other key.",
    "most_attended.second": "Next is position {second} ('{second_token}') with {p2:.2f}.",
    "uniform_loss.prompt": "Before any training, what loss does a model that spreads its guess evenly over all {V:,} "
                           "tokens get?",
    "uniform_loss.explanation": "A uniform guess gives each of the V = {V:,} tokens p = 1/{V:,}, so every position "
                                "costs −ln(1/{V:,}) = ln {V:,} = **{ans:.3f}**, and so does their mean.",
    "loss_vs_uniform.prompt": "This model's loss on the text, against ln V = {ln_v:.3f} (a uniform guess): where will "
                              "it be?",
    "loss_vs_uniform.explanation": "The live loss is **{loss:.3f}**, {ratio:.2f} × ln V.",
    "loss_band.0": "well below ln V: better than guessing",
    "loss_band.1": "about ln V (within 10%)",
    "loss_band.2": "well above ln V: confidently wrong",
    "greedy_next.prompt": "Which token will greedy decoding pick after “{before}”?",
    "greedy_next.explanation": "Greedy decoding takes the most likely token: {ans} with p = **{p:.3f}**.",
    "greedy_next.second": "Next: {second} with {p2:.3f}.",
    "nucleus_size.prompt": "With {what}, how many tokens can still be drawn after “{before}”?",
    "nucleus_size.temperature": "temperature {temperature:g}",
    "nucleus_size.explanation": "Sorted from most likely, the first **{ans}** token(s) reach a total of {top_p:g} "
                                "(they hold {held:.3f} before renormalising); every other token is cut.",
    "target_prob.prompt": "At token {pos} ('{token}') the true next token is {target}. What probability does the "
                          "model give it? (1/V = {inv_v:.3f})",
    "target_prob.explanation": "p({target} | the text up to token {pos}) = **{p:.3f}**; −log p = {nll:.2f} is what "
                               "this position adds to the loss.",
    "prob_band.0": "less than half of 1/V (worse than a uniform guess)",
    "prob_band.1": "about 1/V (between half and twice)",
    "prob_band.2": "between 2/V and 0.5",
    "prob_band.3": "more than 0.5",
    "token_count.prompt": "How many tokens does the tokenizer make of “{text}”? ({chars} characters, {words} words)",
    "token_count.explanation": "**{n}** tokens: each merge the tokenizer learned joins a frequent pair of characters "
                               "into one token, so there are fewer tokens than the {chars} characters.",
    "target_at.prompt": "x[{b}, {pos}] is '{token}'. What is the target y[{b}, {pos}]?",
    "target_at.no_target": "−100 (nothing to predict)",
    "target_at.next": "y[{b}, {pos}] = **{answer}**: the token at position {next_pos}. y is x shifted left by one, "
                      "so at every position the model must predict the token that comes next.",
    "target_at.last": "y[{b}, {pos}] = **{answer}**: the last token has no next token, so its target is −100, which "
                      "the loss ignores.",
    "best_head.prompt": "Which head is the strongest {kind} head? Such a head {description}",
    "best_head.explanation": "Scored {where} ({how}): layer {layer} head {head} scores **{score:.2f}**; a head that "
                             "spread its weight evenly would score about {even:.2f}.",
    "best_head.on_probe": "on a probe of random tokens repeated twice",
    "best_head.on_text": "on your text",
    "head_kind.previous": "previous-token",
    "head_kind.induction": "induction",
    "head_kind.duplicate": "duplicate-token",
    "head_kind.first": "first-token",
    "head_kind.current": "current-token",
    "head_does.previous": "looks at the token just before: the first half of an induction circuit, and of many "
                          "bigram-like features.",
    "head_does.induction": "finds the earlier occurrence of the current token and looks at what came after it, so "
                           "the model can copy it: …A B … A → B.",
    "head_does.duplicate": "looks at earlier copies of the current token: 'have I seen this before?'.",
    "head_does.first": "parks its weight on the first token when it has nothing better to do (an attention sink).",
    "head_does.current": "looks at its own position.",
    "head_how.previous": "mean weight on position t−1",
    "head_how.induction": "mean weight on the position after an earlier occurrence of the current token",
    "head_how.duplicate": "mean weight on earlier occurrences of the current token",
    "head_how.first": "mean weight on position 0 (queries after the first)",
    "head_how.current": "mean weight on position t",
}


def fields(template: str) -> set[str]:
    """The names a template fills: ``{layer}`` and ``{p:.2f}`` give {"layer", "p"}."""
    return {name.split(".")[0].split("[")[0] for _, name, _, _ in string.Formatter().parse(template) if name}


class Words:
    """One language's words: ``w("key", **fields)`` is the filled template, in English where the language lacks
    the key or its template does not fill."""

    def __init__(self, code: str, table: dict[str, str]):
        self.code, self.table = code, table

    @property
    def name(self) -> str:
        return self.table.get("language", ENGLISH["language"])

    def __call__(self, key: str, **values: Any) -> str:
        template = self.table.get(key)
        if template is not None:
            try:
                return template.format(**values)
            except (KeyError, IndexError, ValueError):
                pass
        return ENGLISH[key].format(**values)


def read_words(path: Path) -> dict[str, str]:
    """A ``_words.toml``: its string entries whose key English has (the rest are ignored); {} if unreadable."""
    try:
        if path.stat().st_size > MAX_WORDS_BYTES:
            return {}
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return {}
    return {k: v for k, v in data.items() if k in ENGLISH and isinstance(v, str)}


_cache: dict[Path, tuple[tuple, dict]] = {}
_lock = threading.Lock()


def _stamp(path: Path) -> tuple:
    try:
        st = path.stat()
        return (st.st_mtime_ns, st.st_size)
    except OSError:
        return ()


def _table(folder: Path, code: str) -> dict[str, str]:
    path = Path(folder) / code / WORDS_FILE
    stamp = _stamp(path)
    with _lock:
        hit = _cache.get(path)
    if hit is not None and hit[0] == stamp:
        return hit[1]
    table = read_words(path) if stamp else {}
    with _lock:
        _cache[path] = (stamp, table)
    return table


_subfolders: dict[Path, tuple[tuple, list[str]]] = {}


def _language_folders(folder: Path) -> list[str]:
    """The language codes of ``folder``'s subfolders (at most 50, by code), listed again only when the folder's own
    stamp changes (a subfolder made, removed or renamed): every page's sidebar asks, on every run."""
    stamp = _stamp(folder)
    with _lock:
        hit = _subfolders.get(folder)
    if hit is not None and hit[0] == stamp:
        return hit[1]
    try:
        codes = sorted(p.name for p in folder.iterdir() if p.is_dir() and LANG_CODE.fullmatch(p.name))[:50]
    except OSError:
        codes = []
    with _lock:
        _subfolders[folder] = (stamp, codes)
    return codes


def languages(folder: Path | str = LESSONS) -> dict[str, str]:
    """code -> the language's own name: English first, then each ``lessons/<code>/_words.toml``, by code. A words
    file added to or removed from a language's folder counts at once (its own stamp is read on every call)."""
    out = {"en": ENGLISH["language"]}
    folder = Path(folder)
    for code in _language_folders(folder):
        if code != "en" and _stamp(folder / code / WORDS_FILE):
            out[code] = _table(folder, code).get("language", code)
    return out


def words(lang: str = "en", folder: Path | str = LESSONS) -> Words:
    """The words of ``lang`` (English for "en" or a language with no words file)."""
    if lang == "en" or not isinstance(lang, str) or not LANG_CODE.fullmatch(lang):
        return Words("en", dict(ENGLISH))
    return Words(lang, _table(Path(folder), lang))
