import sys

from slurmx.cli import main

sys.exit(main())
