"""Train a sparse autoencoder on a shipped model's residual stream, measure it on the held-out plays, and write
it with its top snippets beside the model:

    python -m gptviz.train_sae --model shakespeare --layer 2 --n-features 1024 --k 32 --threads 1

writes ``checkpoints/shakespeare.sae.safetensors`` (float16 weights; the hook, sizes, training settings and
figures in its metadata) and ``checkpoints/shakespeare.sae.snippets.safetensors`` (each feature's strongest
held-out windows). Every figure is measured on the file as written (its float16 weights read back). Seeded.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time

import torch

from ..interp.sae import load_sae, sae_path, save_snippets, snippets_path
from ..model.checkpoint import load_checkpoint
from ..model.hook_names import act_name
from ..paths import CHECKPOINTS
from ..text import corpus
from ..training.sae import SAETrainConfig, collect, evaluate, held_out_resid, top_snippets, train_sae, windows


def parse(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m gptviz.train_sae", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="shakespeare", help="a shipped model's name (checkpoints/NAME.safetensors)")
    p.add_argument("--layer", type=int, default=2, help="read the residual stream at the input of this layer")
    p.add_argument("--n-features", type=int, default=1024)
    p.add_argument("--k", type=int, default=32, help="active features per vector (TopK)")
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--batch-size", type=int, default=4096)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--tokens", type=int, default=1_000_000, help="training vectors collected from the train plays")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--n-top", type=int, default=8, help="snippets kept per feature")
    return p.parse_args(argv)


def main(argv=None) -> int:
    a = parse(argv)
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    model_file = CHECKPOINTS / f"{a.model}.safetensors"
    ck = load_checkpoint(model_file)
    model, tok = ck.model.eval(), ck.tokenizer
    hook = act_name("resid_pre", a.layer)
    T = model.config.block_size
    cfg = SAETrainConfig(n_features=a.n_features, k=a.k, steps=a.steps, batch_size=a.batch_size, lr=a.lr,
                         seed=a.seed)
    t0 = time.perf_counter()
    train_ids = torch.from_numpy(corpus.encoded("train", tok).astype("int64"))
    acts = collect(model, train_ids, hook, a.tokens, T=T, seed=a.seed)
    t_collect = time.perf_counter() - t0
    print(f"collected {acts.shape[0]:,} vectors at {hook} in {t_collect:.1f}s", flush=True)

    def progress(step, row):
        print(f"step {step:5d}  batch FVU {row['fvu']:.4f}  aux {row['aux']:.3f}  dead {row['dead']:.3f}  "
              f"lr {row['lr']:.2e}  {row['seconds']:.1f}s  load {os.getloadavg()[0]:.2f}", flush=True)

    sae, hist = train_sae(acts, hook, cfg, on_progress=progress)
    seconds = time.perf_counter() - t0
    load = [round(v, 2) for v in os.getloadavg()]
    del acts
    out = sae_path(a.model)
    sae.meta.update(model=a.model, model_config=json.dumps(model.config.to_dict(), sort_keys=True),
                    model_sha256=hashlib.sha256(model_file.read_bytes()).hexdigest(), history=hist)
    sae.save(out)
    shipped = load_sae(out)  # every figure below is of the float16 weights as written

    val = windows(torch.from_numpy(corpus.encoded("val", tok).astype("int64")), T)
    r = held_out_resid(model, val, hook)
    fig = evaluate(model, shipped, val, r)
    chars = fig["tokens"] * len(corpus.load("val")) / len(corpus.encoded("val", tok))
    fig.update(chars=round(chars), loss_nats_per_char=fig["loss_per_token"] * fig["tokens"] / chars,
               spliced_nats_per_char=fig["spliced_loss_per_token"] * fig["tokens"] / chars,
               plays=corpus.manifest()["val"]["plays"])
    fig["delta_nats_per_char"] = fig["spliced_nats_per_char"] - fig["loss_nats_per_char"]
    shipped.meta.update(figures=fig, training=dict(seconds=round(seconds, 1), collect_seconds=round(t_collect, 1),
                                                   threads=a.threads, load_average=load, tokens=a.tokens,
                                                   torch=torch.__version__),
                        command="python -m gptviz.train_sae " + " ".join(argv if argv is not None else sys.argv[1:]))
    shipped.save(out)  # the same float16 weights, now with their figures
    snips = top_snippets(shipped, val, r, n_top=a.n_top)
    save_snippets(snippets_path(a.model), snips, {"hook": hook, "model": a.model, "window": T,
                                                  "split": "val", "plays": fig["plays"]})
    print(json.dumps({k: (round(v, 4) if isinstance(v, float) else v) for k, v in fig.items()}), flush=True)
    print(f"saved {out} ({out.stat().st_size:,} bytes) and {snippets_path(a.model).name} "
          f"({snippets_path(a.model).stat().st_size:,} bytes); training {seconds:.0f}s on {a.threads} thread(s), "
          f"load average {load}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
