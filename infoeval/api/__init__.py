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

from infoeval import _API
from infoeval.api.drafting import distill, spec_accept, spec_decode, temperature  # noqa: F401
from infoeval.api.gates import gate, quantize, reference  # noqa: F401
from infoeval.api.information import kl_fit, mutual_info  # noqa: F401
from infoeval.api.results import load, summary_of  # noqa: F401
from infoeval.api.scoring import compare, compress_bits  # noqa: F401
from infoeval.api.units import mix, sensitivity  # noqa: F401

# the functions ``infoeval`` re-exports when first asked for (``infoeval._API``, the one list), and summary_of
__all__ = [*_API, "summary_of"]
