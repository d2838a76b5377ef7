"""Write notebooks/quickstart.ipynb and notebooks/gpu_kernels.ipynb (without outputs).

    python3 notebooks/build_notebooks.py

The notebooks are generated so their cells stay reviewable as plain Python here.
notebooks/run_notebook_as_script.py executes a notebook's code cells without Jupyter (e.g. the
GPU notebook on a machine without nbclient).
"""
import hashlib
import os

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = os.path.dirname(os.path.abspath(__file__))

QUICKSTART = [
    ("md", """# kbench quickstart (CPU)

kbench times a callable the way a kernel developer needs: correctness first, a cold or hot
cache on purpose, a stop rule that says how precise the median is, and a report of everything
that shaped the figure. This notebook runs on any CPU in well under a minute; the timing
budgets are kept small (`max_time_s`) so it does."""),
    ("code", """%matplotlib inline
import numpy as np
import kbench

rng = np.random.default_rng(0)
quick = dict(warmup_s=0.05, max_time_s=0.5)     # small budgets: this is a demo
kbench.__version__"""),
    ("md", """## Hot and cold cache

The same reduction over 16 MB, once with the data left in cache from the previous call
(`cold_cache=None`) and once with the last-level cache flushed before every sample
(`cold_cache="flush"`, kbench's default; the flush is outside the timed region). `bytes=` and
`flops=` are what the operation must move and compute per call: kbench turns them into GB/s and
GFLOP/s, and into a percentage of this machine's measured peaks once `kbench peaks` has run."""),
    ("code", """x = rng.random(1 << 21)          # 2 Mi float64 = 16 MB
hot = kbench.bench(np.sum, x, bytes=x.nbytes, flops=x.size, cold_cache=None, **quick)
hot"""),
    ("code", """cold = kbench.bench(np.sum, x, bytes=x.nbytes, flops=x.size, cold_cache="flush", **quick)
cold"""),
    ("code", """print(f"cold / hot median: {cold.median / hot.median:.2f}x  "
      f"({cold.throughput['bytes_per_s'] / 1e9:.1f} vs {hot.throughput['bytes_per_s'] / 1e9:.1f} GB/s)")"""),
    ("md", """## Correctness: `kbench.compare`

Before timing anything, check the answer. `kbench.compare` reports the worst errors of an
output against a reference; here a float32 running sum drifts from the float64 one."""),
    ("code", """ref = np.cumsum(x)
approx = np.cumsum(x.astype(np.float32))
kbench.compare(approx, ref)"""),
    ("md", """`check=` makes `bench` verify the output before it times anything (a wrong answer raises
and nothing is timed):"""),
    ("code", """r = kbench.bench(np.cumsum, x, check=np.cumsum, cold_cache=None, **quick)
r.correctness["ok"], r.median"""),
    ("md", """## Save, reload, compare files

Results serialise to JSON with their metadata, and `kbench.Result.load` reads them back.
`kbench compare OLD NEW` (or `kbench.workflow.cli_compare.compare_files`) prints the deltas
with verdicts.
It judges only figures taken the same way: the hot figure against the cold one is "not
comparable" (the cache, not the code, made the difference), reported and never judged. It also
notes that the two came from different cells: a cell's source is the harness that made its
figure, as a script's is."""),
    ("code", """import os, tempfile
from kbench.workflow.cli_compare import compare_files

tmp = tempfile.mkdtemp()
hot.to_json(os.path.join(tmp, "hot.json"))
cold.to_json(os.path.join(tmp, "cold.json"))
reloaded = kbench.Result.load(os.path.join(tmp, "cold.json"))
print("reloaded:", reloaded.name, reloaded.cold_cache["mode"], reloaded.median == cold.median)
print(compare_files(os.path.join(tmp, "hot.json"), os.path.join(tmp, "cold.json"),
                    threshold="5%"))"""),
    ("md", """## Did my change make it slower? `kbench.ab`, both versions in one cell

Not by benching the code again in another cell, or later, and comparing with the first figure:
on a shared host (a laptop, a CI runner, a VM) other processes, the core the scheduler picks
and the clock move a CPU figure between runs by more than either run's CI, which sees only its
own samples (on a 2-core VM, quiet sessions of a 16 MB add and a 384^3 matmul moved -18%..+16%
with CIs of +-5%), so two separate runs are not compared at a few %. `kbench.ab` runs both
versions in one cell, in interleaved trials whose order alternates (A B, B A, ...), so drift
hits both alike; it gives a verdict only when the CI of the median paired delta excludes zero,
and the table says how many pairs agree in sign."""),
    ("code", """a = rng.random(1 << 16)
b = rng.random(1 << 16)
# before the change: multiply, then sum (a temporary); after: einsum, one pass; both 1 thread
ab = kbench.ab({"before": lambda: (a * b).sum(), "after": lambda: np.einsum("i,i->", a, b)},
               trials=6, cold_cache=None, warmup_s=0.02, max_time_s=0.15)
ab"""),
    ("md", """## Sweep: throughput against size

`kbench.sweep` runs a factory over the cartesian product of axes and collects one row per case:
the table below, `.to_markdown()`, `.to_csv()`, `.to_pandas()` and a plot of throughput against
size (with the measured peak as a horizontal line once `kbench peaks` has run)."""),
    ("code", """def copy_case(n, dtype):
    src = np.ones(n, dtype=dtype)
    dst = np.empty_like(src)
    return {"fn": np.copyto, "args": (dst, src), "bytes": 2 * src.nbytes}

s = kbench.sweep(copy_case, axes={"n": [1 << 12, 1 << 15, 1 << 18, 1 << 21],
                                  "dtype": ["float32", "float64"]},
                 cold_cache=None, warmup_s=0.02, max_time_s=0.15)
s"""),
    ("code", """s.plot(x="n", y="bytes_per_s");"""),
    ("code", """print(s.to_markdown())"""),
]

GPU = [
    ("md", """# kbench on GPU kernels

Needs a CUDA GPU and PyTorch. Copy and matmul with their theoretical bytes and FLOPs, the three
timing modes, an A/B of two kernels, a sweep plotted against the measured peak, and the
`do_bench` drop-in."""),
    ("code", """%matplotlib inline
import torch
import kbench

assert torch.cuda.is_available(), "this notebook needs a CUDA GPU"
dev = torch.device("cuda")
torch.cuda.get_device_name(dev)"""),
    ("md", """## Copy: bytes moved per call

A device-to-device copy reads `n` elements and writes `n`: `bytes = 2 * src.nbytes`. kbench
flushes L2 before every sample by default, so this is DRAM bandwidth, not L2."""),
    ("code", """n = 1 << 26
src = torch.randn(n, device=dev)
dst = torch.empty_like(src)

def copy(dst, src):
    return dst.copy_(src)          # the output is what check= compares

r_copy = kbench.bench(copy, dst, src, bytes=2 * src.nbytes, check=lambda dst, src: src)
r_copy"""),
    ("md", """## Matmul: FLOPs and bytes

`2*M*N*K` FLOPs; each input read once and the output written once. With both counts kbench
says whether the kernel is memory- or compute-bound against this GPU's measured ridge point."""),
    ("code", """M = N = K = 4096
a = torch.randn(M, K, device=dev, dtype=torch.bfloat16)
b = torch.randn(K, N, device=dev, dtype=torch.bfloat16)
mm_flops = 2 * M * N * K
mm_bytes = (M * K + K * N + M * N) * a.element_size()

r_mm = kbench.bench(torch.matmul, a, b, flops=mm_flops, bytes=mm_bytes,
                    check=lambda a, b: (a.float() @ b.float()).to(a.dtype), rtol=2e-2, atol=1e-1)
r_mm"""),
    ("md", """## Timing modes

`cupti`: kernel time from CUPTI activity records (no launch overhead); `events`: CUDA events
around each call; `graph`: the call captured in a CUDA graph and replayed. Small kernels show the
difference most."""),
    ("code", """small = torch.randn(1 << 16, device=dev)
small_out = torch.empty_like(small)
modes = {}
for mode in ("cupti", "events", "graph"):
    modes[mode] = kbench.bench(torch.mul, small, 2.0, kwargs={"out": small_out},
                               bytes=2 * small.nbytes, mode=mode, max_time_s=2.0)
for mode, r in modes.items():
    print(f"{mode:7s} {r.median * 1e6:8.2f} us  (n={r.n}, stop: {r.stop['stop']})")"""),
    ("md", """## A/B of two kernels

A fused softmax against a hand-written one: interleaved trials, paired deltas, a verdict only
when it is resolved."""),
    ("code", """x = torch.randn(8192, 4096, device=dev)

def naive_softmax(x):
    e = (x - x.amax(dim=-1, keepdim=True)).exp()
    return e / e.sum(dim=-1, keepdim=True)

ab = kbench.ab({"baseline": naive_softmax, "candidate": lambda x: torch.softmax(x, dim=-1)}, x,
               trials=10, bytes=2 * x.nbytes, check=lambda x: torch.softmax(x, dim=-1))
ab"""),
    ("md", """## Sweep: copy bandwidth against size

Throughput rises with size until the DRAM ceiling; the dashed line is the peak `kbench peaks`
measured on this GPU (run it once to get the line)."""),
    ("code", """def copy_case(n, dtype):
    src = torch.ones(n, device=dev, dtype=getattr(torch, dtype))
    dst = torch.empty_like(src)
    return {"fn": copy, "args": (dst, src), "bytes": 2 * src.nbytes}

s = kbench.sweep(copy_case, axes={"n": [1 << k for k in range(16, 29, 2)],
                                  "dtype": ["float16", "float32"]},
                 warmup_s=0.2, max_time_s=1.0)
s"""),
    ("code", """s.plot(x="n", y="bytes_per_s");"""),
    ("md", """## Drop-in for `triton.testing.do_bench`

Same signature and return value (milliseconds), measured by kbench: see docs/dropin.md for the
differences."""),
    ("code", """from kbench.testing import do_bench, bench_gpu_time_with_cupti
print(do_bench(lambda: torch.matmul(a, b), quantiles=[0.2, 0.5, 0.8]))
times = bench_gpu_time_with_cupti(torch.matmul, input_args=(a, b), repeat_iters=20)
print(len(times), min(times), max(times))"""),
]


def build(cells, path):
    nb = new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    nb.metadata["language_info"] = {"name": "python"}
    nb.cells = [new_markdown_cell(src) if kind == "md" else new_code_cell(src)
                for kind, src in cells]
    for cell in nb.cells:       # ids from the content: a rebuild changes only what changed
        cell["id"] = hashlib.sha1(cell.source.encode()).hexdigest()[:8]
    nbformat.validate(nb)
    nbformat.write(nb, path)


if __name__ == "__main__":
    build(QUICKSTART, os.path.join(HERE, "quickstart.ipynb"))
    build(GPU, os.path.join(HERE, "gpu_kernels.ipynb"))
