"""Where a fetch may go: checking a URL, and the addresses its host resolves to.

``address_problem`` is the address rule: cloud metadata, unspecified, multicast, link-local and
reserved addresses are always refused; loopback and other non-global (private) addresses unless
the policy allows private networks. ``resolve`` applies it to every address a host resolves to,
so one bad record among good ones is enough to refuse the host.
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlsplit

from ..errors import ImageLoadError
from .policy import ImagePolicy

__all__ = ["METADATA_ADDRESSES", "Target", "address_problem", "parse_target", "resolve", "shown"]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
SockAddr = tuple[Any, ...]

METADATA_ADDRESSES: frozenset[IPAddress] = frozenset(
    ipaddress.ip_address(a) for a in ("169.254.169.254", "fd00:ec2::254", "100.100.100.200")
)
"""Cloud instance-metadata endpoints (AWS, AWS over IPv6, Alibaba): refused under any policy."""

_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_URL_SAFE = "/%!$&'()*+,;=:@?"


@dataclass(frozen=True)
class Target:
    """One hop's URL, checked and taken apart."""

    url: str
    tls: bool
    host: str  # ASCII (IDNA) name or IP literal, without brackets
    port: int
    path: str  # request target: path and query, percent-encoded


def shown(url: str) -> str:
    return url if len(url) <= 200 else url[:200] + "..."


def address_problem(ip: IPAddress, *, allow_private: bool) -> str | None:
    """Why connecting to ``ip`` is refused, or ``None`` when it is allowed.

    IPv4 addresses wrapped in IPv6 (mapped, NAT64, 6to4) are judged by the IPv4 address too.
    ``allow_private`` admits loopback and other non-global addresses, never the rest.
    """
    candidates: list[IPAddress] = [ip]
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            candidates = [ip.ipv4_mapped]
        elif ip in _NAT64:
            candidates = [ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)]
        elif ip.sixtofour is not None:
            candidates.append(ip.sixtofour)
    for candidate in candidates:
        if candidate in METADATA_ADDRESSES:
            return f"{candidate} is a cloud metadata address"
        if candidate.is_unspecified:
            return f"{candidate} is an unspecified address"
        if candidate.is_multicast:
            return f"{candidate} is a multicast address"
        if candidate.is_link_local:
            return f"{candidate} is a link-local address"
        if candidate.is_loopback:
            if allow_private:
                continue
            return f"{candidate} is a loopback address"
        if candidate.is_reserved:
            return f"{candidate} is a reserved address"
        if not candidate.is_global and not allow_private:
            return f"{candidate} is a private (non-global) address"
    return None


def parse_target(url: str) -> Target:
    """Check one hop's URL: http(s), a host, no credentials, nothing that is not printable."""
    if any(ord(c) <= 0x20 or ord(c) == 0x7F for c in url):
        raise ImageLoadError(
            f"URL {shown(url)!r} contains spaces or control characters", reason="bad-url"
        )
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise ImageLoadError(f"malformed URL {shown(url)!r}: {exc}", reason="bad-url") from exc
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        raise ImageLoadError(
            f"URL {shown(url)!r}: the {scheme or 'empty'!r} scheme is not fetched "
            "(only http and https)",
            reason="scheme-refused",
        )
    if parts.username is not None or parts.password is not None:
        raise ImageLoadError(f"URL {shown(url)!r} carries credentials", reason="bad-url")
    host = parts.hostname
    if not host:
        raise ImageLoadError(f"URL {shown(url)!r} has no host", reason="bad-url")
    if not host.isascii():
        try:
            host = host.encode("idna").decode("ascii")
        except UnicodeError as exc:
            raise ImageLoadError(f"URL {shown(url)!r}: bad host name", reason="bad-url") from exc
    tls = scheme == "https"
    path = quote(parts.path or "/", safe=_URL_SAFE)
    if parts.query:
        path += "?" + quote(parts.query, safe=_URL_SAFE)
    return Target(url, tls, host, (443 if tls else 80) if port is None else port, path)


def resolve(target: Target, policy: ImagePolicy) -> list[tuple[int, SockAddr]]:
    """Every address ``target.host`` resolves to; refused unless all of them are allowed."""
    try:
        infos = socket.getaddrinfo(target.host, target.port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        raise ImageLoadError(
            f"cannot resolve {target.host!r}: {exc}", reason="fetch-failed"
        ) from exc
    addresses: list[tuple[int, SockAddr]] = []
    for family, _kind, _proto, _name, sockaddr in infos:
        if family not in (socket.AF_INET, socket.AF_INET6):
            continue
        ip = ipaddress.ip_address(str(sockaddr[0]).split("%", 1)[0])
        problem = address_problem(ip, allow_private=policy.allow_private_networks)
        if problem is not None:
            raise ImageLoadError(f"host {target.host!r}: {problem}", reason="private-address")
        entry = (int(family), tuple(sockaddr))
        if entry not in addresses:
            addresses.append(entry)
    if not addresses:
        raise ImageLoadError(f"{target.host!r} has no IP address", reason="fetch-failed")
    return addresses
