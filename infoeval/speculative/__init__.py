"""Speculative decoding and distillation, measured from logits.

p is the target (teacher), q the draft (student). Modules: theory (acceptance maths), drafts (building q),
pairs (both models on the engine's windows), accept (spec-accept), decode (the speculative sampling loop),
generate (spec-decode), verify (Theorem 1 by Monte Carlo), distill (distillation terms), temperature (the
temperature table), report (rich tables).
"""
