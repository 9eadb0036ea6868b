import sys

from evo.cli import main

sys.exit(main())
