"""The question kinds: each works its answer out from the live trace, so it follows the model and the text, and
words it in the class's language (``wording``: the same answer, the same choices in the same order, in any
language)."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Optional

import numpy as np
import torch

from ...interp import head_detector
from ...run.generation import distribution
from ..markdown_text import plain_md
from ..page_context import probe_rows
from .live import Live
from .schema import QuestionUnavailable
from .wording import ENGLISH, Words, words

MAX_CHOICES = 8


@dataclass
class Question:
    prompt: str
    choices: list[str]
    correct: int
    value: Any  # the answer itself: a position, a token id, a number, (layer, head)
    explanation: str  # how the answer follows from the live numbers
    highlight: dict  # what to mark on a figure: {"hook", "row", "col"} | {"token", "pos"} | {"value"} | …
    view: str = ""  # the section that shows the answer when the step's own view cannot
    options: dict = field(default_factory=dict)  # that section's options
    settings: dict = field(default_factory=dict)  # settings it pins (e.g. the answer's layer and head)

    @property
    def answer(self) -> str:
        return self.choices[self.correct]


@dataclass
class Kind:
    fn: Callable
    params: tuple = ()
    required: tuple = ()
    types: dict = field(default_factory=dict)  # param -> (types, description)
    doc: str = ""

    def check(self, p: str, value: Any) -> Optional[str]:
        if p == "behaviour" and value not in head_detector.KINDS:
            return f"'behaviour' must be one of {', '.join(head_detector.KINDS)}"
        if p == "kind" or p not in self.types:
            return None
        types, what = self.types[p]
        if isinstance(value, bool) and bool not in types:
            return f"{p!r} must be {what}"
        return None if isinstance(value, types) else f"{p!r} must be {what}"


def _pos(live: Live, value, default: int) -> int:
    """A position: an int (negative counts from the end of the text), or a token's text (its last occurrence)."""
    n = live.n_pos
    if value is None:
        value = default
    if isinstance(value, str):
        want = value.strip().lower()
        hits = [i for i, t in enumerate(live.tokens) if t.replace("␣", " ").strip().lower() == want]
        if not hits:
            raise QuestionUnavailable(f"the text has no token {value!r}")
        return hits[-1]
    i = int(value)
    i = n + i if i < 0 else i
    if not 0 <= i < n:
        raise QuestionUnavailable(f"position {value} is outside the text ({n} tokens)")
    return i


def _tok(live: Live, i: int) -> str:
    """A position's choice label (plain text: the page escapes it where Markdown draws it)."""
    return f"{i}: '{live.tokens[i]}'"


def _md(text: str) -> str:
    """A piece of the text, a token or a vocabulary label (a user's or a loaded file's) inside a prompt or an
    explanation, which are Markdown: shown as itself, never as a link, emphasis or markup."""
    return plain_md(text)


def _spread_choices(correct: int, pool: list[int], must: Iterable[int] = (), k: int = MAX_CHOICES) -> list[int]:
    """At most k items of ``pool`` (in order) holding ``correct`` and ``must``, the rest spread evenly."""
    if len(pool) <= k:
        return list(pool)
    keep = {correct, *[m for m in must if m in pool]}
    rest = [p for p in pool if p not in keep]
    n = k - len(keep)
    if n > 0:
        picks = np.linspace(0, len(rest) - 1, n).round().astype(int)
        keep |= {rest[i] for i in picks}
    return [p for p in pool if p in keep]


def _layer_head(live: Live, q: dict) -> tuple[int, int]:
    cfg = live.trace.config
    layer = int(q.get("layer", live.layer))
    head = int(q.get("head", live.head))
    if not 0 <= layer < cfg.n_layer:
        raise QuestionUnavailable(f"this model has no layer {layer} (it has {cfg.n_layer})")
    if not 0 <= head < cfg.n_head:
        raise QuestionUnavailable(f"this model has no head {head} (it has {cfg.n_head} per layer)")
    return layer, head


def most_attended(q: dict, live: Live, w: Words) -> Question:
    layer, head = _layer_head(live, q)
    name = f"blocks.{layer}.attn.hook_pattern"
    i = _pos(live, q.get("query"), -1)
    if i < 1:
        raise QuestionUnavailable("the first token can only look at itself: choose a later query")
    row = live.arr(name)[live.b, head, i, : i + 1].astype(np.float64)
    ans = int(np.argmax(row))
    order = np.argsort(-row, kind="stable")
    second = int(order[1]) if len(order) > 1 else ans
    pool = _spread_choices(ans, list(range(i + 1)), must=(i, i - 1, 0))
    explanation = w("most_attended.explanation", i=i, token=_md(live.tokens[i]), layer=layer, head=head, p=row[ans],
                    ans=ans, ans_token=_md(live.tokens[ans]))
    if second != ans:
        explanation += " " + w("most_attended.second", second=second, second_token=_md(live.tokens[second]),
                               p2=row[second])
    return Question(
        w("most_attended.prompt", layer=layer, head=head, i=i, token=_md(live.tokens[i])),
        [_tok(live, j) for j in pool], pool.index(ans), ans, explanation,
        {"hook": name, "head": head, "row": i, "col": ans}, "step", {"hook": name},
        {"layer": layer, "head": head})


def uniform_loss(q: dict, live: Live, w: Words) -> Question:
    V = live.vocab_size
    ans = math.log(V)
    cands = {"1/V": 1 / V, "ln V / 2": ans / 2, "ln V": ans, "log₂ V": math.log2(V), "2 ln V": 2 * ans}
    shown: dict[str, float] = {}
    for _, v in sorted(cands.items(), key=lambda kv: kv[1]):
        shown.setdefault(f"{v:.3f}", v)
    labels = list(shown)
    return Question(
        w("uniform_loss.prompt", V=V), labels, labels.index(f"{ans:.3f}"), ans,
        w("uniform_loss.explanation", V=V, ans=ans),
        {"value": ans, "metric": "uniform"}, "logits.loss")


LOSS_BANDS = tuple(ENGLISH[f"loss_band.{k}"] for k in range(3))


def loss_vs_uniform(q: dict, live: Live, w: Words) -> Question:
    V = live.vocab_size
    ln_v = math.log(V)
    loss = live.trace.loss
    if loss is None or math.isnan(loss):
        raise QuestionUnavailable("the text has no position with a target: type at least two tokens")
    band = 0 if loss < 0.9 * ln_v else (1 if loss <= 1.1 * ln_v else 2)
    return Question(
        w("loss_vs_uniform.prompt", ln_v=ln_v), [w(f"loss_band.{k}") for k in range(3)], band, loss,
        w("loss_vs_uniform.explanation", loss=loss, ratio=loss / ln_v), {"value": loss, "metric": "loss"},
        "logits.loss")


def _next_probs(live: Live, pos: int) -> np.ndarray:
    logits = torch.as_tensor(live.arr("hook_logits")[live.b, pos]).double()
    return torch.softmax(logits, -1).numpy()


def _label(live: Live, i: int) -> str:
    return f"'{live.vocab[i]}'"


def _distinct(live: Live, ids: list[int]) -> list[str]:
    labels = [_label(live, i) for i in ids]
    return [f"{l} (id {i})" if labels.count(l) > 1 else l for l, i in zip(labels, ids, strict=True)]


def greedy_next(q: dict, live: Live, w: Words) -> Question:
    pos = _pos(live, q.get("pos"), -1)
    p = _next_probs(live, pos)
    ans = int(np.argmax(p))
    top = [int(i) for i in np.argsort(-p, kind="stable")[: int(q.get("choices", 4))]]
    pool = sorted(top, key=lambda i: (live.vocab[i], i))  # not in order of probability: that would tell
    before = live.text(pos)
    return Question(
        w("greedy_next.prompt", before=_md(before[-40:])), _distinct(live, pool), pool.index(ans), ans,
        w("greedy_next.explanation", ans=_md(_label(live, ans)), p=p[ans])
        + (" " + w("greedy_next.second", second=_md(_label(live, top[1])), p2=p[top[1]]) if len(top) > 1 else ""),
        {"token": ans, "pos": pos}, "generation.distribution",
        {"prompt": before, "temperature": 1.0, "top_k": 0, "top_p": 1.0})


def nucleus_size(q: dict, live: Live, w: Words) -> Question:
    pos = _pos(live, q.get("pos"), -1)
    top_p, temperature = float(q["top_p"]), float(q.get("temperature", 1.0))
    top_k = int(q["top_k"]) if q.get("top_k") else None
    logits = torch.as_tensor(live.arr("hook_logits")[live.b, pos])
    d = distribution(logits, temperature, top_k, top_p)
    ans = int(d.kept.sum())
    V = live.vocab_size
    cands = sorted({c for c in (ans, ans - 1, ans + 1, ans // 2, ans * 2, ans + 3, 1, V) if 1 <= c <= V},
                   key=lambda c: (abs(math.log(c / ans)), c))[:4]
    pool = sorted(cands)
    before = live.text(pos)
    what = f"top-p = {top_p:g}" + (", " + w("nucleus_size.temperature", temperature=temperature)
                                   if temperature != 1 else "") + (f", top-k {top_k}" if top_k else "")
    return Question(
        w("nucleus_size.prompt", what=what, before=_md(before[-40:])), [str(c) for c in pool], pool.index(ans), ans,
        w("nucleus_size.explanation", ans=ans, top_p=top_p, held=float(d.tempered[d.kept].sum())),
        {"kept": ans, "top_p": top_p, "temperature": temperature, "top_k": top_k or 0},
        "generation.distribution", {"prompt": before, "temperature": temperature, "top_k": top_k or 0, "top_p": top_p})


PROB_BANDS = tuple(ENGLISH[f"prob_band.{k}"] for k in range(4))


def target_prob(q: dict, live: Live, w: Words) -> Question:
    y = live.targets if live.scored is None else np.asarray(live.scored)[live.b, : live.n_pos]
    has = [t for t in range(live.n_pos) if y[t] >= 0]
    if not has:
        raise QuestionUnavailable("no position of the text has a target")
    pos = _pos(live, q.get("pos"), has[-1])
    if live.targets[pos] < 0:
        raise QuestionUnavailable(f"position {pos} has no target (nothing comes after it)")
    target = int(live.targets[pos])
    p = float(_next_probs(live, pos)[target])
    V = live.vocab_size
    band = 0 if p < 0.5 / V else (1 if p <= 2 / V else (2 if p <= 0.5 else 3))
    return Question(
        w("target_prob.prompt", pos=pos, token=_md(live.tokens[pos]), target=_md(_label(live, target)), inv_v=1 / V),
        [w(f"prob_band.{k}") for k in range(4)], band, p,
        w("target_prob.explanation", target=_md(_label(live, target)), pos=pos, p=p, nll=-math.log(max(p, 1e-30))),
        {"pos": pos, "token": target, "value": p}, "logits.target")


def token_count(q: dict, live: Live, w: Words) -> Question:
    n = live.n_pos
    text = live.text()
    chars, n_words = len(text), len(text.split())
    cands = [n, chars, n_words, max(1, (n + chars) // 2), n + 2, max(1, n - 2)]
    pool = []
    for c in cands:
        if c not in pool:
            pool.append(c)
    pool = sorted(pool[:4])
    return Question(
        w("token_count.prompt", text=_md(text[:60]), chars=chars, words=n_words), [str(c) for c in pool],
        pool.index(n), n,
        w("token_count.explanation", n=n, chars=chars),
        {"count": n}, "tokens.chips")


NO_TARGET = ENGLISH["target_at.no_target"]


def target_at(q: dict, live: Live, w: Words) -> Question:
    pos = _pos(live, q.get("pos"), 2)
    ids = live.ids
    y = int(live.targets[pos])
    cand = []
    for j in (pos - 1, pos, pos + 1):
        if 0 <= j < live.n_pos and ids[j] not in cand:
            cand.append(ids[j])
    no_target = w("target_at.no_target")
    labels = _distinct(live, cand) + [no_target]
    correct = len(cand) if y < 0 else cand.index(y) if y in cand else None
    if correct is None:  # the target is a token not shown next to it (an edited id): add it
        labels.insert(-1, _label(live, y))
        correct = len(labels) - 2
    answer = no_target if y < 0 else _md(_label(live, y))
    return Question(
        w("target_at.prompt", b=live.b, pos=pos, token=_md(live.tokens[pos])), labels, correct, y,
        w("target_at.next" if y >= 0 else "target_at.last", b=live.b, pos=pos, answer=answer, next_pos=pos + 1),
        {"row": live.b, "col": pos}, "tokens.grids")


def best_head(q: dict, live: Live, w: Words) -> Question:
    kind = q["behaviour"]
    probe = kind in ("induction", "duplicate") and live.model is not None
    rows = probe_rows(live.model.config) if probe else head_detector.PROBE_ROWS
    scores = head_detector.detect(live.trace, live.b, probe_model=live.model if probe else None, probe_batch=rows)[kind]
    s = np.nan_to_num(np.asarray(scores, dtype=np.float64), nan=-1.0)
    L, H = s.shape
    flat = int(np.argmax(s))
    ans = (flat // H, flat % H)
    pool = _spread_choices(flat, list(range(L * H)))
    where = w("best_head.on_probe" if probe else "best_head.on_text")
    return Question(
        w("best_head.prompt", kind=w(f"head_kind.{kind}"), description=w(f"head_does.{kind}")),
        [f"L{c // H} H{c % H}" for c in pool], pool.index(flat), ans,
        w("best_head.explanation", where=where, how=w(f"head_how.{kind}"), layer=ans[0], head=ans[1], score=s[ans],
          even=1 / max(2, live.n_pos // 2)),
        {"hook": f"blocks.{ans[0]}.attn.hook_pattern", "head": ans[1]}, "step",
        {"hook": f"blocks.{ans[0]}.attn.hook_pattern"}, {"layer": ans[0], "head": ans[1]})


_POS = ((int, str), "a position (a whole number, negative from the end) or a token's text")
_INT = ((int,), "a whole number")
_NUM = ((int, float), "a number")
KINDS: dict[str, Kind] = {
    "most_attended": Kind(most_attended, ("query", "layer", "head"), (), {"query": _POS, "layer": _INT, "head": _INT},
                          "the key a head weights most from one query (argmax of the live pattern row)"),
    "uniform_loss": Kind(uniform_loss, (), (), {}, "the loss of a uniform guess, ln V of the live vocabulary"),
    "loss_vs_uniform": Kind(loss_vs_uniform, (), (), {}, "whether the live loss is below, about, or above ln V"),
    "greedy_next": Kind(greedy_next, ("pos", "choices"), (), {"pos": _POS, "choices": _INT},
                        "the token greedy decoding picks (argmax of the live next-token distribution)"),
    "nucleus_size": Kind(nucleus_size, ("top_p", "temperature", "top_k", "pos"), ("top_p",),
                         {"top_p": _NUM, "temperature": _NUM, "top_k": _INT, "pos": _POS},
                         "how many tokens top-p (and temperature, top-k) leave to draw from"),
    "target_prob": Kind(target_prob, ("pos",), (), {"pos": _POS},
                        "the probability the model gives the true next token, in bands around 1/V"),
    "token_count": Kind(token_count, (), (), {}, "how many tokens the text becomes"),
    "target_at": Kind(target_at, ("pos",), (), {"pos": _POS}, "the target y at a position: the next token, or −100"),
    "best_head": Kind(best_head, ("behaviour",), ("behaviour",),
                      {"behaviour": ((str,), f"one of {', '.join(head_detector.KINDS)}")},
                      "the head that scores highest for a behaviour (previous-token, induction, …)"),
}


def ask(spec: dict, live: Live, lang: str | Words = "en") -> Question:
    """The question ``spec`` ({"kind": …, params}) asked of the live trace, worded in ``lang`` (a language code,
    or its Words). Raises QuestionUnavailable when this model or text cannot answer it."""
    kind = KINDS.get(spec.get("kind"))
    if kind is None:
        raise QuestionUnavailable(f"unknown question kind {spec.get('kind')!r}")
    return kind.fn(spec, live, lang if isinstance(lang, Words) else words(lang))
