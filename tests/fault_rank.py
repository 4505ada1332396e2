"""Test launcher: runs the infoeval CLI, and on the rank named by INFOEVAL_TEST_FAULT_RANK makes every forward pass
fail, or with INFOEVAL_TEST_FAULT_STAGE=quantize every layer's encoding (the variables are read
here only, never by the package)."""

import os
import sys

if __name__ == "__main__":
    if os.environ.get("RANK") == os.environ.get("INFOEVAL_TEST_FAULT_RANK"):
        from infoeval.engine import forward
        from infoeval.quant import apply

        def broken(*args, **kwargs):
            raise RuntimeError("injected fault")

        if os.environ.get("INFOEVAL_TEST_FAULT_STAGE") == "quantize":
            apply.encode_with_sqnr = broken
        else:
            forward.forward_logits = broken
    from infoeval.cli import main

    sys.exit(main())
