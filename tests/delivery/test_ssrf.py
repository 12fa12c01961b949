"""SSRF guard: URL syntax, address refusals, allowlists, and the vetting resolver."""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket

import pytest
from aiohttp.abc import AbstractResolver, ResolveResult
from yarl import URL

from a2a_push.delivery.ssrf import MAX_URL_LENGTH, AddressPolicy, VettedResolver
from a2a_push.errors import InvalidConfigError, UnsafeURLError


class FixedResolver(AbstractResolver):
    """A DNS test double: fixed answers per host name, and a record of the questions."""

    def __init__(self, answers: dict[str, list[str]]) -> None:
        self.answers = answers
        self.asked: list[str] = []
        self.closed = False

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        self.asked.append(host)
        if host not in self.answers:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return [
            {
                "hostname": host,
                "host": address,
                "port": port,
                "family": socket.AF_INET6 if ":" in address else socket.AF_INET,
                "proto": 0,
                "flags": socket.AI_NUMERICHOST,
            }
            for address in self.answers[host]
        ]

    async def close(self) -> None:
        self.closed = True


def ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    return ipaddress.ip_address(text)


# -- refusals without an allowlist ------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "category"),
    [
        ("http://127.0.0.1/", "loopback"),
        ("http://10.0.0.1/", "private"),
        ("http://169.254.169.254/latest", "cloud metadata"),
        ("http://[::ffff:127.0.0.1]/", "loopback"),
        ("http://[::1]/", "loopback"),
        ("http://0.0.0.0/", "unspecified"),
        ("http://100.64.0.1/", "CGNAT"),
        ("http://192.168.1.1/", "private"),
        ("http://172.16.5.4/", "private"),
        ("http://[fe80::1]/", "link-local"),
        ("http://169.254.1.1/", "link-local"),
        ("http://[fc00::1]/", "unique local"),
        ("http://224.0.0.1/", "multicast"),
        ("http://[ff02::1]/", "multicast"),
        ("http://255.255.255.255/", "broadcast"),
        ("http://240.0.0.1/", "reserved"),
        ("http://192.0.2.10/", "documentation"),
        ("http://[2001:db8::1]/", "documentation"),
        ("http://198.18.0.1/", "benchmarking"),
        ("http://[::]/", "unspecified"),
        ("http://[fd00:ec2::254]/", "cloud metadata"),
        ("http://100.100.100.200/", "cloud metadata"),
    ],
)
def test_refuses_non_public_ip_literals(url: str, category: str) -> None:
    with pytest.raises(UnsafeURLError) as caught:
        AddressPolicy().validate_url(url)
    assert caught.value.field == "url"
    assert category in caught.value.message
    assert "allowlist" in caught.value.message


@pytest.mark.parametrize(
    ("url", "reaches"),
    [
        ("http://[::ffff:10.0.0.1]/", "10.0.0.1"),  # IPv4-mapped
        ("http://[::ffff:0:10.0.0.1]/", "10.0.0.1"),  # IPv4-translated (SIIT)
        ("http://[::10.0.0.1]/", "10.0.0.1"),  # IPv4-compatible
        ("http://[2002:7f00:1::]/", "127.0.0.1"),  # 6to4
        ("http://[64:ff9b::a9fe:a9fe]/", "169.254.169.254"),  # NAT64
        # Teredo: client 10.0.0.1, stored bit-inverted in the last 32 bits.
        ("http://[2001:0:4136:e378:8000:63bf:f5ff:fffe]/", "10.0.0.1"),
    ],
)
def test_judges_ipv6_by_the_embedded_ipv4_address(url: str, reaches: str) -> None:
    with pytest.raises(UnsafeURLError, match=f"reaches IPv4 {reaches}"):
        AddressPolicy().validate_url(url)


@pytest.mark.parametrize(
    "url",
    [
        "http://2130706433/",
        "http://0x7f.1/",
        "http://0x7f000001/",
        "http://017700000001/",
        "http://127.1/",
        "http://127.000.000.001/",
        "http://127.0.0.1./",
        "http://1.2.3.4.5/",
        "http://134744072/",  # 8.8.8.8: numeric forms are refused even when public
        "http://-1.1/",  # a sign: once a crash (a negative address) instead of a refusal
        "http://+1.1/",
        "http://1_0.1/",
    ],
)
def test_refuses_non_dotted_quad_numeric_hosts(url: str) -> None:
    with pytest.raises(UnsafeURLError, match="not a dotted-quad IPv4 address"):
        AddressPolicy().validate_url(url)


def test_numeric_host_message_says_what_resolvers_would_dial() -> None:
    with pytest.raises(UnsafeURLError, match=r"read it as 127\.0\.0\.1"):
        AddressPolicy().validate_url("http://2130706433/")


def test_refusal_message_suggests_allow_loopback_for_loopback() -> None:
    with pytest.raises(UnsafeURLError, match="allow_loopback=True"):
        AddressPolicy().validate_url("http://127.0.0.1:8080/hook")


def test_refusal_uses_the_given_field_name() -> None:
    with pytest.raises(UnsafeURLError) as caught:
        AddressPolicy().validate_url("http://10.0.0.1/", field="pushNotificationConfig.url")
    assert caught.value.field == "pushNotificationConfig.url"


# -- accepted -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "http://93.184.216.34/",
        "https://93.184.216.34:8443/hooks?x=1",
        "http://[2606:4700::1]/",
        "http://[2002:5db8:d822::]/",  # 6to4 of the public 93.184.216.34
        "https://example.com/webhook",
        "HTTPS://Hooks.Example.COM/a2a",
        "https://bücher.example/hook",
    ],
)
def test_accepts_public_addresses_and_host_names_without_dialling(url: str) -> None:
    assert isinstance(AddressPolicy().validate_url(url), URL)


def test_validate_url_returns_the_parsed_url() -> None:
    parsed = AddressPolicy().validate_url("https://example.com:8443/hook?a=1")
    assert (parsed.scheme, parsed.host, parsed.port, parsed.path) == (
        "https",
        "example.com",
        8443,
        "/hook",
    )


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1/",
        "http://127.8.9.10:9000/",
        "http://[::1]/",
        "http://[::ffff:127.0.0.1]/",
    ],
)
def test_allow_loopback_admits_loopback(url: str) -> None:
    AddressPolicy(allow_loopback=True).validate_url(url)


@pytest.mark.parametrize(
    "url", ["http://10.0.0.1/", "http://169.254.169.254/", "http://[fe80::1]/"]
)
def test_allow_loopback_admits_nothing_else(url: str) -> None:
    with pytest.raises(UnsafeURLError):
        AddressPolicy(allow_loopback=True).validate_url(url)


def test_allowlisted_cidr_admits_addresses_inside_it() -> None:
    policy = AddressPolicy(["10.0.0.0/8"])
    policy.validate_url("http://10.0.0.1/")
    assert policy.is_ip_allowed(ip("10.255.0.9"))
    assert policy.is_ip_allowed(ip("::ffff:10.0.0.1"))
    assert not policy.is_ip_allowed(ip("192.168.1.1"))
    assert not policy.is_ip_allowed(ip("127.0.0.1"))


def test_allowlisted_ipv6_cidr_admits_addresses_inside_it() -> None:
    policy = AddressPolicy(["fd00::/8"])
    assert policy.is_ip_allowed(ip("fd12:3456::1"))
    assert not policy.is_ip_allowed(ip("fc00::1"))


def test_allowlisted_single_ip_admits_only_that_address() -> None:
    policy = AddressPolicy(["192.168.1.5"])
    assert policy.is_ip_allowed(ip("192.168.1.5"))
    assert not policy.is_ip_allowed(ip("192.168.1.6"))


def test_metadata_addresses_need_an_exact_allowlist_entry() -> None:
    broad = AddressPolicy(["169.254.0.0/16", "fd00::/8", "100.64.0.0/10", "*.internal"])
    assert broad.is_ip_allowed(ip("169.254.1.1"))
    for address in ("169.254.169.254", "fd00:ec2::254", "100.100.100.200"):
        assert not broad.is_ip_allowed(ip(address), host="metadata.google.internal")
    assert AddressPolicy(["169.254.169.254"]).is_ip_allowed(ip("169.254.169.254"))


def test_allowlisted_host_name_admits_what_it_resolves_to() -> None:
    policy = AddressPolicy(["Hooks.Internal"])
    assert policy.is_ip_allowed(ip("10.1.2.3"), host="hooks.internal")
    assert policy.is_ip_allowed(ip("10.1.2.3"), host="HOOKS.internal.")
    assert not policy.is_ip_allowed(ip("10.1.2.3"), host="other.internal")
    assert not policy.is_ip_allowed(ip("10.1.2.3"))


def test_allowlisted_international_names_are_encoded_as_url_hosts_are() -> None:
    # Python's "idna" codec (IDNA 2003) turned "faß.de" into another domain, fass.de.
    policy = AddressPolicy(["faß.de", "*.ς.example"])
    assert policy.is_ip_allowed(ip("10.1.2.3"), host=URL("http://faß.de/").raw_host)
    assert not policy.is_ip_allowed(ip("10.1.2.3"), host="fass.de")
    assert policy.is_ip_allowed(ip("10.1.2.3"), host=URL("http://a.ς.example/").raw_host)
    assert not policy.is_ip_allowed(ip("10.1.2.3"), host="a.xn--4xa.example")  # plain sigma


def test_wildcard_host_entry_matches_subdomains_only() -> None:
    policy = AddressPolicy(["*.corp.example"])
    assert policy.is_ip_allowed(ip("10.0.0.1"), host="a.corp.example")
    assert policy.is_ip_allowed(ip("10.0.0.1"), host="a.b.corp.example")
    assert not policy.is_ip_allowed(ip("10.0.0.1"), host="corp.example")
    assert not policy.is_ip_allowed(ip("10.0.0.1"), host="evilcorp.example")


def test_public_addresses_are_allowed_without_an_allowlist() -> None:
    policy = AddressPolicy()
    assert policy.is_ip_allowed(ip("93.184.216.34"))
    assert policy.is_ip_allowed(ip("2606:4700::1"))


@pytest.mark.parametrize(
    "entry", ["10.0.0.1/8", "300.1.2.3", "10.0.0.0/33", "not a host", "", "1.2.3", "*."]
)
def test_invalid_allowlist_entry_raises_value_error_naming_it(entry: str) -> None:
    with pytest.raises(ValueError, match=re.escape(f"allowlist entry {entry!r}")):
        AddressPolicy([entry])


def test_allowlist_given_as_a_single_string_is_rejected() -> None:
    with pytest.raises(ValueError, match="not the single string"):
        AddressPolicy("10.0.0.0/8")


# -- syntax errors ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("ftp://x", "only http and https"),
        ("file:///etc/passwd", "only http and https"),
        ("javascript:alert(1)", "only http and https"),
        ("example.com/hook", "no scheme"),
        ("127.0.0.1:8080/hook", "no scheme; write the whole URL"),
        ("localhost:8080/hook", "no scheme"),
        ("example.com:443/hook", "no scheme"),
        ("mailto:ops@example.com", "has scheme 'mailto'"),
        ("http://user:pw@example.com/", "user-info"),
        ("http://@example.com/", "user-info"),
        ("http://example.com/\r\nX-Injected: 1", "control characters"),
        ("http://example.com/a\nb", "control characters"),
        ("http://exa mple.com/", "whitespace"),
        ("http://example.com/\x00", "control characters"),
        ("http:///path", "no host"),
        ("http://", "no host"),
        ("http://[v1.x]/", "not a valid IPv6 address"),
        ("http://exa%6Dple.com/", "not a valid host name"),
        ("http://example.com:99999/", "not a valid URL"),
        ("http://example.com:0/", "port 0"),
        # yarl raises IndexError on these (once a crash: -32603 / HTTP 500 on registration)
        ("http://[]@/", "host part cannot be parsed"),
        ("http://[@]0@", "host part cannot be parsed"),
        ("http://example.com/" + "a" * MAX_URL_LENGTH, "the limit is 2048"),
        ("", "must not be empty"),
    ],
)
def test_syntax_errors_raise_invalid_config_error_for_the_url_field(url: str, says: str) -> None:
    with pytest.raises(InvalidConfigError) as caught:
        AddressPolicy().validate_url(url)
    assert type(caught.value) is InvalidConfigError
    assert caught.value.field == "url"
    assert says in caught.value.message


def test_url_of_exactly_the_maximum_length_is_accepted() -> None:
    prefix = "https://example.com/"
    AddressPolicy().validate_url(prefix + "a" * (MAX_URL_LENGTH - len(prefix)))


# -- check_url (registration time, resolves names) -------------------------------------


class SilentResolver(FixedResolver):
    """A name server that never answers."""

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        await asyncio.sleep(3600)
        raise AssertionError("unreachable")


async def test_check_url_gives_up_on_a_name_server_that_does_not_answer() -> None:
    with pytest.raises(InvalidConfigError, match=r"could not be resolved within 0.2 s"):
        await AddressPolicy().check_url(
            "http://slow.example/hook", resolver=SilentResolver({}), timeout=0.2
        )


async def test_check_url_refuses_a_name_resolving_to_loopback() -> None:
    with pytest.raises(UnsafeURLError) as caught:
        await AddressPolicy().check_url("http://localhost/hook")
    assert "localhost" in caught.value.message
    assert "loopback" in caught.value.message
    assert caught.value.field == "url"


async def test_check_url_admits_localhost_with_allow_loopback() -> None:
    await AddressPolicy(allow_loopback=True).check_url("http://localhost/hook")


async def test_check_url_refuses_if_any_resolved_address_is_refused() -> None:
    dns = FixedResolver({"mixed.test": ["93.184.216.34", "10.0.0.7"]})
    with pytest.raises(UnsafeURLError, match=r"resolves to 10\.0\.0\.7, a private address"):
        await AddressPolicy().check_url("https://mixed.test/hook", resolver=dns)


async def test_check_url_accepts_a_name_resolving_only_to_public_addresses() -> None:
    dns = FixedResolver({"hooks.test": ["93.184.216.34", "2606:4700::1"]})
    await AddressPolicy().check_url("https://hooks.test/hook", resolver=dns)
    assert dns.asked == ["hooks.test"]
    assert not dns.closed  # a resolver the caller passed in stays the caller's


async def test_check_url_admits_an_allowlisted_name_resolving_to_private_addresses() -> None:
    dns = FixedResolver({"hooks.internal": ["10.1.2.3"]})
    await AddressPolicy(["hooks.internal"]).check_url("http://hooks.internal/", resolver=dns)


async def test_check_url_reports_an_unresolvable_name_as_invalid_config() -> None:
    dns = FixedResolver({})
    with pytest.raises(InvalidConfigError, match="could not be resolved") as caught:
        await AddressPolicy().check_url("https://nowhere.test/", field="u", resolver=dns)
    assert type(caught.value) is InvalidConfigError
    assert caught.value.field == "u"


async def test_check_url_checks_ip_literals_without_resolving() -> None:
    dns = FixedResolver({})
    await AddressPolicy().check_url("http://93.184.216.34/", resolver=dns)
    with pytest.raises(UnsafeURLError):
        await AddressPolicy().check_url("http://[::1]/", resolver=dns)
    assert dns.asked == []


async def test_check_url_applies_syntax_checks_first() -> None:
    with pytest.raises(InvalidConfigError, match="only http and https"):
        await AddressPolicy().check_url("ftp://example.com/")


# -- VettedResolver (connect time) -----------------------------------------------------


async def test_resolver_refuses_a_name_that_resolves_only_to_loopback() -> None:
    resolver = VettedResolver(AddressPolicy(), FixedResolver({"rebind.test": ["127.0.0.1"]}))
    with pytest.raises(UnsafeURLError, match=r"'rebind\.test' resolves to 127\.0\.0\.1"):
        await resolver.resolve("rebind.test", 443)


async def test_resolver_returns_only_admitted_addresses() -> None:
    dns = FixedResolver(
        {"mixed.test": ["10.0.0.1", "93.184.216.34", "169.254.169.254", "2606:4700::1", "::1"]}
    )
    answers = await VettedResolver(AddressPolicy(), dns).resolve("mixed.test", 443)
    assert [a["host"] for a in answers] == ["93.184.216.34", "2606:4700::1"]
    assert all(a["port"] == 443 for a in answers)


async def test_resolver_returns_loopback_when_allowed() -> None:
    dns = FixedResolver({"rebind.test": ["127.0.0.1"]})
    answers = await VettedResolver(AddressPolicy(allow_loopback=True), dns).resolve("rebind.test")
    assert [a["host"] for a in answers] == ["127.0.0.1"]


async def test_resolver_admits_private_answers_for_an_allowlisted_name() -> None:
    dns = FixedResolver({"hooks.internal": ["10.1.2.3"]})
    answers = await VettedResolver(AddressPolicy(["hooks.internal"]), dns).resolve("hooks.internal")
    assert [a["host"] for a in answers] == ["10.1.2.3"]


async def test_resolver_checks_ip_literals_without_asking_dns() -> None:
    dns = FixedResolver({})
    resolver = VettedResolver(AddressPolicy(), dns)
    answers = await resolver.resolve("93.184.216.34", 80)
    assert answers[0]["host"] == "93.184.216.34"
    assert answers[0]["family"] == socket.AF_INET
    with pytest.raises(UnsafeURLError):
        await resolver.resolve("::ffff:127.0.0.1", 80)
    assert dns.asked == []


async def test_resolver_refuses_numeric_hosts_that_getaddrinfo_would_accept() -> None:
    dns = FixedResolver({})
    with pytest.raises(UnsafeURLError, match="dotted-quad"):
        await VettedResolver(AddressPolicy(), dns).resolve("2130706433", 80)
    assert dns.asked == []


async def test_resolver_reports_an_empty_answer_as_a_dns_failure() -> None:
    resolver = VettedResolver(AddressPolicy(), FixedResolver({"empty.test": []}))
    with pytest.raises(OSError, match="did not resolve") as caught:
        await resolver.resolve("empty.test")
    assert not isinstance(caught.value, UnsafeURLError)


async def test_resolver_uses_the_system_resolver_by_default() -> None:
    resolver = VettedResolver(AddressPolicy(allow_loopback=True))
    try:
        answers = await resolver.resolve("localhost", 80, family=socket.AF_INET)
    finally:
        await resolver.close()
    assert [a["host"] for a in answers] == ["127.0.0.1"]


async def test_resolver_close_closes_the_inner_resolver() -> None:
    dns = FixedResolver({})
    await VettedResolver(AddressPolicy(), dns).close()
    assert dns.closed
