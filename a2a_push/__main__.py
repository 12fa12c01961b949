"""``python -m a2a_push``: the ``a2a-push`` command."""

from a2a_push.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
