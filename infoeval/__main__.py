import sys

from infoeval.cli import main

sys.exit(main())
