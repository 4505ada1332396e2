"""infoeval as a library: the functions a Python user calls, over the same pipelines as the CLI.

    import infoeval
    result = infoeval.compare(schemes=("int8-channel", "int4-g128"), max_tokens=2048)   # quantize-compare
    infoeval.reference(out="ref.safetensors"); infoeval.gate(reference="ref.safetensors", scheme="int8-channel")
    result = infoeval.load("results/quantize-compare-smollm2-135m/")   # any result JSON or run folder
    result.to_frame()        # the summary table (summary.csv)
    result.positions         # the per-position table, where the run kept it (positions.csv)
    result.save("copy/")     # what the CLI writes: result.json, summary.csv, positions.csv

Results are the commands' typed records (``CompareResult``, ``GateResult``, …; ``output/results.py``).
"""

from infoeval.api.drafting import distill, spec_accept, spec_decode, temperature
from infoeval.api.gates import gate, quantize, reference
from infoeval.api.information import kl_fit, mutual_info
from infoeval.api.results import load, summary_of
from infoeval.api.scoring import compare, compress_bits
from infoeval.api.units import mix, sensitivity

__all__ = [
    "compare",
    "compress_bits",
    "reference",
    "gate",
    "quantize",
    "sensitivity",
    "mix",
    "spec_accept",
    "distill",
    "spec_decode",
    "temperature",
    "mutual_info",
    "kl_fit",
    "load",
    "summary_of",
]
