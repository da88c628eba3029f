"""Settings in, a page context out, without drawing anything.

``resolve(settings, store)`` works out the tokenizer, the model config, the batch and which model is
shown from one settings dict, and returns ``(ctx, notices)``. It imports no Streamlit: every problem is a
``Notice`` for the caller to show, so the sidebar, a lesson step that pins its own text and preset, and
the HTML report all resolve settings the same way. ``store`` supplies the cached resources (the app
passes ``gptviz.ui.resources``).
"""
from __future__ import annotations

import copy
import dataclasses
import functools
import json
import os
from dataclasses import dataclass, field
from typing import Any, Optional

from ..config import MAX_TRACE_BYTES, PRESETS, ModelConfig
from ..interp.head_detector import PROBE_N, PROBE_ROWS
from ..model.gpt import GPT
from ..perf import BIG_MODEL_PARAMS
from ..run import edits as edit_specs
from ..run.trace import Trace
from ..text.batches import DEFAULT_PROMPT, Batch, encode_batch
from ..text.tokenizers import token_labels
from ..training import tasks
from .settings import (  # noqa: F401  (re-exported: the settings were part of this module)
    BOOL_FIELDS,
    CKPT_PREFIX,
    CONFIG_FIELDS,
    FLOAT_FIELDS,
    FOLDER_PREFIX,
    INT_FIELDS,
    MOE_FIELDS,
    OPENING_MODEL,
    URL_FIELDS,
    URL_NOTICES,
    Entry,
    _config_settings,
    apply_preset,
    config_from_settings,
    config_json,
    default_preset,
    defaults,
)

# A model this big reads at most BIG_MODEL_T tokens per line, so that every page stays quick, and fewer when a slim
# trace of one line that long would not fit the trace limit, or its forward pass would cost more than PAGE_FLOPS
# (big_model_t). A view's trace is slim (each layer's score steps worked out when read, gptviz.run.on_demand) when
# its full trace would be over SLIM_TRACE_BYTES.
BIG_MODEL_T = 512
SLIM_TRACE_BYTES = 64_000_000
# The arithmetic one text change may cost (ModelConfig.forward_flops): about SmolLM2-135M's or GPT-2 small's pass over
# 512 tokens (156 and 136 GFLOP), the most whose pages kept to the 3 s budget on 2 cores (tools/bench, part "long").
# A Qwen3-0.6B shape costs 320 GFLOP at 256 tokens, and its plain forward pass alone takes 2.8-4.0 s there, so it
# reads 128 (156 GFLOP). GPTVIZ_PAGE_GFLOP raises it on a faster server (bounded: 10 GFLOP to 10 TFLOP).
PAGE_FLOPS = 160e9
MIN_BUDGET_T = 32  # the arithmetic budget never cuts a line below this


def page_flops() -> float:
    """PAGE_FLOPS, or the server's GPTVIZ_PAGE_GFLOP (a number of GFLOP from 10 to 10,000; anything else is ignored)."""
    raw = os.environ.get("GPTVIZ_PAGE_GFLOP", "")
    try:
        g = float(raw)
    except ValueError:
        return PAGE_FLOPS
    return g * 1e9 if 10 <= g <= 10_000 else PAGE_FLOPS


def probe_rows(cfg: ModelConfig) -> int:
    """How many rows the head detector's probe runs for this model: PROBE_ROWS, halved (never below 1) while their
    forward pass would cost more than a text change may (``page_flops``). A Qwen3-0.6B shape's 8 rows of 64 tokens
    are about 600 GFLOP, 5 s and more on two cores before the page's first view; it gets 2. Worked out from the
    config alone."""
    T, rows = min(2 * PROBE_N, cfg.block_size // 2 * 2), PROBE_ROWS
    while rows > 1 and rows * cfg.forward_flops(1, T) > page_flops():
        rows //= 2
    return rows


def slim_view(cfg: ModelConfig, batch: int, seq_len: int) -> bool:
    """Whether the app traces (batch, seq_len) tokens of this model slim: a decoder-only model's big trace."""
    return cfg.n_enc_layer < 0 and cfg.trace_bytes(batch, seq_len) > SLIM_TRACE_BYTES


def big_model_t(cfg: ModelConfig, passes: int = 1) -> int:
    """The most tokens a line of a big model is cut to: BIG_MODEL_T, halved until one line's trace fits the limit and
    ``passes`` forward passes the arithmetic budget (``page_flops``; Compare models runs two models on the text, the
    Backward page a forward and a backward pass), never below 64 for memory or MIN_BUDGET_T for arithmetic, never
    more than block_size. Worked out from the config alone: nothing is allocated."""
    T, budget = min(cfg.block_size, BIG_MODEL_T), page_flops()
    while (T > 64 and cfg.trace_bytes(1, T, slim=slim_view(cfg, 1, T)) > MAX_TRACE_BYTES) or \
            (T > MIN_BUDGET_T and passes * cfg.forward_flops(1, T) > budget):
        T //= 2
    return T


# What a page's ``passes`` (its arithmetic in forward passes of the text) are, for the sentence saying why it reads
# fewer tokens: Compare models runs two models; the Backward page's backward pass costs about two forward passes.
PASSES_SAID = {2: "{p} passes over {n} tokens (one for each model)",
               3: "the forward and backward passes over {n} tokens (about {p} forward passes)"}


# Compare models runs two models on the text and keeps both traces. Counted as 2 passes, a Qwen3-0.6B-shaped pair read
# 64 tokens and its text change took 2.7 s at p50 and 4.2 s at p95 of 20 (tools/bench, 2026-11-28): each trace took
# about twice a plain pass (1.35-1.54 s against 0.69-0.80 s at T = 64), its memory fresh while the caches fill. The
# budget was measured on one-model pages, so it already holds one trace's keeping; the second counts one pass more.
COMPARE_PASSES = 3
COMPARE_SAID = ("the work of about {p} passes over {n} tokens (one pass for each model, and one for keeping the "
                "second model's trace)")


def why_cut(cfg: ModelConfig, T: int, passes: int = 1, said: Optional[str] = None) -> str:
    """The sentence saying why a big model's lines are cut to T tokens (``big_model_t(cfg, passes)``); ``said``: what
    the page's passes are ("{p}" and "{n}" filled in), when not one of PASSES_SAID's."""
    n, longer = cfg.num_params(), min(cfg.block_size, 2 * T)
    why = "to keep the pages responsive"
    if T < min(cfg.block_size, BIG_MODEL_T):
        if passes * cfg.forward_flops(1, longer) > page_flops():
            one = (f"one pass over {longer} tokens" if passes == 1
                   else (said or PASSES_SAID.get(passes, "{p} passes over {n} tokens")).format(p=passes, n=longer))
            why = (f"because {one} would cost about {passes * cfg.forward_flops(1, longer) / 1e9:,.0f} "
                   f"GFLOP, over this server's budget of {page_flops() / 1e9:,.0f} GFLOP a text (a few seconds on "
                   "two cores), so that every page stays within about 3 s")
        else:
            why = (f"because the trace of {longer} tokens would not fit the trace limit of "
                   f"{MAX_TRACE_BYTES / 1e9:g} GB")
    return f"This model has {n / 1e6:.0f}M parameters: each line is cut to {T} tokens {why}."


@dataclass
class Notice:
    level: str  # "error" | "warning" | "info" | "caption"
    text: str
    icon: Optional[str] = None


@dataclass
class Ctx:
    """Everything a page needs, worked out once per rerun."""

    s: dict[str, Any]
    cfg: ModelConfig
    cfg_json: str
    tok: Any
    batch: Batch
    model_key: Optional[str] = None
    entry: Any = None  # the loaded model's registry entry, if a loaded model is shown (or its shape, untrained)
    untrained: bool = False  # the loaded model's shape, freshly initialised
    store: Any = None
    edit_notice: str = ""
    scored_y: Any = None  # targets with -100 where the model's task does not score (None: every position)
    task_rule: str = ""  # one sentence on which positions the task scores
    style: dict = field(default_factory=dict)  # figure style for this view (e.g. presenter fonts)
    # an encoder-decoder model's source (x: the token ids its encoder reads, attention_mask: 1 real, 0 padding),
    # one row per batch row; None for a decoder-only model or a fixed random encoder output (n_enc_layer = 0)
    source_batch: Optional[Batch] = None
    _traces: dict = field(default_factory=dict)

    @property
    def model(self) -> GPT:
        return self.store.get_model(self.cfg_json, self.model_key)

    @property
    def b(self) -> int:
        return min(self.s["batch"], self.batch.x.shape[0] - 1)

    @property
    def n_pos(self) -> int:
        return self.batch.lengths[self.b]

    @property
    def layer(self) -> int:
        return min(self.s["layer"], self.cfg.n_layer - 1)

    @property
    def head(self) -> Optional[int]:
        h = self.s["head"]
        return None if h is None or h < 0 else min(h, self.cfg.n_head - 1)

    @property
    def selection(self) -> Optional[tuple[int, int]]:
        """The (query, key) pair picked by clicking an attention cell, if it fits this text."""
        sel = self.s.get("sel")
        if not sel or len(sel) != 2:
            return None
        q, k = int(sel[0]), int(sel[1])
        return (q, k) if 0 <= k <= q < self.n_pos else None

    @property
    def label(self) -> str:
        """What model is shown, in words."""
        if self.entry is not None:
            name = self.entry.label
            return f"{name} — untrained weights (same shape)" if self.untrained else name
        return f"the configurable model (preset: {self.s.get('preset')}, seed {self.cfg.seed})"

    def labels(self, b: Optional[int] = None) -> list[str]:
        b = self.b if b is None else b
        return token_labels(self.tok, self.batch.x[b, : self.batch.lengths[b]].tolist())

    def id_label(self, i: int) -> str:
        return self.tok.token_str(int(i))

    def vocab_labels(self) -> list[str]:
        """A display string for every id the model scores: the tokenizer's, then ``<unused N>`` for the rows a
        model pads its vocabulary with past the tokenizer's (Pythia's 50,304 for 50,277 tokens, say)."""
        labels = self.store.vocab_labels(self.tok)
        V = self.cfg.vocab_size
        return labels[:V] if len(labels) >= V else labels + list(unused_labels(len(labels), V))

    def trace(self, grads: bool = False) -> Trace:
        """The (cached) trace of this batch, with the session's edits. With ``grads``, a long text's trace
        (``grad_layer``) keeps the steps and gradients of the layer in view only."""
        if not grads and True in self._traces and self.grad_layer is None:
            return self._traces[True]  # a trace with gradients holds every forward value too: don't trace twice
        if grads not in self._traces:
            b = self.batch
            args = (self.cfg_json, self.model_key, _tup(b.x), _tup(b.y), _tup(b.attention_mask))
            src = self.source_batch
            source = () if src is None else (_tup(src.x), _tup(src.attention_mask))
            spec = self.s.get("edits") or edit_specs.EMPTY
            scope = {"grad_layer": self.grad_layer} if grads and self.grad_layer is not None else {}
            try:
                self._traces[grads] = self.store.traced(*args, edit_specs.spec_key(spec), grads, *source, **scope)
            except ValueError as exc:
                self.edit_notice = f"Your edits could not be applied ({exc}), so this shows the model without them."
                self._traces[grads] = self.store.traced(*args, edit_specs.spec_key(None), grads, *source, **scope)
        return self._traces[grads]

    def trace_for_step(self, name: str, grads: bool = False) -> Trace:
        """The trace to read step ``name`` (or, ``grads``, its gradient) from: this run's trace with gradients when
        it holds the step (a long text's keeps only the layer in view), so the Backward page's forward half needs
        no second trace; else ``trace(grads)``."""
        if not grads and True in self._traces and name in self._traces[True]:
            return self._traces[True]
        return self.trace(grads)

    def without_traces(self) -> "Ctx":
        """A copy holding none of this run's traces, for what Streamlit keeps after a run (a download's callable, a
        widget's callback args): the copy traces again, through the cache, if it is asked for one."""
        return dataclasses.replace(self, _traces={})

    @property
    def grad_layer(self) -> Optional[int]:
        """The one layer whose steps a trace with gradients keeps (the layer in view), for a long text on a big
        model (``slim_view``): all of its layers' gradients would not fit. None: every layer's."""
        x = self.batch.x
        return self.layer if slim_view(self.cfg, x.shape[0], x.shape[1]) else None


@functools.lru_cache(maxsize=8)
def unused_labels(start: int, stop: int) -> tuple[str, ...]:
    """``<unused N>`` for ids ``start`` to ``stop - 1``, made once: a Qwen3-shaped model read with a small tokenizer
    pads 150,000 of them, 40 ms a time, and a page asks several times a run."""
    return tuple(f"<unused {i}>" for i in range(start, stop))


def _tup(t) -> tuple:
    return tuple(map(tuple, t.tolist()))


def _cap(msg: str) -> str:
    return msg[:1].upper() + msg[1:]


def trace_for_view(model, x: tuple, y: Optional[tuple], mask: Optional[tuple], edits_key: str, grads: bool,
                   src: Optional[tuple] = None, src_mask: Optional[tuple] = None,
                   grad_layer: Optional[int] = None) -> Trace:
    """The trace a store serves for these (hashable) arguments: numpy arrays, read-only, with gradients only the
    weight gradients' norms. ``edits_key``: ``edits.spec_key(spec)``; ``src``/``src_mask``: an encoder-decoder model's
    source ids and padding mask; ``grad_layer`` (with ``grads``): that layer's steps only, and those outside blocks."""
    import torch

    from ..run.trace import trace

    cfg = model.config
    spec = json.loads(edits_key)
    edits = edit_specs.from_spec(spec, cfg.n_layer, cfg.n_head, cfg) if not edit_specs.is_empty(spec) else None
    source = {}
    if src is not None:
        source["enc_input"] = torch.tensor(src, dtype=torch.long)
        if src_mask is not None and not all(all(r) for r in src_mask):
            source["enc_mask"] = torch.tensor(src_mask, dtype=torch.long)
    # inference mode without gradients: 8 % of a small trace (no version counters); every tensor becomes numpy here
    with torch.inference_mode(not grads):
        tr = trace(model, torch.tensor(x, dtype=torch.long),
                   targets=None if y is None else torch.tensor(y, dtype=torch.long),
                   attention_mask=None if mask is None else torch.tensor(mask, dtype=torch.long),
                   edits=edits, grads=grads, weight_grads="norms" if grads else "tensors",
                   slim=slim_view(cfg, len(x), len(x[0]) if x else 0),
                   layers=None if grad_layer is None or not grads else [grad_layer], **source)
        return (tr.numpy().without_param_grads() if grads else tr.numpy()).freeze()


def encode_source(tok, cfg: ModelConfig, text: Optional[str], rows: int) -> tuple[Optional[Batch], list[str]]:
    """An encoder-decoder model's source as a ``Batch`` with exactly ``rows`` rows (the last line repeats if there
    are fewer lines), and notices; ``(None, notices)`` when the model has no encoder (n_enc_layer < 1) or the
    text gives no tokens."""
    if cfg.n_enc_layer < 1 or not text or not str(text).strip():
        return None, []
    try:
        src = encode_batch(tok, str(text), cfg.enc_len)
    except ValueError as exc:
        return None, [f"The source can't be read ({exc}): the encoder reads the model's example instead."]
    if int(src.x.min()) < 0 or int(src.x.max()) >= cfg.vocab_size:
        return None, ["The source has tokens outside this model's vocabulary: the encoder reads the model's example "
                      "instead."]
    pick = [min(r, src.x.shape[0] - 1) for r in range(rows)]
    out = Batch(src.x[pick], src.y[pick], src.attention_mask[pick], [src.lengths[i] for i in pick], src.notices)
    return out, [f"Source: {n}" for n in src.notices]


def resolve(s: dict, store, passes: int = 1, passes_said: Optional[str] = None) -> tuple[Ctx, list[Notice]]:
    """The context a page shows for settings ``s`` (which this may correct in place: a checkpoint's
    example text, a setting that had to fall back), and the notices to show about it. ``passes``: the page's
    arithmetic in forward passes of its text (the Backward page's 3), which a big model's line is cut to fit
    (``big_model_t``); ``passes_said``: what they are, for the caption saying so (``why_cut``)."""
    notes: list[Notice] = list(s.pop(URL_NOTICES, None) or [])  # what was wrong with the link, shown once
    # 0. a loaded model (trained, uploaded, shipped) replaces the configurable one until unloaded
    preset = str(s.get("preset", ""))
    if s.get("model_key") and preset.startswith((CKPT_PREFIX, FOLDER_PREFIX)) and \
            store.registered(s["model_key"]) is None:
        s["model_key"] = None  # a shipped or folder model the store let go (others loaded since): open it again
    if preset.startswith(CKPT_PREFIX) and not s.get("model_key"):
        name = preset[len(CKPT_PREFIX):]
        try:
            s["model_key"] = store.shipped_checkpoint(name)
            entry = store.registered(s["model_key"])
            if entry and entry.meta.get("example") and s.get("text") in (None, "", DEFAULT_PROMPT):
                # an encoder-decoder model's example is its source; its decoder reads decoder_example
                s["text"] = entry.meta.get("decoder_example") or entry.meta["example"]
                if entry.meta.get("decoder_example"):
                    s["source"] = entry.meta["example"]
        except (ValueError, OSError) as exc:
            notes.append(Notice("error", f"The shipped model {name!r} could not be loaded: {exc}. "
                                         "Showing the small configurable model instead."))
            s["preset"] = "default"
            s["model_key"] = None
    if preset.startswith(FOLDER_PREFIX) and not s.get("model_key"):
        name = preset[len(FOLDER_PREFIX):]
        try:
            s["model_key"] = store.folder_model(name)
        except (ValueError, OSError) as exc:
            notes.append(Notice("error", f"The model folder {name!r} could not be opened: {exc}. Showing the small "
                                         "configurable model instead."))
            s["preset"] = "default"
            s["model_key"] = None
    model_key = s.get("model_key")
    entry = store.registered(model_key)
    if model_key and entry is None:
        notes.append(Notice("warning", "The loaded model is no longer in memory (the server was restarted or it "
                                       "was replaced); showing the configurable model again."))
        s["model_key"] = model_key = None
    untrained = bool(entry is not None and s.get("untrained"))

    # 1. tokenizer: the loaded model's own, else the chosen one
    tok = entry.tokenizer if entry is not None and entry.tokenizer is not None else None
    if tok is None:
        tok, err = store.tokenizer_for(s["tokenizer"], int(s["merges"]), bool(s["lowercase"]))
        if tok is None:
            notes.append(Notice("warning", f"{err} Showing the built-in char BPE tokenizer instead.", "📴"))
            tok, _ = store.tokenizer_for("char-bpe", int(s["merges"]), bool(s["lowercase"]))

    # 2. config: on a bad setting, say which and keep the last one that worked
    if entry is not None:
        cfg = entry.model.config
        if getattr(entry.model, "family_note", None):  # how gptviz holds a folder's family (hf_families.Family.note)
            notes.append(Notice("caption", entry.model.family_note))
        if tok.vocab_size > cfg.vocab_size:
            notes.append(Notice("error", f"The tokenizer has {tok.vocab_size:,} tokens but the loaded model only "
                                         f"{cfg.vocab_size:,}: choose a tokenizer that fits it."))
            tok, _ = store.tokenizer_for("char-bpe", 0, True)
    else:
        try:
            cfg = config_from_settings(s, tok.vocab_size)
            cfg.check_limits(batch=1, seq_len=1)  # the size of the model itself; the trace is checked below
            s["_last_good"] = cfg.to_dict()
        except ValueError as exc:
            notes.append(Notice("error", f"**This model setting can't be used:** {exc}. Still showing the last model "
                                         "that worked.", "⚠️"))
            last = s.get("_last_good")
            cfg = ModelConfig.from_dict(last) if last else PRESETS["default"]
            if cfg.vocab_size != tok.vocab_size:
                cfg = cfg.replace(vocab_size=tok.vocab_size)

    # 3. batch: a big model reads fewer tokens, so that every page stays quick
    T = cfg.block_size
    if cfg.num_params() > BIG_MODEL_PARAMS and T > big_model_t(cfg, passes):
        T = big_model_t(cfg, passes)
        notes.append(Notice("caption", why_cut(cfg, T, passes, passes_said)))
    try:
        batch = encode_batch(tok, s["text"], T, limit_said=f"the {T} tokens a line of this big model is cut to"
                             if T < cfg.block_size else None)
    except ValueError as exc:
        notes.append(Notice("warning", f"{_cap(str(exc))}. Showing the example sentence instead.", "✏️"))
        example = entry.meta.get("example") if entry is not None else None
        batch = None
        for fallback in (example, DEFAULT_PROMPT, tok.decode([0, 0])):
            try:
                batch = encode_batch(tok, fallback, T) if fallback else None
            except ValueError:
                batch = None
            if batch is not None:
                break
    if s.get("id_edits"):
        x, y, extra = edit_specs.apply_id_edits(batch.x, batch.y, batch.lengths, s["id_edits"], cfg.vocab_size)
        batch = Batch(x, y, batch.attention_mask, batch.lengths, batch.notices + extra)
    for n in batch.notices:
        notes.append(Notice("info", n, "✂️" if "cut" in n else "ℹ️"))

    # 4. the trace of this very batch must fit; if it doesn't, the text is what to shorten
    try:
        cfg.check_limits(batch=batch.x.shape[0], seq_len=batch.x.shape[1],
                         slim=slim_view(cfg, batch.x.shape[0], batch.x.shape[1]))
    except ValueError as exc:
        notes.append(Notice("error", f"**This text is too long for this model:** {exc}. Showing the first line, cut "
                                     "to fit, instead."))
        one = min(T, big_model_t(cfg, passes))  # one line this long fits (64 tokens at least, as before)
        batch = encode_batch(tok, s["text"].splitlines()[0] if s["text"].strip() else DEFAULT_PROMPT, one)

    # 4b. a model with an encoder reads a source: the settings' "source", else the loaded model's example
    source_batch = None
    if cfg.n_enc_layer > 0:
        text = s.get("source") or (entry.meta.get("example") if entry is not None else None) or s["text"]
        source_batch, src_notes = encode_source(tok, cfg, text, batch.x.shape[0])
        notes += [Notice("info", n, "✂️") for n in src_notes]

    model_key_shown = None if untrained else model_key
    ctx = Ctx(s, cfg, config_json(cfg), tok, batch, model_key_shown, entry=entry, untrained=untrained,
              store=store, source_batch=source_batch)
    # 5. a model trained on a task is scored on the positions that task scores
    task = (entry.meta.get("task") if entry is not None else None) or ""
    rule = tasks.scoring_rule(task)
    if rule:
        ctx.scored_y, ctx.task_rule = tasks.scored_targets(task, batch.x, batch.y, tok), rule
    return ctx, notes


def pinned(s: dict, **overrides) -> dict:
    """A copy of settings ``s`` with some fields pinned (a lesson step's text, preset, layer, head), for
    ``resolve``: the session's own settings, sidebar and URL are left as they are."""
    out = copy.deepcopy({k: v for k, v in s.items() if not k.startswith("_")})
    preset = overrides.pop("preset", None)
    if preset is not None and preset != out.get("preset"):
        apply_preset(out, preset)
    out.update(overrides)
    return out
