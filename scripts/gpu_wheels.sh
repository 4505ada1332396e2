#!/usr/bin/env bash
# Prepare, on this machine (it has the package registry), the wheels that scripts/gpu_check.sh installs offline on a
# GPU machine: Python 3.12, manylinux x86-64, no dependencies resolved (the GPU image already holds torch,
# transformers, accelerate, safetensors, tokenizers, typer, rich, pandas, numpy, pyarrow, pytest). Into .whl/
# (ignored by git), about 58 MB: what travels to the GPU machine is limited to 64 MiB with the working tree.
#
#   scripts/gpu_wheels.sh          # then, with the device tool: run scripts/gpu_check.sh, carrying .whl
set -euo pipefail
cd "$(dirname "$0")/.."
# infoeval's own dependencies the image lacks, the method libraries, and what those import at start (auto-round:
# datasets, dill, multiprocess, pydantic; hqq: termcolor). The versions this project's CPU runs use.
WHEELS=(gguf==0.19.0 zstandard==0.25.0 constriction==0.5.0 optimum-quanto==0.2.7 torchao==0.18.0 bitsandbytes==0.50.2
        auto-round==0.16.1 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19 pydantic==2.14.4 pydantic_core==2.50.5
        annotated-types==0.8.0 typing-inspection==0.4.5 termcolor==3.3.0)
PLATFORMS=(manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_24_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64 any)
mkdir -p .whl
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  "${PLATFORMS[@]/#/--platform=}" -d .whl "${WHEELS[@]}"
# hqq publishes only a source archive; it is pure Python, so its wheel is built here
ls .whl/hqq-*.whl >/dev/null 2>&1 || python3 -m pip wheel -q --no-deps -w .whl hqq==0.2.8.post1
du -ch .whl/*.whl | tail -1
