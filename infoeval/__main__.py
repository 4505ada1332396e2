"""``python -m infoeval`` and the ``infoeval`` console script: the command line, with Ctrl-C during the first
seconds (the imports of torch and transformers) ending as "infoeval: interrupted", not a traceback."""

import sys


def main() -> int:
    try:
        from infoeval.cli import main as run
    except KeyboardInterrupt:
        print("infoeval: interrupted", file=sys.stderr)
        return 130
    return run()


if __name__ == "__main__":
    sys.exit(main())
