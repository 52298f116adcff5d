"""``python -m labs.engine``: see :mod:`labs.engine.cli`."""

import sys

from labs.engine.cli import main

if __name__ == "__main__":
    sys.exit(main())
