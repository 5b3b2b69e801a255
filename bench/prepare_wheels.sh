#!/usr/bin/env bash
# The wheels an offline GPU machine with torch preinstalled lacks, downloaded (or built) HERE, where there is
# network, into DIR; then copy DIR to the GPU machine and pass it as `--wheels DIR` to bench/gpu_acceptance.sh
# or bench/gpu_stages.sh (docs/gpu.md). Seen on an H100 image with Python 3.12, torch 2.11, lightning,
# transformers 5.17 and no network: the project ran after adding exactly the core set below.
#
#   bash bench/prepare_wheels.sh DIR           the core set: hydra-core, omegaconf, antlr4-python3-runtime
#                                              (an sdist only: built here as a wheel), hydra-joblib-launcher,
#                                              transformers (the project needs >= 5.19; the image has 5.17)
#   bash bench/prepare_wheels.sh DIR --trl     also trl, datasets, dill, multiprocess (bench/bench_vs_trl.py)
#
# PYTHON_VERSION (default 3.12) is the GPU machine's Python, not this one's: every wheel here is pure Python,
# so any Python with pip can fetch them. Versions are pinned: the ones run on the GPU (trl's: on the CPU).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
PYTHON_VERSION=${PYTHON_VERSION:-3.12}
dir="" trl=0
while [ $# -gt 0 ]; do
    case "$1" in
        --trl) trl=1 ;;
        -*) echo "prepare_wheels.sh: unknown option $1 (usage: prepare_wheels.sh DIR [--trl])" >&2; exit 2 ;;
        *) [ -z "$dir" ] || { echo "prepare_wheels.sh: one DIR, not '$dir' and '$1'" >&2; exit 2; }; dir=$1 ;;
    esac
    shift
done
[ -n "$dir" ] || { echo "usage: bash bench/prepare_wheels.sh DIR [--trl]" >&2; exit 2; }
CORE=(hydra-core==1.3.2 omegaconf==2.3.0 hydra-joblib-launcher==1.2.0 transformers==5.24.0)
SDIST=(antlr4-python3-runtime==4.9.3)   # published as an sdist only: pip wheel builds it
TRL=(trl==1.16.0 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19)   # the GPU image has accelerate, pyarrow, xxhash
wanted=("${CORE[@]}")
[ "$trl" = 0 ] || wanted+=("${TRL[@]}")
mkdir -p "$dir"
echo "== downloading ${wanted[*]} (for CPython $PYTHON_VERSION, no dependencies: the image has the rest)"
"$PYTHON" -m pip download -q --no-deps --only-binary=:all: --python-version "$PYTHON_VERSION" --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any \
    -d "$dir" "${wanted[@]}"
echo "== building ${SDIST[*]} from its sdist"
"$PYTHON" -m pip wheel -q --no-deps --no-binary=:all: -w "$dir" "${SDIST[@]}"
# pip install refuses two versions of one package: say so here rather than on the GPU machine
dupes=$(cd "$dir" && ls *.whl | sed -E 's/-[0-9][^-]*-.*//' | tr 'A-Z-' 'a-z_' | sort | uniq -d)
[ -z "$dupes" ] || { echo "prepare_wheels.sh: $dir holds two versions of: $dupes (keep one)" >&2; exit 1; }
echo "== $dir: $(ls "$dir"/*.whl | wc -l) wheels, $(du -sh "$dir" | cut -f1)"
ls "$dir"
echo "next, on the GPU machine: bash bench/gpu_acceptance.sh --wheels $dir   (or bench/gpu_stages.sh --wheels $dir)"
