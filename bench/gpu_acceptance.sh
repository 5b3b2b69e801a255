#!/usr/bin/env bash
# The GPU tier in one command (docs/gpu.md: what to expect, how to read the output).
#
#   bash bench/gpu_acceptance.sh                 a machine with a CUDA GPU: install the vllm extra into this
#                                                Python, run the gpu tests (tests/test_gpu.py) and rollout=vllm's
#                                                tests, then time one RLOO step of the 0.5B shape (B=128 x k=8)
#   bash bench/gpu_acceptance.sh --dry-run       any machine (CPU): compose and check every GPU config, report
#                                                what the environment lacks for the real run; installs nothing
#   bash bench/gpu_acceptance.sh --no-install    the extras are installed already (e.g. a machine without network)
#   bash bench/gpu_acceptance.sh --wheels DIR    an offline machine with torch: installs only DIR's wheels
#                                                (bench/prepare_wheels.sh DIR, run where there is network) with
#                                                pip --no-index --no-deps --target, on PYTHONPATH; no extras
#   bash bench/gpu_acceptance.sh -- stage.sampling.max_new_tokens=512     overrides for the timing run
#
# PYTHON picks the interpreter (default: python on PATH, i.e. the active virtual environment). Exit status:
# non-zero if any part failed; every part runs regardless, so one report covers them all. Where vLLM is not
# installed (an offline machine), its parts are reported "not installed" and skipped, not failed, and the
# timing runs the default engine (rollout=hf) at the papers' setting instead.
set -uo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python}
dry=0 install=1 timing=() wheels=""
while [ $# -gt 0 ]; do
    case "$1" in
        --dry-run) dry=1 ;;
        --no-install) install=0 ;;
        --wheels) [ $# -ge 2 ] || { echo "gpu_acceptance.sh: --wheels needs a folder" >&2; exit 2; }
                  wheels=$2 install=0; shift ;;
        --) shift; timing=("$@"); break ;;
        *) echo "gpu_acceptance.sh: unknown argument $1 (--dry-run, --no-install, --wheels DIR, -- overrides)" >&2; exit 2 ;;
    esac
    shift
done
if [ -n "$wheels" ]; then
    source bench/_wheels.sh
    install_wheels "$wheels" || exit 2
fi
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"   # this checkout's ablate, whatever is installed
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
if [ "$dry" = 1 ]; then
    exec "$PYTHON" bench/gpu_acceptance.py --dry-run
fi
if ! "$PYTHON" -c "import torch, sys; sys.exit(not torch.cuda.is_available())"; then
    echo "gpu_acceptance.sh: torch sees no CUDA GPU here; on a CPU machine run it with --dry-run" >&2
    exit 2
fi
failed=()
if [ "$install" = 1 ]; then
    echo "== installing the vllm and dev extras"
    "$PYTHON" -m pip install -q -e '.[dev,vllm]' || { echo "the install failed: fix it, or pass --no-install" >&2; exit 2; }
fi
export VLLM_ENABLE_V1_MULTIPROCESSING=0   # rollout=vllm pushes weights to an engine in the training process
"$PYTHON" bench/gpu_acceptance.py --dry-run || failed+=("dry run")
if "$PYTHON" -c "import vllm" 2>/dev/null; then
    echo "== the gpu tests (SFT bf16, RLOO with rollout=vllm and rollout=hf, evaluation, DPO, DDP on every GPU)"
    "$PYTHON" -m pytest -q -m gpu tests/test_gpu.py || failed+=("tests/test_gpu.py")
    echo "== rollout=vllm's tests (written for CPU; on the GPU they check the same parity)"
    "$PYTHON" -m pytest -q -m vllm tests/test_vllm.py || failed+=("tests/test_vllm.py")
    echo "== one RLOO step of the 0.5B shape, B=128 x k=8, rollout=vllm colocated"
    "$PYTHON" bench/gpu_acceptance.py --time -- "${timing[@]}" || failed+=("timing")
else
    echo "== vllm: not installed: tests/test_vllm.py, the rollout=vllm gpu test and the rollout=vllm timing are skipped"
    echo "== the gpu tests but rollout=vllm's (SFT bf16, RLOO with rollout=hf, evaluation, DPO, DDP on every GPU)"
    "$PYTHON" -m pytest -q -m gpu tests/test_gpu.py -k "not vllm" || failed+=("tests/test_gpu.py")
    echo "== RLOO of the 0.5B shape, B=128 x k=8, 1,024 new tokens, rollout=hf: 2 steps, each printed as it ends"
    "$PYTHON" bench/gpu_acceptance.py --stage papers --steps 2 -- "${timing[@]}" || failed+=("timing")
fi
if [ ${#failed[@]} -gt 0 ]; then
    echo "gpu_acceptance.sh: FAILED: ${failed[*]}" >&2
    exit 1
fi
echo "gpu_acceptance.sh: all parts passed"
