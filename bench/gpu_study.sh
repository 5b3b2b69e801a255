#!/usr/bin/env bash
# A bench script, not the way to run a study on many machines: that is the SLURM launcher
# (hydra/launcher=slurm, docs/training.md "A study on a SLURM cluster"). This script is for an offline GPU node
# with no scheduler, lent for a fixed slot (the wheels it needs are brought along, nothing is downloaded).
# A study's seeds on such a node, in seed groups, within a deadline (docs/gpu.md): each group is
# one sweep (every condition of the preset x the group's seeds, all jobs at once through the joblib
# launcher, one CPU thread each, the model on the GPU), and each group's run directories come back as a
# tarball the moment the group ends, so a slot cut short still returns every group it finished. Only a
# group whose runs all completed is analysed (`ablate.stats DIR...` pools the groups): whole seeds, so
# the machine is balanced across the arms. Each group's directory is `<study>_look<N>_<first seed>` (--look,
# default 1), the name `ablate.stats` reads as one look however many directories (and machines) it took.
#
#   bash bench/gpu_study.sh --wheels DIR --out DIR --deadline SECONDS [--look N] STUDY "0,1;2,3;4,5" [OVERRIDE...]
#
# --accelerator cpu --smoke runs the same groups on a CPU at smoke scale (experiment=[STUDY,smoke_study]):
# how tests/test_bench.py checks this script without a GPU.
# Checkpoints and model weights stay behind (the report reads status.json, metrics.csv and eval/).
set -uo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
wheels="" out="gpu-study" deadline=540 look=1 accelerator=gpu experiment=""
while [ $# -gt 0 ]; do
    case "$1" in
        --wheels) wheels=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        --deadline) deadline=$2; shift 2 ;;
        --look) look=$2; shift 2 ;;
        --accelerator) accelerator=$2; shift 2 ;;
        --smoke) experiment=smoke_study; shift ;;
        *) break ;;
    esac
done
[ $# -ge 2 ] || { echo "usage: gpu_study.sh [--wheels DIR] [--out DIR] [--deadline S] [--look N] [--accelerator cpu --smoke] STUDY 'SEEDS;SEEDS' [OVERRIDE...]" >&2; exit 2; }
study=$1 groups=$2; shift 2
experiment=${experiment:+[$study,$experiment]}
experiment=${experiment:-$study}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
if [ -n "$wheels" ]; then
    source bench/_wheels.sh
    install_wheels "$wheels" || exit 2
fi
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
"$PYTHON" -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)'
start=$SECONDS
IFS=';' read -ra seed_groups <<< "$groups"
for seeds in "${seed_groups[@]}"; do
    left=$((deadline - (SECONDS - start)))
    [ "$left" -gt "${GPU_STUDY_MIN_S:-60}" ] || { echo "== seeds $seeds: not started ($left s left)"; break; }
    name="${study}_look${look}_${seeds%%,*}" dir="${GPU_STUDY_TMP:-/tmp/gpu_study}/$name"
    echo "== seeds $seeds (at most $left s): $dir"
    t0=$SECONDS
    mkdir -p "$dir"
    # its own process group: the launcher's workers outlive a killed parent, and only this group's may die
    setsid "$PYTHON" -m ablate.train -m "experiment=$experiment" "seed=$seeds" hydra/launcher=joblib \
        hydra.launcher.n_jobs=-1 "trainer.accelerator=$accelerator" trainer.num_threads=1 "hydra.sweep.dir=$dir" "$@" \
        > "$dir/sweep.log" 2>&1 &
    pid=$!
    (   # the deadline: its sleep dies with it, so nothing outlives the script holding its output open
        trap 'kill "$s" 2> /dev/null; exit' TERM
        sleep "$left" & s=$!
        wait "$s" && kill -9 -- "-$pid"
    ) > /dev/null 2>&1 & watchdog=$!
    wait "$pid"
    rc=$?
    kill "$watchdog" 2>/dev/null
    kill -9 -- "-$pid" 2>/dev/null
    total=$(ls -d "$dir"/[0-9]* 2>/dev/null | wc -l)
    # the jobs the launcher planned: a deadline can kill the group before its last jobs made a directory
    planned=$(grep -o 'is launching [0-9]* jobs' "$dir/sweep.log" | grep -o '[0-9][0-9]*' | head -n 1)
    [ "${planned:-0}" -gt "$total" ] && total=$planned
    done_=$(grep -l '"state": "completed"' "$dir"/[0-9]*/status.json 2>/dev/null | wc -l)
    echo "== seeds $seeds: exit $rc after $((SECONDS - t0)) s; $done_ of $total runs completed"
    "$PYTHON" - "$dir" <<'EOF'
import json, pathlib, statistics, sys
d = sorted(float(json.loads(p.read_text()).get("duration_s") or 0) for p in pathlib.Path(sys.argv[1]).glob("[0-9]*/status.json"))
d and print(f"   run seconds: min {d[0]:.0f}, median {statistics.median(d):.0f}, max {d[-1]:.0f}")
EOF
    tar czf "$out/$name.tgz" --exclude=checkpoints --exclude=model -C "$(dirname "$dir")" "$name"
    if [ "$done_" = 0 ] || [ "$done_" != "$total" ]; then
        tail -n 15 "$dir"/0/train.log "$dir/sweep.log" 2>/dev/null | tail -n 30
        echo "gpu_study.sh: seeds $seeds incomplete; stopping"; exit 1
    fi
done
echo "gpu_study.sh: done after $((SECONDS - start)) s"
