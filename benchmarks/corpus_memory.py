"""Peak memory of the corpus pipeline (read → Arrow → tokenise → pack) for a small and a large corpus.

Builds two corpora from the IMDB reviews in the data root — the first ~10 MB, and all of it (unsup + train + test,
~130 M characters) — and runs `load_corpus` + `pack_corpus` on each in a fresh process with an empty cache,
printing the child's peak RSS. Flat memory means the pipeline streams; growth with size means it does not.

    python benchmarks/corpus_memory.py [--tokenizer DIR] [--workers 2]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = """
import json, resource, sys, threading, time
peak = {"RssAnon": 0, "RssFile": 0}
def sample():  # anonymous memory (heap) vs file-backed pages of the memory-mapped Arrow files
    while True:
        for line in open("/proc/self/status"):
            key = line.split(":")[0]
            if key in peak:
                peak[key] = max(peak[key], int(line.split()[1]) // 1024)
        time.sleep(0.05)
threading.Thread(target=sample, daemon=True).start()
from bertkit.text.corpus import load_corpus
from bertkit.text.packing import pack_corpus
from bertkit.text.tokenizer import load_tokenizer
files, tokenizer, workers = json.loads(sys.argv[1])
start = time.perf_counter()
dataset, stats, key = load_corpus(files)
packed = pack_corpus(dataset, key, load_tokenizer(tokenizer), 128, workers=workers)
print(json.dumps({"characters": stats.characters, "blocks": packed.stats["train_blocks"],
                  "seconds": time.perf_counter() - start,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "peak_anon_mb": peak["RssAnon"], "peak_file_mb": peak["RssFile"]}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokenizer", required=True, help="a tokenizer directory (e.g. a pretraining run)")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    from bertkit.paths import find_dataset

    imdb = find_dataset("imdb")
    with tempfile.TemporaryDirectory() as tmp:
        small = Path(tmp) / "small.txt"
        with gzip.open(imdb / "unsup.txt.gz", "rt", encoding="utf-8") as src, small.open("w") as dst:
            size = 0
            for line in src:
                dst.write(line)
                size += len(line)
                if size >= 10_000_000:
                    break
        cases = {"~10 MB": [str(small)],
                 "~130 MB": [str(imdb / n) for n in ("unsup.txt.gz", "train.jsonl.gz", "test.jsonl.gz")]}
        for name, files in cases.items():
            env = {**os.environ, "BERTKIT_CACHE": tempfile.mkdtemp(dir=tmp), "HF_DATASETS_DISABLE_PROGRESS_BARS": "1"}
            out = subprocess.run([sys.executable, "-c", CHILD, json.dumps([files, args.tokenizer, args.workers])],
                                 capture_output=True, text=True, env=env, check=True)
            result = json.loads(out.stdout.strip().splitlines()[-1])
            children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024  # incl. map() workers
            print(f"{name}: {result['characters'] / 1e6:.1f} M characters, {result['blocks']:,} blocks in "
                  f"{result['seconds']:.0f} s; peak RSS {result['peak_rss_mb']:.0f} MB = heap (RssAnon) "
                  f"{result['peak_anon_mb']:.0f} MB + memory-mapped files (RssFile, reclaimable) "
                  f"{result['peak_file_mb']:.0f} MB at their peaks; "
                  f"(largest child process so far {children:.0f} MB)", flush=True)


if __name__ == "__main__":
    main()
