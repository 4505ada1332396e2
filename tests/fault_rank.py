"""Test launcher: runs the infoeval CLI, and on the rank named by INFOEVAL_TEST_FAULT_RANK makes every forward pass
fail (the variable is read here only, never by the package)."""

import os

if __name__ == "__main__":
    if os.environ.get("RANK") == os.environ.get("INFOEVAL_TEST_FAULT_RANK"):
        from infoeval import engine

        def broken(*args, **kwargs):
            raise RuntimeError("injected fault")

        engine.forward_logits = broken
    from infoeval.cli import main

    main()
