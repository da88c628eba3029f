"""One model shared by many threads: same results as one after another, weights untouched."""
from concurrent.futures import ThreadPoolExecutor

import torch
from conftest import CONFIGS, random_ids

from gptviz import GPT, trace


def test_parallel_traces_equal_sequential_traces():
    c = CONFIGS["gpt2-like"]
    m = GPT(c)
    before = {k: v.clone() for k, v in m.state_dict().items()}
    jobs = []
    for i in range(24):
        idx = random_ids(c, B=2, seed=i)
        edits = ({f"blocks.{i % 2}.attn.hook_pattern":
                  (lambda p, h=i % c.n_head: p.index_fill(1, torch.tensor([h]), 0.0))} if i % 3 == 0 else None)
        jobs.append((idx, edits, i % 2 == 0))

    def run(job):
        idx, edits, grads = job
        tr = trace(m, idx, targets=idx, edits=edits, grads=grads)
        return tr["hook_logits"], tr.grad("hook_embed")

    sequential = [run(j) for j in jobs]
    with ThreadPoolExecutor(max_workers=8) as pool:
        parallel = list(pool.map(run, jobs * 3))
    for i, (logits, g) in enumerate(parallel):
        ref_logits, ref_g = sequential[i % len(jobs)]
        assert torch.equal(logits, ref_logits)
        assert (g is None and ref_g is None) or torch.equal(g, ref_g)
    assert all(torch.equal(before[k], v) for k, v in m.state_dict().items())
    assert all(p.grad is None for p in m.parameters())
