#!/usr/bin/env bash
# gpu_carry.sh: build the folder (default .gpu/) that benchmarks/gpu_check.sh needs on a CUDA machine beyond that
# machine's own image (its torch, transformers, sentence-transformers, pyarrow, pandas, xxhash, pytest are there;
# nothing can be fetched there). Run it here, where the pip registries are reachable:
#
#   bash benchmarks/gpu_carry.sh [DIR] [--faiss] [--no-data]
#
#   DIR/wheels  datasets, dill, multiprocess (datasets needs both) and seqeval (a pure-Python wheel built from its
#               sdist): the versions this environment has (else the newest), for the target's Python (PY_VERSION,
#               default 3.12, the CUDA image's) on x86-64 Linux, each with --no-deps; EXTRA="name==version ..." adds
#               more (e.g. a newer pyarrow if the target's is older than datasets asks). --faiss adds faiss-cpu
#               (~30 MB; only indexes of >= 300k vectors use it, no gpu_check step does).
#   DIR/data    from the data root: wikitext2/wiki.test.raw, stsb/, sst2/, imdb/train.jsonl.gz (~21 MB; --no-data
#               leaves it out)
#
# Then carry it with the checkout: `echo /.gpu/ >> .git/info/exclude` once (so git ignores it), and name `.gpu` in
# the device call's carry list (64 MiB in all with the checkout). gpu_check.sh installs DIR/wheels with
# `pip install --no-index --no-deps --target` where a module is missing and points BERTKIT_DATA at DIR/data; a
# WHEELS or BERTKIT_DATA set in the environment wins.
set -eu -o pipefail

DIR=.gpu
FAISS=0
DATA=1
for arg in "$@"; do
    case "$arg" in
        --faiss) FAISS=1 ;;
        --no-data) DATA=0 ;;
        -h|--help) sed -n '2,/^set -eu/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        -*) echo "gpu_carry.sh: unknown option $arg" >&2; exit 2 ;;
        *) DIR="$arg" ;;
    esac
done
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY="${PYTHON:-python3}"
PY_VERSION="${PY_VERSION:-3.12}"

pinned() {  # NAME → NAME==VERSION as installed here, else NAME
    local version
    version="$("$PY" -c "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))" "$1" 2> /dev/null)" \
        && echo "$1==$version" || echo "$1"
}

mkdir -p "$DIR/wheels"
binary=(datasets dill multiprocess)
[ "$FAISS" = 1 ] && binary+=(faiss-cpu)
specs=()
for name in "${binary[@]}"; do specs+=("$(pinned "$name")"); done
# shellcheck disable=SC2206
specs+=(${EXTRA:-})
"$PY" -m pip download --quiet --no-deps --only-binary=:all: --python-version "$PY_VERSION" --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d "$DIR/wheels" "${specs[@]}"
"$PY" -m pip wheel --quiet --no-deps -w "$DIR/wheels" "$(pinned seqeval)"  # sdist only on PyPI: pure Python

if [ "$DATA" = 1 ]; then
    "$PY" - "$DIR/data" <<'EOF'
import shutil
import sys
from pathlib import Path

sys.path.insert(0, ".")
from bertkit.paths import find_dataset

dest = Path(sys.argv[1])
for name, files in {"wikitext2": ["wiki.test.raw", "README.md"], "stsb": ["sts-train.csv", "sts-dev.csv",
                    "sts-test.csv", "README.md", "LICENSE.txt"], "sst2": ["train.tsv", "dev.tsv", "README.md"],
                    "imdb": ["train.jsonl.gz", "README.md"]}.items():
    (dest / name).mkdir(parents=True, exist_ok=True)
    for file in files:
        if (find_dataset(name) / file).is_file():
            shutil.copyfile(find_dataset(name) / file, dest / name / file)
EOF
fi
ls -l "$DIR/wheels"
du -sh "$DIR"
if [[ "$DIR" != /* ]] && ! git check-ignore -q "$DIR/wheels" 2> /dev/null; then
    echo "note: git does not ignore $DIR: add '/$DIR/' to $(git rev-parse --git-path info/exclude 2> /dev/null)"
fi
