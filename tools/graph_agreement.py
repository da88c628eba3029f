"""How often an attribution graph's prediction agrees with the model: every kept feature node of the shipped
Shakespeare GPT's graphs switched off alone, its predicted change of the top target logit against the change each
of ``graph_interventions.MODES`` computes.

    python -m tools.graph_agreement                 # both shipped transcoders, the two prompts below
    python -m tools.graph_agreement --within 0.1    # "agrees": |predicted - computed| <= 0.1 |computed|

Prints one line per transcoder, prompt and mode: the nodes, how many agree, and the median |predicted - computed| /
|computed|. The graphs are the Circuits page's defaults (1,024 feature nodes, pruned at 0.8 and 0.98)."""
from __future__ import annotations

import argparse
import statistics
import time

import torch

from gptviz.interp.attribution_graph import attribute
from gptviz.interp.graph_interventions import MODES, intervene
from gptviz.interp.graph_pruning import EDGE_THRESHOLD, NODE_THRESHOLD, prune
from gptviz.interp.transcoder import load_transcoder, transcoder_path
from gptviz.model.checkpoint import load_checkpoint
from gptviz.paths import CHECKPOINTS

PROMPTS = ("Now is the winter of our disconte", "ROMEO: But soft, what light through yonder window bre")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.graph_agreement", description=__doc__.split("\n\n")[0])
    p.add_argument("--within", type=float, default=0.1, help="relative difference that counts as agreeing")
    a = p.parse_args(argv)
    ck = load_checkpoint(CHECKPOINTS / "shakespeare.safetensors")
    model, tok = ck.model.eval(), ck.tokenizer
    print(f"model: {sum(p.numel() for p in model.parameters()):,} parameters; torch threads {torch.get_num_threads()}")
    for cross in (True, False):
        tc = load_transcoder(transcoder_path("shakespeare", cross))
        for prompt in PROMPTS:
            ids = tok.encode(prompt)
            g = attribute(model, tc, ids, max_feature_nodes=1024)
            kept = prune(g, NODE_THRESHOLD, EDGE_THRESHOLD)
            nodes = [tuple(int(v) for v in g.node(i)[1:4]) for i in range(g.n_features) if bool(kept.node_mask[i])]
            target = [int(g.logit_ids[0])]
            for mode in MODES:
                t0 = time.perf_counter()
                rel = []
                for node in nodes:
                    out = intervene(model, tc, ids, [node], 0.0, target, mode=mode)
                    pred, real = float(out["predicted"][0]), float(out["real"][0])
                    rel.append(abs(pred - real) / abs(real) if real else (0.0 if pred == 0 else float("inf")))
                agree = sum(r <= a.within for r in rel)
                print(f"{'clt' if cross else 'per-layer':9s} T={len(ids):2d} {prompt[:24]!r:27s} {mode:11s} "
                      f"{agree:3d} of {len(nodes):3d} agree ({100 * agree / max(1, len(nodes)):5.1f} %), median "
                      f"relative difference {statistics.median(rel):.3f} ({time.perf_counter() - t0:.1f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
