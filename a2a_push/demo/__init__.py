"""The end-to-end demo (``a2a-push demo``, ``make demo``).

Part 1 (:mod:`.run`, with the webhook sink of :mod:`.sink`): the mock agent over HTTP,
every push notification verified on arrival. Part 2 (:mod:`.loop`, with the receiver
process and the app's SSE client of :mod:`.receiver_side`): the whole loop through the
receiver in its own process.
"""

from .run import main, run_demo

__all__ = ["main", "run_demo"]
