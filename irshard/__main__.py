import sys

from irshard.cli import main

sys.exit(main())
