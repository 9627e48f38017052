"""``python3 -m kvspec`` is ``python3 -m kvspec.conform``."""
import sys

from .conform import main

sys.exit(main())
