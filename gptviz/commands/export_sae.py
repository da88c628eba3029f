"""``python -m gptviz.export_sae``: write a shipped model's dictionaries in the formats researchers share them in.

    python -m gptviz.export_sae --model shakespeare --out exported/shakespeare-sae
    python -m gptviz.export_sae --model shakespeare --what clt --out exported/shakespeare-clt

- ``sae`` (the default): the sparse autoencoder as a SAELens folder (cfg.json and sae_weights.safetensors), which
  SAELens's ``SAE.load_from_disk`` and ``gptviz.load_sae`` read. The same SAE, exactly.
- ``transcoder`` (per-layer) and ``clt`` (cross-layer): the transcoder as a circuit-tracer folder (config.yaml,
  W_enc_{i} and W_dec_{i}.safetensors), which circuit-tracer's ``load_clt`` and ``gptviz.load_sae`` read.
  circuit-tracer has no TopK rule, so the shipped TopK transcoder is written as a JumpReLU one whose thresholds
  make each feature fire as often as it did under TopK on ``--tokens`` training vectors
  (``gptviz.interp.transcoder_formats.matched_thresholds``). That is a different transcoder: the command measures
  it on the held-out plays (FVU, L0 and dead features per layer, and the loss with every MLP replaced) and writes
  the figures into config.yaml under ``gptviz_figures``.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from ..interp.sae import load_sae, sae_path
from ..interp.sae_formats import save_saelens
from ..interp.transcoder import load_transcoder, transcoder_path
from ..interp.transcoder_formats import as_jumprelu, matched_thresholds, save_circuit_tracer
from ..paths import CHECKPOINTS

KINDS = ("sae", "transcoder", "clt")
MAX_TOKENS = 131_072  # vectors the thresholds are matched on: each layer sorts (N, n_features) scores, 0.5 GB here


def parse(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m gptviz.export_sae", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="shakespeare", help="a shipped model's name (its files: checkpoints/NAME.*)")
    p.add_argument("--what", choices=KINDS, default="sae",
                   help="the SAE (SAELens), the per-layer transcoder or the cross-layer one (circuit-tracer)")
    p.add_argument("--out", required=True, help="the folder to write (created if needed)")
    p.add_argument("--tokens", type=int, default=32_768,
                   help="training vectors the JumpReLU thresholds are matched on (transcoders only)")
    p.add_argument("--measure-windows", type=int, default=0,
                   help="held-out windows to measure the exported transcoder on (0: every one)")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def _export_sae(a) -> int:
    src = sae_path(a.model)
    if not src.is_file():
        print(f"no sparse autoencoder ships for {a.model!r} (looked for {src})", file=sys.stderr)
        return 2
    sae = load_sae(src)
    out = save_saelens(sae, Path(a.out), model_name=a.model)
    print(f"wrote {out}: {sae.kind} SAE on {sae.hook}, {sae.n_features} features of {sae.d_model}")
    return 0


def _export_transcoder(a) -> int:
    from ..model.checkpoint import load_checkpoint
    from ..text import corpus
    from ..training.sae import windows
    from ..training.transcoder import collect_mlp_pairs, evaluate_transcoder

    cross = a.what == "clt"
    src = transcoder_path(a.model, cross)
    if not src.is_file():
        print(f"no {'cross-layer' if cross else 'per-layer'} transcoder ships for {a.model!r} (looked for {src})",
              file=sys.stderr)
        return 2
    if not 1 <= a.tokens <= MAX_TOKENS:
        print(f"--tokens={a.tokens}: match the thresholds on 1 to {MAX_TOKENS:,} vectors (each holds every layer's MLP "
              "input)", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    tc = load_transcoder(src)
    ck = load_checkpoint(CHECKPOINTS / f"{a.model}.safetensors")
    model, tok = ck.model.eval(), ck.tokenizer
    T = model.config.block_size
    train_ids = torch.from_numpy(corpus.encoded("train", tok).astype("int64"))
    ins, _ = collect_mlp_pairs(model, train_ids, a.tokens, T=T, seed=a.seed)
    rule = f"matched to TopK's firing on {a.tokens:,} training vectors (seed {a.seed})"
    jump = as_jumprelu(tc, matched_thresholds(tc, ins), note=rule)
    del ins
    val = windows(torch.from_numpy(corpus.encoded("val", tok).astype("int64")), T)
    if a.measure_windows > 0:
        val = val[:a.measure_windows]
    fig = {}
    for name, which in (("topk", tc), ("jumprelu", jump)):
        f = evaluate_transcoder(model, which, val)
        chars = f["tokens"] * len(corpus.load("val")) / len(corpus.encoded("val", tok))
        fig[name] = {"fvu": [round(v, 4) for v in f["fvu"]], "l0": [round(v, 2) for v in f["l0"]],
                     "dead_fraction": [round(v, 4) for v in f["dead_fraction"]],
                     "loss_nats_per_char": round(f["loss_per_token"] * f["tokens"] / chars, 4),
                     "replaced_nats_per_char": round(f["replaced_loss_per_token"] * f["tokens"] / chars, 4),
                     "tokens": f["tokens"]}
    extra = {"gptviz_figures": {"held_out": fig, "thresholds": rule, "source": src.name,
                                "seconds": round(time.perf_counter() - t0, 1)}}
    out = save_circuit_tracer(jump, Path(a.out), model_name=a.model, extra=extra)
    print(json.dumps(fig))
    print(f"wrote {out}: a {'cross-layer' if cross else 'per-layer'} JumpReLU transcoder, {tc.n_layer} layers of "
          f"{tc.n_features} features (thresholds {rule})")
    return 0


def main(argv=None) -> int:
    a = parse(argv)
    return _export_sae(a) if a.what == "sae" else _export_transcoder(a)
