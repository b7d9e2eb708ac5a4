import sys

from mizuoto.cli import main

sys.exit(main())
