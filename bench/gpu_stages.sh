#!/usr/bin/env bash
# The GPU tier in stages for a short slot on an offline GPU node (docs/gpu.md): each stage under its own
# `timeout -s KILL`, each printing its figures the moment they exist (a step's line as the step ends), so a
# stage cut short still reports what it finished. At most 14 min 10 s by the stages' limits (18 min 10 s with --compile); docs/gpu.md has the measured times.
#
#   bash bench/gpu_stages.sh --wheels DIR [--out DIR] [--compile] [--stages env,rloo_medium,...]
#
# --wheels DIR: wheels the image lacks (bench/prepare_wheels.sh makes them where there is network), installed
# with pip --no-index --no-deps --target into a temporary folder put on PYTHONPATH; nothing else is installed.
# --out DIR: where the log and each stage's step figures (JSON lines) are written (default: gpu-stages/).
# Stages: env | rloo_small | tests | rloo_medium | rloo_papers (B=128 x k=8, 1,024 new tokens) | sigterm, and
# the papers' step lever by lever (not run unless named in --stages): compile_test (the compiled decode gives
# the eager tokens on this card) | decode (bench/gpu_step.py: decode-step variants at 1,024 rows, profiled) | learn
# (learner variants) | rloo_papers_fast (two papers-setting steps with rollout.dtype=bfloat16 rollout.compile=true,
# the latter dropped if compile_test failed; steps in steps_fast.jsonl). 9 min 40 s at most for the four.
# --compile: after rloo_medium, the same with rollout.compile=true (rloo_medium_compile, its steps in
# steps_compile.jsonl): the compiled decode step against the eager one on the same card (not yet measured).
# --stages LIST: run only these stages (comma-separated names), for a slot too short for all of them.
# Seconds per stage: STAGE_S_<NAME> (e.g. STAGE_S_RLOO_PAPERS=300).
set -uo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
wheels="" out="gpu-stages" compile=0 only=""
while [ $# -gt 0 ]; do
    case "$1" in
        --wheels) wheels=$2; shift ;;
        --out) out=$2; shift ;;
        --compile) compile=1 ;;
        --stages) only=",$2,"; shift ;;
        *) echo "gpu_stages.sh: unknown argument $1 (--wheels DIR, --out DIR, --compile, --stages LIST)" >&2; exit 2 ;;
    esac
    shift
done
mkdir -p "$out"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
if [ -n "$wheels" ]; then
    source bench/_wheels.sh
    install_wheels "$wheels" || exit 2
fi
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"   # this checkout's ablate
failed=()
stage() {  # stage NAME SECONDS COMMAND...: run under timeout -s KILL, say how it ended and how long it took
    local name=$1 seconds=$2; shift 2
    if [ -n "$only" ] && [[ "$only" != *",$name,"* ]]; then echo "== stage $name: not in --stages"; return; fi
    local var="STAGE_S_${name^^}"; seconds=${!var:-$seconds}
    echo "== stage $name (at most ${seconds} s): $*"
    local start=$SECONDS
    timeout -s KILL "$seconds" "$@"
    local rc=$?
    echo "== stage $name: exit $rc after $((SECONDS - start)) s$([ $rc = 137 ] && echo ' (killed at its limit)')"
    [ $rc = 0 ] || failed+=("$name")
}
stage env 30 bash -c "nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; \
    $PYTHON -c 'import torch, transformers, lightning, hydra; print(\"torch\", torch.__version__, \"cuda\", torch.version.cuda, \
\"transformers\", transformers.__version__, \"lightning\", lightning.__version__, \"hydra\", hydra.__version__)'; \
    $PYTHON -c 'import vllm' 2>/dev/null && echo 'vllm: installed' || echo 'vllm: not installed (rollout=vllm parts are skipped)'"
stage rloo_small 120 "$PYTHON" bench/gpu_acceptance.py --stage small --steps 2 --out "$out/steps.jsonl"
vllm_filter=$("$PYTHON" -c 'import vllm' 2>/dev/null && echo "" || echo "not vllm")
stage tests 120 "$PYTHON" -m pytest -q -p no:cacheprovider -m gpu tests/test_gpu.py ${vllm_filter:+-k "$vllm_filter"}
stage rloo_medium 210 "$PYTHON" bench/gpu_acceptance.py --stage medium --steps 2 --out "$out/steps.jsonl"
[ "$compile" = 0 ] || stage rloo_medium_compile 200 "$PYTHON" bench/gpu_acceptance.py --stage medium --steps 2 \
    --out "$out/steps_compile.jsonl" -- rollout.compile=true
stage rloo_papers 300 "$PYTHON" bench/gpu_acceptance.py --stage papers --steps 2 --out "$out/steps.jsonl"
opt_in() { [[ "$only" == *",$1,"* ]] && stage "$@"; }   # the lever stages run only when --stages names them
opt_in compile_test 110 "$PYTHON" -m pytest -q -p no:cacheprovider -m gpu tests/test_gpu.py -k "rollout_compile or fast_gpu"
opt_in decode 140 "$PYTHON" bench/gpu_step.py decode --rows 1024 --context 512 --steps 12 --profile 4 \
    --variants eager,eager_bf16,compiled_stock_bf16,compiled_bf16
opt_in learn 90 "$PYTHON" bench/gpu_step.py learn --rows 16 --width 1024 --reps 2
# the new GPU settings; without rollout.compile where the compiled decode failed its test on this card
fast=(rollout.dtype=bfloat16 rollout.compile=true)
[[ " ${failed[*]} " == *" compile_test "* ]] && fast=(rollout.dtype=bfloat16)
opt_in rloo_papers_fast 240 "$PYTHON" bench/gpu_acceptance.py --stage papers --steps 2 --out "$out/steps_fast.jsonl" \
    -- "${fast[@]}"
echo "figures: $out/steps.jsonl"
if [ ${#failed[@]} -gt 0 ]; then
    echo "gpu_stages.sh: FAILED: ${failed[*]}" >&2
    exit 1
fi
echo "gpu_stages.sh: all stages passed"
