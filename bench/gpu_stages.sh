#!/usr/bin/env bash
# The GPU tier in stages for a short slot on an offline GPU node (docs/gpu.md): each stage under its own
# `timeout -s KILL`, each printing its figures the moment they exist (a step's line as the step ends), so a
# stage cut short still reports what it finished.
#
#   bash bench/gpu_stages.sh --wheels DIR [--out DIR] [--compile] [--stages env,rloo_medium,...]
#   bash bench/gpu_stages.sh --wheels DIR --out DIR --papers-levers     the papers' step lever by lever, <= 6 min
#   bash bench/gpu_stages.sh --smoke --papers-levers --out DIR          the lever stages' code on a CPU, tiny shapes
#
# --wheels DIR: wheels the image lacks (bench/prepare_wheels.sh makes them where there is network; with --trl for
# the trl stage), installed with pip --no-index --no-deps --target into a temporary folder put on PYTHONPATH.
# --out DIR: where the log and each stage's step figures (JSON lines) are written (default: gpu-stages/).
# Default stages (14 min 10 s at most): env | rloo_small | tests | rloo_medium | rloo_papers (B=128 x k=8, 1,024
# new tokens) | sigterm. --compile adds rloo_medium_compile after rloo_medium (rollout.compile=true, its steps in
# steps_compile.jsonl).
# Lever stages, run only when named in --stages; --papers-levers runs env and all of these but compile_test,
# 360 s at most by their limits:
#   sampling (15 s)          bench/gpu_step.py sample: sample_on_device over 1,024 x 151,936 logits, RL's and eval's
#   decode_eager (35 s)      bench/gpu_step.py decode, eager and eager with the bf16 copy, profiled (host vs device
#                            time, kernels a step, top kernels) in the training configuration: 1,024 rows, a papers
#                            chunk's 1,280-slot cache filled to 512, bf16 autocast with its weight cache off
#   learn (45 s)             bench/gpu_step.py learn: chunked / fused vocabulary / fused with the decoder compiled
#   decode_compiled (60 s)   the compiled step: folded heads + bf16 copy (the new path, buckets included), stock
#                            attention + bf16, folded with fp32 weights; each then frees its cache and decodes a new
#                            chunk whose cache lands elsewhere (lever 3: memory freed, CUDA graphs recorded again)
#   rloo_papers_fast (140 s) two papers-setting steps with rollout.dtype=bfloat16 rollout.compile=true (the compile
#                            dropped if compile_test ran and failed); steps in steps_fast.jsonl
#   trl (50 s)               bench/bench_vs_trl.py --device cuda: TRL's RLOOTrainer and ablate on the 0.5B shape,
#                            B=8 x k=8, 64 new tokens (skipped, exit 0, where TRL's wheels are missing)
#   compile_test (110 s)     tests/test_gpu.py -k "rollout_compile or fast_gpu": the compiled decode gives the eager
#                            tokens on this card
# Stage limits are sized to the 6 minutes, not measured; the first compiled step of a stage may not fit in them.
# --smoke: the lever stages on a CPU (gpu_step.py --smoke --backend eager, gpu_acceptance.py --smoke,
# bench_vs_trl.py --dry-run), limits x4; the default stages are skipped there. tests/test_bench.py runs it.
# --stages LIST: run only these stages (comma-separated names). Seconds per stage: STAGE_S_<NAME>.
set -uo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
LEVERS=env,sampling,decode_eager,learn,decode_compiled,rloo_papers_fast,trl
wheels="" out="gpu-stages" compile=0 only="" smoke=0
while [ $# -gt 0 ]; do
    case "$1" in
        --wheels) wheels=$2; shift ;;
        --out) out=$2; shift ;;
        --compile) compile=1 ;;
        --stages) only=",$2,"; shift ;;
        --papers-levers) only=",$LEVERS," ;;
        --smoke) smoke=1 ;;
        *) echo "gpu_stages.sh: unknown argument $1 (--wheels DIR, --out DIR, --compile, --stages LIST," \
                "--papers-levers, --smoke)" >&2; exit 2 ;;
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
    [ "$smoke" = 0 ] || seconds=$((seconds * 4))
    echo "== stage $name (at most ${seconds} s): $*"
    local start=$SECONDS
    timeout -s KILL "$seconds" "$@"
    local rc=$?
    echo "== stage $name: exit $rc after $((SECONDS - start)) s$([ $rc = 137 ] && echo ' (killed at its limit)')"
    [ $rc = 0 ] || failed+=("$name")
}
on_gpu() { [ "$smoke" = 0 ] && stage "$@" || echo "== stage $1: not a --smoke stage"; }   # the default stages
opt_in() { [[ "$only" == *",$1,"* ]] && stage "$@"; }   # the lever stages run only when --stages names them
stage env 15 bash -c "{ command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version \
--format=csv,noheader; } || echo 'nvidia-smi: not found'; \
    $PYTHON -c 'import torch, transformers, lightning, hydra; print(\"torch\", torch.__version__, \"cuda\", torch.version.cuda, \
\"transformers\", transformers.__version__, \"lightning\", lightning.__version__, \"hydra\", hydra.__version__)'; \
    $PYTHON -c 'import vllm' 2>/dev/null && echo 'vllm: installed' || echo 'vllm: not installed (rollout=vllm parts are skipped)'; \
    $PYTHON -c 'import trl' 2>/dev/null && echo 'trl: installed' || echo 'trl: not installed (the trl stage is skipped)'"
on_gpu rloo_small 120 "$PYTHON" bench/gpu_acceptance.py --stage small --steps 2 --out "$out/steps.jsonl"
vllm_filter=$("$PYTHON" -c 'import vllm' 2>/dev/null && echo "" || echo "not vllm")
on_gpu tests 120 "$PYTHON" -m pytest -q -p no:cacheprovider -m gpu tests/test_gpu.py ${vllm_filter:+-k "$vllm_filter"}
on_gpu rloo_medium 210 "$PYTHON" bench/gpu_acceptance.py --stage medium --steps 2 --out "$out/steps.jsonl"
[ "$compile" = 0 ] || on_gpu rloo_medium_compile 200 "$PYTHON" bench/gpu_acceptance.py --stage medium --steps 2 \
    --out "$out/steps_compile.jsonl" -- rollout.compile=true
on_gpu rloo_papers 300 "$PYTHON" bench/gpu_acceptance.py --stage papers --steps 2 --out "$out/steps.jsonl"
# SIGTERM to the training process itself (not to a shell around it) mid-generation at the papers' setting:
# it must end within 30 s, marked interrupted. `timeout -s TERM` signals its child, python, directly.
HF_PAPERS_OVERRIDES=$("$PYTHON" -c "import sys; sys.path.insert(0, 'bench'); from gpu_acceptance import HF_STAGES; print(' '.join(HF_STAGES['papers']))")
on_gpu sigterm 70 bash -c "run=\$(mktemp -d)/run; start=\$SECONDS; \
    timeout --preserve-status -s TERM -k 60 25 $PYTHON -m ablate.train ${HF_PAPERS_OVERRIDES:-} hydra.run.dir=\$run >/dev/null 2>&1; rc=\$?; \
    echo \"sigterm at 25 s: exit \$rc, \$((SECONDS - start - 25)) s after the signal; status: \$($PYTHON -c \
\"import json,sys; s=json.load(open(sys.argv[1])); print(s['state'], 'after', s['attempts'], 'attempt(s)')\" \$run/status.json)\"; \
    [ \$rc = 143 ]"
# the lever stages; on a CPU (--smoke) the same code at tiny shapes, compiled variants traced by the eager backend
step_py=("$PYTHON" bench/gpu_step.py) acceptance_smoke=() trl_shape=(--device cuda --model qwen2.5-0.5b-shape
    --batch-prompts 8 --k 8 --max-new-tokens 64 --micro-batch 8 --steps 2 --warmup 1 --rounds 1)
if [ "$smoke" = 1 ]; then
    step_py+=(--smoke --backend eager) acceptance_smoke=(--smoke) trl_shape=(--dry-run)
fi
decode=(--rows 1024 --context 512 --new-tokens 768 --steps 10)
opt_in compile_test 110 "$PYTHON" -m pytest -q -p no:cacheprovider -m gpu tests/test_gpu.py -k "rollout_compile or fast_gpu"
opt_in sampling 15 "${step_py[@]}" sample --rows 1024 --steps 8
opt_in decode_eager 35 "${step_py[@]}" decode "${decode[@]}" --profile 3 --variants eager,eager_bf16
opt_in learn 45 "${step_py[@]}" learn --rows 16 --width 1024 --reps 2 --variants chunked,fused,fused_compiled
opt_in decode_compiled 60 "${step_py[@]}" decode "${decode[@]}" --profile 2 \
    --variants compiled_bf16,compiled_stock_bf16,compiled
# the new GPU settings; without rollout.compile where the compiled decode failed its test on this card
fast=(rollout.dtype=bfloat16 rollout.compile=true)
[[ " ${failed[*]} " == *" compile_test "* ]] && fast=(rollout.dtype=bfloat16)
opt_in rloo_papers_fast 140 "$PYTHON" bench/gpu_acceptance.py --stage papers --steps 2 "${acceptance_smoke[@]}" \
    --out "$out/steps_fast.jsonl" -- "${fast[@]}"
opt_in trl 50 "$PYTHON" bench/bench_vs_trl.py "${trl_shape[@]}" --json "$out/trl.json" --ablate rollout.dtype=bfloat16
echo "figures: $out/"
if [ ${#failed[@]} -gt 0 ]; then
    echo "gpu_stages.sh: FAILED: ${failed[*]}" >&2
    exit 1
fi
echo "gpu_stages.sh: all stages passed"
