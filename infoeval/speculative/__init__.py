"""Speculative decoding and distillation, measured from logits (issue 4).

p is the target (teacher), q the draft (student). Modules: math (pure maths), drafts (building q), accept
(spec-accept over windows), decode (the speculative sampling loop), verify (Theorem 1 by Monte Carlo),
distill (distillation terms), temperature (the temperature table), report (rich tables, no torch).
"""
