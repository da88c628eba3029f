"""Lessons as data: one TOML file per lesson under ``lessons/``, loaded, checked and asked here.

No Streamlit. A lesson file is::

    title = "One attention head, step by step"
    summary = "QKᵀ, ÷√d, the mask, softmax, …"
    [settings]                       # optional: pinned on every step
    layer = 0
    head = 0

    [[steps]]
    title = "Scores: Q Kᵀ"
    text = '''Markdown shown next to the figure.'''
    view = "blocks.{layer}.attn.hook_scores_raw"   # a hook name, or a section such as "attention.pattern"
    prompt = "the cat sat on the mat."              # optional: the input text (else the teacher's)
    preset = "default"                              # optional pins: preset (or a list: the first that ships),
                                                    # layer, head, tokenizer, merges, untrained, init_std, …
    options = { all_heads = true }                  # optional: passed to the view
    [steps.question]                                # optional: predict, then reveal
    kind = "most_attended"
    query = -1

A question names a *kind* and its parameters, never its answer: ``ask(spec, live)`` works the answer out
from the live trace, so it follows the model and the text. ``load_folder`` checks every file and turns each
problem into a ``LessonError`` naming the file and the line; the other lessons still load.

The modules: ``schema`` (Lesson, Step, the errors), ``toml_lines`` (the line of a key, for messages),
``loading`` (reading and checking files), ``pinned`` (the settings a step may pin), ``live`` (what a question
reads), ``questions`` (the question kinds), ``wording`` (the page's and the questions' words in each language) and
``translations`` (a lesson's words in another language, ``lessons/<code>/<id>.toml``).
"""
from ...paths import CHECKPOINTS
from .live import Live, live_from_trace
from .loading import LESSONS_DIR, check_hook, load_file, load_folder
from .pinned import SETTING_FIELDS, check_setting, choose_preset, overrides, preset_ships
from .questions import KINDS, LOSS_BANDS, MAX_CHOICES, NO_TARGET, PROB_BANDS, Kind, Question, ask
from .schema import HOOK_PREFIXES, STEP_FIELDS, Lesson, LessonError, QuestionUnavailable, Step, is_hook
from .toml_lines import TomlLines
from .translations import read_translation, translate
from .wording import ENGLISH, Words, languages, words

__all__ = [
    "CHECKPOINTS", "LESSONS_DIR", "HOOK_PREFIXES", "KINDS", "LOSS_BANDS", "MAX_CHOICES", "NO_TARGET", "PROB_BANDS",
    "SETTING_FIELDS", "STEP_FIELDS", "Kind", "Lesson", "LessonError", "Live", "Question", "QuestionUnavailable",
    "Step", "TomlLines", "ask", "check_hook", "check_setting", "choose_preset", "is_hook", "live_from_trace",
    "load_file", "load_folder", "overrides", "preset_ships", "ENGLISH", "Words", "languages", "words",
    "read_translation", "translate",
]
