"""``python -m a2a_push.mock_agent``: the mock agent, as ``a2a-push mock-agent``."""

import sys

from .cli import main

sys.exit(main())
