"""The command ``python -m gptviz.neurons --model shakespeare``: summarise every MLP neuron of a shipped checkpoint
over a slice of the held-out plays and write ``checkpoints/NAME.neurons.npz``, which the Neurons page reads instead
of computing it (``--all``: every shipped decoder-only checkpoint with an MLP)."""
from __future__ import annotations

import argparse
import sys
import time

from ..interp import neuron_store, neurons
from ..model.checkpoint import load_checkpoint
from ..paths import CHECKPOINTS

SHIPPED_TOKENS = 16_384  # 256 windows of 64 tokens, spread over Hamlet and Julius Caesar


def shipped_names() -> list[str]:
    return sorted(p.stem for p in CHECKPOINTS.glob("*.safetensors") if "." not in p.stem)


def summarise_checkpoint(name: str, n_tokens: int = SHIPPED_TOKENS) -> str:
    """Compute and write one checkpoint's summary; returns a line saying what was written (or why not)."""
    ck = load_checkpoint(CHECKPOINTS / f"{name}.safetensors")
    reason = neurons.why_no_neurons(ck.model.config)
    if reason:
        return f"{name}: skipped ({reason})"
    t0 = time.perf_counter()
    stats = neurons.compute(ck.model, ck.tokenizer, n_tokens, max_floats=None)
    stats.meta.update(model=name, fingerprint=neuron_store.fingerprint(ck.model),
                      command=f"python -m gptviz.neurons --model {name}")
    size = neuron_store.save(stats, neuron_store.path_for(name))
    return (f"{name}: {stats.n_tokens} tokens, {stats.n_layer} layers x {stats.d_mlp} neurons in "
            f"{time.perf_counter() - t0:.1f} s -> {neuron_store.path_for(name).name} ({size / 1e6:.2f} MB)")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m gptviz.neurons", description=__doc__)
    ap.add_argument("--model", action="append", default=[], help="a shipped checkpoint's name (repeatable)")
    ap.add_argument("--all", action="store_true", help="every shipped checkpoint with an MLP")
    ap.add_argument("--tokens", type=int, default=SHIPPED_TOKENS, help="held-out tokens to read (64 a window)")
    args = ap.parse_args(argv)
    names = shipped_names()
    wanted = names if args.all else args.model
    if not wanted:
        ap.error(f"name a model with --model (one of {', '.join(names)}) or pass --all")
    bad = [n for n in wanted if n not in names]
    if bad:
        ap.error(f"no shipped checkpoint {bad[0]!r}: choose one of {', '.join(names)}")
    if not 64 <= args.tokens <= 200_000:
        ap.error("--tokens must be between 64 and 200000")
    for name in wanted:
        print(summarise_checkpoint(name, args.tokens), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
