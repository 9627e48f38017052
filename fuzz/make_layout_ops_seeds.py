#!/usr/bin/env python3
"""Writes the seed corpus of fuzz_layout_ops: 20 pseudo-random byte files.

The target decodes any bytes into a trace (byte 0 picks the Highway target,
a FuzzedDataProvider the rest), so seeds only need varied lengths and
contents; a fixed random seed keeps them stable. Usage:
    fuzz/make_layout_ops_seeds.py [FOLDER]   (default corpus/fuzz_layout_ops)
"""
import os
import random
import sys

folder = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "corpus", "fuzz_layout_ops")
os.makedirs(folder, exist_ok=True)
rng = random.Random(20240601)
for i in range(20):
    size = rng.choice([24, 48, 96, 160, 256, 400])
    data = bytes([i]) + bytes(rng.randrange(256) for _ in range(size - 1))
    with open(os.path.join(folder, "seed_%02d.bin" % i), "wb") as f:
        f.write(data)
