"""A language model as a lossless compressor: ``compress`` / ``decompress`` with a real range coder.

frequencies (logits → integer counts, pure maths) · coder (constriction's range coder, a shorter ending) ·
stepping (the one encode/decode code path: segments of a group stepped together with a KV cache) · segments
(exact tokenization, segments and groups) · environment (what exactness depends on) · container (the .iez file
format) · core (bytes ⇄ archive) · summary (what compress reports) · pipeline (the commands) · verify (the
arithmetic-coded row of compress-bits) · report (tables).
"""
