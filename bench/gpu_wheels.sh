#!/usr/bin/env bash
# The wheels bench/gpu.sh installs on the GPU machine, which reaches no package index (issue 29 §5).
#
# That machine has Python 3.12 on x86-64 with torch, torchvision, numpy, pillow, opencv, pyarrow, fsspec, click, tqdm,
# aiohttp, urllib3, protobuf, pyyaml, requests, filelock, lightning-utilities, python-dateutil and tifffile
# (/work/.library/device/KINDS.md).  What the benches import and it lacks, at the versions CI runs, with what each
# requires (Requires-Dist; every requirement not listed here is on that machine or never imported by the benches):
#   crc32c 2.9.post0                     corgi_io's checksums (no requirements)
#   simplejpeg 1.9.0                     ImageDecoder's default JPEG decoder, the bare-decode lines (numpy)
#   webdataset 1.0.2, braceexpand 0.1.7  the webdataset peer (braceexpand, numpy, pyyaml)
#   litdata 0.2.76                       the litdata peer (imports boto3 at import; torchvision, tifffile: there;
#                                        obstore: optional)
#   boto3 1.43.11, botocore 1.43.117, s3transfer 0.17.0, jmespath 1.1.0   litdata's boto3 (botocore:
#                                        jmespath, python-dateutil, urllib3)
# Run it here, in the repository root, where pip reaches an index:  bash bench/gpu_wheels.sh
# It writes them to .whl/ (ignored by git), the folder that travels with the working tree to the GPU machine.
set -euo pipefail
cd "$(dirname "$0")/.."
wheels=(crc32c==2.9.post0 simplejpeg==1.9.0 webdataset==1.0.2 braceexpand==0.1.7 litdata==0.2.76
        boto3==1.43.11 botocore==1.43.117 s3transfer==0.17.0 jmespath==1.1.0)
platforms=()
for platform in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 \
                manylinux1_x86_64; do
    platforms+=(--platform "$platform")
done
mkdir -p .whl
rm -f .whl/*.whl  # one version of each: two would stop the install on the GPU machine
python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    "${platforms[@]}" --dest .whl "${wheels[@]}"
echo "gpu_wheels.sh: $(ls .whl/*.whl | wc -l) wheels, $(du -sh .whl | cut -f1), in .whl/ (carry it to the GPU machine)"
