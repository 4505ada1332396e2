"""sensitivity: which units (Linear layers, decoder blocks, layer types) a quantization scheme hurts, each
quantized alone: units · pipeline (the sweep through the engine and the block-level stage) · proxy (the
diagonal-Fisher predictor) · ranking (Spearman) · result · report · plot."""

from infoeval.sensitivities.result import SensitivityResult
from infoeval.sensitivities.sweep import sweep, sweep_prepared

__all__ = ["SensitivityResult", "sweep", "sweep_prepared"]
