#!/usr/bin/env bash
# Every GPU measurement of the project, in one go, in at most 8 minutes on one H100 with 16 CPU cores (issue 29 §5):
#   1. bench/to_device.py: step time and GPU idle time, the copy in the step against to_device's side stream;
#   2. bench/image_decode.py --device cuda: ImageDecoder(device="cuda") end to end (the workers send the JPEG bytes,
#      to_device decodes them with nvJPEG on its side stream) against the fused CPU path (ImageDecoder() in the
#      workers) and the peers, images/s, interleaved rounds; then the bare decodes (libjpeg-turbo, nvJPEG).  Only
#      the DataLoader mode and the imagenet and hires sets: every set and mode (66 fresh processes) ran past 300 s
#      on an H200 on 2026-11-27;
#   3. bench/to_device.py --images: the same model on the pack's images, decoded on the CPU in the workers, with
#      nvJPEG in the step (on the compute stream), or with nvJPEG in to_device (on its side stream).
# One line per result.  The machine reaches no package index: first, where pip reaches one, `bash bench/gpu_wheels.sh`
# puts what it lacks into .whl/; this script installs those into /tmp/site, and imports corgi_io from this checkout.
# Usage, in the repository root:  bash bench/gpu.sh   (through the device tool: carry .whl)
set -uo pipefail
cd "$(dirname "$0")/.."
fail() { echo "gpu.sh: $*" >&2; exit 1; }

python3 -c 'import sys, torch; sys.exit(not torch.cuda.is_available())' 2>/dev/null \
    || fail "no CUDA device: $(python3 -c 'import torch; print("torch", torch.__version__, "sees none")' 2>&1 |
                               tail -1)"
compgen -G ".whl/*.whl" >/dev/null || fail "no wheels in .whl/: run bash bench/gpu_wheels.sh first, where pip works"
python3 -m pip install --quiet --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    .whl/*.whl || fail "the wheels in .whl/ did not install into /tmp/site"
export PYTHONPATH="/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
out=bench/out/gpu
failed=()

# bench NAME SECONDS COMMAND...: run one bench under a time limit; a failure is one line, and the next bench runs.
bench() {
    local name=$1 seconds=$2
    shift 2
    local started=$SECONDS
    timeout "$seconds" "$@"
    local status=$?
    echo "# gpu.sh: $name took $((SECONDS - started)) s (limit $seconds s), exit $status"
    ((status == 0)) || failed+=("$name (exit $status$( ((status == 124)) && echo ", over its time limit"))")
}

# the three limits add up to 7 minutes; the quick bench first, then the one that builds the pack the last one reads
bench to_device 45 python3 bench/to_device.py --batch 256 --steps 50 --rounds 3 --workers 4
bench image_decode 300 python3 bench/image_decode.py --device cuda --n 500 --n-hires 50 --rounds 3 --epochs 1 \
    --sets imagenet,hires --modes workers --workdir "$out/image_decode"
bench "to_device --images" 75 python3 bench/to_device.py --images "$out/image_decode/imagenet/corgi" --batch 64 \
    --steps 48 --rounds 3 --workers 8
((${#failed[@]} == 0)) || fail "failed: ${failed[*]}"
