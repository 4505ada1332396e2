"""The input stage: text → tokens → documents → windows, the protocols that cut them, and prepare (all of it at
once)."""
