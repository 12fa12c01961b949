"""``python -m receiver``: run the receiver (same options as ``a2a-push receiver``)."""

from receiver.cli import main

raise SystemExit(main())
