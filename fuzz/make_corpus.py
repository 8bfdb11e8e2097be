#!/usr/bin/env python3
"""Writes the fuzzers' seed corpora from the conformance kernels (the raw strings of tests/).

fuzz/make_corpus.py OUT_DIR writes OUT_DIR/translate, OUT_DIR/library (whole Metal sources and
bodies, one file each) and OUT_DIR/signature (bodies in the signature fuzzer's input layout:
name NUL inputs NUL outputs NUL body NUL header NUL template names NUL knobs)."""

import hashlib
import pathlib
import re
import sys

REPO = pathlib.Path(__file__).resolve().parents[1]


def sources():
    files = sorted((REPO / "tests").rglob("*.cpp")) + [REPO / "examples" / "example_kernels.h"]
    for f in files:
        for m in re.finditer(r'R"(\w*)\((.*?)\)\1"', f.read_text(), re.S):
            text = m.group(2)
            if "thread_position" in text or "kernel" in text or "[[" in text:
                yield text


def write(folder, data):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / hashlib.sha1(data).hexdigest()).write_bytes(data)


def main():
    out = pathlib.Path(sys.argv[1])
    n = 0
    for text in sources():
        data = text.encode()
        write(out / "translate", data)
        write(out / "library", data)
        if "kernel void" not in text and "[[kernel]]" not in text:
            sig = b"\0".join([b"k", b"inp,x", b"out", data, b"", b"T", bytes(range(48))])
            write(out / "signature", sig)
        n += 1
    print(f"make_corpus: {n} seeds in {out}")


if __name__ == "__main__":
    main()
