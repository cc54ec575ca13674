"""The `overlaprun` command installed by pip: runs the launcher binary bundled with the package."""

import os
import sys


def main():
    binary = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "overlaprun")
    if not os.path.exists(binary):
        sys.exit("overlaprun: %s is missing; reinstall the package with `pip install .`" % binary)
    # An elastic job's driver runs in Python (launcher/elastic_launch.h): this interpreter.
    os.environ.setdefault("OVERLAP_ELASTIC_PYTHON", sys.executable)
    os.execv(binary, [binary] + sys.argv[1:])


if __name__ == "__main__":
    main()
