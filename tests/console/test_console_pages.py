"""The console over HTTP: sign-in, every page, every action, and what it refuses.

A real notifier on SQLite delivers to a real webhook sink on 127.0.0.1; the console is
mounted on the agent's aiohttp app with ``notifier.add_console``.
"""

from __future__ import annotations

import asyncio
import html
import re
from pathlib import Path

import aiohttp

from a2a_push.console.app import CSP
from a2a_push.console.auth import COOKIE
from a2a_push.protocol import TaskState
from a2a_push.store import DeliveryState
from a2a_push.testing import SinkResponse

from .conftest import ADMIN_KEY, Rig, console_rig


async def page(session: aiohttp.ClientSession, url: str) -> tuple[int, str]:
    async with session.get(url, allow_redirects=False) as resp:
        return resp.status, await resp.text()


async def test_pages_need_a_session_and_say_where_to_sign_in(rig: Rig) -> None:
    for path in ("/console/", "/console/deliveries?task=t", "/console/dead", "/console/configs"):
        async with rig.session.get(rig.base + path, allow_redirects=False) as resp:
            assert resp.status == 303, path
            assert resp.headers["Location"].startswith("/console/login")
    async with rig.session.get(rig.base + "/console/overview.json") as resp:
        assert resp.status == 401
        assert (await resp.json())["error"] == "unauthorized"


async def test_sign_in_sets_a_strict_session_cookie_and_lands_on_the_asked_page(rig: Rig) -> None:
    async with rig.session.get(rig.base + "/console/login?next=/console/dead") as resp:
        text = await resp.text()
        assert resp.headers["Content-Security-Policy"] == CSP
    token = re.search(r'name="login" value="([0-9a-f]+)"', text)
    assert token is not None and 'value="/console/dead"' in text
    async with rig.session.post(
        rig.base + "/console/login",
        data={"login": token.group(1), "key": ADMIN_KEY, "next": "/console/dead"},
        allow_redirects=False,
    ) as resp:
        assert resp.status == 303
        assert resp.headers["Location"] == "/console/dead"
        cookie = next(v for k, v in resp.headers.items() if k == "Set-Cookie" and COOKIE in v)
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/console" in cookie
    assert "Max-Age=28800" in cookie and "Secure" not in cookie  # plain http here
    assert ADMIN_KEY not in cookie
    status, text = await page(rig.session, rig.base + "/console/dead")
    assert status == 200 and "Dead letters" in text


async def test_a_wrong_key_gets_a_clear_page_and_no_session(rig: Rig) -> None:
    async with rig.session.get(rig.base + "/console/login") as resp:
        token = re.search(r'name="login" value="([0-9a-f]+)"', await resp.text())
    assert token is not None
    async with rig.session.post(
        rig.base + "/console/login",
        data={"login": token.group(1), "key": "not-the-admin-key-000"},
        allow_redirects=False,
    ) as resp:
        assert resp.status == 401
        assert "That is not an admin key" in await resp.text()
        assert not any(COOKIE + "=" in v for v in resp.headers.getall("Set-Cookie", []))
    status, _ = await page(rig.session, rig.base + "/console/")
    assert status == 303


async def test_a_sign_in_without_its_form_token_is_refused(rig: Rig) -> None:
    async with rig.session.post(
        rig.base + "/console/login", data={"key": ADMIN_KEY}, allow_redirects=False
    ) as resp:
        assert resp.status == 403
        assert "expired or came from another page" in await resp.text()
    status, _ = await page(rig.session, rig.base + "/console/")
    assert status == 303


async def test_a_key_never_goes_in_a_url(rig: Rig) -> None:
    status, text = await page(rig.session, rig.base + "/console/login")
    assert 'method="post"' in text and 'type="password"' in text
    async with rig.session.get(
        rig.base + f"/console/login?key={ADMIN_KEY}", allow_redirects=False
    ) as resp:
        assert resp.status == 200  # the form again: a key in a query signs nobody in
    status, _ = await page(rig.session, rig.base + "/console/")
    assert status == 303


async def test_overview_shows_the_outbox_and_the_chart(rig: Rig) -> None:
    await rig.register("t-ok", "/ok")
    await rig.publish("t-ok")
    rig.sink.set_default("/bad", 400)
    await rig.register("t-bad", "/bad")
    await rig.publish("t-bad")
    await rig.sign_in(rig.session)
    status, text = await page(rig.session, rig.base + "/console/")
    assert status == 200
    assert re.search(r'data-field="dead"><a [^>]*>2</a>', text), text  # snapshot + event
    assert "<svg" in text and 'class="ok"' in text and 'class="fail"' in text
    async with rig.session.get(rig.base + "/console/overview.json") as resp:
        data = await resp.json()
    assert data["dead"] == 2 and data["openBreakers"] == []
    assert sum(b["delivered"] for b in data["series"]) == 2
    assert sum(b["failed"] for b in data["series"]) == 2
    assert len(data["series"]) == 60


async def test_deliveries_filter_by_task_endpoint_state_and_time(rig: Rig) -> None:
    await rig.register("t-1", "/one")
    await rig.publish("t-1")
    await rig.register("t-2", "/two")
    await rig.publish("t-2", TaskState.COMPLETED)
    await rig.sign_in(rig.session)
    base = rig.base + "/console/deliveries"
    _, text = await page(rig.session, base + "?task=t-1")
    assert text.count('href="/console/deliveries/msg_') == 2 and "t-2" not in text
    endpoint = rig.sink.url("/x").rsplit("/", 1)[0]
    _, text = await page(rig.session, base + f"?endpoint={endpoint}&state=delivered")
    assert text.count('href="/console/deliveries/msg_') == 4
    _, text = await page(rig.session, base + "?endpoint=http://127.0.0.2:1")
    assert "No delivery matches." in text
    _, text = await page(rig.session, base + "?since=2000-01-01T00:00&until=2000-01-02T00:00")
    assert "No delivery matches." in text
    _, text = await page(rig.session, base + "?since=2000-01-01T00:00")
    assert text.count('href="/console/deliveries/msg_') == 4
    status, text = await page(rig.session, base + "?state=lost")
    assert status == 400 and "is not one of pending, delivered, dead" in text
    status, text = await page(rig.session, base + "?since=yesterday")
    assert status == 400 and "YYYY-MM-DDTHH:MM" in text


async def test_deliveries_page_by_keyset(rig: Rig) -> None:
    await rig.register("t-many", "/many")
    for _ in range(55):
        await rig.notifier.publish("t-many", _event("t-many"))
    await rig.sign_in(rig.session)
    _, first = await page(rig.session, rig.base + "/console/deliveries?task=t-many")
    ids = re.findall(r'href="/console/deliveries/(msg_\w+)"', first)
    assert len(ids) == 50
    after = re.search(r'href="([^"]+)" rel="next"', first)
    assert after is not None
    _, second = await page(rig.session, rig.base + html.unescape(after.group(1)))
    more = re.findall(r'href="/console/deliveries/(msg_\w+)"', second)
    assert len(more) == 6 and not set(more) & set(ids)  # 1 snapshot + 55 events
    assert 'rel="next"' not in second


def _event(task_id: str):  # type: ignore[no-untyped-def]
    from .conftest import status_event

    return status_event(task_id, TaskState.WORKING)


async def test_a_delivery_shows_attempts_headers_redacted_and_its_task(rig: Rig) -> None:
    rig.sink.script("/flaky", [200, SinkResponse(503, body=b"busy, try later"), 200])
    await rig.register("t-f", "/flaky?secret=path-secret", token="token-secret-123")
    [delivery_id] = await rig.publish("t-f")
    await rig.sign_in(rig.session)
    status, text = await page(rig.session, rig.base + f"/console/deliveries/{delivery_id}")
    assert status == 200
    assert "token-secret-123" not in text and "path-secret" not in text
    assert "X-A2A-Notification-Token: [redacted]" in text
    assert "X-A2A-Signature: [JWT, signed for each attempt]" in text
    assert "webhook-id: " + delivery_id in text
    assert "busy, try later" in text  # the 503's body (its first attempt)
    assert "TASK_STATE_WORKING" in text and "&quot;statusUpdate&quot;" in text
    assert text.count('href="/console/deliveries/msg_') >= 2  # the snapshot too
    status, text = await page(rig.session, rig.base + "/console/deliveries/msg_nope")
    assert status == 404 and "No delivery has that id" in text


async def test_replay_needs_the_csrf_token_then_redelivers(rig: Rig) -> None:
    rig.sink.set_default("/dead", 400)
    await rig.register("t-d", "/dead")
    [delivery_id] = await rig.publish("t-d")
    token = await rig.sign_in(rig.session)
    url = rig.base + "/console/dead/replay"
    for data in ({"id": delivery_id}, {"id": delivery_id, "csrf": "0" * 64}):
        async with rig.session.post(url, data=data, allow_redirects=False) as resp:
            assert resp.status == 403
            assert "nothing was changed" in await resp.text()
    got = await rig.notifier.store.get_delivery(delivery_id)
    assert got is not None and got.state is DeliveryState.DEAD
    async with rig.session.post(
        url,
        data={"id": delivery_id, "csrf": token},
        headers={"Origin": "http://evil.example"},
        allow_redirects=False,
    ) as resp:
        assert resp.status == 403 and "another site" in await resp.text()
    rig.sink.set_default("/dead", 200)
    async with rig.session.post(
        url, data={"id": delivery_id, "csrf": token}, allow_redirects=False
    ) as resp:
        assert resp.status == 303
    [settled] = await rig.notifier.wait_settled([delivery_id], timeout=15)
    assert settled.state is DeliveryState.DELIVERED
    async with rig.session.post(url, data={"id": delivery_id, "csrf": token}) as resp:
        assert resp.status == 409 and "is not a dead letter now" in await resp.text()


async def test_replay_all_says_how_many_then_replays_them(rig: Rig) -> None:
    rig.sink.set_default("/all", 400)
    await rig.register("t-a", "/all")
    ids = [i for _ in range(3) for i in await rig.publish("t-a")]
    token = await rig.sign_in(rig.session)
    _, text = await page(rig.session, rig.base + "/console/dead/replay-all?task=t-a")
    assert "Replay 4 dead letters (task t-a)?" in text  # the snapshot too
    rig.sink.set_default("/all", 200)
    async with rig.session.post(
        rig.base + "/console/dead/replay-all",
        data={"task": "t-a", "expected": "4", "csrf": token},
    ) as resp:
        assert "Replayed 4 dead letters." in await resp.text()
    settled = await rig.notifier.wait_settled(ids, timeout=15)
    assert {d.state for d in settled} == {DeliveryState.DELIVERED}
    _, text = await page(rig.session, rig.base + "/console/dead/replay-all?task=t-a")
    assert "nothing to replay" in text


async def test_configs_disable_and_enable(rig: Rig) -> None:
    config = await rig.register("t-c", "/c")
    token = await rig.sign_in(rig.session)
    action = f"/console/configs/{config.key}/disable"
    _, text = await page(rig.session, rig.base + "/console/configs")
    assert action in text
    async with rig.session.post(rig.base + action, allow_redirects=False) as resp:
        assert resp.status == 403  # no token
    assert (await rig.notifier.store.get_config_by_key(config.key)).enabled  # type: ignore[union-attr]
    async with rig.session.post(rig.base + action, data={"csrf": token}) as resp:
        assert resp.status == 200
        assert "disabled by an operator (console)" in await resp.text()
    assert not (await rig.notifier.store.get_config_by_key(config.key)).enabled  # type: ignore[union-attr]
    _, text = await page(rig.session, rig.base + "/console/")
    assert re.search(r'data-field="disabledConfigs"><a [^>]*>1</a>', text)
    async with rig.session.post(
        rig.base + f"/console/configs/{config.key}/enable", data={"csrf": token}
    ) as resp:
        assert resp.status == 200
    assert (await rig.notifier.store.get_config_by_key(config.key)).enabled  # type: ignore[union-attr]
    async with rig.session.post(
        rig.base + "/console/configs/no-such-key/enable", data={"csrf": token}
    ) as resp:
        assert resp.status == 404


async def test_endpoints_page_shows_breaker_success_and_latency(rig: Rig) -> None:
    await rig.register("t-e", "/e")
    await rig.publish("t-e")
    await rig.sign_in(rig.session)
    _, text = await page(rig.session, rig.base + "/console/endpoints")
    endpoint = rig.sink.url("/x").rsplit("/", 1)[0]
    assert endpoint in text and "100.0 %" in text and "closed" in text
    assert re.search(r"<td>\d+ ms</td>", text)


async def test_outside_values_render_as_text(rig: Rig) -> None:
    evil = '<script>alert("x")</script>'
    rig.sink.set_default("/x", SinkResponse(400, body=b"<img src=x onerror=alert(1)>"))
    task_id = f"t{evil}"
    await rig.register(task_id, "/x")
    await rig.notifier.publish(
        task_id,
        _event(task_id).model_copy(update={"metadata": {"link": "javascript:alert(1)"}}),
    )
    await asyncio.sleep(0.5)
    await rig.sign_in(rig.session)
    for path in ("/console/deliveries", "/console/dead", "/console/configs"):
        _, text = await page(rig.session, rig.base + path)
        assert "<script>alert" not in text and "&lt;script&gt;" in text, path
    found = await rig.notifier.store.list_deliveries(_filter(task_id))
    _, text = await page(rig.session, rig.base + f"/console/deliveries/{found[-1].id}")
    assert "<img src=x" not in text and "&lt;img src=x onerror=alert(1)&gt;" in text
    assert 'href="javascript:' not in text and "javascript:alert(1)" in text


def _filter(task_id: str):  # type: ignore[no-untyped-def]
    from a2a_push.store import DeliveryFilter

    return DeliveryFilter(task_id=task_id)


async def test_sign_out_ends_the_session_in_the_browser(rig: Rig) -> None:
    token = await rig.sign_in(rig.session)
    async with rig.session.post(
        rig.base + "/console/logout", data={"csrf": token}, allow_redirects=False
    ) as resp:
        assert resp.status == 303 and resp.headers["Location"] == "/console/login"
    status, _ = await page(rig.session, rig.base + "/console/")
    assert status == 303


async def test_an_expired_session_changes_nothing(tmp_path: Path) -> None:
    async for rig in console_rig(tmp_path, admin_keys=[ADMIN_KEY]):
        rig.sink.set_default("/dead", 400)
        await rig.register("t-x", "/dead")
        [delivery_id] = await rig.publish("t-x")
        rig.session.cookie_jar.update_cookies({COOKIE: "forged.cookie"})
        async with rig.session.post(
            rig.base + "/console/dead/replay", data={"id": delivery_id, "csrf": "x"}
        ) as resp:
            assert resp.status == 401
            assert "session has ended" in await resp.text()
        got = await rig.notifier.store.get_delivery(delivery_id)
        assert got is not None and got.state is DeliveryState.DEAD


async def test_without_admin_keys_the_console_is_off(tmp_path: Path) -> None:
    async for rig in console_rig(tmp_path, admin_keys=[]):
        for path in ("/console/", "/console/login", "/console/deliveries"):
            status, text = await page(rig.session, rig.base + path)
            assert status == 404 and "The console is off" in text, path
        async with rig.session.post(
            rig.base + "/console/login", data={"key": ADMIN_KEY}, allow_redirects=False
        ) as resp:
            assert resp.status == 404


async def test_static_files_and_headers(rig: Rig) -> None:
    async with rig.session.get(rig.base + "/console/static/console.js") as resp:
        assert resp.status == 200 and resp.content_type == "text/javascript"
        assert "fetch(" in await resp.text()
    async with rig.session.get(rig.base + "/console/static/../app.py") as resp:
        assert resp.status == 404
    await rig.sign_in(rig.session)
    async with rig.session.get(rig.base + "/console/") as resp:
        assert resp.headers["Content-Security-Policy"] == CSP
        assert resp.headers["X-Frame-Options"] == "DENY"
        assert resp.headers["Cache-Control"] == "no-store"
        text = await resp.text()
    assert "<script>" not in text and 'src="/console/static/console.js"' in text
