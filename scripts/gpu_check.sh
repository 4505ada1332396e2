#!/usr/bin/env bash
# The GPU check (issue 50): run on a machine with CUDA as the only command, from the repository root, e.g. with the
# device tool: run(command="scripts/gpu_check.sh", carry=[".whl"], timeout_s=540) after scripts/gpu_wheels.sh.
# It installs the prepared wheels offline (into /tmp/site; nothing else is touched), runs the `cuda` tests on the
# tiny models (tests/test_cuda*.py), then benchmarks/gpu.py (quantize-compare on a Qwen3-0.6B-shaped model in
# bfloat16 and float32, and the CPU-vs-GPU differences), and writes the record benchmarks/results/gpu.json (also
# copied, with the logs and the tests' JUnit XML, to $OUT when the device tool sets it). Sized for 8 minutes on one GPU,
# the install included (its timeouts: 300 s for the tests, 240 s for the benchmark); not yet timed on one.
# INFOEVAL_TEST_GPU=cpu scripts/gpu_check.sh is its dry run on a machine without a GPU: the tests' dry run, the
# benchmark on the CPU at small settings, no wheels installed and no record written.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu-check}
mkdir -p "$OUT"
started=$(date +%s)
BENCH=(--save)
if [ "${INFOEVAL_TEST_GPU:-cuda}" = cpu ]; then
  BENCH=(--device cpu --max-tokens 256 --cpu-tokens 128)
  echo "gpu_check: dry run on the CPU (INFOEVAL_TEST_GPU=cpu): no wheels installed, no record written"
else
  python3 -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'gpu_check: no CUDA device on this machine')" || exit 3
fi
if [ "${INFOEVAL_TEST_GPU:-cuda}" = cpu ]; then
  :
elif compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl 2>&1 | tail -3
  export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
else
  echo "gpu_check: no wheels in .whl/ (scripts/gpu_wheels.sh prepares them): the libraries missing here skip their tests" >&2
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null
python3 -c "import torch, transformers; print('torch', torch.__version__, 'cuda', torch.version.cuda, '· transformers', transformers.__version__)"
echo "== cuda tests (tests/test_cuda*.py)"
timeout 300 python3 -m pytest -q -m cuda -p no:cacheprovider -rs --junitxml "$OUT/cuda-tests.xml" tests/test_cuda*.py 2>&1 | tee "$OUT/tests.log" | tail -25
tests_rc=${PIPESTATUS[0]}
echo "== benchmark (benchmarks/gpu.py)"
timeout 240 python3 benchmarks/gpu.py --junit "$OUT/cuda-tests.xml" "${BENCH[@]}" > "$OUT/bench.json" 2> "$OUT/bench.log"
bench_rc=$?
tail -5 "$OUT/bench.log"
[ "${BENCH[0]}" = --save ] && [ -f benchmarks/results/gpu.json ] && cp benchmarks/results/gpu.json "$OUT/gpu.json"
python3 - "$OUT/bench.json" <<'PY' || true
import json, sys
f = json.load(open(sys.argv[1]))
for r in f["runs"]:
    print(f"{r['dtype']:>9}: {r['tokens']} tokens, {r['tokens_per_s']:,.0f} tokens/s, peak {r['peak_gpu_mib'] or 0:,} MiB GPU, load {r['load_s']} s")
d = f["cpu_vs_gpu_float32"]
print(f"CPU vs GPU (float32, {d['positions']} positions): max |ΔNLL| {d['nll_max_abs_diff']:.2e}")
t = f.get("tests", {})
print(f"cuda tests: {t.get('passed')} passed, {t.get('skipped')} skipped, {t.get('failed')} failed")
PY
echo "gpu_check: tests exit $tests_rc, benchmark exit $bench_rc, $(( $(date +%s) - started )) s"
[ "$tests_rc" = 0 ] && [ "$bench_rc" = 0 ]
