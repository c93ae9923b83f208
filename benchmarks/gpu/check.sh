#!/usr/bin/env bash
# The GPU check: run it in the folder `make gpu-bundle` wrote, on a machine with an NVIDIA GPU
# and CUDA's compiler (no network needed). `bash check.sh --cpu` runs the same steps with the
# CUDA build switched off. Without a GPU (and without --cpu) it says so and exits 0.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

cpu=0
for arg in "$@"; do
    case "$arg" in
        --cpu | -h | --help) cpu=1 ;;  # the CPU path, or only the help: no GPU needed
    esac
done

if [ "$cpu" = 0 ]; then
    if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
        echo "gpu-check: no NVIDIA GPU found; nothing run"
        exit 0
    fi
    # One card only: the first.
    export CUDA_VISIBLE_DEVICES="${CUDA_VISIBLE_DEVICES:-0}"
fi

if [ ! -f "$here/BUNDLE.json" ]; then
    echo "gpu-check: $here is not a bundle; run \`make gpu-bundle\` and the bundle's check.sh" >&2
    exit 2
fi

# The wheels are for CPython 3.11 and 3.12.
python=""
for candidate in python3.12 python3.11 python3; do
    if command -v "$candidate" >/dev/null 2>&1 &&
        "$candidate" -c 'import sys; sys.exit(sys.version_info[:2] not in ((3, 11), (3, 12)))' 2>/dev/null; then
        python="$candidate"
        break
    fi
done
if [ -z "$python" ]; then
    echo "gpu-check: needs CPython 3.11 or 3.12 (the bundle's wheels)" >&2
    exit 2
fi
exec "$python" "$here/repo/benchmarks/gpu/gpu_check.py" --bundle "$here" "$@"
