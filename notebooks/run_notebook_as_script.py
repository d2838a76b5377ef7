"""Execute a notebook's code cells as a plain Python script (no Jupyter needed).

    MPLBACKEND=Agg python3 notebooks/run_notebook_as_script.py notebooks/gpu_kernels.ipynb out.png

IPython magics (lines starting with %) are dropped; a cell's trailing expression is printed and,
when it has an HTML representation, checked to hold a table. The last figure is saved to the
second argument.
"""
import json, sys, time
nb = json.load(open(sys.argv[1]))
g = {}
for i, c in enumerate(nb["cells"]):
    if c["cell_type"] != "code":
        continue
    src = "".join(c["source"])
    src = "\n".join(l for l in src.splitlines() if not l.startswith("%"))
    t = time.time()
    lines = src.rstrip().splitlines()
    # show the value of a trailing expression, as a notebook would
    try:
        compile(lines[-1], "<last>", "eval")
        body, last = "\n".join(lines[:-1]), lines[-1]
    except SyntaxError:
        body, last = src, None
    exec(compile(body, f"<cell {i}>", "exec"), g)
    if last is not None and not last.endswith(";"):
        v = eval(last, g)
        print(repr(v)[:3000])
        if hasattr(v, "_repr_html_"):
            assert "<table" in v._repr_html_()
    print(f"--- cell {i} ok in {time.time() - t:.1f}s", flush=True)
import matplotlib.pyplot as plt
plt.gcf().savefig(sys.argv[2])
