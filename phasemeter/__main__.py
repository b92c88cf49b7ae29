import sys

from phasemeter.cli.main import main

sys.exit(main())
