"""Train a transcoder on a shipped model's MLPs, measure it on the held-out plays, and write it beside the model:

    python -m gptviz.train_transcoder --model shakespeare --n-features 1024 --k 32 --threads 2
    python -m gptviz.train_transcoder --model shakespeare --cross-layer --n-features 1024 --k 32 --threads 2

writes ``checkpoints/shakespeare.transcoder.safetensors`` (per-layer) or
``checkpoints/shakespeare.clt.transcoder.safetensors`` (cross-layer): float16 weights, with the sizes, the training
settings and the figures in its metadata. Every figure is measured on the file as written (its float16 weights read
back). Seeded.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from pathlib import Path

import torch

from ..interp.transcoder import load_transcoder, transcoder_path
from ..model.checkpoint import load_checkpoint
from ..paths import CHECKPOINTS
from ..text import corpus
from ..training.sae import windows
from ..training.transcoder import TranscoderTrainConfig, collect_mlp_pairs, evaluate_transcoder, train_transcoder


def parse(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m gptviz.train_transcoder", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="shakespeare", help="a shipped model's name (checkpoints/NAME.safetensors)")
    p.add_argument("--cross-layer", action="store_true",
                   help="each layer's features write to every later MLP's output (default: only their own)")
    p.add_argument("--n-features", type=int, default=1024, help="features per layer")
    p.add_argument("--k", type=int, default=32, help="active features per vector and layer (TopK)")
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument("--batch-size", type=int, default=2048)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--tokens", type=int, default=400_000, help="training vectors collected from the train plays")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", default=None, help="write here instead of beside the model")
    return p.parse_args(argv)


def main(argv=None) -> int:
    a = parse(argv)
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    model_file = CHECKPOINTS / f"{a.model}.safetensors"
    ck = load_checkpoint(model_file)
    model, tok = ck.model.eval(), ck.tokenizer
    T = model.config.block_size
    cfg = TranscoderTrainConfig(n_features=a.n_features, k=a.k, cross_layer=a.cross_layer, steps=a.steps,
                                batch_size=a.batch_size, lr=a.lr, seed=a.seed)
    t0 = time.perf_counter()
    train_ids = torch.from_numpy(corpus.encoded("train", tok).astype("int64"))
    ins, outs = collect_mlp_pairs(model, train_ids, a.tokens, T=T, seed=a.seed)
    t_collect = time.perf_counter() - t0
    print(f"collected {ins.shape[0]:,} vectors at each of {ins.shape[1]} MLPs in {t_collect:.1f}s", flush=True)

    def progress(step, row):
        print(f"step {step:5d}  batch FVU (sum over layers) {row['fvu']:.4f}  aux {row['aux']:.3f}  "
              f"dead {row['dead']:.3f}  lr {row['lr']:.2e}  {row['seconds']:.1f}s  load {os.getloadavg()[0]:.2f}",
              flush=True)

    tc, hist = train_transcoder(ins, outs, cfg, on_progress=progress)
    seconds = time.perf_counter() - t0
    load = [round(v, 2) for v in os.getloadavg()]
    del ins, outs
    out = Path(a.out) if a.out else transcoder_path(a.model, a.cross_layer)
    tc.meta.update(model=a.model, model_config=json.dumps(model.config.to_dict(), sort_keys=True),
                   model_sha256=hashlib.sha256(model_file.read_bytes()).hexdigest(), history=hist)
    tc.save(out)
    shipped = load_transcoder(out)  # every figure below is of the float16 weights as written

    val = windows(torch.from_numpy(corpus.encoded("val", tok).astype("int64")), T)
    fig = evaluate_transcoder(model, shipped, val)
    chars = fig["tokens"] * len(corpus.load("val")) / len(corpus.encoded("val", tok))
    fig.update(chars=round(chars), loss_nats_per_char=fig["loss_per_token"] * fig["tokens"] / chars,
               replaced_nats_per_char=fig["replaced_loss_per_token"] * fig["tokens"] / chars,
               plays=corpus.manifest()["val"]["plays"])
    fig["delta_nats_per_char"] = fig["replaced_nats_per_char"] - fig["loss_nats_per_char"]
    shipped.meta.update(figures=fig, training=dict(seconds=round(seconds, 1), collect_seconds=round(t_collect, 1),
                                                   threads=a.threads, load_average=load, tokens=a.tokens,
                                                   torch=torch.__version__),
                        command="python -m gptviz.train_transcoder " + " ".join(argv if argv is not None
                                                                                else sys.argv[1:]))
    shipped.save(out)  # the same float16 weights, now with their figures
    print(json.dumps({k: ([round(x, 4) for x in v] if isinstance(v, list) and v and isinstance(v[0], float)
                          else round(v, 4) if isinstance(v, float) else v) for k, v in fig.items()}), flush=True)
    print(f"saved {out} ({out.stat().st_size:,} bytes); training {seconds:.0f}s on {a.threads} thread(s), "
          f"load average {load}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
