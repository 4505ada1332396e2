"""CI regression gates: the compact reference, limits and verdicts, quantized checkpoints."""
