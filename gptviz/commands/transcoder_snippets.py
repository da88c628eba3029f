"""Each feature's strongest held-out windows, for a shipped transcoder (the Circuits page shows them beside a feature):

    python -m gptviz.transcoder_snippets --model shakespeare --cross-layer

reads ``checkpoints/shakespeare.clt.transcoder.safetensors`` and writes
``checkpoints/shakespeare.clt.transcoder.snippets.safetensors``: for every layer, each feature's ``--n-top`` strongest
windows of the held-out plays, as the SAE's snippets are made (``gptviz.training.sae.top_snippets``), with the
feature's activation on each token of a span around its peak.
"""
from __future__ import annotations

import argparse
import sys
import time

import torch

from ..interp.transcoder import input_hook, load_transcoder, save_snippets, snippets_path, transcoder_path
from ..model.checkpoint import load_checkpoint
from ..paths import CHECKPOINTS
from ..text import corpus
from ..training.sae import held_out_resid, top_snippets, windows


class _OneLayer:
    """One layer of a transcoder seen as an encoder of its MLP input (what ``top_snippets`` reads)."""

    def __init__(self, tc, layer: int):
        self.tc, self.layer, self.n_features = tc, layer, tc.n_features

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        return self.tc.encode(self.layer, x)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m gptviz.transcoder_snippets", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="shakespeare")
    p.add_argument("--cross-layer", action="store_true")
    p.add_argument("--n-top", type=int, default=5)
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    ck = load_checkpoint(CHECKPOINTS / f"{a.model}.safetensors")
    model, tok = ck.model.eval(), ck.tokenizer
    tc = load_transcoder(transcoder_path(a.model, a.cross_layer))
    val = windows(torch.from_numpy(corpus.encoded("val", tok).astype("int64")), model.config.block_size)
    t0 = time.perf_counter()
    per_layer = []
    for layer in range(tc.n_layer):
        inputs = held_out_resid(model, val, input_hook(layer))
        per_layer.append(top_snippets(_OneLayer(tc, layer), val, inputs, n_top=a.n_top))
        print(f"layer {layer}: {time.perf_counter() - t0:.0f}s", flush=True)
    out = snippets_path(a.model, a.cross_layer)
    save_snippets(out, per_layer, {"model": a.model, "window": model.config.block_size, "split": "val",
                                   "plays": corpus.manifest()["val"]["plays"], "n_top": a.n_top})
    print(f"saved {out} ({out.stat().st_size:,} bytes)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
