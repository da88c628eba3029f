"""Part 3, memory: the peak resident memory one GPT-2-small trace adds, measured in a fresh process."""
from __future__ import annotations

import subprocess
import sys

from gptviz.paths import ROOT
from tools.bench.models import big_model_t
from tools.bench.report import GOALS, mib, row

# Run in a fresh process (Linux: /proc): prints resident bytes before, peak bytes after, and the parameter count.
_MEM_SCRIPT = r"""
import sys, torch
sys.path.insert(0, {root!r})
from gptviz import GPT, preset, trace
from gptviz.perf import tune_allocator
tune_allocator()
cfg = preset("gpt2-small")
model = GPT(cfg)
idx = torch.randint(0, cfg.vocab_size, (1, {T}), generator=torch.Generator().manual_seed(0))
y = torch.full_like(idx, -100); y[:, :-1] = idx[:, 1:]
def status(field):
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024  # bytes
open("/proc/self/clear_refs", "w").write("5")  # restart the peak (VmHWM) from here
before = status("VmRSS")
if {mode!r} == "trace":
    t = trace(model, idx, y)
else:
    with torch.no_grad():
        out = model(idx, y)
print(before, status("VmHWM"), model.num_params())
"""


def bench_memory() -> list[dict]:
    """Peak resident memory one GPT-2-small trace (with targets, at the app's token cap) adds, in a fresh process."""
    T = big_model_t()
    res = {}
    for mode in ("forward", "trace"):
        out = subprocess.run([sys.executable, "-c", _MEM_SCRIPT.format(root=str(ROOT), mode=mode, T=T)],
                             capture_output=True, text=True, check=True).stdout.split()
        res[mode] = tuple(int(v) for v in out[:3])  # bytes before, bytes peak, parameters
    before, peak, n_params = res["trace"]
    weights = n_params * 4
    tr = peak - before
    fw = res["forward"][1] - res["forward"][0]
    return [row("peak memory a trace adds (with targets)", f"gpt2-small · {n_params:,} params · T={T} · random ids",
                f"trace +{mib(tr):.0f} MiB, a forward +{mib(fw):.0f} MiB · weights alone {mib(weights):.0f} MiB "
                f"({n_params:,} × 4 B) · whole process before the trace {mib(before):.0f} MiB",
                tr / max(fw, 2**20), f"trace ≤ {GOALS['trace_memory_mib']} MiB", mib(tr) <= GOALS["trace_memory_mib"])]
