#!/usr/bin/env python3
"""The library anchor for `lyre-bench vector`: hnswlib (from PyPI) on the same
dataset, in process, one thread, with the servers' declaration (L2, M=16,
efConstruction=100). Prints JSON: build rate, memory growth per vector, and
(ef, queries/s, recall@10) for each search breadth.

    bench/hnswlib-anchor.py DATA_DIR 10,20,40,80,160
"""
import json
import sys
import time

import hnswlib
import numpy as np


def resident_bytes():
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def main():
    data_dir, efs = sys.argv[1], [int(e) for e in sys.argv[2].split(",")]
    meta = json.load(open(f"{data_dir}/meta.json"))
    n, d, q, k = meta["vectors"], meta["dimensions"], meta["queries"], meta["k"]
    base = np.fromfile(f"{data_dir}/base.f32", dtype="<f4").reshape(n, d)
    queries = np.fromfile(f"{data_dir}/queries.f32", dtype="<f4").reshape(q, d)
    truth = np.fromfile(f"{data_dir}/truth.u32", dtype="<u4").reshape(q, k)

    before = resident_bytes()
    index = hnswlib.Index(space="l2", dim=d)
    index.init_index(max_elements=n, ef_construction=100, M=16)
    index.set_num_threads(1)
    started = time.perf_counter()
    index.add_items(base, np.arange(n))
    build_seconds = time.perf_counter() - started
    grown = resident_bytes() - before

    points = []
    for ef in efs:
        index.set_ef(max(ef, k))
        started = time.perf_counter()
        found = [index.knn_query(queries[i : i + 1], k=k)[0][0] for i in range(q)]
        seconds = time.perf_counter() - started
        hits = sum(len(set(map(int, found[i])) & set(map(int, truth[i]))) for i in range(q))
        points.append([ef, q / seconds, hits / (q * k)])
    json.dump(
        {"build_vectors_per_sec": n / build_seconds, "bytes_per_vector": grown / n, "points": points},
        sys.stdout,
        indent=2,
    )
    print()


if __name__ == "__main__":
    main()
