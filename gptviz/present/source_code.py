"""The lines of gptviz's own source that compute each recorded step: the code shown to students, so it cannot drift.

Each step names the function that computes it and an anchor: the hook point the tensor passes through
(``self.hook_pattern``), or for the loss steps the variable ``loss_breakdown`` assigns. The statement holding the
anchor is shown as it stands in the source, shape comment included, with the few statements before it that
compute its input (``context``). Nothing here is written by hand, so a change to the model changes what is shown.
"""
from __future__ import annotations

import ast
import inspect
import textwrap
import threading
from functools import lru_cache
from typing import Callable, Optional

from ..config import ModelConfig
from ..model import encoder_decoder, experts, gpt, layers
from ..run import loss
from ..run.step_meta import split_name

# CPython 3.11's parser is not safe in two threads at once: sessions starting together (a class joining) raised
# "SystemError: AST constructor recursion depth mismatch" on a replica. One parse at a time.
_PARSE_LOCK = threading.Lock()


def _parse(source: str) -> ast.Module:
    with _PARSE_LOCK:
        return ast.parse(source)


# rest of the hook name (without "blocks.{l}.") -> (function, anchor, statements of context before it)
_NORM = {"hook_scale": 1, "hook_normalized": 0, "hook_out": 2}
_ATTEND = {"hook_q": 0, "hook_k": 0, "hook_v": 0, "hook_q_normed": 0, "hook_k_normed": 0, "hook_rot_q": 0,
           "hook_rot_k": 0, "hook_k_rep": 0, "hook_v_rep": 0, "hook_scores_raw": 1, "hook_scores_scaled": 0,
           "hook_scores_capped": 0, "hook_attn_scores": 0, "hook_sink": 2, "hook_pattern": 1, "hook_z": 0}
# a mixture of experts' steps (gptviz.model.experts)
_MOE = {"hook_router_logits": 0, "hook_router_probs": 0, "hook_expert_weights": 3, "hook_expert_out": 3,
        "hook_shared_gate": 0, "hook_shared_out": 0}
_PARALLEL = {"hook_resid_pre": 0, "hook_attn_out": 1, "hook_resid_mid": 0, "hook_mlp_out": 1, "hook_resid_post": 0}


def _table(seq2seq: bool) -> dict[str, tuple[Callable, str, int]]:
    block = encoder_decoder.DecoderBlock.forward if seq2seq else gpt.Block.forward
    top = encoder_decoder.Seq2Seq.run if seq2seq else gpt.GPT.run
    t: dict[str, tuple[Callable, str, int]] = {
        "hook_embed": (top, "self.hook_embed", 0 if seq2seq else 1),
        "hook_pos_embed": (top, "self.hook_pos_embed", 1),
        "hook_logits": (top, "self.hook_logits", 0 if seq2seq else 1),
        "hook_logits_raw": (top, "self.hook_logits_raw", 0),  # Gemma 2's logits before the cap
        "mlp.hook_pre": (layers.MLP.forward, "self.hook_pre", 0),
        "mlp.hook_pre_linear": (layers.MLP.forward, "self.hook_pre_linear", 0),
        "mlp.hook_post": (layers.MLP.forward, "self.hook_post", 1),
        "hook_probs": (loss.loss_breakdown, "probs", 0),
        "hook_loss_per_token": (loss.loss_breakdown, "loss_per_token", 2),
        "hook_loss": (loss.loss_breakdown, "loss", 1),
    }
    for leaf in ("hook_resid_pre", "hook_attn_out", "hook_resid_mid", "hook_cross_out", "hook_resid_cross",
                 "hook_mlp_out", "hook_resid_post"):
        t[leaf] = (block, f"self.{leaf}", 0)
    for norm in ("ln1", "ln2", "ln1_post", "ln2_post", "ln_final", "ln_cross", "enc_ln_final"):
        for leaf, context in _NORM.items():
            t[f"{norm}.{leaf}"] = (layers.Norm.forward, f"self.{leaf}", context)
    for attn in ("attn", "cross_attn"):
        for leaf, context in _ATTEND.items():
            t[f"{attn}.{leaf}"] = (layers.HeadsAttention.attend, f"self.{leaf}", context)
    t["attn.hook_qkv"] = (gpt.CausalSelfAttention.forward, "self.hook_qkv", 0)
    moe = experts.MixtureOfExperts.forward  # a mixture of experts' steps: the router, the choice, the experts
    for leaf, context in _MOE.items():
        t[f"mlp.{leaf}"] = (moe, f"self.{leaf}", context)
    if seq2seq:
        for leaf in ("hook_enc_embed", "hook_enc_pos_embed", "hook_enc_out"):
            t[leaf] = (encoder_decoder.Seq2Seq.encode, f"self.{leaf}", 1 if leaf == "hook_enc_pos_embed" else 0)
    return t


def _encoder_table() -> dict[str, tuple[Callable, str, int]]:
    return {leaf: (encoder_decoder.EncoderBlock.forward, f"self.{leaf}", 0)
            for leaf in ("hook_resid_pre", "hook_attn_out", "hook_resid_mid", "hook_mlp_out", "hook_resid_post")}


@lru_cache(maxsize=None)
def _statements(fn: Callable) -> tuple[str, list[list[tuple[int, int]]]]:
    """The function's dedented source and, for every block of statements, each statement's (first, last) line."""
    source = textwrap.dedent(inspect.getsource(fn))
    tree = _parse(source)
    blocks = []
    for node in ast.walk(tree):
        for field in ("body", "orelse"):
            body = getattr(node, field, None)
            if isinstance(body, list) and body and isinstance(body[0], ast.stmt) and not isinstance(node, ast.Module):
                blocks.append([(s.lineno, s.end_lineno) for s in body])
    return source, blocks


def _mentions(text: str, anchor: str) -> bool:
    if anchor.endswith("("):  # a call, as a prelude names it
        return anchor in text
    if anchor.startswith("self."):
        return anchor + "(" in text or anchor + "," in text or anchor + ")" in text
    return text.lstrip().startswith(anchor + " =")


def _occurrences(fn: Callable, anchor: str) -> list[tuple[list[tuple[int, int]], int]]:
    """(block, index) of every innermost statement that mentions the anchor, in source order."""
    source, blocks = _statements(fn)
    lines = source.splitlines()
    found = []
    for block in blocks:
        for i, (a, b) in enumerate(block):
            text = "\n".join(lines[a - 1:b])
            if _mentions(text, anchor) and not any(  # the innermost: no inner block holds it alone
                    blk is not block and blk[0][0] >= a and blk[-1][1] <= b and
                    any(_mentions("\n".join(lines[x - 1:y]), anchor) for x, y in blk) for blk in blocks):
                found.append((block, i))
    return sorted(found, key=lambda f: f[0][f[1]][0])


def _preludes(rest: str, seq2seq: bool, capped: bool = False) -> list[tuple[Callable, str]]:
    """Statements from the callers that show where a head's queries, keys and values come from (for QK-norm's
    steps, what the head's norm computes; for Gemma 2's capped logits, the unembedding and the cap)."""
    if rest == "hook_logits_raw" or (rest == "hook_logits" and capped):
        return [(gpt.GPT.run, "self.lm_head(")] + ([(gpt.GPT.run, "self.hook_logits_raw(")] if capped and
                                                  rest == "hook_logits" else [])
    if rest.split(".")[-1] in ("hook_q_normed", "hook_k_normed"):
        return [(layers.HeadNorm.forward, "x.pow(")]
    if rest.split(".")[-1] not in ("hook_q", "hook_k", "hook_v"):
        return []
    if not seq2seq:
        return [(gpt.CausalSelfAttention.forward, "qkv.split(")]
    attend = (encoder_decoder.Attention.forward, "self.attend(")
    return [(encoder_decoder.DecoderBlock.forward, "self.cross_attn("), attend] if rest.startswith("cross_attn.") \
        else [attend]


def _statement(fn: Callable, anchor: str) -> str:
    """The first statement of ``fn`` that mentions ``anchor``, dedented."""
    source, _ = _statements(fn)
    lines = source.splitlines()
    block, i = _occurrences(fn, anchor)[0]
    a, b = block[i]
    return textwrap.dedent("\n".join(lines[a - 1:b]))


def _pick(rest: str, cfg: ModelConfig, n: int) -> int:
    """Which of several statements with the same anchor this config runs."""
    if n == 1:
        return 0
    if rest in ("mlp.hook_pre", "mlp.hook_post"):  # a gated MLP's branch comes first
        return 0 if cfg.gated_mlp else n - 1
    if rest in ("attn.hook_q_normed", "attn.hook_k_normed"):  # OLMo 2's norm over the whole projection comes first
        return 0 if cfg.qk_norm_full else n - 1
    if rest == "hook_resid_post":  # `if self.attn_only: return self.hook_resid_post(x)` comes first
        return 0 if cfg.attn_only else n - 1
    if rest == "hook_enc_out":  # a fixed random encoder output (n_enc_layer == 0) comes first
        return 0 if cfg.n_enc_layer == 0 else n - 1
    return n - 1


def step_code(name: str, cfg: ModelConfig) -> str:
    """The source lines that compute step ``name`` in a model of this config, or "" if none are known."""
    layer, rest, stack = split_name(name, cfg)
    seq2seq = cfg.n_enc_layer >= 0
    table = _encoder_table() if stack == "encoder" and rest in _encoder_table() else _table(seq2seq)
    if cfg.parallel_attn and rest in _PARALLEL:  # GPT-NeoX's block is a method of its own
        table = {rest: (gpt.Block.forward_parallel, f"self.{rest}", _PARALLEL[rest])}
    if rest not in table:
        return ""
    fn, anchor, context = table[rest]
    capped = not seq2seq and cfg.final_softcap is not None
    context = 0 if capped and rest == "hook_logits" else context  # the unembedding is shown by the preludes
    found = _occurrences(fn, anchor)
    if not found:
        return ""
    block, i = found[_pick(rest, cfg, len(found))]
    source, _ = _statements(fn)
    lines = source.splitlines()
    shown: list[tuple[int, int]] = []
    j = i - 1
    while j >= 0 and len(shown) < context:  # the statements that make the anchor's input, book-keeping left out
        text = "\n".join(lines[block[j][0] - 1:block[j][1]])
        if "raw" not in text and "self.hook_" not in text:
            shown.insert(0, block[j])
        j -= 1
    shown.append(block[i])
    prelude = [_statement(f, a) for f, a in _preludes(rest, seq2seq, capped)]
    return "\n".join(prelude + [textwrap.dedent("\n".join(lines[a - 1:b])) for a, b in shown])


def anchor_line(name: str, cfg: ModelConfig) -> Optional[str]:
    """The shown line that holds the step's anchor (its hook, or the loss variable), whose shape comment names the
    recorded shape."""
    layer, rest, stack = split_name(name, cfg)
    table = _encoder_table() if stack == "encoder" and rest in _encoder_table() else _table(cfg.n_enc_layer >= 0)
    if cfg.parallel_attn and rest in _PARALLEL:
        table = {rest: (gpt.Block.forward_parallel, f"self.{rest}", 0)}
    if rest not in table:
        return None
    anchor = table[rest][1]
    for line in step_code(name, cfg).splitlines():
        if _mentions(line, anchor):
            return line
    return None


def function_code(*fns: Callable) -> str:
    """The source of each function as it stands in gptviz (its signature and body, the docstring left out), one after
    the other: the code a view shows for the engine function behind it, so it cannot drift from what runs."""
    parts = []
    for fn in fns:
        source, _ = _statements(fn)
        tree = _parse(source)
        node = tree.body[0]
        lines = source.splitlines()
        body = node.body
        if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant) \
                and isinstance(body[0].value.value, str):
            keep = lines[:body[0].lineno - 1] + lines[body[0].end_lineno:]
        else:
            keep = lines
        decorators = len(node.decorator_list)
        parts.append("\n".join(keep[decorators:]).rstrip())
    return "\n\n".join(parts)
