#!/usr/bin/env python3
"""How many of MLX's `.metal` units compile unmodified with Alloy, for the CPU and for CUDA.

    python3 scripts/mlx_units.py --mlx-src PATH [--sample N | --all] [--cli build/alloy]
                                 [--only NAME ...] [--json OUT]

PATH is an MLX source tree (the folder holding `mlx/backend/metal/kernels/*.metal`, e.g. a clone
of github.com/ml-explore/mlx). Each unit is read as MLX's build reads it: its own text,
`#include "mlx/backend/metal/kernels/..."` resolved from PATH, no function constants given.

What "compiles" means (docs/msl-support.md, "MLX's kernel library"):
  1. read: `alloy.compile_shader(unit, include_dirs=[PATH])` reads the whole unit (every macro
     expanded, every kernel reflected: names, parameters);
  2. CPU: a sample of N kernels (default 4: the first, the last and evenly spaced ones, in source
     order) compiles with the host compiler, as the unit the first call of those kernels builds
     (`lib.precompile(stream=alloy.cpu, kernels=sample)`); --all compiles every kernel;
  3. CUDA: the same sample compiles with NVRTC for sm_90 (`alloy translate --library --target
     ptx --kernel ...`, no GPU needed).
A unit compiles when all three succeed. The first error of a failing step is printed.
"""

import argparse
import json
import pathlib
import subprocess
import sys
import time

KERNELS = "mlx/backend/metal/kernels"


def first_error(text, limit=300):
    lines = [ln.strip() for ln in str(text).splitlines() if ln.strip()]
    for ln in lines:
        if "error" in ln.lower() or "not supported" in ln.lower():
            return ln[:limit]
    return (lines[0] if lines else "(no message)")[:limit]


def sample_of(names, n):
    if n <= 0 or n >= len(names):
        return list(names)
    idx = sorted({round(i * (len(names) - 1) / (n - 1)) for i in range(n)}) if n > 1 else [0]
    return [names[i] for i in idx]


def check_unit(alloy, root, unit, n, cli, arch):
    rel = unit.relative_to(root).as_posix()
    res = {"unit": rel, "kernels": 0, "read": None, "cpu": None, "cuda": None}
    src = unit.read_text()
    t0 = time.time()
    try:
        lib = alloy.compile_shader(src, include_dirs=[str(root)], name=rel)
        names = lib.kernel_names()
        res["kernels"] = len(names)
        res["read"] = "ok"
    except Exception as e:  # noqa: BLE001 - every failure is a result here
        res["read"] = first_error(e)
        res["cpu"] = res["cuda"] = "not read"
        return res
    sample = sample_of(names, n)
    res["sample"] = sample
    try:
        lib.precompile(stream=alloy.cpu, kernels=sample)
        res["cpu"] = "ok"
    except Exception as e:  # noqa: BLE001
        res["cpu"] = first_error(e)
    res["cpu_s"] = round(time.time() - t0, 1)
    t1 = time.time()
    if cli:
        cmd = [cli, "translate", "--library", str(unit), "--include-dir", str(root),
               "--target", "ptx", "--arch", arch]
        for k in sample:
            cmd += ["--kernel", k]
        r = subprocess.run(cmd, capture_output=True, text=True)
        res["cuda"] = "ok" if r.returncode == 0 else first_error(r.stderr)
    else:
        res["cuda"] = "no CLI"
    res["cuda_s"] = round(time.time() - t1, 1)
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--mlx-src", required=True, help="MLX source tree")
    ap.add_argument("--sample", type=int, default=4, help="kernels compiled per unit")
    ap.add_argument("--all", action="store_true", help="compile every kernel of each unit")
    ap.add_argument("--cli", default=str(pathlib.Path(__file__).resolve().parents[1] / "build" /
                                         "alloy"), help="the alloy CLI (for NVRTC)")
    ap.add_argument("--arch", default="sm_90")
    ap.add_argument("--only", nargs="*", help="unit file names (e.g. unary.metal)")
    ap.add_argument("--json", help="write the results here")
    a = ap.parse_args()

    import alloy

    root = pathlib.Path(a.mlx_src).resolve()
    units = sorted((root / KERNELS).rglob("*.metal"))
    if not units:
        sys.exit(f"no .metal units under {root / KERNELS}")
    if a.only:
        units = [u for u in units if u.name in a.only]
    cli = a.cli if pathlib.Path(a.cli).exists() else None
    results = []
    for u in units:
        r = check_unit(alloy, root, u, 0 if a.all else a.sample, cli, a.arch)
        results.append(r)
        print(f"{u.name:34s} kernels {r['kernels']:5d}  read {r['read'][:60]:<10s} "
              f"cpu {r['cpu'][:160]}  cuda {r['cuda'][:160]}", flush=True)
    ok = lambda k: sum(1 for r in results if r["read"] == "ok" and r[k] == "ok")  # noqa: E731
    print(f"\n{len(results)} units: read {sum(r['read'] == 'ok' for r in results)}, "
          f"CPU {ok('cpu')}, CUDA {ok('cuda')}")
    if a.json:
        pathlib.Path(a.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
