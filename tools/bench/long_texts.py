"""Part 7, long texts (issue 21): every page after a text change at T = 512, and the memory of one trace, for GPT-2
small and a SmolLM2-135M-shaped model; and (issue 38) every page at T = 256 for a Qwen3-0.6B-shaped model.
``python -m tools.bench --only long`` (it takes 10-30 minutes, so it runs only when named), or
``python -m tools.bench.long_texts [--reps N] [--pages home,attention] [--models gpt2,smol,qwen3]``.

- **gpt2-small**: the preset (124,439,808 parameters, random weights) with the GPT-2 tokenizer.
- **SmolLM2-135M shape**: a ``transformers`` ``LlamaForCausalLM`` with SmolLM2-135M's config (30 layers, hidden 576,
  9 heads, 3 key/value heads, intermediate 1536, vocabulary 49,152, rope_theta 100,000, tied embeddings, RMSNorm;
  134,515,008 parameters) and random weights, saved once with a BPE tokenizer trained on the Shakespeare corpus
  (``--models-dir``, default ``/tmp/gptviz-bench-models``) and opened by the app as ``?model=NAME`` from
  ``GPTVIZ_MODELS_DIR``, as a server's model folder is.
- **Qwen3-0.6B shape**: a ``Qwen3ForCausalLM`` with Qwen3-0.6B's config (28 layers, hidden 1024, 16 heads of 128, 8
  key/value heads, QK-norm, intermediate 3072, vocabulary 151,936, rope_theta 1,000,000, tied embeddings;
  596,049,920 parameters, just under gptviz's 600,000,000 limit), random weights, built and opened the same way,
  typed at 256 tokens (the issue's size), which the app cuts to 128: its pass over 256 would cost 320 GFLOP, over
  the app's arithmetic budget of 160 a text (``PAGE_FLOPS``); each row checks the page's caption says so.

Each row: the model (name and parameter count, checked against the sidebar after every run), T (every text change
must trace exactly 512 positions), how many of the reruns were cache misses (all of them should be), the number of
reruns, the CPU seconds this process spent on a rerun (median; both of torch's threads, so on a quiet two-core
machine the wall time would be about half of it at best), and the machine's load average before and after (other
processes share the CPU: with a load over the core count the times are upper bounds). Goals: text change ≤ 3 s
on every page, ≤ 6 s on Backward; one trace ≤ 1.5 GiB.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from gptviz.paths import ROOT
from gptviz.present.url_params import MAX_LINE_CHARS
from tools.bench.models import LONG_GOAL_MS, fresh_words
from tools.bench.report import BenchFailure, failed, mib, row, spread, table

T_LONG = 512
GOAL_MS, GOAL_BACKWARD_MS, GOAL_TRACE_MIB = LONG_GOAL_MS, 6000, 1536
GPT2_PARAMS, SMOL_PARAMS = 124_439_808, 134_515_008
SMOL_NAME = "SmolLM2-135M-shape"
QWEN3_PARAMS, QWEN3_NAME = 596_049_920, "Qwen3-0.6B-shape"
QWEN3_CONFIG = dict(vocab_size=151936, hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
                    num_attention_heads=16, num_key_value_heads=8, head_dim=128, rope_theta=1000000.0,
                    tie_word_embeddings=True, rms_norm_eps=1e-6, max_position_embeddings=40960, hidden_act="silu")
# The tokens each model's rows type, and the positions the app traces of them: the Qwen3-0.6B shape's 256 tokens
# (the size) are cut to 128, as its pass over 256 would cost 320 GFLOP, over the app's budget of 160 a text
# (gptviz.present.page_context.PAGE_FLOPS). Each row checks the page says so and that every trace had T_OF positions.
TYPED_OF = {"gpt2": T_LONG, "smol": T_LONG, "qwen3": 256}
T_OF = {"gpt2": T_LONG, "smol": T_LONG, "qwen3": 128}
T_BACKWARD_OF = {"gpt2": 128, "smol": 128, "qwen3": 32}  # big_model_t(cfg, passes=3): what the Backward page traces
CUT_SAID = {"qwen3": "each line is cut to 128 tokens because one pass over 256 tokens would cost about 320 GFLOP"}
SMOL_CONFIG = dict(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                   num_attention_heads=9, num_key_value_heads=3, rope_theta=100000.0, tie_word_embeddings=True,
                   rms_norm_eps=1e-5, max_position_embeddings=8192, hidden_act="silu")
# Short words, so that 512 GPT-2 tokens fit well within a line (the app's limit is MAX_LINE_CHARS); varied, so that a
# text is not one phrase repeated.
STORY = ("a cat and a dog sat by the old red door. the cat ran to the sea, and the dog ran to the hill. "
         "then a bird came down from a tree and sang a song for them all. it was a good day, so they sat in the sun "
         "and ate bread and figs. at dusk the wind came up, the sky went dark, and rain fell on the roof. ")


def _load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def smol_folder(models_dir: Path, which: str = "smol") -> Path:
    """The SmolLM2-135M-shaped (or, ``which="qwen3"``, Qwen3-0.6B-shaped) model folder, built once (random weights,
    seeded) with its tokenizer."""
    name, want = (SMOL_NAME, SMOL_PARAMS) if which == "smol" else (QWEN3_NAME, QWEN3_PARAMS)
    folder = models_dir / name
    if (folder / "config.json").is_file() and (folder / "tokenizer.json").is_file() and \
            any(folder.glob("*.safetensors")):
        return folder
    import torch
    import transformers as tf
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    from gptviz.text.corpus import load

    folder.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    model = (tf.LlamaForCausalLM(tf.LlamaConfig(**SMOL_CONFIG)) if which == "smol"
             else tf.Qwen3ForCausalLM(tf.Qwen3Config(**QWEN3_CONFIG))).eval()
    n = sum(p.numel() for p in model.parameters())
    if n != want:
        raise BenchFailure(f"the {name} built with {n:,} parameters, not {want:,}")
    model.save_pretrained(str(folder))
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=2000, special_tokens=["<|endoftext|>"], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([load("train")[:400_000]], trainer)
    tok.save(str(folder / "tokenizer.json"))
    return folder


def cut_to(tok, text: str, T: int) -> str:
    """``text``'s first ``T`` tokens of ``tok`` as text (a prefix that would encode to another length is shortened
    a token at a time)."""
    ids = tok.encode(text)
    if len(ids) < T:
        raise BenchFailure(f"the bench's text has only {len(ids)} tokens, fewer than T={T}")
    for n in range(T, 0, -1):
        out = tok.decode(ids[:n])
        if len(tok.encode(out)) == T:
            return out
    raise BenchFailure(f"no prefix of the bench's text encodes to exactly {T} tokens")


def expected(which: str, models_dir: Path) -> dict:
    """The model a row names, worked out from its config (never from the page), and the texts it reads."""
    from gptviz.config import preset

    name = {"gpt2": "gpt2-small", "smol": SMOL_NAME, "qwen3": QWEN3_NAME}[which]
    if which == "gpt2":
        from gptviz.text.tokenizers import get_tokenizer

        cfg, tok = preset("gpt2-small", vocab_size=50257), get_tokenizer("gpt2")
        if cfg.num_params() != GPT2_PARAMS:
            raise BenchFailure(f"preset gpt2-small has {cfg.num_params():,} parameters, not {GPT2_PARAMS:,}")
        label, query = f"gpt2-small · {cfg.num_params():,} params", {"preset": "gpt2-small", "tokenizer": "gpt2"}
    else:
        from gptviz.model.pretrained import model_config
        from gptviz.text.hf_tokenizer import HFTokenizer

        folder = smol_folder(models_dir, which)
        cfg = model_config(folder)[0]
        name, want, shape = ((SMOL_NAME, SMOL_PARAMS, (30, 9, 3, 576, False)) if which == "smol" else
                             (QWEN3_NAME, QWEN3_PARAMS, (28, 16, 8, 1024, True)))
        if cfg.num_params() != want or (cfg.n_layer, cfg.n_head, cfg.n_kv_head, cfg.n_embd, cfg.qk_norm) != shape:
            raise BenchFailure(f"the folder {folder} is not {name} ({cfg.num_params():,} parameters)")
        tok = HFTokenizer.from_file(folder / "tokenizer.json")
        label, query = f"{name} · {cfg.num_params():,} params", {"model": name}
    from gptviz.present.page_context import COMPARE_PASSES, big_model_t

    story, typed, T = STORY * 8, TYPED_OF[which], T_OF[which]
    if big_model_t(cfg) != T or big_model_t(cfg, passes=3) != T_BACKWARD_OF[which]:
        raise BenchFailure(f"the app reads {big_model_t(cfg)} tokens of a line of {name} ({big_model_t(cfg, passes=3)} "
                           f"on Backward), not the {T} ({T_BACKWARD_OF[which]}) this bench expects")
    # A change of text changes both halves of the line: the fresh word starts it (every page reads a line's first T
    # tokens) and comes again about 3/4 of the way in (the Generation page continues its prompt's last T tokens, which
    # a change at the start alone would leave as they were: a cache hit, not a change)
    head = cut_to(tok, story, typed * 3 // 4 - 8)

    def text_for(w: str) -> str:
        return cut_to(tok, f"{w} {head} {w} {story}", typed)

    first = text_for("start")
    if len(first) > MAX_LINE_CHARS:
        raise BenchFailure(f"{typed} tokens took {len(first)} characters, over the app's {MAX_LINE_CHARS:,} a line")
    return {"cfg": cfg, "label": label, "query": dict(query, text=first), "text_for": text_for, "T": T,
            # pages whose arithmetic is more than one pass of the text read fewer tokens of a big model's line:
            # Compare models runs two models and keeps both traces, the Backward page a forward and a backward pass
            "T_of_page": {"compare_models": big_model_t(cfg, COMPARE_PASSES), "backward": big_model_t(cfg, passes=3),
                          "who_did_it": big_model_t(cfg, passes=2)},  # the trace and the logit lens
            "typed": typed, "cut_said": CUT_SAID.get(which),
            "tokenizer": "gpt2" if which == "gpt2" else "its own BPE (2,000)"}


def bench_long_pages(which: str, reps: int, models_dir: Path, pages: list[str] | None = None) -> list[dict]:
    """One row per page: the time of ``reps`` text changes (each a new text of exactly T_LONG tokens).

    Memory: the process's resident memory peaked at 9.4 GB over both models' 20 text changes a page (2026-11-25); an
    earlier run (before that day's fixes to what a session keeps, with every layer's gradients) was killed at 24 GB."""
    from streamlit import config
    from streamlit.testing.v1 import AppTest

    from tools.bench.pages import TraceCounter, app_pages, check_page, page_query, type_text

    config.set_option("client.showErrorDetails", "full")
    try:
        exp = expected(which, models_dir)
    except BenchFailure as exc:
        return [failed(f"long text · {which} · every page", which, str(exc))]
    counter = TraceCounter()
    rows = []
    try:
        for page in pages or app_pages():
            name = Path(page).stem
            figure = f"long text · {exp['label'].split(' · ')[0]} · {name} · text change"
            # issue 38 holds the Qwen3 shape's every page, Backward too, to 3 s (its Backward reads 32 tokens)
            goal = GOAL_BACKWARD_MS if "backward" in name.lower() and which != "qwen3" else GOAL_MS
            first = len(counter.calls)
            load0 = _load()
            try:
                at = AppTest.from_file(str(ROOT / page), default_timeout=900)
                for k, v in page_query(page, exp).items():  # the Lessons row opens a lesson on the row's model
                    at.query_params[k] = v
                at.run()
                check_page(at, exp, "first run")
                said = exp["cut_said"]
                if said and exp["T"] in {T for _, T in counter.calls[first:]} and \
                        not any(said in str(c.value) for c in at.caption):
                    raise BenchFailure(f"a text of {exp['typed']} tokens was cut to {exp['T']} with no caption saying "
                                       f"why ('{said}…')")
                at.run()
                check_page(at, exp, "second run")
                times, cpu, misses = [], [], 0
                for i in range(reps):
                    type_text(at, exp["text_for"](fresh_words()))
                    n0 = len(counter.calls)
                    t, c = time.perf_counter(), time.process_time()
                    at.run()
                    times.append(time.perf_counter() - t)
                    cpu.append(time.process_time() - c)  # this process's CPU seconds (both threads)
                    check_page(at, exp, f"text change {i + 1}")
                    misses += len(counter.calls) > n0
                Ts = sorted({T for _, T in counter.calls[first:]})
                want_T = exp["T_of_page"].get(name, exp["T"])
                if Ts and want_T not in Ts:  # (a page may also trace a probe, or a lesson its own text)
                    raise BenchFailure(f"no trace had T={want_T} (the traces had T={'/'.join(map(str, Ts))})")
                text, p50, up = spread(times)
                cache = f"cache: {reps - misses} hit, {misses} miss" if Ts else "no trace"
                t_label = "T=" + "/".join(map(str, Ts)) if Ts else "T=— (draws no trace)"
                t_label += f" of {exp['typed']} typed" if exp["typed"] != exp["T"] else ""
                rows.append(row(figure, f"{exp['label']} · {t_label} · {exp['tokenizer']}",
                                f"{text} · CPU p50 {statistics.median(cpu):.1f} s · {cache} · load {load0} → "
                                f"{_load()}", float("nan"), f"≤ {goal} ms",
                                up <= goal))
            except BenchFailure as exc:
                rows.append(failed(figure, exp["label"], str(exc)))
            except Exception as exc:  # noqa: BLE001 - a row fails, the bench goes on
                rows.append(failed(figure, exp["label"], f"{type(exc).__name__}: {exc}"[:200]))
            print(f"[long] {rows[-1]['figure']}: {rows[-1]['value']}", file=sys.stderr, flush=True)
    finally:
        counter.close()
    return rows


# In a fresh process (Linux /proc): the trace the app caches for one line of T_LONG tokens (trace_for_view: slim,
# numpy, read-only), its bytes as the cache counts them, and the peak resident memory it added while computed.
_MEM_SCRIPT = r"""
import json, sys, time, torch
sys.path.insert(0, {root!r})
from gptviz.perf import tune_allocator
tune_allocator()
torch.set_num_threads(2)
from gptviz.present.page_context import trace_for_view, slim_view
from gptviz.run.byte_cache import nbytes
from gptviz.run import edits
if {which!r} == "gpt2":
    from gptviz import GPT, preset
    model = GPT(preset("gpt2-small"))
else:
    from gptviz.model.pretrained import from_pretrained
    model = from_pretrained({folder!r})[0]
cfg = model.config
g = torch.Generator().manual_seed(0)
x = tuple(tuple(r) for r in torch.randint(0, 2000, (1, {T}), generator=g).tolist())
y = tuple(tuple(r[1:]) + (-100,) for r in x)
def status(field):
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
open("/proc/self/clear_refs", "w").write("5")
before = status("VmRSS")
t = time.perf_counter()
layer = 0 if {grads} and slim_view(cfg, 1, {T}) else None  # as Ctx.grad_layer: the layer in view (0 by default)
tr = trace_for_view(model, x, y, None, edits.spec_key(None), {grads}, grad_layer=layer)
dt = time.perf_counter() - t
print(json.dumps(dict(before=before, peak=status("VmHWM"), held=status("VmRSS"), nbytes=nbytes(tr), seconds=dt,
                      params=cfg.num_params(), slim=tr.slim, layers="all" if layer is None else 1,
                      estimate=cfg.trace_bytes(1, {T}, {grads}, slim_view(cfg, 1, {T}), None if layer is None else 1))))
"""


def bench_long_memory(which: str, models_dir: Path) -> list[dict]:
    rows = []
    folder = str(smol_folder(models_dir, which)) if which != "gpt2" else ""
    name = {"gpt2": "gpt2-small", "smol": SMOL_NAME, "qwen3": QWEN3_NAME}[which]
    for grads in (False, True):
        figure = f"long text · {name} · one trace's memory" + (" (with gradients: Backward)" if grads else "")
        load0 = _load()
        try:
            out = subprocess.run([sys.executable, "-c", _MEM_SCRIPT.format(root=str(ROOT), which=which, folder=folder,
                                                                          T=(T_BACKWARD_OF if grads else T_OF)[which],
                                                                          grads=grads)],
                                 capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1]
            r = json.loads(out)
        except (subprocess.CalledProcessError, ValueError, IndexError) as exc:
            rows.append(failed(figure, name, f"{type(exc).__name__}: {exc}"[:300]))
            continue
        kept = mib(r["nbytes"])
        T = (T_BACKWARD_OF if grads else T_OF)[which]
        rows.append(row(figure, f"{name} · {r['params']:,} params · T={T} · random ids · slim {r['slim']} · "
                                f"layers kept: {r['layers']}",
                        f"cached {kept:.0f} MiB (estimate {mib(r['estimate']):.0f}) · peak while traced "
                        f"+{mib(r['peak'] - r['before']):.0f} MiB · {r['seconds']:.2f} s · load {load0} → {_load()}",
                        float("nan"), f"≤ {GOAL_TRACE_MIB} MiB", kept <= GOAL_TRACE_MIB))
        print(f"[long] {figure}: {rows[-1]['value']}", file=sys.stderr, flush=True)
    return rows


def bench_long(quick: bool, reps: int | None = None, models: tuple[str, ...] = ("gpt2", "smol"),
               pages: list[str] | None = None, models_dir: Path | None = None) -> list[dict]:
    """Every page's text change at T = 512 and one trace's memory, for each model."""
    models_dir = Path(models_dir or os.environ.get("GPTVIZ_BENCH_MODELS", "/tmp/gptviz-bench-models"))
    models_dir.mkdir(parents=True, exist_ok=True)
    os.environ["GPTVIZ_MODELS_DIR"] = str(models_dir)  # the app finds the model folder here (?model=NAME)
    reps = reps or (2 if quick else 20)  # p95 of 20: about 15 minutes for both models
    rows = []
    for which in models:
        rows += bench_long_memory(which, models_dir)
        rows += bench_long_pages(which, reps, models_dir, pages)
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.bench.long_texts", description=__doc__.split("\n")[0])
    p.add_argument("--reps", type=int, default=20, help="text changes per page (p95 from 20 on, else the max)")
    p.add_argument("--models", default="gpt2,smol", help="gpt2, smol, qwen3, comma-separated")
    p.add_argument("--pages", default="", help="page files' stems, comma-separated (default: every page)")
    p.add_argument("--models-dir", default=None, help="where the SmolLM2-shaped folder is built (once)")
    p.add_argument("--json", help="also write the rows as JSON here")
    a = p.parse_args(argv)
    import torch

    from gptviz.perf import tune_allocator

    torch.set_num_threads(int(os.environ.get("GPTVIZ_THREADS", "2")))
    tune_allocator()
    pages = None
    if a.pages:
        from tools.bench.pages import app_pages

        pages = [pg for pg in app_pages() if Path(pg).stem in a.pages.split(",")]
    rows = bench_long(False, a.reps, tuple(a.models.split(",")), pages, a.models_dir)
    print(table(rows))
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1, default=str))
    return 0 if all(r["ok"] is not False for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
