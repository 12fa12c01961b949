"""The delivery console: server-rendered pages over the outbox, for operators.

Pages (under a prefix, ``/console`` by default): the overview, deliveries (filters and
keyset paging), one delivery (its attempts, the webhook headers as sent with secrets
redacted, the body, the task's other deliveries), dead letters (replay one, or every one
that matches a filter after a confirmation that says how many), endpoints (breaker,
success rate, latency, in flight) and configs (enable, disable).

Security: the console is off without admin keys; signing in takes an admin key on a form
and opens a session cookie (``HttpOnly``, ``SameSite=Strict``, ``Secure`` behind https,
expiring); every state-changing action is a POST carrying the session's CSRF token;
pages are sent with a strict Content-Security-Policy (no inline script, nothing from
another origin) and every value from outside is escaped (:mod:`.html`). Reading works
with JavaScript off; the little script there is refreshes the overview.
"""

from __future__ import annotations

import asyncio
import calendar
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any, Final
from urllib.parse import urlsplit

from aiohttp import web

from ..delivery.health import BreakerState, EndpointHealth
from ..delivery.webhook import webhook_headers
from ..endpoints import endpoint_of
from ..errors import StoreUnavailableError
from ..events import OperationalEvent
from ..ids import delivery_id_floor
from ..openapi import Body, Operation, Param, refusal, route
from ..protocol.constants import (
    HEADER_AUTHORIZATION,
    HEADER_NOTIFICATION_TOKEN,
    HEADER_SIGNATURE,
    HEADER_WEBHOOK_SIGNATURE,
)
from ..store import (
    Delivery,
    DeliveryFilter,
    DeliveryState,
    Store,
    StoredConfig,
    matching_ids,
)
from .auth import COOKIE, LOGIN_COOKIE, Session, Sessions
from .html import Markup, h, href, join, pretty_json, table, when

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

PAGE_SIZE: Final = 50
REPLAY_ALL_LIMIT: Final = 10_000
CSP: Final = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
SECURITY_HEADERS: Final = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}
STATIC: Final = {
    "console.css": "text/css",
    "console.js": "text/javascript",
    "favicon.svg": "image/svg+xml",
}
STATES: Final = ("pending", "delivered", "dead")
REDACTED: Final = "[redacted]"


@dataclass(slots=True)
class ConsoleSource:
    """What the console reads and acts on.

    ``health`` and ``in_flight`` come from a running dispatcher (absent for a console
    opened on an outbox file: breakers and in-flight counts then show as unknown);
    ``wake`` tells a dispatcher in this process that replayed work is due.
    """

    store: Store
    health: EndpointHealth | None = None
    in_flight: Callable[[], Mapping[str, int]] | None = None
    wake: Callable[[], None] | None = None
    signing: bool = True
    name: str = "a2a-push"
    # The operational events this process emitted lately, oldest first (docs/events.md).
    events: Callable[[], list[OperationalEvent]] | None = None

    @classmethod
    def of_notifier(cls, notifier: Any, *, name: str = "a2a-push") -> ConsoleSource:
        dispatcher = notifier.dispatcher
        return cls(
            store=notifier.store,
            health=dispatcher.health,
            in_flight=dispatcher.endpoint_load,
            wake=dispatcher.wake,
            signing=notifier.signer is not None,
            name=name,
            events=notifier.recent_events,
        )


class BadInput(ValueError):
    """A filter the console cannot use; the message says which and why."""


class Console:
    """The console's pages, mounted on an aiohttp app with :meth:`add_routes`."""

    def __init__(
        self,
        source: ConsoleSource,
        admin_keys: Iterable[str],
        *,
        session_seconds: float | None = None,
        secure_cookies: bool | None = None,
    ) -> None:
        self.source = source
        self.sessions = (
            Sessions(admin_keys)
            if session_seconds is None
            else Sessions(admin_keys, session_seconds=session_seconds)
        )
        # None: Secure when the request came over https (or a proxy says it did).
        self.secure_cookies = secure_cookies
        self.prefix = "/console"

    @property
    def enabled(self) -> bool:
        return self.sessions.enabled

    # ---- mounting -------------------------------------------------------------------

    def add_routes(self, app: web.Application, prefix: str = "/console") -> None:
        """Serve the console under ``prefix``. Without admin keys every page answers
        404 with a page saying how to turn the console on."""
        if not prefix.startswith("/") or prefix.endswith("/"):
            raise ValueError(f"prefix must start with / and not end with one: {prefix!r}")
        self.prefix = prefix
        p = prefix
        get, post = self._page, self._action
        pages: list[tuple[str, str, Handler, str]] = [
            ("GET", p, self._slash, "redirects to the console's overview"),
            ("GET", f"{p}/", get(self.overview), "the overview"),
            ("GET", f"{p}/login", self.login_form, "the sign-in form"),
            ("POST", f"{p}/login", self.login, "sign in with an admin key (form)"),
            ("POST", f"{p}/logout", post(self.logout), "sign out"),
            ("GET", f"{p}/deliveries", get(self.deliveries), "deliveries, filtered and paged"),
            ("GET", f"{p}/deliveries/{{id}}", get(self.delivery), "one delivery and its attempts"),
            ("GET", f"{p}/dead", get(self.dead_letters), "dead letters"),
            ("POST", f"{p}/dead/replay", post(self.replay_one), "replay one dead letter"),
            ("GET", f"{p}/dead/replay-all", get(self.replay_all_confirm), "confirm a replay"),
            ("POST", f"{p}/dead/replay-all", post(self.replay_all), "replay matching dead letters"),
            ("GET", f"{p}/endpoints", get(self.endpoints), "endpoints: breakers, latency"),
            ("GET", f"{p}/configs", get(self.configs), "configs"),
            (
                "POST",
                f"{p}/configs/{{key}}/{{action:enable|disable}}",
                post(self.set_config),
                "enable or disable a config",
            ),
        ]
        for method, path, handler, summary in pages:
            route(app, method, path, handler, _page_operation(summary, path))
        route(
            app,
            "GET",
            f"{p}/overview.json",
            self._api(self.overview_json),
            Operation(
                "the overview's figures, for the console's script",
                {200: Body({"type": "object"}, "figures"), 401: refusal("not signed in")},
                tags=("console",),
                security=(),
            ),
        )
        route(
            app,
            "GET",
            f"{p}/static/{{name}}",
            self.static,
            Operation(
                "the console's stylesheet and script",
                {
                    200: Body(None, "the file", media_types=tuple(STATIC.values())),
                    404: refusal("no such file"),
                },
                tags=("console",),
                security=(),
                params=(Param("name", "path", "console.css, console.js or favicon.svg"),),
            ),
        )

    async def _slash(self, request: web.Request) -> web.StreamResponse:
        raise web.HTTPSeeOther(f"{self.prefix}/")

    # ---- plumbing ---------------------------------------------------------------------

    def _session(self, request: web.Request) -> Session | None:
        return self.sessions.check(request.cookies.get(COOKIE))

    async def _answer(
        self,
        handler: Callable[[web.Request, Session], Awaitable[web.StreamResponse]],
        request: web.Request,
        session: Session,
    ) -> web.StreamResponse:
        """The handler's answer; a page saying what went wrong when it fails."""
        try:
            return await handler(request, session)
        except BadInput as exc:
            return self._message(400, "Bad request", str(exc), session)
        except StoreUnavailableError as exc:
            return self._unavailable(exc, session)
        except web.HTTPException:
            raise
        except Exception:
            log.exception("console: failed answering %s %s", request.method, request.path)
            return self._message(500, "Error", "The console failed at this; see the log.", session)

    def _page(
        self, handler: Callable[[web.Request, Session], Awaitable[web.Response]]
    ) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
        async def page(request: web.Request) -> web.StreamResponse:
            if not self.enabled:
                return self._off()
            session = self._session(request)
            if session is None:
                target = request.path_qs if request.path != f"{self.prefix}/" else None
                raise web.HTTPSeeOther(href(f"{self.prefix}/login", {"next": target}))
            return await self._answer(handler, request, session)

        return page

    def _action(
        self, handler: Callable[[web.Request, Session], Awaitable[web.StreamResponse]]
    ) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
        async def action(request: web.Request) -> web.StreamResponse:
            if not self.enabled:
                return self._off()
            session = self._session(request)
            if session is None:
                return self._message(
                    401,
                    "Signed out",
                    "Your session has ended (or you never signed in): nothing was changed. "
                    "Sign in and try again.",
                    None,
                )
            form = await request.post()
            token = form.get("csrf")
            if not isinstance(token, str) or not self.sessions.check_csrf(session, token):
                return self._message(
                    403,
                    "Refused",
                    "This form did not carry this session's CSRF token: nothing was changed. "
                    "Go back, reload the page and try again.",
                    session,
                )
            if not _same_origin(request):
                return self._message(
                    403,
                    "Refused",
                    "The request came from another site: nothing was changed.",
                    session,
                )
            return await self._answer(handler, request, session)

        return action

    def _api(
        self, handler: Callable[[web.Request], Awaitable[dict[str, Any]]]
    ) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
        async def api(request: web.Request) -> web.StreamResponse:
            if not self.enabled:
                return web.json_response({"error": "not_found"}, status=404)
            if self._session(request) is None:
                return web.json_response(
                    {"error": "unauthorized", "message": "sign in to the console"},
                    status=401,
                    headers={"Cache-Control": "no-store"},
                )
            return web.json_response(await handler(request), headers={"Cache-Control": "no-store"})

        return api

    def _unavailable(self, exc: Exception, session: Session | None) -> web.Response:
        log.warning("console: the database is unavailable: %s", exc)
        response = self._message(
            503,
            "Database unavailable",
            "The database does not answer right now; nothing was changed. Try again in a "
            "few seconds.",
            session,
        )
        response.headers["Retry-After"] = "5"
        return response

    def _off(self) -> web.Response:
        return self._html(
            404,
            self._layout(
                "Console off",
                None,
                h(
                    "p",
                    None,
                    "The console is off: it needs at least one admin key "
                    "(the gateway's admin_keys, --admin-key; or admin_keys= where the "
                    "notifier mounts it).",
                ),
            ),
        )

    def _message(self, status: int, title: str, text: str, session: Session | None) -> web.Response:
        body = join(
            h("p", {"class": "message"}, text),
            h("p", None, h("a", {"href": f"{self.prefix}/"}, "Back to the console")),
        )
        return self._html(status, self._layout(title, session, body))

    def _html(
        self, status: int, text: str, headers: Mapping[str, str] | None = None
    ) -> web.Response:
        response = web.Response(status=status, text=text, content_type="text/html", charset="utf-8")
        response.headers.update(SECURITY_HEADERS)
        if headers:
            response.headers.update(headers)
        return response

    def _ok(self, title: str, session: Session, *body: object) -> web.Response:
        return self._html(200, self._layout(title, session, join(*body)))

    def _layout(self, title: str, session: Session | None, body: Markup) -> str:
        p = self.prefix
        nav: Markup | str = ""
        if session is not None:
            links = [
                ("Overview", f"{p}/"),
                ("Deliveries", f"{p}/deliveries"),
                ("Dead letters", f"{p}/dead"),
                ("Endpoints", f"{p}/endpoints"),
                ("Configs", f"{p}/configs"),
            ]
            nav = h(
                "nav",
                None,
                h(
                    "ul",
                    None,
                    [h("li", None, h("a", {"href": url}, label)) for label, url in links],
                ),
                h(
                    "form",
                    {"method": "post", "action": f"{p}/logout", "class": "logout"},
                    self._csrf(session),
                    h("button", {"type": "submit"}, "Sign out"),
                ),
            )
        document = join(
            Markup("<!doctype html>\n"),
            h(
                "html",
                {"lang": "en"},
                h(
                    "head",
                    None,
                    h("meta", {"charset": "utf-8"}),
                    h(
                        "meta",
                        {"name": "viewport", "content": "width=device-width, initial-scale=1"},
                    ),
                    h("title", None, f"{title} · {self.source.name} console"),
                    h("link", {"rel": "stylesheet", "href": f"{p}/static/console.css"}),
                    h("link", {"rel": "icon", "href": f"{p}/static/favicon.svg"}),
                    h("script", {"src": f"{p}/static/console.js", "defer": True}),
                ),
                h(
                    "body",
                    {"data-prefix": p},
                    h(
                        "header",
                        None,
                        h("span", {"class": "brand"}, f"{self.source.name} console"),
                        nav,
                    ),
                    h("main", None, h("h1", None, title), body),
                ),
            ),
        )
        return str(document)

    def _csrf(self, session: Session) -> Markup:
        return h(
            "input", {"type": "hidden", "name": "csrf", "value": self.sessions.csrf_token(session)}
        )

    def _cookie_secure(self, request: web.Request) -> bool:
        if self.secure_cookies is not None:
            return self.secure_cookies
        return request.secure

    async def static(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["name"]
        if name not in STATIC:
            raise web.HTTPNotFound()
        data = resources.files(__package__).joinpath("static", name).read_bytes()
        response = web.Response(body=data, content_type=STATIC[name], charset="utf-8")
        response.headers.update(SECURITY_HEADERS)
        response.headers["Cache-Control"] = "max-age=300"
        return response

    # ---- sign-in ----------------------------------------------------------------------

    async def login_form(
        self, request: web.Request, *, status: int = 200, error: str | None = None
    ) -> web.Response:
        if not self.enabled:
            return self._off()
        nonce, token = self.sessions.login_token()
        next_path = _next_path(request.query.get("next"), self.prefix)
        body = join(
            h("p", {"class": "error", "role": "alert"}, error) if error else "",
            h(
                "form",
                {"method": "post", "action": f"{self.prefix}/login", "class": "login"},
                h("input", {"type": "hidden", "name": "login", "value": token}),
                h("input", {"type": "hidden", "name": "next", "value": next_path}),
                h("label", {"for": "key"}, "Admin key"),
                h(
                    "input",
                    {
                        "type": "password",
                        "id": "key",
                        "name": "key",
                        "autocomplete": "current-password",
                        "required": True,
                        "autofocus": True,
                    },
                ),
                h("button", {"type": "submit"}, "Sign in"),
            ),
        )
        response = self._html(status, self._layout("Sign in", None, body))
        response.set_cookie(
            LOGIN_COOKIE,
            nonce,
            max_age=3600,
            path=self.prefix,
            httponly=True,
            samesite="Strict",
            secure=self._cookie_secure(request),
        )
        return response

    async def login(self, request: web.Request) -> web.StreamResponse:
        if not self.enabled:
            return self._off()
        form = await request.post()
        token, key = form.get("login"), form.get("key")
        if not self.sessions.check_login_token(
            request.cookies.get(LOGIN_COOKIE), token if isinstance(token, str) else None
        ) or not _same_origin(request):
            return await self.login_form(
                request,
                status=403,
                error="This sign-in form has expired or came from another page: enter the key "
                "again.",
            )
        key_id = self.sessions.check_key(key) if isinstance(key, str) else None
        if key_id is None:
            await asyncio.sleep(0.25)  # a guess costs time
            log.warning("console: refused a sign-in with a wrong admin key from %s", request.remote)
            return await self.login_form(
                request, status=401, error="That is not an admin key. Nothing was changed."
            )
        cookie, _ = self.sessions.open(key_id)
        next_raw = form.get("next")
        target = _next_path(next_raw if isinstance(next_raw, str) else None, self.prefix)
        response = web.HTTPSeeOther(target)
        response.set_cookie(
            COOKIE,
            cookie,
            max_age=int(self.sessions.session_seconds),
            path=self.prefix,
            httponly=True,
            samesite="Strict",
            secure=self._cookie_secure(request),
        )
        response.del_cookie(LOGIN_COOKIE, path=self.prefix)
        log.info("console: signed in with admin key %s…", key_id[:8])
        raise response

    async def logout(self, request: web.Request, session: Session) -> web.StreamResponse:
        response = web.HTTPSeeOther(f"{self.prefix}/login")
        response.del_cookie(COOKIE, path=self.prefix)
        raise response

    # ---- overview ---------------------------------------------------------------------

    async def _overview_data(self) -> dict[str, Any]:
        store = self.source.store
        now = time.time()
        stats = await store.stats(now=now, count_delivered=False)
        disabled = await store.count_configs(enabled=False)
        series = await store.attempt_series(since=now - 3600, bucket_seconds=60, now=now)
        health = self.source.health
        open_breakers = sorted(health.open_endpoints()) if health is not None else None
        return {
            "at": now,
            "pending": stats.pending,
            "due": stats.due,
            "inFlight": stats.leased,
            "dead": stats.dead,
            "oldestPendingAge": (now - stats.oldest_pending_created_at)
            if stats.oldest_pending_created_at is not None
            else None,
            "disabledConfigs": disabled,
            "openBreakers": open_breakers,
            "series": [
                {"at": b.start, "delivered": b.delivered, "failed": b.failed} for b in series
            ],
        }

    async def overview_json(self, request: web.Request) -> dict[str, Any]:
        return await self._overview_data()

    async def overview(self, request: web.Request, session: Session) -> web.Response:
        data = await self._overview_data()
        p = self.prefix
        breakers = data["openBreakers"]

        def tile(label: str, name: str, value: object, link: str | None = None) -> Markup:
            shown = h("a", {"href": link}, value) if link else value
            return h(
                "div",
                {"class": "tile"},
                h("span", {"class": "label"}, label),
                h("span", {"class": "value", "data-field": name}, shown),
            )

        tiles = h(
            "div",
            {"class": "tiles", "id": "overview", "data-src": f"{p}/overview.json"},
            tile(
                "Queue depth (pending)",
                "pending",
                data["pending"],
                href(f"{p}/deliveries", {"state": "pending"}),
            ),
            tile("Due now", "due", data["due"]),
            tile("In flight", "inFlight", data["inFlight"]),
            tile("Dead letters", "dead", data["dead"], f"{p}/dead"),
            tile(
                "Open breakers",
                "openBreakers",
                len(breakers) if breakers is not None else "unknown",
                f"{p}/endpoints",
            ),
            tile(
                "Disabled configs",
                "disabledConfigs",
                data["disabledConfigs"],
                href(f"{p}/configs", {"enabled": "no"}),
            ),
        )
        age = data["oldestPendingAge"]
        return self._ok(
            "Overview",
            session,
            tiles,
            h(
                "p",
                {"class": "note"},
                "Oldest pending delivery: ",
                h(
                    "span",
                    {"data-field": "oldestPendingAge"},
                    _duration(age) if age is not None else "none",
                ),
                ". Refreshes every 5 s with JavaScript on; reload otherwise.",
            ),
            h("h2", None, "Attempts over the last hour"),
            _chart(data["series"]),
            *self._recent_events(),
        )

    def _recent_events(self) -> list[Markup]:
        """The "Recent events" list: this process's latest operational events, newest
        first (none for a console opened on an outbox file)."""
        if self.source.events is None:
            return []
        rows = [
            (when(e.time), h("code", None, e.type), _event_summary(e))
            for e in reversed(self.source.events())
        ]
        return [
            h("h2", None, "Recent events"),
            table(
                ("time", "event", "about"),
                rows,
                empty="No operational events since this process started.",
            ),
        ]

    # ---- deliveries -------------------------------------------------------------------

    def _filter(
        self, query: Mapping[str, str], *, state: DeliveryState | None = None
    ) -> tuple[DeliveryFilter, dict[str, str]]:
        given = {
            name: query.get(name, "").strip()
            for name in ("task", "config", "endpoint", "state", "since", "until")
        }
        if state is None and given["state"]:
            if given["state"] not in STATES:
                raise BadInput(f"state: {given['state']!r} is not one of {', '.join(STATES)}")
            state = DeliveryState(given["state"])
        endpoint = given["endpoint"] or None
        if endpoint is not None:
            try:
                endpoint = endpoint_of(endpoint)
            except (ValueError, TypeError):
                raise BadInput(
                    f"endpoint: {endpoint!r} is not a URL (give scheme://host[:port])"
                ) from None
        since = _time_input("since", given["since"])
        flt = DeliveryFilter(
            state=state,
            task_id=given["task"] or None,
            config_key=given["config"] or None,
            endpoint=endpoint,
            created_after=since,
            created_before=_time_input("until", given["until"]),
            limit=PAGE_SIZE + 1,
            after_id=_after(query.get("after") or None, since),
        )
        return flt, given

    def _filter_form(self, action: str, given: Mapping[str, str], *, with_state: bool) -> Markup:
        def field(name: str, label: str, kind: str = "text", placeholder: str = "") -> Markup:
            return h(
                "label",
                None,
                label,
                h(
                    "input",
                    {
                        "type": kind,
                        "name": name,
                        "value": given.get(name, ""),
                        "placeholder": placeholder or None,
                    },
                ),
            )

        state = given.get("state", "")
        select = h(
            "label",
            None,
            "State",
            h(
                "select",
                {"name": "state"},
                h("option", {"value": ""}, "any"),
                [h("option", {"value": s, "selected": s == state}, s) for s in STATES],
            ),
        )
        return h(
            "form",
            {"method": "get", "action": action, "class": "filters"},
            field("task", "Task"),
            field("config", "Config key"),
            field("endpoint", "Endpoint", placeholder="https://host:443"),
            select if with_state else "",
            field("since", "Created from (UTC)", "datetime-local"),
            field("until", "until (UTC)", "datetime-local"),
            h("button", {"type": "submit"}, "Filter"),
        )

    def _delivery_rows(self, found: list[Delivery]) -> list[list[object]]:
        p = self.prefix
        return [
            [
                h("a", {"href": f"{p}/deliveries/{d.id}"}, d.id),
                h("a", {"href": href(f"{p}/deliveries", {"task": d.task_id})}, d.task_id),
                d.seq,
                d.kind,
                h("span", {"class": f"state {d.state.value}"}, d.state.value),
                d.attempts,
                _last(d),
                when(d.created_at),
            ]
            for d in found
        ]

    def _pager(self, path: str, given: Mapping[str, str], found: list[Delivery]) -> Markup:
        links = [h("a", {"href": href(path, given)}, "First page")]
        if len(found) > PAGE_SIZE:
            links.append(
                h(
                    "a",
                    {
                        "href": href(path, {**given, "after": found[PAGE_SIZE - 1].id}),
                        "rel": "next",
                    },
                    "Next page",
                )
            )
        return h("p", {"class": "pager"}, links)

    async def deliveries(self, request: web.Request, session: Session) -> web.Response:
        flt, given = self._filter(request.query)
        found = await self.source.store.list_deliveries(flt)
        path = f"{self.prefix}/deliveries"
        return self._ok(
            "Deliveries",
            session,
            self._filter_form(path, given, with_state=True),
            table(
                ["Delivery", "Task", "Seq", "Kind", "State", "Attempts", "Last", "Created"],
                self._delivery_rows(found[:PAGE_SIZE]),
                empty="No delivery matches.",
            ),
            self._pager(path, given, found),
        )

    async def delivery(self, request: web.Request, session: Session) -> web.Response:
        store = self.source.store
        d = await store.get_delivery(request.match_info["id"])
        if d is None:
            return self._message(
                404, "Not found", "No delivery has that id (it may have been purged).", session
            )
        config = await store.get_config_by_key(d.config_key)
        attempts = await store.list_attempts(d.id)
        siblings = await store.list_deliveries(DeliveryFilter(task_id=d.task_id, limit=201))
        siblings.sort(key=lambda x: (x.config_key != d.config_key, x.config_key, x.seq))
        p = self.prefix
        facts = [
            ("Task", h("a", {"href": href(f"{p}/deliveries", {"task": d.task_id})}, d.task_id)),
            ("Config", d.config_key),
            ("Endpoint", endpoint_of(config.url) if config is not None else "(config deleted)"),
            ("Seq", d.seq),
            ("Kind", d.kind),
            ("State", h("span", {"class": f"state {d.state.value}"}, d.state.value)),
            ("Attempts", d.attempts),
            ("Created", when(d.created_at)),
            ("Updated", when(d.updated_at)),
            ("Next attempt", when(d.next_attempt_at) if d.state is DeliveryState.PENDING else "—"),
        ]
        actions: Markup | str = ""
        if d.state is DeliveryState.DEAD:
            actions = h(
                "form",
                {"method": "post", "action": f"{p}/dead/replay", "class": "inline"},
                self._csrf(session),
                h("input", {"type": "hidden", "name": "id", "value": d.id}),
                h("button", {"type": "submit"}, "Replay this delivery"),
            )
        attempt_rows = [
            [
                a.number,
                when(a.started_at),
                f"{a.duration * 1000:.0f} ms" if a.duration is not None else "",
                a.endpoint,
                a.status if a.status is not None else (a.error_class or ""),
                h("span", {"class": f"verdict {a.verdict}"}, _verdict(a)),
                a.error or "",
                h("pre", {"class": "excerpt"}, a.response.decode("utf-8", errors="replace"))
                if a.response
                else "",
            ]
            for a in attempts
        ]
        headers = _headers_as_sent(d, config, self.source.signing)
        return self._ok(
            f"Delivery {d.id}",
            session,
            h(
                "dl",
                {"class": "facts"},
                [join(h("dt", None, k), h("dd", None, v)) for k, v in facts],
            ),
            actions,
            h("h2", None, "Attempts"),
            table(
                [
                    "#",
                    "Started",
                    "Took",
                    "Endpoint",
                    "Status / error",
                    "Verdict",
                    "Error",
                    "Response (first 1 KiB)",
                ],
                attempt_rows,
                empty="No attempt yet."
                if d.attempts == 0
                else "No attempt history kept for this delivery.",
            ),
            h("h2", None, "Webhook headers as sent"),
            h("pre", {"class": "headers"}, "\n".join(f"{k}: {v}" for k, v in headers.items())),
            h("h2", None, "Body"),
            h("pre", {"class": "body"}, pretty_json(d.body)),
            h("h2", None, "The task's deliveries"),
            table(
                ["Delivery", "Config", "Seq", "Kind", "State", "Attempts"],
                [
                    [
                        h(
                            "a",
                            {
                                "href": f"{p}/deliveries/{s.id}",
                                "aria-current": "page" if s.id == d.id else None,
                            },
                            s.id,
                        ),
                        s.config_key,
                        s.seq,
                        s.kind,
                        h("span", {"class": f"state {s.state.value}"}, s.state.value),
                        s.attempts,
                    ]
                    for s in siblings[:200]
                ],
                empty="None.",
            ),
        )

    # ---- dead letters -----------------------------------------------------------------

    async def dead_letters(self, request: web.Request, session: Session) -> web.Response:
        flt, given = self._filter(request.query, state=DeliveryState.DEAD)
        given.pop("state", None)
        found = await self.source.store.list_deliveries(flt)
        p = self.prefix
        path = f"{p}/dead"
        rows = []
        for row, d in zip(self._delivery_rows(found[:PAGE_SIZE]), found, strict=False):
            rows.append(
                [
                    *row,
                    h(
                        "form",
                        {"method": "post", "action": f"{p}/dead/replay", "class": "inline"},
                        self._csrf(session),
                        h("input", {"type": "hidden", "name": "id", "value": d.id}),
                        h("button", {"type": "submit"}, "Replay"),
                    ),
                ]
            )
        replay_all = (
            h(
                "p",
                None,
                h(
                    "a",
                    {"href": href(f"{p}/dead/replay-all", given), "class": "button"},
                    "Replay all that match…",
                ),
            )
            if found
            else ""
        )
        return self._ok(
            "Dead letters",
            session,
            self._filter_form(path, given, with_state=False),
            replay_all,
            table(
                ["Delivery", "Task", "Seq", "Kind", "State", "Attempts", "Last", "Created", ""],
                rows,
                empty="No dead letter matches.",
            ),
            self._pager(path, given, found),
        )

    async def _matching_dead(self, query: Mapping[str, str]) -> tuple[list[str], dict[str, str]]:
        flt, given = self._filter(query, state=DeliveryState.DEAD)
        given.pop("state", None)
        ids = await matching_ids(self.source.store, flt, at_most=REPLAY_ALL_LIMIT)
        return ids, given

    async def replay_all_confirm(self, request: web.Request, session: Session) -> web.Response:
        ids, given = await self._matching_dead(request.query)
        p = self.prefix
        described = ", ".join(f"{k} {v}" for k, v in given.items() if v) or "no filter"
        if not ids:
            return self._ok(
                "Replay dead letters",
                session,
                h("p", None, f"No dead letter matches ({described}): nothing to replay."),
            )
        capped = len(ids) >= REPLAY_ALL_LIMIT
        return self._ok(
            "Replay dead letters",
            session,
            h(
                "p",
                {"class": "confirm"},
                f"Replay {len(ids)} dead letter{'s' if len(ids) != 1 else ''} ({described})?"
                + (f" At most {REPLAY_ALL_LIMIT} are replayed at once." if capped else ""),
            ),
            h(
                "form",
                {"method": "post", "action": f"{p}/dead/replay-all"},
                self._csrf(session),
                [
                    h("input", {"type": "hidden", "name": k, "value": v})
                    for k, v in given.items()
                    if v
                ],
                h("input", {"type": "hidden", "name": "expected", "value": len(ids)}),
                h("button", {"type": "submit"}, f"Replay {len(ids)}"),
                " ",
                h("a", {"href": href(f"{p}/dead", given)}, "Cancel"),
            ),
        )

    async def replay_all(self, request: web.Request, session: Session) -> web.Response:
        form = await request.post()
        query = {k: v for k, v in form.items() if isinstance(v, str)}
        ids, given = await self._matching_dead(query)
        replayed = await self._replay(ids)
        expected = query.get("expected", "")
        note = (
            f" ({expected} matched when you confirmed; the rest changed meanwhile)"
            if expected.isdigit() and int(expected) != len(ids)
            else ""
        )
        log.info("console: replayed %d dead letters (%s)", replayed, given)
        return self._ok(
            "Replayed",
            session,
            h(
                "p",
                {"class": "message"},
                f"Replayed {replayed} dead letter{'s' if replayed != 1 else ''}{note}.",
            ),
            h(
                "p",
                None,
                h(
                    "a",
                    {"href": href(f"{self.prefix}/deliveries", {**given, "state": "pending"})},
                    "Watch them",
                ),
            ),
        )

    async def replay_one(self, request: web.Request, session: Session) -> web.StreamResponse:
        form = await request.post()
        delivery_id = form.get("id")
        if not isinstance(delivery_id, str) or not delivery_id:
            raise BadInput("id: which delivery to replay")
        replayed = await self._replay([delivery_id])
        if not replayed:
            return self._message(
                409,
                "Not replayed",
                f"{delivery_id} was not replayed: it is not a dead letter now, or its config "
                "is disabled or gone (enable the config first).",
                session,
            )
        log.info("console: replayed %s", delivery_id)
        raise web.HTTPSeeOther(f"{self.prefix}/deliveries/{delivery_id}")

    async def _replay(self, ids: list[str]) -> int:
        if not ids:
            return 0
        count = await self.source.store.replay(ids)
        if count and self.source.wake is not None:
            self.source.wake()
        return count

    # ---- endpoints and configs --------------------------------------------------------

    async def endpoints(self, request: web.Request, session: Session) -> web.Response:
        now = time.time()
        stats = await self.source.store.endpoint_stats(since=now - 3600, now=now)
        health = self.source.health
        breakers = health.states() if health is not None else {}
        load = dict(self.source.in_flight()) if self.source.in_flight is not None else None
        names = sorted(set(stats) | set(breakers) | set(load or ()))
        p = self.prefix
        rows = []
        for name in names:
            s = stats.get(name)
            state = breakers.get(name, BreakerState.CLOSED) if health is not None else None
            rows.append(
                [
                    h("a", {"href": href(f"{p}/deliveries", {"endpoint": name})}, name),
                    h("span", {"class": f"breaker {state.value}"}, state.value)
                    if state
                    else "unknown",
                    (load or {}).get(name, 0) if load is not None else "unknown",
                    s.attempts if s else 0,
                    f"{100 * s.succeeded / s.attempts:.1f} %" if s and s.attempts else "—",
                    _ms(s.p50) if s else "—",
                    _ms(s.p95) if s else "—",
                    _ms(s.p99) if s else "—",
                ]
            )
        return self._ok(
            "Endpoints",
            session,
            h("p", {"class": "note"}, "Attempts, success rate and latency over the last hour."),
            table(
                ["Endpoint", "Breaker", "In flight", "Attempts", "Success", "p50", "p95", "p99"],
                rows,
                empty="No endpoint was tried in the last hour.",
            ),
        )

    async def configs(self, request: web.Request, session: Session) -> web.Response:
        enabled_q = request.query.get("enabled", "")
        if enabled_q not in ("", "yes", "no"):
            raise BadInput("enabled: yes, no, or leave it out")
        enabled = None if not enabled_q else enabled_q == "yes"
        after = request.query.get("after") or None
        found = await self.source.store.list_all_configs(
            enabled=enabled, after_key=after, limit=PAGE_SIZE + 1
        )
        p = self.prefix
        rows = []
        for c in found[:PAGE_SIZE]:
            action = "disable" if c.enabled else "enable"
            rows.append(
                [
                    c.key,
                    h("a", {"href": href(f"{p}/deliveries", {"task": c.task_id})}, c.task_id),
                    c.id,
                    endpoint_of(c.url),
                    c.protocol_version,
                    "enabled" if c.enabled else h("span", {"class": "state dead"}, "disabled"),
                    c.disabled_reason or "",
                    h(
                        "form",
                        {
                            "method": "post",
                            "action": f"{p}/configs/{c.key}/{action}",
                            "class": "inline",
                        },
                        self._csrf(session),
                        h("button", {"type": "submit"}, action.capitalize()),
                    ),
                ]
            )
        chooser = h(
            "p",
            {"class": "pager"},
            h("a", {"href": f"{p}/configs"}, "All"),
            h("a", {"href": href(f"{p}/configs", {"enabled": "yes"})}, "Enabled"),
            h("a", {"href": href(f"{p}/configs", {"enabled": "no"})}, "Disabled"),
        )
        pager: Markup | str = ""
        if len(found) > PAGE_SIZE:
            pager = h(
                "p",
                {"class": "pager"},
                h(
                    "a",
                    {
                        "href": href(
                            f"{p}/configs",
                            {"enabled": enabled_q, "after": found[PAGE_SIZE - 1].key},
                        ),
                        "rel": "next",
                    },
                    "Next page",
                ),
            )
        return self._ok(
            "Configs",
            session,
            chooser,
            table(
                ["Key", "Task", "Id", "Endpoint", "Version", "State", "Why", ""],
                rows,
                empty="No config matches.",
            ),
            pager,
        )

    async def set_config(self, request: web.Request, session: Session) -> web.StreamResponse:
        key, action = request.match_info["key"], request.match_info["action"]
        enabled = action == "enable"
        changed = await self.source.store.set_config_enabled(
            key, enabled, None if enabled else "disabled by an operator (console)"
        )
        if not changed:
            return self._message(
                404, "Not found", "No config has that key (it may have been deleted).", session
            )
        log.info("console: %sd config %s", action, key)
        if enabled and self.source.wake is not None:
            self.source.wake()
        raise web.HTTPSeeOther(href(f"{self.prefix}/configs", {"enabled": "" if enabled else "no"}))


# ---- helpers --------------------------------------------------------------------------


def _page_operation(summary: str, path: str) -> Operation:
    """A console page in the OpenAPI document: HTML for people, not an API."""
    params = tuple(
        Param(name, "path", f"the {name}") for name in ("id", "key", "action") if "{" + name in path
    )
    return Operation(
        f"console: {summary}",
        {
            200: Body(None, "an HTML page", media_types=("text/html",)),
            303: Body(None, "a redirect (to the sign-in form, or after an action)", media_types=()),
            400: Body(None, "a page saying what was wrong", media_types=("text/html",)),
            401: Body(None, "signed out: a page saying so", media_types=("text/html",)),
            403: Body(
                None, "no CSRF token, or another site: a page saying so", media_types=("text/html",)
            ),
            404: Body(
                None,
                "not found, or the console is off (a path no route matches: the server's "
                "own JSON error)",
                media_types=("text/html", "application/json"),
            ),
        },
        description="A page of the delivery console (docs/console.md); sign in with an admin key.",
        tags=("console",),
        params=params,
        security=(),
    )


def _same_origin(request: web.Request) -> bool:
    """False when the browser says the form came from another origin (Origin, or
    Referer when Origin is absent); True when neither is sent (the CSRF token and the
    SameSite cookie still hold)."""
    origin = request.headers.get("Origin") or request.headers.get("Referer")
    if not origin or origin == "null":
        return origin != "null"
    parts = urlsplit(origin)
    return parts.netloc == request.host


def _next_path(value: str | None, prefix: str) -> str:
    """Where to go after signing in: only a path under the console (never another site)."""
    if (
        value
        and value.startswith(prefix + "/")
        and not value.startswith("//")
        and "\\" not in value
    ):
        return value
    return prefix + "/"


def _time_input(name: str, value: str) -> float | None:
    if not value:
        return None
    for fmt in ("%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M", "%Y-%m-%d"):
        try:
            return float(calendar.timegm(time.strptime(value, fmt)))
        except ValueError:
            continue
    raise BadInput(f"{name}: {value!r} is not a time; use YYYY-MM-DDTHH:MM (UTC)")


def _after(after: str | None, since: float | None) -> str | None:
    """The keyset position to list from: the page's, or the first id made at ``since``
    (ids sort by creation: the primary key then finds the first page at once). A second
    early: an id is made just before its delivery's created_at is read."""
    if since is None:
        return after
    floor = delivery_id_floor(since - 1.0)
    return max(after, floor) if after is not None else floor


def _event_summary(event: OperationalEvent) -> str:
    """One line on what an event is about: its endpoint, config, task or key."""
    data = event.data
    parts = [
        f"{label} {data[name]}"
        for name, label in (
            ("endpoint", ""),
            ("configId", "config"),
            ("taskId", "task"),
            ("reason", "reason:"),
            ("lastError", "last:"),
            ("kid", "kid"),
            ("previousKid", "replacing"),
        )
        if data.get(name) not in (None, "")
    ]
    return ", ".join(part.strip() for part in parts)


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    if seconds < 172800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


def _ms(seconds: float | None) -> str:
    return "—" if seconds is None else f"{seconds * 1000:.0f} ms"


def _last(d: Delivery) -> str:
    if d.last_status is not None:
        shown = f"HTTP {d.last_status}"
        if d.last_error and not d.last_error.startswith(shown):
            return f"{shown}: {d.last_error}"
        return d.last_error or shown
    return d.last_error or ""


def _verdict(a: Any) -> str:
    if a.verdict == "retry" and a.retry_at is not None:
        return "retry at " + time.strftime("%H:%M:%SZ", time.gmtime(a.retry_at))
    return str(a.verdict)


def _headers_as_sent(d: Delivery, config: StoredConfig | None, signing: bool) -> dict[str, str]:
    """The headers of the delivery's webhook as the dispatcher builds them, with every
    credential, token, signature and JWT redacted (they are secrets, or change on every
    attempt)."""
    if config is None:
        return {"(config deleted)": "headers unknown"}
    headers = webhook_headers(d, config, None, now=int(d.updated_at))
    headers["webhook-timestamp"] = "(the time of each attempt)"
    if signing:
        headers[HEADER_SIGNATURE] = "[JWT, signed for each attempt]"
    if HEADER_AUTHORIZATION in headers:
        scheme = config.auth_scheme if config.auth_scheme and config.auth_credentials else "Bearer"
        headers[HEADER_AUTHORIZATION] = f"{scheme} {REDACTED}"
    elif signing:
        headers[HEADER_AUTHORIZATION] = f"Bearer {REDACTED}"
    for secret in (HEADER_NOTIFICATION_TOKEN, HEADER_WEBHOOK_SIGNATURE):
        if secret in headers:
            headers[secret] = REDACTED
    return headers


def _chart(series: list[dict[str, Any]]) -> Markup:
    """An SVG bar chart of delivered (up) and failed (down) attempts per minute;
    console.js redraws it from overview.json."""
    width, height, mid = 720, 160, 110
    top = max([s["delivered"] for s in series] + [1])
    bottom = max([s["failed"] for s in series] + [1])
    bar = width / max(len(series), 1)
    bars = []
    for i, s in enumerate(series):
        x = i * bar
        up = (mid - 10) * s["delivered"] / top
        down = (height - mid - 10) * s["failed"] / bottom
        label = time.strftime("%H:%M", time.gmtime(s["at"]))
        if up:
            bars.append(
                h(
                    "rect",
                    {
                        "class": "ok",
                        "x": f"{x:.1f}",
                        "y": f"{mid - up:.1f}",
                        "width": f"{bar * 0.8:.1f}",
                        "height": f"{up:.1f}",
                    },
                    h("title", None, f"{label}: {s['delivered']} delivered"),
                )
            )
        if down:
            bars.append(
                h(
                    "rect",
                    {
                        "class": "fail",
                        "x": f"{x:.1f}",
                        "y": f"{mid:.1f}",
                        "width": f"{bar * 0.8:.1f}",
                        "height": f"{down:.1f}",
                    },
                    h("title", None, f"{label}: {s['failed']} failed"),
                )
            )
    span = (
        time.strftime("%H:%M", time.gmtime(series[0]["at"]))
        + "-"
        + time.strftime("%H:%M", time.gmtime(series[-1]["at"] + 60))
        if series
        else ""
    )
    total_ok = sum(s["delivered"] for s in series)
    total_fail = sum(s["failed"] for s in series)
    return h(
        "figure",
        {"class": "chart"},
        h(
            "svg",
            {
                "id": "chart",
                "viewBox": f"0 0 {width} {height}",
                "preserveAspectRatio": "none",
                "role": "img",
                "aria-label": "attempts per minute",
            },
            h("line", {"x1": 0, "x2": width, "y1": mid, "y2": mid, "class": "axis"}),
            bars,
        ),
        h(
            "figcaption",
            None,
            h("span", {"class": "ok", "data-field": "delivered"}, f"{total_ok} delivered"),
            " · ",
            h("span", {"class": "fail", "data-field": "failed"}, f"{total_fail} failed attempts"),
            f" · peak {max([x['delivered'] for x in series] + [0])} delivered per minute",
            f" · {span} UTC" if span else "",
        ),
    )
