"""Unit tests for llamacpp_integrations.multimodal: every image source, and every refusal.

Pure Python: images are made with Pillow in memory, remote cases go to a threaded
``http.server`` on 127.0.0.1, and name resolution is faked with a patched ``getaddrinfo``.
"""

from __future__ import annotations

import base64
import io
import os
import socket
import ssl
import struct
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, cast

import pytest
from PIL import Image

from llamacpp_integrations.errors import ImageLoadError, InvalidRequestError
from llamacpp_integrations.multimodal import (
    ImagePolicy,
    LoadedImage,
    aload_image,
    load_image,
)
from llamacpp_integrations.multimodal import fetch as fetch_mod
from llamacpp_integrations.multimodal.targets import address_problem

# --------------------------------------------------------------------------- images


def _encode(image: Image.Image, fmt: str = "PNG", **params: Any) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format=fmt, **params)
    return buffer.getvalue()


def _reference() -> Image.Image:
    """7x5, every pixel different, so a transposed or shifted result cannot pass."""
    image = Image.new("RGB", (7, 5))
    for x in range(7):
        for y in range(5):
            image.putpixel((x, y), (x * 36, y * 60, 255 - x * 10 - y * 20))
    return image


REF = _reference()
REF_PNG = _encode(REF)
REF_B64 = base64.b64encode(REF_PNG).decode("ascii")


def _png_claiming(width: int, height: int) -> bytes:
    """A 1x1 PNG whose IHDR (CRC fixed up) claims ``width`` x ``height``."""
    png = bytearray(_encode(Image.new("RGB", (1, 1))))
    assert png[12:16] == b"IHDR"
    struct.pack_into(">II", png, 16, width, height)
    struct.pack_into(">I", png, 29, zlib.crc32(bytes(png[12:29])) & 0xFFFFFFFF)
    return bytes(png)


def _reason(source: Any, policy: ImagePolicy | None = None, **kwargs: Any) -> str:
    with pytest.raises(ImageLoadError) as info:
        load_image(source, policy or ImagePolicy(), **kwargs)
    return info.value.reason


def _pixel(loaded: LoadedImage, x: int, y: int) -> tuple[int, int, int]:
    offset = (y * loaded.width + x) * 3
    r, g, b = loaded.rgb[offset : offset + 3]
    return r, g, b


# --------------------------------------------------------------------------- a local server


@dataclass
class Server:
    port: int
    requests: list[tuple[str, str | None]] = field(default_factory=list)

    def url(self, path: str, host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}{path}"


Route = Callable[[BaseHTTPRequestHandler, int], None]


def _send(
    h: BaseHTTPRequestHandler,
    body: bytes,
    content_type: str | None = "image/png",
    *,
    length: int | None = -1,
    status: int = 200,
    extra: dict[str, str] | None = None,
) -> None:
    h.send_response(status)
    if content_type is not None:
        h.send_header("Content-Type", content_type)
    if length is not None:
        h.send_header("Content-Length", str(len(body) if length == -1 else length))
    for name, value in (extra or {}).items():
        h.send_header(name, value)
    h.end_headers()
    h.wfile.write(body)


def _redirect(location: str) -> Route:
    def route(h: BaseHTTPRequestHandler, port: int) -> None:
        _send(h, b"", None, status=302, extra={"Location": location.format(port=port)})

    return route


def _redirect_chain(h: BaseHTTPRequestHandler, port: int) -> None:
    left = int(h.path.rsplit("/", 1)[1])
    if left == 0:
        _send(h, REF_PNG)
    else:
        _send(h, b"", None, status=302, extra={"Location": f"/redirect/{left - 1}"})


def _chunked_lying(h: BaseHTTPRequestHandler, port: int) -> None:
    # Claims 100 bytes but is chunked (which wins), and goes on for 300 kB.
    h.send_response(200)
    h.send_header("Content-Type", "image/png")
    h.send_header("Content-Length", "100")
    h.send_header("Transfer-Encoding", "chunked")
    h.end_headers()
    for _ in range(30):
        chunk = b"\0" * 10_000
        h.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
    h.wfile.write(b"0\r\n\r\n")


def _slow(h: BaseHTTPRequestHandler, port: int) -> None:
    time.sleep(1.0)
    _send(h, REF_PNG)


def _drip(h: BaseHTTPRequestHandler, port: int) -> None:
    # Headers at once, then a byte every 50 ms: no single read ever waits long.
    _send(h, b"", length=None)
    for byte in REF_PNG[:30]:
        h.wfile.write(bytes([byte]))
        h.wfile.flush()
        time.sleep(0.05)


ROUTES: dict[str, Route] = {
    "/ref.png": lambda h, p: _send(h, REF_PNG),
    "/ref-params": lambda h, p: _send(h, REF_PNG, "IMAGE/PNG; charset=binary"),
    "/html": lambda h, p: _send(h, REF_PNG, "text/html"),
    "/no-type": lambda h, p: _send(h, REF_PNG, None),
    "/missing": lambda h, p: _send(h, b"no", "text/plain", status=404),
    "/declared-big": lambda h, p: _send(h, REF_PNG, length=10**9),
    "/stream-big": lambda h, p: _send(h, REF_PNG + b"\0" * 300_000, length=None),
    "/short-length": lambda h, p: _send(h, REF_PNG + b"\0" * 300_000, length=20),
    "/chunked-lying": _chunked_lying,
    "/slow": _slow,
    "/drip": _drip,
    "/to-metadata": _redirect("http://169.254.169.254/latest/meta-data"),
    "/to-file": _redirect("file:///etc/passwd"),
    "/to-loopback": _redirect("http://127.0.0.1:{port}/ref.png"),
    "/to-localhost": _redirect("http://localhost:{port}/ref.png"),
    "/to-mapped": _redirect("http://[::ffff:127.0.0.1]:{port}/ref.png"),
    "/to-mapped-hex": _redirect("http://[::ffff:7f00:1]:{port}/ref.png"),
    "/to-ipv6-loopback": _redirect("http://[::1]:{port}/ref.png"),
    "/to-decimal": _redirect("http://2130706433:{port}/ref.png"),
    "/no-location": lambda h, p: _send(h, b"", None, status=302),
}


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        server = cast(_HTTPServer, self.server)
        server.record.requests.append((self.path, self.headers.get("Host")))
        path = self.path.split("?", 1)[0]
        route = _redirect_chain if path.startswith("/redirect/") else ROUTES.get(path)
        try:
            if route is None:
                _send(self, b"", None, status=404)
            else:
                route(self, server.record.port)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    record: Server


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    httpd = _HTTPServer(("127.0.0.1", 0), _Handler)
    httpd.record = Server(port=httpd.server_address[1])
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05})
    thread.daemon = True
    thread.start()
    try:
        yield httpd.record
    finally:
        httpd.shutdown()
        httpd.server_close()


LOCAL = ImagePolicy(allow_remote=True, allow_private_networks=True)
PUBLIC_ONLY = ImagePolicy(allow_remote=True)


@dataclass
class Net:
    """What the fetch code did on the network: lookups and connections."""

    lookups: list[str] = field(default_factory=list)
    connects: list[Any] = field(default_factory=list)
    names: dict[str, list[str]] = field(default_factory=dict)  # fake DNS ([]: no such name)
    reroute: dict[str, tuple[str, int]] = field(default_factory=dict)  # public IP -> local


@pytest.fixture
def net(monkeypatch: pytest.MonkeyPatch) -> Net:
    record = Net()
    real_getaddrinfo = socket.getaddrinfo
    real_open = fetch_mod._open_socket

    def fake_getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        record.lookups.append(str(host))
        if record.names.get(host) == []:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        if host in record.names:
            return [
                (socket.AF_INET6, socket.SOCK_STREAM, 6, "", (ip, port, 0, 0))
                if ":" in ip
                else (socket.AF_INET, socket.SOCK_STREAM, 6, "", (ip, port))
                for ip in record.names[host]
            ]
        return real_getaddrinfo(host, port, *args, **kwargs)

    def spy_open(family: int, sockaddr: Any, timeout: float) -> socket.socket:
        record.connects.append(sockaddr)
        if sockaddr[0] in record.reroute:
            return real_open(socket.AF_INET, record.reroute[sockaddr[0]], timeout)
        return real_open(family, sockaddr, timeout)

    monkeypatch.setattr(socket, "getaddrinfo", fake_getaddrinfo)
    monkeypatch.setattr(fetch_mod, "_open_socket", spy_open)
    return record


# --------------------------------------------------------------------------- accepted sources


@pytest.fixture
def allowed(tmp_path: Path) -> Path:
    directory = tmp_path / "allowed"
    directory.mkdir()
    (directory / "ref.png").write_bytes(REF_PNG)
    return directory


def test_every_source_type_yields_the_same_pixels(
    server: Server, allowed: Path, net: Net, monkeypatch: pytest.MonkeyPatch
) -> None:
    policy = ImagePolicy(allowed_dirs=(allowed,), allow_remote=True, allow_private_networks=True)
    monkeypatch.chdir(allowed)
    urlsafe = base64.urlsafe_b64encode(REF_PNG).decode().rstrip("=")
    wrapped = "\n".join(REF_B64[i : i + 60] for i in range(0, len(REF_B64), 60))
    sources: dict[str, Any] = {
        "bytes": REF_PNG,
        "bytearray": bytearray(REF_PNG),
        "memoryview": memoryview(REF_PNG),
        "data URI": f"data:image/png;base64,{REF_B64}",
        "data URI, wrapped lines": f"data:image/png;base64,{wrapped}",
        "data URI, upper case": f"DATA:IMAGE/PNG;BASE64,{REF_B64}",
        "data URI, percent-encoded": "data:image/png," + "".join(f"%{b:02X}" for b in REF_PNG),
        "bare base64": REF_B64,
        "bare base64, URL-safe unpadded": urlsafe,
        "PIL image": REF,
        "PIL image, lazily opened": Image.open(io.BytesIO(REF_PNG)),
        "path str": str(allowed / "ref.png"),
        "relative path": "ref.png",
        "Path": allowed / "ref.png",
        "URL": server.url("/ref.png"),
        "URL with parameters in Content-Type": server.url("/ref-params"),
    }
    for name, source in sources.items():
        loaded = load_image(source, policy)
        assert (loaded.width, loaded.height) == (7, 5), name
        assert loaded.rgb == REF.tobytes(), name
        assert loaded.format == "PNG", name
        if not isinstance(source, Image.Image):
            assert loaded.data == REF_PNG, name
        else:
            assert Image.open(io.BytesIO(loaded.data)).tobytes() == REF.tobytes(), name


async def test_aload_image_matches_load_image(server: Server) -> None:
    assert await aload_image(REF_PNG) == load_image(REF_PNG)
    remote = await aload_image(server.url("/ref.png"), LOCAL, max_side=3)
    assert remote == load_image(REF_PNG, max_side=3)
    with pytest.raises(ImageLoadError) as info:
        await aload_image(server.url("/ref.png"))
    assert info.value.reason == "remote-disabled"


def test_jpeg_webp_gif_bmp_decode() -> None:
    for fmt in ("JPEG", "WEBP", "GIF", "BMP"):
        loaded = load_image(_encode(REF, fmt))
        assert loaded.format == fmt
        assert (loaded.width, loaded.height) == (7, 5)
        assert len(loaded.rgb) == 7 * 5 * 3


def test_error_is_an_invalid_request_with_a_clear_message() -> None:
    with pytest.raises(ImageLoadError) as info:
        load_image(b"definitely not an image")
    err = info.value
    assert isinstance(err, InvalidRequestError) and isinstance(err, ValueError)
    assert err.reason == "decode-failed"
    assert str(err).startswith("image refused (decode-failed): ")
    assert "PNG" in str(err)  # names the formats it tried


def test_unsupported_source_types() -> None:
    assert _reason(12345) == "bad-source"
    assert _reason(None) == "bad-source"
    assert _reason("") == "empty"
    assert _reason("   ") == "empty"


# --------------------------------------------------------------------------- schemes and URLs


@pytest.mark.parametrize(
    "source",
    [
        "file:///etc/passwd",
        "FILE:/etc/passwd",
        "file://localhost/etc/passwd",
        "ftp://example.com/a.png",
        "gopher://example.com/1",
        "javascript:alert(1)",
        "jar:http://example.com/a.jar!/a.png",
        "blob:https://example.com/1234",
    ],
)
def test_other_schemes_are_refused_under_any_policy(source: str, tmp_path: Path) -> None:
    permissive = ImagePolicy(
        allowed_dirs=(Path("/"),), allow_remote=True, allow_private_networks=True
    )
    assert _reason(source) == "scheme-refused"
    assert _reason(source, permissive) == "scheme-refused"


def test_remote_is_disabled_by_default(server: Server, net: Net) -> None:
    assert _reason(server.url("/ref.png")) == "remote-disabled"
    assert _reason("https://example.com/a.png") == "remote-disabled"
    assert net.lookups == [] and net.connects == []


@pytest.mark.parametrize(
    "url",
    [
        "http://user:secret@127.0.0.1/a.png",
        "http://127.0.0.1:99999/a.png",
        "http:///no-host.png",
        "http://exa mple.com/a.png",
        "http://example.com/a\r\nX-Injected: 1",
    ],
)
def test_malformed_urls(url: str, net: Net) -> None:
    assert _reason(url, LOCAL) == "bad-url"
    assert net.connects == []


# --------------------------------------------------------------------------- addresses


@pytest.mark.parametrize(
    ("address", "refused", "refused_with_private_allowed"),
    [
        ("93.184.216.34", False, False),
        ("2606:4700:4700::1111", False, False),
        ("127.0.0.1", True, False),
        ("127.8.9.10", True, False),
        ("::1", True, False),
        ("10.1.2.3", True, False),
        ("172.16.0.1", True, False),
        ("192.168.1.1", True, False),
        ("100.64.0.1", True, False),  # carrier-grade NAT
        ("fc00::1", True, False),
        ("::ffff:127.0.0.1", True, False),
        ("169.254.169.254", True, True),
        ("fd00:ec2::254", True, True),
        ("100.100.100.200", True, True),
        ("::ffff:169.254.169.254", True, True),
        ("64:ff9b::a9fe:a9fe", True, True),  # NAT64 of 169.254.169.254
        ("2002:a9fe:a9fe::1", True, True),  # 6to4 of 169.254.169.254
        ("169.254.1.1", True, True),
        ("fe80::1", True, True),
        ("0.0.0.0", True, True),
        ("::", True, True),
        ("224.0.0.1", True, True),
        ("ff02::1", True, True),
        ("240.0.0.1", True, True),
        ("255.255.255.255", True, True),
    ],
)
def test_address_rules(address: str, refused: bool, refused_with_private_allowed: bool) -> None:
    import ipaddress

    ip = ipaddress.ip_address(address)
    assert (address_problem(ip, allow_private=False) is not None) == refused
    assert (address_problem(ip, allow_private=True) is not None) == refused_with_private_allowed


def test_loopback_server_refused_without_private_networks(server: Server, net: Net) -> None:
    assert _reason(server.url("/ref.png"), PUBLIC_ONLY) == "private-address"
    assert _reason(server.url("/ref.png", host="localhost"), PUBLIC_ONLY) == "private-address"
    assert _reason(server.url("/ref.png", host="[::1]"), PUBLIC_ONLY) == "private-address"
    assert _reason(f"http://2130706433:{server.port}/ref.png", PUBLIC_ONLY) == "private-address"
    assert net.connects == []


@pytest.mark.parametrize(
    "url",
    [
        "http://169.254.169.254/latest/meta-data/",
        "http://[fd00:ec2::254]/latest/meta-data/",
        "http://100.100.100.200/latest/meta-data/",
        "http://[::ffff:169.254.169.254]/",
        "https://169.254.169.254/",
    ],
)
def test_metadata_addresses_refused_even_with_private_networks(url: str, net: Net) -> None:
    assert _reason(url, LOCAL) == "private-address"
    assert net.connects == []


def test_a_name_with_any_private_address_is_refused(net: Net) -> None:
    net.names["mixed.example"] = ["93.184.216.34", "10.0.0.7"]
    net.names["inner.example"] = ["192.168.0.10"]
    net.names["meta.example"] = ["169.254.169.254"]
    assert _reason("http://mixed.example/a.png", PUBLIC_ONLY) == "private-address"
    assert _reason("http://inner.example/a.png", PUBLIC_ONLY) == "private-address"
    assert _reason("http://meta.example/a.png", LOCAL) == "private-address"
    assert net.connects == []


def test_connects_to_the_vetted_address_with_the_original_host(server: Server, net: Net) -> None:
    net.names["images.example"] = ["127.0.0.1"]
    loaded = load_image(f"http://images.example:{server.port}/ref.png?v=1", LOCAL)
    assert loaded.rgb == REF.tobytes()
    assert net.lookups == ["images.example"]  # resolved once, never again
    assert net.connects == [("127.0.0.1", server.port)]
    assert server.requests[-1] == ("/ref.png?v=1", f"images.example:{server.port}")


def test_unresolvable_or_unreachable_hosts_fail_to_fetch(net: Net) -> None:
    net.names["public.example"] = ["93.184.216.34"]
    net.reroute["93.184.216.34"] = ("127.0.0.1", 9)  # nothing listens on the discard port
    assert _reason("http://public.example/a.png", PUBLIC_ONLY) == "fetch-failed"
    assert net.connects == [("93.184.216.34", 80)]
    net.names["does-not-exist.example"] = []
    assert _reason("http://does-not-exist.example/a.png", PUBLIC_ONLY) == "fetch-failed"


# --------------------------------------------------------------------------- redirects


def test_redirect_from_an_allowed_host_to_metadata_is_refused_before_connecting(
    server: Server, net: Net
) -> None:
    assert _reason(server.url("/to-metadata"), LOCAL) == "private-address"
    assert net.connects == [("127.0.0.1", server.port)]


def test_redirect_to_a_file_url_is_refused(server: Server, net: Net) -> None:
    assert _reason(server.url("/to-file"), LOCAL) == "scheme-refused"
    assert len(net.connects) == 1


@pytest.mark.parametrize(
    "path",
    [
        "/to-loopback",
        "/to-localhost",
        "/to-mapped",
        "/to-mapped-hex",
        "/to-ipv6-loopback",
        "/to-decimal",
    ],
)
def test_redirect_from_a_public_host_to_loopback_is_refused(
    path: str, server: Server, net: Net
) -> None:
    # "public.example" resolves to a public address, which the test reroutes to the local server.
    net.names["public.example"] = ["93.184.216.34"]
    net.reroute["93.184.216.34"] = ("127.0.0.1", server.port)
    assert _reason(f"http://public.example{path}", PUBLIC_ONLY) == "private-address"
    assert net.connects == [("93.184.216.34", 80)]
    assert server.requests[-1] == (path, "public.example")


def test_redirects_are_followed_up_to_the_limit(server: Server, net: Net) -> None:
    assert load_image(server.url("/redirect/3"), LOCAL).rgb == REF.tobytes()
    assert len(net.connects) == 4
    assert _reason(server.url("/redirect/4"), LOCAL) == "too-many-redirects"
    no_redirects = ImagePolicy(allow_remote=True, allow_private_networks=True, max_redirects=0)
    assert load_image(server.url("/redirect/0"), no_redirects).width == 7
    assert _reason(server.url("/redirect/1"), no_redirects) == "too-many-redirects"
    assert _reason(server.url("/no-location"), LOCAL) == "fetch-failed"


# --------------------------------------------------------------------------- responses


def test_content_type_must_be_allowed(server: Server) -> None:
    assert _reason(server.url("/html"), LOCAL) == "bad-content-type"
    assert _reason(server.url("/no-type"), LOCAL) == "bad-content-type"
    jpeg_only = ImagePolicy(
        allow_remote=True, allow_private_networks=True, allowed_content_types=("image/jpeg",)
    )
    assert _reason(server.url("/ref.png"), jpeg_only) == "bad-content-type"


def test_http_error_status(server: Server) -> None:
    assert _reason(server.url("/missing"), LOCAL) == "fetch-failed"
    assert _reason(server.url("/nothing-here"), LOCAL) == "fetch-failed"


def test_body_size_is_capped(server: Server) -> None:
    small = ImagePolicy(allow_remote=True, allow_private_networks=True, max_bytes=100_000)
    start = time.monotonic()
    assert _reason(server.url("/declared-big"), small) == "too-large"  # refused from the header
    assert _reason(server.url("/stream-big"), small) == "too-large"  # no Content-Length
    assert _reason(server.url("/chunked-lying"), small) == "too-large"  # Content-Length lies
    # A Content-Length below the body only frames it: the rest is never read.
    assert _reason(server.url("/short-length"), small) == "decode-failed"
    assert time.monotonic() - start < 5


def test_slow_server_times_out(server: Server) -> None:
    policy = ImagePolicy(allow_remote=True, allow_private_networks=True, timeout_s=0.3)
    start = time.monotonic()
    assert _reason(server.url("/slow"), policy) == "timeout"
    assert time.monotonic() - start < 0.9


def test_dripping_server_times_out_on_the_whole_fetch(server: Server) -> None:
    policy = ImagePolicy(allow_remote=True, allow_private_networks=True, timeout_s=0.3)
    start = time.monotonic()
    assert _reason(server.url("/drip"), policy) == "timeout"
    assert time.monotonic() - start < 0.9


def test_https_verifies_the_host_name(
    server: Server, net: Net, monkeypatch: pytest.MonkeyPatch
) -> None:
    context = fetch_mod._tls_context()
    assert context.check_hostname and context.verify_mode == ssl.CERT_REQUIRED
    # Against a plain-HTTP server the handshake fails.
    assert _reason(f"https://127.0.0.1:{server.port}/ref.png", LOCAL) == "fetch-failed"

    seen: list[str | None] = []

    class RecordingContext:
        def wrap_socket(self, sock: socket.socket, **kwargs: Any) -> ssl.SSLSocket:
            seen.append(kwargs.get("server_hostname"))
            raise ssl.SSLCertVerificationError("certificate verify failed")

    monkeypatch.setattr(fetch_mod, "_tls_context", RecordingContext)
    net.names["images.example"] = ["127.0.0.1"]
    assert _reason(f"https://images.example:{server.port}/a.png", LOCAL) == "fetch-failed"
    assert seen == ["images.example"]
    assert net.connects[-1] == ("127.0.0.1", server.port)


# --------------------------------------------------------------------------- local paths


def test_paths_need_an_allowed_dir(allowed: Path) -> None:
    assert _reason(str(allowed / "ref.png")) == "path-not-allowed"
    assert _reason(allowed / "ref.png") == "path-not-allowed"


def test_paths_outside_the_allowed_dirs_are_refused(tmp_path: Path, allowed: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.png").write_bytes(REF_PNG)
    evil = tmp_path / "allowed-evil"  # shares the allowed dir's name as a prefix
    evil.mkdir()
    (evil / "x.png").write_bytes(REF_PNG)
    (allowed / "escape.png").symlink_to(outside / "secret.png")
    (allowed / "escape-dir").symlink_to(outside, target_is_directory=True)
    (allowed / "alias.png").symlink_to(allowed / "ref.png")
    policy = ImagePolicy(allowed_dirs=(allowed,))

    assert load_image(allowed / "alias.png", policy).rgb == REF.tobytes()
    for path in [
        outside / "secret.png",
        f"{allowed}/../outside/secret.png",
        f"{allowed}/escape.png",
        f"{allowed}/escape-dir/secret.png",
        evil / "x.png",
        "/etc/passwd",
        "ref.png",  # relative to the working directory, which is not the allowed one
    ]:
        assert _reason(path, policy) == "path-not-allowed", path


def test_allowed_dir_given_through_a_symlink(tmp_path: Path, allowed: Path) -> None:
    link = tmp_path / "link-to-allowed"
    link.symlink_to(allowed, target_is_directory=True)
    policy = ImagePolicy(allowed_dirs=(link,))
    assert load_image(allowed / "ref.png", policy).width == 7
    assert load_image(link / "ref.png", policy).width == 7


def test_only_regular_files_within_the_size_cap(allowed: Path) -> None:
    policy = ImagePolicy(allowed_dirs=(allowed,))
    (allowed / "sub").mkdir()
    os.mkfifo(allowed / "fifo")
    (allowed / "loop").symlink_to(allowed / "loop")
    assert _reason(allowed / "missing.png", policy) == "not-found"
    assert _reason(allowed / "sub", policy) == "not-found"
    assert _reason(allowed / "fifo", policy) == "not-found"  # and does not block
    assert _reason(allowed / "loop", policy) == "path-not-allowed"
    assert _reason(f"{allowed}/ref.png\x00.txt", policy) == "path-not-allowed"
    tiny = ImagePolicy(allowed_dirs=(allowed,), max_bytes=10)
    assert _reason(allowed / "ref.png", tiny) == "too-large"


# --------------------------------------------------------------------------- data URIs


def test_data_uri_refusals() -> None:
    assert _reason(f"data:text/plain;base64,{REF_B64}") == "bad-content-type"
    assert _reason(f"data:;base64,{REF_B64}") == "bad-content-type"
    assert _reason("data:image/svg+xml,<svg onload='alert(1)'/>") == "bad-content-type"
    assert _reason("data:image/png;base64,@@not base64@@") == "decode-failed"
    assert _reason("data:image/png;base64") == "decode-failed"
    assert _reason(f"data:image/png;base64,{REF_B64}", ImagePolicy(max_bytes=50)) == "too-large"
    big = "data:image/png;base64," + "A" * 2_000_000
    with pytest.raises(ImageLoadError) as info:
        load_image(big, ImagePolicy(max_bytes=1000))
    assert info.value.reason == "too-large"
    assert len(str(info.value)) < 300  # the payload is not echoed back


def test_base64_only_when_it_decodes_to_an_image(allowed: Path) -> None:
    # Base64-looking text that is not an image is a path, and paths are refused by default.
    assert _reason("aGVsbG8gd29ybGQgaGVsbG8gd29ybGQ=") == "path-not-allowed"
    assert _reason(REF_B64[:40] + "!!!!") == "path-not-allowed"
    assert _reason(REF_B64[:64]) == "decode-failed"  # starts like a PNG, ends too soon
    assert _reason(REF_B64[:100] + "*" + REF_B64[100:]) == "path-not-allowed"


# --------------------------------------------------------------------------- decoding


def test_corrupt_truncated_and_empty_inputs() -> None:
    assert _reason(b"") == "empty"
    assert _reason(b"\x00" * 100) == "decode-failed"
    assert _reason(REF_PNG[: len(REF_PNG) // 2]) == "decode-failed"
    assert _reason(REF_PNG[:40]) == "decode-failed"
    assert _reason(_encode(REF, "JPEG")[:200]) == "decode-failed"


def test_zero_size_images_are_empty() -> None:
    assert _reason(_png_claiming(0, 0)) == "empty"
    assert _reason(_png_claiming(0, 5)) == "empty"
    assert _reason(Image.new("RGB", (0, 0))) == "empty"
    assert _reason(Image.new("RGB", (4, 0))) == "empty"


def test_decompression_bombs() -> None:
    global_limit = Image.MAX_IMAGE_PIXELS
    assert _reason(_png_claiming(100_000, 100_000)) == "decompression-bomb"
    # Refused from the header: decoding would have failed (the data is 1x1) with decode-failed.
    assert _reason(_png_claiming(5000, 5000), ImagePolicy(max_pixels=1_000_000)) == (
        "decompression-bomb"
    )
    real = Image.new("L", (1200, 1000))  # compresses to a few kB
    real_png = _encode(real)
    assert len(real_png) < 10_000
    assert _reason(real_png, ImagePolicy(max_pixels=1_000_000)) == "decompression-bomb"
    assert _reason(real, ImagePolicy(max_pixels=1_000_000)) == "decompression-bomb"
    assert load_image(real_png, ImagePolicy(max_pixels=1_200_000)).width == 1200
    assert global_limit == Image.MAX_IMAGE_PIXELS  # global state left alone


def test_formats_outside_the_policy_are_refused() -> None:
    tiff = _encode(REF, "TIFF")
    assert _reason(tiff) == "bad-content-type"
    with_tiff = ImagePolicy(allowed_content_types=("image/png", "image/tiff"))
    assert load_image(tiff, with_tiff).rgb == REF.tobytes()
    png_only = ImagePolicy(allowed_content_types=("image/png",))
    assert _reason(_encode(REF, "JPEG"), png_only) == "bad-content-type"
    assert _reason(f"data:image/jpeg;base64,{REF_B64}", png_only) == "bad-content-type"
    # A declared type is not trusted for the decoder: PNG bytes labelled JPEG are still PNG.
    assert load_image(f"data:image/jpeg;base64,{REF_B64}").format == "PNG"


# --------------------------------------------------------------------------- modes


def test_alpha_is_composited_over_white() -> None:
    la = Image.new("LA", (3, 1))
    la.putpixel((0, 0), (0, 0))  # transparent black
    la.putpixel((1, 0), (50, 255))  # opaque gray
    la.putpixel((2, 0), (0, 128))  # half-transparent black
    loaded = load_image(_encode(la))
    assert _pixel(loaded, 0, 0) == (255, 255, 255)
    assert _pixel(loaded, 1, 0) == (50, 50, 50)
    assert all(abs(c - 127) <= 1 for c in _pixel(loaded, 2, 0))

    rgba = Image.new("RGBA", (1, 1), (255, 0, 0, 128))
    assert all(
        abs(a - b) <= 1
        for a, b in zip(_pixel(load_image(_encode(rgba)), 0, 0), (255, 127, 127), strict=True)
    )


def test_palette_modes() -> None:
    palette = Image.new("P", (2, 1))
    palette.putpalette([255, 0, 0, 0, 0, 255] + [0] * 762)
    palette.putpixel((0, 0), 0)
    palette.putpixel((1, 0), 1)
    opaque = load_image(_encode(palette, "GIF"))
    assert (_pixel(opaque, 0, 0), _pixel(opaque, 1, 0)) == ((255, 0, 0), (0, 0, 255))
    see_through = load_image(_encode(palette, "GIF", transparency=1))
    assert (_pixel(see_through, 0, 0), _pixel(see_through, 1, 0)) == ((255, 0, 0), (255,) * 3)
    png = load_image(_encode(palette, "PNG", transparency=0))
    assert _pixel(png, 0, 0) == (255, 255, 255)


def test_cmyk_converts_to_rgb() -> None:
    cmyk = Image.new("CMYK", (4, 3), (0, 255, 255, 0))  # red
    lossless = load_image(_encode(cmyk, "TIFF"), ImagePolicy(allowed_content_types=("image/tiff",)))
    assert lossless.rgb == cmyk.convert("RGB").tobytes()
    assert _pixel(lossless, 0, 0) == (255, 0, 0)
    jpeg = load_image(_encode(cmyk, "JPEG", quality=95))
    r, g, b = _pixel(jpeg, 1, 1)
    assert r > 230 and g < 30 and b < 30


def test_sixteen_bit_gray_is_scaled_not_clipped() -> None:
    gray16 = Image.new("I;16", (3, 1))
    for x, value in enumerate((0, 32768, 65535)):
        gray16.putpixel((x, 0), value)
    loaded = load_image(_encode(gray16))
    assert [_pixel(loaded, x, 0) for x in range(3)] == [(0,) * 3, (128,) * 3, (255,) * 3]
    assert load_image(gray16).rgb == loaded.rgb


def test_bilevel_and_gray() -> None:
    bilevel = Image.new("1", (2, 1))
    bilevel.putpixel((1, 0), 1)
    loaded = load_image(_encode(bilevel, "BMP"))
    assert (_pixel(loaded, 0, 0), _pixel(loaded, 1, 0)) == ((0,) * 3, (255,) * 3)
    assert load_image(Image.new("L", (1, 1), 77)).rgb == bytes([77] * 3)


def test_animated_gif_gives_its_first_frame() -> None:
    frames = [Image.new("RGB", (4, 4), color) for color in ((255, 0, 0), (0, 0, 255))]
    buffer = io.BytesIO()
    frames[0].save(buffer, "GIF", save_all=True, append_images=frames[1:], duration=100, loop=0)
    loaded = load_image(buffer.getvalue())
    assert getattr(Image.open(io.BytesIO(buffer.getvalue())), "n_frames", 1) == 2
    assert loaded.rgb == bytes([255, 0, 0] * 16)


def test_exif_orientation_is_applied() -> None:
    wide = Image.new("RGB", (4, 2), (0, 200, 0))
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 degrees clockwise to display
    loaded = load_image(_encode(wide, "PNG", exif=exif))
    assert (loaded.width, loaded.height) == (2, 4)


# --------------------------------------------------------------------------- resizing


@pytest.mark.parametrize(
    ("size", "max_side", "expected"),
    [
        ((400, 100), 100, (100, 25)),
        ((100, 400), 100, (25, 100)),
        ((37, 23), 10, (10, 6)),
        ((1000, 3), 100, (100, 1)),
        ((7, 5), 1000, (7, 5)),  # never upscaled
        ((64, 64), 64, (64, 64)),
    ],
)
def test_max_side_keeps_the_aspect_ratio(
    size: tuple[int, int], max_side: int, expected: tuple[int, int]
) -> None:
    image = Image.new("RGB", size, (10, 120, 230))
    loaded = load_image(_encode(image), max_side=max_side)
    assert (loaded.width, loaded.height) == expected
    assert loaded.rgb == bytes([10, 120, 230] * (expected[0] * expected[1]))
    assert loaded.data == _encode(image)  # the original bytes are kept


def test_resized_helper_and_bad_max_side() -> None:
    full = load_image(_encode(Image.new("RGB", (300, 200), (1, 2, 3))))
    half = full.resized(150)
    assert (half.width, half.height) == (150, 100)
    assert half.data == full.data and half.format == full.format
    assert full.resized(300) is full
    assert load_image(full.data, max_side=150) == half
    assert half.to_pil().size == (150, 100)
    for bad in (0, -3, True):
        with pytest.raises(InvalidRequestError):
            load_image(REF_PNG, max_side=bad)
        with pytest.raises(InvalidRequestError):
            full.resized(bad)


# --------------------------------------------------------------------------- the policy


def test_policy_validation() -> None:
    with pytest.raises(InvalidRequestError):
        ImagePolicy(allowed_dirs="/tmp")  # type: ignore[arg-type]
    with pytest.raises(InvalidRequestError):
        ImagePolicy(allowed_content_types="image/png")  # type: ignore[arg-type]
    for bad in (
        {"timeout_s": 0},
        {"timeout_s": float("inf")},
        {"max_bytes": 0},
        {"max_pixels": 0},
        {"max_redirects": -1},
        {"allowed_content_types": ()},
    ):
        with pytest.raises(InvalidRequestError):
            ImagePolicy(**bad)
    policy = ImagePolicy(allowed_dirs=["/a"], allowed_content_types=(" Image/PNG ",))  # type: ignore[arg-type]
    assert policy.allowed_dirs == (Path("/a"),)
    assert policy.allowed_content_types == ("image/png",)
    assert "rgb" not in repr(load_image(REF_PNG))  # no pixel dump in reprs
