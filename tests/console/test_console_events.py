"""The overview's "Recent events": the notifier's operational events, escaped."""

from __future__ import annotations

import asyncio
import re

from .conftest import Rig


async def test_the_overview_lists_recent_events_newest_first_escaped(rig: Rig) -> None:
    await rig.sign_in(rig.session)
    async with rig.session.get(rig.base + "/console/") as resp:
        page = await resp.text()
    assert "Recent events" in page and "No operational events since this process" in page
    rig.sink.set_default("/gone", 410)
    rig.sink.set_default("/refused", 400)
    await rig.register("<script>alert(1)</script>", "/gone?secret=s3cr3t")
    await rig.register("t-refused", "/refused")
    for _ in range(100):
        if len(rig.notifier.recent_events()) == 3:
            break
        await asyncio.sleep(0.05)
    assert sorted(e.type for e in rig.notifier.recent_events()) == [
        "config.disabled",
        "delivery.dead",
        "delivery.dead",
    ]
    async with rig.session.get(rig.base + "/console/") as resp:
        page = await resp.text()
    listed = page[page.index("Recent events") :]
    assert "<script>alert(1)</script>" not in page
    assert "task &lt;script&gt;alert(1)&lt;/script&gt;" in listed
    assert "reason: gone" in listed and "last: HTTP 400" in listed
    assert "s3cr3t" not in page and "/gone" not in listed
    shown = re.findall(r"<code>([a-z._]+)</code>", listed)
    assert shown == [e.type for e in reversed(rig.notifier.recent_events())]  # newest first
