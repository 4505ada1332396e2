"""The maths: per-position information theory, aggregates and standard errors, the metric registry, llama.cpp's
statistics."""
