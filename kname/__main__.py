import sys

from kname.cli import main

sys.exit(main())
