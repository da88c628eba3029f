"""``python -m gptviz.export_sae``: write a shipped sparse autoencoder as a SAELens folder (cfg.json and
sae_weights.safetensors), which SAELens's ``SAE.load_from_disk`` and ``gptviz.load_sae`` read.

    python -m gptviz.export_sae --model shakespeare --out exported/shakespeare-sae
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..interp.sae import load_sae, sae_path
from ..interp.sae_formats import save_saelens


def parse(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m gptviz.export_sae", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="shakespeare", help="a shipped model's name (its SAE: checkpoints/NAME.sae."
                                                           "safetensors)")
    p.add_argument("--out", required=True, help="the folder to write (created if needed)")
    return p.parse_args(argv)


def main(argv=None) -> int:
    a = parse(argv)
    src = sae_path(a.model)
    if not src.is_file():
        print(f"no sparse autoencoder ships for {a.model!r} (looked for {src})", file=sys.stderr)
        return 2
    sae = load_sae(src)
    out = save_saelens(sae, Path(a.out), model_name=a.model)
    print(f"wrote {out}: {sae.kind} SAE on {sae.hook}, {sae.n_features} features of {sae.d_model}")
    return 0
