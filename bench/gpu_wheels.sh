#!/usr/bin/env bash
# Download the wheels bench/gpu_check.py installs on a CUDA machine that has torch and transformers but no TRL
# and no network: what `import lopti.train.trainer` needs beyond them, one wheel each (`pip download --no-deps`),
# pinned to the versions lopti is tested with, except pyarrow: 24.0.0, the oldest that datasets 5.2 takes, is the
# smallest (49 MB; 26.0.1 is 55 MB). rich, which TRL uses only where it is installed, is left out, and lopti runs
# from the checkout (its wheel would carry the 17 MB embedded model). 19 wheels, 65.9 MB (62.8 MiB) for CPython
# 3.11 on x86-64 Linux. Usage: bench/gpu_wheels.sh [FOLDER] (default bench/gpu_wheels); PYTHON_VERSION (default
# 3.11) names the GPU machine's Python. It prints the folder's total size, which must stay under 64 MiB.
set -euo pipefail
folder=${1:-bench/gpu_wheels}
python_version=${PYTHON_VERSION:-3.11}
mkdir -p "$folder"
pip download --quiet --no-deps --only-binary=:all: --python-version "$python_version" \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  --dest "$folder" \
  trl==1.16.0 accelerate==1.15.0 datasets==5.2.0 pyarrow==24.0.0 pandas==3.1.1 dill==0.4.1 multiprocess==0.70.19 \
  xxhash==4.1.0 fsspec==2026.9.0 psutil==7.2.2 python-dateutil==4.0.0 pytz==2026.6 tzdata==2026.6 six==1.17.0 \
  requests==2.34.2 certifi==2026.10.19.post1 charset-normalizer==3.5.3 idna==3.20 urllib3==2.8.0
du -ch "$folder"/*.whl | tail -1
