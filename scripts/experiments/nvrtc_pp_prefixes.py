"""Prefixes of a preprocessed CUDA translation, for timing the prelude's front end piece by piece
with nvrtc_prelude_cost (docs/performance.md, item 1, h-cudafirst3).

    alloy translate --target cuda ... > k.cu
    g++ -E -P -x c++ -D__CUDACC_RTC__ -D__CUDACC__ -D__CUDA_ARCH__=900 -DALLOY_MATH_SAFE \
        -DALLOY_QUICK_ENTRY -I src/prelude k.cu -o pp.cu
    python3 scripts/experiments/nvrtc_pp_prefixes.py pp.cu 14      # writes p0003.cu ... p0953.cu
    EXTRA=-fdevice-syntax-only /tmp/nvrtc_prelude_cost src/prelude 9 empty p0*.cu pp.cu k.cu

Each prefix is cut after a line where only namespaces (or extern "C" blocks) are open, those are
closed, and an empty kernel ends it. The preprocessed text compiles like the translation (the
preprocessor's own cost is then the difference between k.cu and pp.cu).
"""
import re
import sys


def main():
    path = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 12
    lines = open(path).read().split("\n")
    stack, ok = [], []
    for i, line in enumerate(lines):
        s = re.sub(r'"([^"\\]|\\.)*"', '""', line)
        s = re.sub(r"'([^'\\]|\\.)*'", "''", s)
        s = s.split("//")[0]
        for ch in s:
            if ch == "{":
                ns = re.match(r"\s*(inline\s+)?namespace\b", line) or re.match(
                    r'\s*extern\s+"C"\s*\{', line)
                stack.append("ns" if ns else "x")
            elif ch == "}":
                stack.pop()
        if all(x == "ns" for x in stack) and (s.rstrip().endswith(("}", ";"))
                                              or s.strip().startswith("namespace")):
            ok.append((i + 1, len(stack)))
    ok = [c for c in ok if c[0] < len(lines) - 15]
    step = max(1, len(lines) // n)
    names, last = [], -step
    for line, depth in ok:
        if line - last < step:
            continue
        last = line
        name = f"p{line:04d}.cu"
        with open(name, "w") as f:
            f.write("\n".join(lines[:line]) + "\n" + "}\n" * depth +
                    'extern "C" __global__ void alloy_empty() {}\n')
        names.append(name)
    print(" ".join(names))


if __name__ == "__main__":
    main()
