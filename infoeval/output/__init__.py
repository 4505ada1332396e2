"""The output stage: results (provenance, JSON, CSV, atomic writes), rich tables, llama.cpp's block, plots."""
