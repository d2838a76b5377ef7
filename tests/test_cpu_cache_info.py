"""Which last-level cache the CPU flush is sized for: the CPUs the process may run on, and where
the size came from (_core.cpu_cache_info, csrc/host/coldcache.c).

Without root: $KBENCH_SYSFS_CPU_ROOT (a test hook of coldcache.c) points the core at a fake
sysfs tree, and each case runs in a subprocess pinned with os.sched_setaffinity (the core
remembers its answer per affinity mask, so a fresh process per tree keeps the cases apart).
The fake tree mimics an AMD X3D part: cpu0 with a 32 MB L3, cpu1 with a 96 MB one."""
import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

MB = 1 << 20

needs_two_cpus = pytest.mark.skipif(
    not {0, 1} <= os.sched_getaffinity(0),
    reason="needs CPUs 0 and 1 in this process's affinity mask to pin to either")


def make_tree(root, l3_sizes):
    """cpuN/cache/index0..3 (L1d, L1i, L2, L3) under root; l3_sizes: {cpu: size text, or None
    for no size file, or "nocache" for no cache directory at all}."""
    for cpu, l3 in l3_sizes.items():
        if l3 == "nocache":
            (root / f"cpu{cpu}").mkdir(parents=True)
            continue
        for i, (level, kind, size) in enumerate([(1, "Data", "32K"), (1, "Instruction", "32K"),
                                                 (2, "Unified", "1024K"), (3, "Unified", l3)]):
            d = root / f"cpu{cpu}" / "cache" / f"index{i}"
            d.mkdir(parents=True)
            (d / "level").write_text(f"{level}\n")
            (d / "type").write_text(f"{kind}\n")
            if size is not None:
                (d / "size").write_text(f"{size}\n")
    return root


def cache_info(root, *cpu_sets, env=None, preload=None, code=""):
    """cpu_cache_info() in a fresh process pinned to each of cpu_sets in turn."""
    script = ("import json, os\nfrom kbench import _core\nout = []\n"
              f"for cpus in {[sorted(c) for c in cpu_sets]!r}:\n"
              "    os.sched_setaffinity(0, cpus)\n"
              "    out.append(_core.cpu_cache_info())\n"
              + code + "print(json.dumps(out))\n")
    e = {k: v for k, v in os.environ.items() if k != "KBENCH_LLC_BYTES"}
    e["KBENCH_SYSFS_CPU_ROOT"] = str(root)
    e.update(env or {})
    if preload:     # after what is there: a sanitizer's runtime must come first
        e["LD_PRELOAD"] = " ".join(filter(None, [e.get("LD_PRELOAD"), str(preload)]))
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=e,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.splitlines()[-1])


@pytest.fixture
def x3d(tmp_path):
    return make_tree(tmp_path / "cpu", {0: "32768K", 1: "98304K"})


@needs_two_cpus
def test_the_size_is_the_cache_of_the_cpus_the_process_runs_on(x3d):
    on1, on0, both = cache_info(x3d, {1}, {0}, {0, 1})
    # pinned to cpu1: cpu1's 96 MB, not cpu0's 32 MB
    assert (on1["llc_bytes"], on1["source"], on1["llc_cpu"], on1["cpus"]) == \
        (96 * MB, "sysfs", 1, [1])
    assert on1["levels_cpu"] == 1 and on1["levels"][-1]["bytes"] == 96 * MB
    assert (on0["llc_bytes"], on0["source"], on0["llc_cpu"], on0["cpus"]) == \
        (32 * MB, "sysfs", 0, [0])
    # free to run on both: the larger, which the flush must evict wherever it runs
    assert (both["llc_bytes"], both["source"], both["llc_cpu"], both["cpus"]) == \
        (96 * MB, "sysfs", 1, [0, 1])


@needs_two_cpus
def test_the_largest_cache_wins_whichever_cpu_comes_first(tmp_path):
    root = make_tree(tmp_path / "cpu", {0: "98304K", 1: "32768K"})
    (both,) = cache_info(root, {0, 1})
    assert (both["llc_bytes"], both["llc_cpu"]) == (96 * MB, 0)


@needs_two_cpus
@pytest.mark.parametrize("l3", [None, "unknown", "nocache"],
                         ids=["no-size-file", "unparseable-size", "no-cache-dir"])
def test_a_cpu_without_a_last_level_size_falls_back_and_says_so(tmp_path, l3):
    root = make_tree(tmp_path / "cpu", {0: "32768K", 1: l3})
    on0, both = cache_info(root, {0}, {0, 1})
    assert (on0["llc_bytes"], on0["source"]) == (32 * MB, "sysfs")
    # cpu1's last level is unknown: neither cpu0's 32 MB (it could be cpu1's, smaller than
    # cpu1's cache) nor cpu1's L2 is an answer; glibc's sysconf is asked, and named
    assert both["source"] in ("sysconf", "none"), both
    assert both["llc_cpu"] is None and both["levels_cpu"] == 1
    assert (both["llc_bytes"] > 0) == (both["source"] == "sysconf")
    if l3 == "nocache":
        assert both["levels"] == []
    else:
        assert both["levels"][-1] == {"level": 3, "type": "Unified", "bytes": 0}


@pytest.fixture(scope="module")
def sysconf_shim(tmp_path_factory):
    """An LD_PRELOAD library whose sysconf reports an L3 of $FAKE_L3 bytes (0: none) and no
    other cache size, as glibc does (wrongly) on some VMs."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build the sysconf shim")
    d = tmp_path_factory.mktemp("shim")
    (d / "shim.c").write_text(textwrap.dedent("""
        #define _GNU_SOURCE
        #include <dlfcn.h>
        #include <stdlib.h>
        #include <unistd.h>
        long sysconf(int name)
        {
            static long (*real)(int);
            if (name == _SC_LEVEL3_CACHE_SIZE)
                return atol(getenv("FAKE_L3") ? getenv("FAKE_L3") : "0");
            if (name >= _SC_LEVEL1_ICACHE_SIZE && name <= _SC_LEVEL4_CACHE_LINESIZE)
                return 0;
            if (real == NULL)
                real = (long (*)(int))dlsym(RTLD_NEXT, "sysconf");
            return real(name);
        }
    """))
    so = d / "shim.so"
    p = subprocess.run([cc, "-shared", "-fPIC", "-o", str(so), str(d / "shim.c"), "-ldl"],
                       capture_output=True, text=True)
    if p.returncode != 0:
        pytest.skip(f"cannot build the sysconf shim: {p.stderr[-300:]}")
    return so


@needs_two_cpus
def test_the_sysconf_fallback_is_named_and_none_is_zero(tmp_path, sysconf_shim):
    root = make_tree(tmp_path / "cpu", {0: "32768K", 1: None})
    (sc,) = cache_info(root, {0, 1}, env={"FAKE_L3": str(320 * MB)}, preload=sysconf_shim)
    assert (sc["llc_bytes"], sc["source"], sc["llc_cpu"]) == (320 * MB, "sysconf", None)
    (none,) = cache_info(root, {0, 1}, env={"FAKE_L3": "0"}, preload=sysconf_shim)
    assert (none["llc_bytes"], none["source"], none["llc_cpu"]) == (0, "none", None)
    # sysfs, where it answers, wins over sysconf's figure
    (sysfs,) = cache_info(root, {0}, env={"FAKE_L3": str(320 * MB)}, preload=sysconf_shim)
    assert (sysfs["llc_bytes"], sysfs["source"]) == (32 * MB, "sysfs")


@needs_two_cpus
def test_the_override_still_wins_and_names_itself(x3d):
    (on1,) = cache_info(x3d, {1}, env={"KBENCH_LLC_BYTES": "3M"})
    assert (on1["llc_bytes"], on1["source"], on1["llc_cpu"]) == (3 * MB, "KBENCH_LLC_BYTES", None)
    assert on1["levels_cpu"] == 1 and on1["cpus"] == [1]


@needs_two_cpus
def test_the_flush_is_sized_for_the_cpu_the_bench_runs_on(x3d):
    """End to end: kbench.bench pinned to cpu1 flushes 2x cpu1's 96 MB and calls it cold
    (before the fix: 2x cpu0's 32 MB, still marked as evicting)."""
    code = """
import numpy as np, kbench
r = kbench.bench(np.sum, np.ones(1 << 12), max_time_s=0.2, min_samples=3, memory=False)
out.append({k: r.cold_cache[k] for k in ("flush_bytes", "cache_bytes", "evicts")})
"""
    (on1, cold) = cache_info(x3d, {1}, code=code)
    assert on1["llc_bytes"] == 96 * MB
    assert cold["cache_bytes"] == 96 * MB and cold["flush_bytes"] >= 2 * 96 * MB
    assert cold["evicts"]
