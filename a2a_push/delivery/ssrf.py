"""SSRF guard: which webhook URLs and addresses we are willing to dial.

Two layers share one :class:`AddressPolicy`:

* registration time: :meth:`AddressPolicy.validate_url` (syntax and IP literals) and
  :meth:`AddressPolicy.check_url` (also resolves the host name);
* connect time: :class:`VettedResolver`, handed to aiohttp's connector, returns only
  admitted addresses, so the connector can only ever dial an address that was vetted
  (a DNS answer that changes between registration and delivery gains nothing).
"""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import re
import socket
from collections.abc import Iterable
from typing import Final, NamedTuple, TypeAlias

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from yarl import URL

from a2a_push.errors import InvalidConfigError, UnsafeURLError

__all__ = ["MAX_URL_LENGTH", "AddressPolicy", "VettedResolver"]

IPAddress: TypeAlias = ipaddress.IPv4Address | ipaddress.IPv6Address

MAX_URL_LENGTH: Final = 2048

_ALLOWED_SCHEMES: Final = frozenset({"http", "https"})

# Header injection (CR/LF), request smuggling and parser differentials all start with a
# character that has no business in a webhook URL.
_FORBIDDEN_CHARS: Final = re.compile(r"[\s\x00-\x1f\x7f-\x9f]")

# yarl drops an empty user-info ("http://@host/") and the brackets of "[v1.x]", so the
# raw authority is inspected as written.
_AUTHORITY: Final = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://([^/?#]*)")

_LABEL: Final = r"[A-Za-z0-9_](?:[A-Za-z0-9_\-]{0,61}[A-Za-z0-9_])?"
_HOSTNAME: Final = re.compile(rf"(?:{_LABEL}\.)*{_LABEL}\.?")
_HEX_LABEL: Final = re.compile(r"0[xX][0-9A-Fa-f]*")
_OCTAL_DIGITS: Final = frozenset("01234567")

_LOOPBACK: Final = "loopback"
_METADATA: Final = "cloud metadata"

_V4 = ipaddress.IPv4Network
_V6 = ipaddress.IPv6Network

# Addresses that cloud platforms answer with instance credentials. They sit inside
# ranges a user may legitimately allowlist (fd00::/8, 100.64.0.0/10, a VPC CIDR), so
# only an allowlist entry naming the exact address admits them.
_METADATA_ADDRESSES: Final[frozenset[IPAddress]] = frozenset(
    ipaddress.ip_address(a)
    for a in (
        "169.254.169.254",  # AWS, GCP, Azure, OCI, DigitalOcean, OpenStack
        "169.254.170.2",  # AWS ECS task metadata
        "169.254.170.23",  # AWS EKS pod identity
        "fd00:ec2::254",  # AWS IMDS over IPv6
        "fd00:ec2::23",  # AWS EKS pod identity over IPv6
        "100.100.100.200",  # Alibaba Cloud
        "168.63.129.16",  # Azure WireServer (public-looking, reachable only in Azure)
    )
)

# Ordered most specific first; the first match names the refusal.
_REFUSED_V4: Final[tuple[tuple[ipaddress.IPv4Network, str], ...]] = (
    (_V4("255.255.255.255/32"), "broadcast"),
    (_V4("0.0.0.0/32"), "unspecified"),
    (_V4("0.0.0.0/8"), "'this network' (reserved)"),
    (_V4("10.0.0.0/8"), "private"),
    (_V4("100.64.0.0/10"), "shared (CGNAT)"),
    (_V4("127.0.0.0/8"), _LOOPBACK),
    (_V4("169.254.0.0/16"), "link-local"),
    (_V4("172.16.0.0/12"), "private"),
    (_V4("192.0.0.0/24"), "IETF protocol assignment (reserved)"),
    (_V4("192.0.2.0/24"), "documentation"),
    (_V4("192.88.99.0/24"), "6to4 relay anycast (reserved)"),
    (_V4("192.168.0.0/16"), "private"),
    (_V4("198.18.0.0/15"), "benchmarking"),
    (_V4("198.51.100.0/24"), "documentation"),
    (_V4("203.0.113.0/24"), "documentation"),
    (_V4("224.0.0.0/4"), "multicast"),
    (_V4("240.0.0.0/4"), "reserved"),
)

_REFUSED_V6: Final[tuple[tuple[ipaddress.IPv6Network, str], ...]] = (
    (_V6("::/128"), "unspecified"),
    (_V6("::1/128"), _LOOPBACK),
    (_V6("64:ff9b:1::/48"), "local-use NAT64"),
    (_V6("100::/64"), "discard-only (reserved)"),
    (_V6("2001:2::/48"), "benchmarking"),
    (_V6("2001:db8::/32"), "documentation"),
    (_V6("2001::/23"), "IETF protocol assignment (reserved)"),
    (_V6("3fff::/20"), "documentation"),
    (_V6("5f00::/16"), "SRv6 SID (reserved)"),
    (_V6("fc00::/7"), "private (unique local)"),
    (_V6("fe80::/10"), "link-local"),
    (_V6("fec0::/10"), "site-local (deprecated)"),
    (_V6("ff00::/8"), "multicast"),
)

# Only 2000::/3 is allocated for global unicast; anything else is reserved.
_GLOBAL_UNICAST_V6: Final = _V6("2000::/3")

# Prefixes whose low 32 bits are an IPv4 address the packet ends up at.
_IPV4_TRANSLATED: Final = _V6("::ffff:0:0:0/96")  # SIIT, RFC 2765
_NAT64: Final = _V6("64:ff9b::/96")  # RFC 6052
_IPV4_COMPATIBLE: Final = _V6("::/96")  # deprecated, RFC 4291


@functools.lru_cache(maxsize=4096)
def _classify(ip: IPAddress) -> str | None:
    """The refused category of a plain (non-embedding) address, or None if public."""
    if ip in _METADATA_ADDRESSES:
        return _METADATA
    if isinstance(ip, ipaddress.IPv4Address):
        for net4, label in _REFUSED_V4:
            if ip in net4:
                return label
        return None
    for net6, label in _REFUSED_V6:
        if ip in net6:
            return label
    if ip not in _GLOBAL_UNICAST_V6:
        return "reserved"
    return None


def _embedded_ipv4(ip: IPAddress) -> tuple[ipaddress.IPv4Address, ...]:
    """IPv4 addresses an IPv6 address really reaches (empty when it embeds none)."""
    if isinstance(ip, ipaddress.IPv4Address):
        return ()
    mapped = ip.ipv4_mapped
    if mapped is not None:
        return (mapped,)
    sixtofour = ip.sixtofour
    if sixtofour is not None:
        return (sixtofour,)
    teredo = ip.teredo
    if teredo is not None:
        return teredo  # (server, client): both must be acceptable
    low32 = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    if ip in _NAT64 or ip in _IPV4_TRANSLATED:
        return (low32,)
    if ip in _IPV4_COMPATIBLE and int(ip) > 1:  # :: and ::1 are themselves
        return (low32,)
    return ()


def _without_scope(ip: IPAddress) -> IPAddress:
    # A zone id ("fe80::1%eth0") changes equality and hashing but not where it goes.
    if isinstance(ip, ipaddress.IPv6Address) and ip.scope_id:
        return ipaddress.IPv6Address(int(ip))
    return ip


def _legacy_ipv4(host: str) -> ipaddress.IPv4Address | None:
    """Decode inet_aton-style numeric hosts (``2130706433``, ``0x7f.1``) for messages."""
    parts = host.rstrip(".").split(".")
    if not 1 <= len(parts) <= 4:
        return None
    numbers: list[int] = []
    for part in parts:
        # Only what inet_aton reads: digits, or 0x and hex digits (int() would also take
        # a sign, "_" and other digits).
        if _HEX_LABEL.fullmatch(part) is not None:
            numbers.append(int(part[2:] or "0", 16))
        elif not (part.isascii() and part.isdigit()):
            return None
        elif len(part) > 1 and part.startswith("0"):
            if not set(part) <= _OCTAL_DIGITS:
                return None
            numbers.append(int(part, 8))
        else:
            numbers.append(int(part, 10))
    *head, last = numbers
    if any(n > 255 for n in head) or last >= 256 ** (5 - len(numbers)):
        return None
    value = last
    for index, number in enumerate(head):
        value |= number << (8 * (3 - index))
    return ipaddress.IPv4Address(value)


def _looks_numeric(host: str) -> bool:
    # Resolvers treat a host whose last label is a number as an IPv4 address.
    last = host.rstrip(".").rpartition(".")[2]
    return (last.isascii() and last.isdigit()) or _HEX_LABEL.fullmatch(last) is not None


def _a(noun: str) -> str:
    return f"an {noun}" if noun[:1].lower() in "aeiou" else f"a {noun}"


class _Refusal(NamedTuple):
    address: str  # as shown in messages
    category: str  # "loopback", "private", ...


class AddressPolicy:
    """Which destination addresses webhooks may be sent to.

    Loopback, private, link-local, CGNAT, multicast, reserved, unspecified, broadcast,
    documentation and benchmarking addresses and cloud metadata endpoints are refused;
    IPv6 addresses that embed an IPv4 address are judged by the embedded address.

    ``allow`` admits exceptions: CIDRs (``10.0.0.0/8``), single IPs, or host names
    (exact and case-insensitive; ``*.example.com`` matches subdomains). A cloud metadata
    address is admitted only by an entry naming that exact address, never by a broader
    CIDR or a host name. ``allow_loopback`` admits 127.0.0.0/8 and ::1 (for local
    testing and demos). ``allowlist_name``: how refusals name the allowlist to the
    person who can extend it (a service names its setting and flag instead).
    """

    __slots__ = (
        "_allow_loopback",
        "_allowlist_name",
        "_entries",
        "_exact_hosts",
        "_exact_ips",
        "_networks",
        "_wildcard_suffixes",
    )

    def __init__(
        self,
        allow: Iterable[str] = (),
        *,
        allow_loopback: bool = False,
        allowlist_name: str | None = None,
    ) -> None:
        if isinstance(allow, str):
            raise ValueError(
                f"allow must be a list of entries, not the single string {allow!r}; "
                f"write allow=[{allow!r}]"
            )
        networks: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = []
        exact_ips: set[IPAddress] = set()
        exact_hosts: set[str] = set()
        suffixes: list[str] = []
        entries: list[str] = []
        for entry in allow:
            parsed = _parse_allow_entry(entry)
            entries.append(entry)
            if isinstance(parsed, ipaddress.IPv4Network | ipaddress.IPv6Network):
                networks.append(parsed)
                if parsed.num_addresses == 1:
                    exact_ips.add(parsed.network_address)
            elif parsed.startswith("*."):
                suffixes.append(parsed[1:])  # keep the dot: ".example.com"
            else:
                exact_hosts.add(parsed)
        self._allow_loopback = allow_loopback
        self._allowlist_name = allowlist_name
        self._entries = tuple(entries)
        self._networks = tuple(networks)
        self._exact_ips = frozenset(exact_ips)
        self._exact_hosts = frozenset(exact_hosts)
        self._wildcard_suffixes = tuple(suffixes)

    def __repr__(self) -> str:
        return (
            f"AddressPolicy(allow={list(self._entries)!r}, allow_loopback={self._allow_loopback})"
        )

    @property
    def allow_loopback(self) -> bool:
        """Whether loopback addresses (127.0.0.0/8, ::1) are admitted."""
        return self._allow_loopback

    @property
    def allow(self) -> tuple[str, ...]:
        """The allowlist entries as given."""
        return self._entries

    def is_ip_allowed(self, ip: IPAddress, host: str | None = None) -> bool:
        """Whether ``ip`` (reached through host name ``host``, if any) may be dialled."""
        return self._refusal(ip, host) is None

    def validate_url(self, url: str, field: str = "url") -> URL:
        """Check a webhook URL's syntax and, for IP-literal hosts, the address.

        Raises :class:`InvalidConfigError` for syntax problems and
        :class:`UnsafeURLError` for refused addresses. Host names are not resolved
        here (see :meth:`check_url`).
        """
        parsed, literal = self._parse_url(url, field)
        if literal is not None:
            reason = self._refusal(literal, None)
            if reason is not None:
                raise UnsafeURLError(self._refusal_message(reason), field)
        return parsed

    async def check_url(
        self,
        url: str,
        field: str = "url",
        resolver: AbstractResolver | None = None,
        *,
        timeout: float = 5.0,
    ) -> None:
        """Registration-time check: :meth:`validate_url`, then resolve the host name.

        Refuses the URL if ANY address the name resolves to is refused, or if the name
        does not resolve (within ``timeout`` seconds: a registration never waits on a
        slow name server for longer). Uses ``resolver`` if given, else a threaded system
        resolver.
        """
        parsed, literal = self._parse_url(url, field)
        host = parsed.raw_host or ""
        if literal is not None:
            reason = self._refusal(literal, None)
            if reason is not None:
                raise UnsafeURLError(self._refusal_message(reason), field)
            return
        owned = resolver is None
        active = aiohttp.ThreadedResolver() if resolver is None else resolver
        try:
            async with asyncio.timeout(timeout):
                answers = await active.resolve(host, 0, family=socket.AF_UNSPEC)
        except TimeoutError:
            raise InvalidConfigError(
                field, f"host {host!r} could not be resolved within {timeout:g} s"
            ) from None
        except UnsafeURLError as exc:
            raise UnsafeURLError(exc.message, field) from None
        except OSError as exc:
            detail = exc.strerror or str(exc) or type(exc).__name__
            raise InvalidConfigError(
                field, f"host {host!r} could not be resolved ({detail})"
            ) from None
        finally:
            if owned:
                await active.close()
        if not answers:
            raise InvalidConfigError(field, f"host {host!r} did not resolve to any address")
        for answer in answers:
            reason = self._refusal_of_answer(answer["host"], host)
            if reason is not None:
                raise UnsafeURLError(self._refusal_message(reason, host), field)

    # -- internals -------------------------------------------------------------------

    def _parse_url(self, url: str, field: str) -> tuple[URL, IPAddress | None]:
        if not isinstance(url, str):
            raise InvalidConfigError(field, f"must be a string, not {type(url).__name__}")
        if not url:
            raise InvalidConfigError(field, "must not be empty")
        if len(url) > MAX_URL_LENGTH:
            raise InvalidConfigError(
                field, f"is {len(url)} characters long; the limit is {MAX_URL_LENGTH}"
            )
        bad = _FORBIDDEN_CHARS.search(url)
        if bad is not None:
            raise InvalidConfigError(
                field,
                "must not contain whitespace or control characters "
                f"(found {bad.group()!r} at position {bad.start()}); percent-encode it",
            )
        try:
            parsed = URL(url)
            raw_host = parsed.raw_host
        except ValueError as exc:
            raise InvalidConfigError(field, f"is not a valid URL: {exc}") from None
        except (IndexError, TypeError):
            # yarl fails so on some malformed authorities, e.g. "http://[]@/".
            raise InvalidConfigError(
                field, "is not a valid URL: its host part cannot be parsed"
            ) from None
        scheme = parsed.scheme
        if scheme not in _ALLOWED_SCHEMES:
            if not scheme or ("://" not in url and ("." in scheme or scheme == "localhost")):
                # "127.0.0.1:8080/hook" parses as scheme "127.0.0.1": say what is missing.
                raise InvalidConfigError(
                    field,
                    "has no scheme; write the whole URL, e.g. https://example.com/hook",
                )
            raise InvalidConfigError(
                field, f"has scheme {scheme!r}; only http and https are allowed"
            )
        match = _AUTHORITY.match(url)
        authority = match.group(1) if match is not None else ""
        if "@" in authority:
            raise InvalidConfigError(
                field,
                "must not contain user-info ('user:password@'); "
                "put credentials in the config's authentication or token instead",
            )
        if parsed.explicit_port == 0:
            raise InvalidConfigError(field, "has port 0, which cannot be dialled")
        if not raw_host:
            raise InvalidConfigError(field, "has no host; expected e.g. https://example.com/hook")
        return parsed, self._literal_ip(parsed, raw_host, authority, field)

    @staticmethod
    def _literal_ip(parsed: URL, raw_host: str, authority: str, field: str) -> IPAddress | None:
        if ":" in raw_host:
            try:
                return _without_scope(ipaddress.IPv6Address(parsed.host or raw_host))
            except ValueError:
                raise InvalidConfigError(
                    field, f"host [{raw_host}] is not a valid IPv6 address"
                ) from None
        if "[" in authority:
            raise InvalidConfigError(field, f"host [{raw_host}] is not a valid IPv6 address")
        if _looks_numeric(raw_host):
            try:
                return ipaddress.IPv4Address(raw_host)
            except ValueError:
                pass
            decoded = _legacy_ipv4(raw_host)
            means = f" (some resolvers read it as {decoded})" if decoded is not None else ""
            raise UnsafeURLError(
                f"host {raw_host!r} is not a dotted-quad IPv4 address{means}; "
                "write the address as four decimal numbers, e.g. 203.0.113.7",
                field,
            )
        if _HOSTNAME.fullmatch(raw_host) is None:
            raise InvalidConfigError(field, f"host {raw_host!r} is not a valid host name")
        return None

    def _host_allowed(self, host: str) -> bool:
        name = host.rstrip(".").lower()
        return name in self._exact_hosts or name.endswith(self._wildcard_suffixes)

    def _refusal(self, ip: IPAddress, host: str | None) -> _Refusal | None:
        """Why ``ip`` is refused, or None if it is admitted."""
        ip = _without_scope(ip)
        embedded = _embedded_ipv4(ip)
        for subject in embedded or (ip,):
            category = _classify(subject)
            if category is None or self._admits(subject, ip, category, host):
                continue
            shown = str(ip) if subject == ip else f"{ip} (which reaches IPv4 {subject})"
            return _Refusal(shown, category)
        return None

    def _admits(self, subject: IPAddress, ip: IPAddress, category: str, host: str | None) -> bool:
        if category == _METADATA:
            return subject in self._exact_ips or ip in self._exact_ips
        if category == _LOOPBACK and self._allow_loopback:
            return True
        if host is not None and self._host_allowed(host):
            return True
        return any(subject in net or ip in net for net in self._networks)

    def _refusal_of_answer(self, address: str, host: str) -> _Refusal | None:
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            return _Refusal(repr(address), "malformed")
        return self._refusal(ip, host)

    def _refusal_message(self, refusal: _Refusal, host: str | None = None) -> str:
        if host is None:
            subject = f"{refusal.address} is {_a(refusal.category)} address"
        else:
            subject = f"host {host!r} resolves to {refusal.address}, {_a(refusal.category)} address"
        allowlist = self._allowlist_name or "the SSRF allowlist (AddressPolicy(allow=[...]))"
        if refusal.category == _METADATA:
            hint = f"add that exact address to {allowlist}"
        else:
            hint = f"add the address, a CIDR covering it, or the host name to {allowlist}"
            if (
                refusal.category == _LOOPBACK
                and not self._allow_loopback
                and self._allowlist_name is None
            ):
                hint += ", or enable loopback (allow_loopback=True) for local testing"
        return f"{subject}, which the SSRF policy refuses; to allow it, {hint}"


def _parse_allow_entry(entry: object) -> ipaddress.IPv4Network | ipaddress.IPv6Network | str:
    if not isinstance(entry, str):
        raise ValueError(f"allowlist entry {entry!r} must be a string")
    text = entry.strip()
    if not text:
        raise ValueError(f"allowlist entry {entry!r} is empty")
    if "/" in text:
        try:
            return ipaddress.ip_network(text, strict=True)
        except ValueError as exc:
            raise ValueError(f"allowlist entry {entry!r} is not a valid CIDR: {exc}") from None
    bare = text[1:-1] if text.startswith("[") and text.endswith("]") else text
    try:
        ip = _without_scope(ipaddress.ip_address(bare))
    except ValueError:
        pass
    else:
        return ipaddress.ip_network(ip)
    wildcard = text.startswith("*.")
    name = (text[2:] if wildcard else text).rstrip(".").lower()
    try:
        # Encoded as URL hosts are (yarl: IDNA 2008 / UTS 46), so that an entry matches the
        # hosts it names: Python's "idna" codec (IDNA 2003) maps "faß.de" to another
        # domain, "fass.de".
        name = URL.build(scheme="http", host=name).raw_host or ""
    except (ValueError, UnicodeError):
        raise ValueError(f"allowlist entry {entry!r} is not a valid host name") from None
    if _HOSTNAME.fullmatch(name) is None or _looks_numeric(name):
        raise ValueError(
            f"allowlist entry {entry!r} is not a CIDR, an IP address or a host name "
            "(examples: 10.0.0.0/8, 192.168.1.5, hooks.internal, *.example.com)"
        )
    return f"*.{name}" if wildcard else name


def _address_family(ip: IPAddress) -> int:
    return socket.AF_INET if ip.version == 4 else socket.AF_INET6


class VettedResolver(AbstractResolver):
    """An aiohttp resolver that returns only addresses the policy admits.

    Handed to ``aiohttp.TCPConnector(resolver=...)``: the connector dials exactly the
    addresses returned here, so no unvetted address is ever dialled. Raises
    :class:`UnsafeURLError` when no resolved address is admitted.
    """

    def __init__(self, policy: AddressPolicy, inner: AbstractResolver | None = None) -> None:
        self._policy = policy
        # ThreadedResolver needs a running loop, so the default is built on first use.
        self._inner = inner

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        """Resolve ``host`` and return only the admitted addresses."""
        literal = self._literal(host)
        if literal is not None:
            reason = self._policy._refusal(literal, None)
            if reason is not None:
                raise UnsafeURLError(self._policy._refusal_message(reason))
            return [
                {
                    "hostname": host,
                    "host": str(literal),
                    "port": port,
                    "family": _address_family(literal),
                    "proto": 0,
                    "flags": socket.AI_NUMERICHOST | socket.AI_NUMERICSERV,
                }
            ]
        inner = self._inner
        if inner is None:
            inner = self._inner = aiohttp.ThreadedResolver()
        answers = await inner.resolve(host, port, family)
        admitted: list[ResolveResult] = []
        first_refusal: _Refusal | None = None
        for answer in answers:
            reason = self._policy._refusal_of_answer(answer["host"], host)
            if reason is None:
                admitted.append(answer)
            elif first_refusal is None:
                first_refusal = reason
        if admitted:
            return admitted
        if first_refusal is None:
            # An empty answer is a DNS failure (retryable), not a policy refusal.
            raise OSError(f"host {host!r} did not resolve to any address")
        raise UnsafeURLError(self._policy._refusal_message(first_refusal, host))

    async def close(self) -> None:
        """Close the inner resolver."""
        if self._inner is not None:
            await self._inner.close()

    @staticmethod
    def _literal(host: str) -> IPAddress | None:
        if ":" in host:
            try:
                return _without_scope(ipaddress.IPv6Address(host))
            except ValueError:
                raise UnsafeURLError(f"host {host!r} is not a valid IPv6 address") from None
        if _looks_numeric(host):
            try:
                return ipaddress.IPv4Address(host)
            except ValueError:
                # getaddrinfo would read "2130706433" as 127.0.0.1: refuse outright.
                raise UnsafeURLError(
                    f"host {host!r} is not a dotted-quad IPv4 address; refusing to resolve it"
                ) from None
        return None
