"""visit against hostile servers on 127.0.0.1, with the SSRF guard on (the default) and off.

Two real HTTP servers run here: the "internal" one on 127.0.0.1 holds a secret page and the hostile
behaviours (slow drip, endless and binary bodies, redirects); the second, on 127.0.0.2, stands in for
a public web server. Loopback addresses are never public, so where a test needs one public server
that redirects inward it tells the guard that 127.0.0.2, and nothing else, counts as public. Nothing
else is faked: requests, sockets, DNS (``localhost``) and the servers are real.
"""

from __future__ import annotations

import shutil
import ssl
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import pytest

from amb_dspy.config import AmbConfig, ToolSettings
from amb_dspy.tools import VisitTool, netguard
from amb_dspy.tools.netguard import check_url, non_public_kind

SECRET = "INTERNAL-SECRET-7f3a"
DRIP_BYTES = 80  # one write every 0.25 s: the whole drip would take 20 s


class _Hostile(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def _send(self, status: int, body: bytes, content_type: str = "text/plain", **headers: str):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in headers.items():
            self.send_header(name.replace("_", "-"), value)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):  # one branch per hostile behaviour
        server = self.server
        server.hits.append({"path": self.path, "headers": dict(self.headers)})
        path, query = urlsplit(self.path).path, parse_qs(urlsplit(self.path).query)
        try:
            if path == "/secret":
                self._send(200, f"<html><title>admin</title><p>{SECRET}</p></html>".encode(), "text/html")
            elif path == "/page":
                self._send(200, b"<html><title>Public page</title><p>Ordinary public text.</p></html>", "text/html")
            elif path == "/redirect":
                self._send(302, b"", Location=query["to"][0])
            elif path == "/loop":
                self._send(302, b"", Location="/loop")
            elif path == "/drip":  # headers at once, then the body one byte at a time
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(DRIP_BYTES))
                self.end_headers()
                self._drip(b"x" * DRIP_BYTES)
            elif path == "/drip-headers":  # the headers themselves never end
                self.wfile.write(b"HTTP/1.1 200 OK\r\n")
                self._drip(b"X-Drip: 1\r\n" * DRIP_BYTES, step=11)
            elif path == "/endless":  # text with no Content-Length that never ends
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Connection", "close")
                self.end_headers()
                self.close_connection = True
                chunk = b"endless text " * 5000
                while server.sent < 200_000_000:
                    self.wfile.write(chunk)
                    server.sent += len(chunk)
            elif path == "/binary-as-text":
                self._send(200, bytes(range(1, 32)) * 200 + b"\xfe\xff" * 500, "text/plain")
            elif path == "/nul-as-text":
                self._send(200, b"PK\x03\x04\x00\x00binary zip body\x00" * 100, "text/plain; charset=utf-8")
            else:
                self._send(404, b"not found")
        except (BrokenPipeError, ConnectionResetError):  # the client hung up: what these tests want
            pass
        finally:
            server.done.set()

    def _drip(self, data: bytes, step: int = 1):
        for i in range(0, len(data), step):
            self.wfile.write(data[i:i + step])
            self.wfile.flush()
            self.server.sent += 1
            time.sleep(0.25)


def _serve(host: str, tls: ssl.SSLContext | None = None, port: int = 0, handler=None):
    httpd = ThreadingHTTPServer((host, port), handler or _Hostile)
    if tls is not None:
        httpd.socket = tls.wrap_socket(httpd.socket, server_side=True)
    httpd.daemon_threads = True
    httpd.hits, httpd.sent, httpd.done = [], 0, threading.Event()
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd


@pytest.fixture(scope="module")
def servers():
    internal, public = _serve("127.0.0.1"), _serve("127.0.0.2")
    yield internal, public
    for httpd in (internal, public):
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture
def internal(servers, monkeypatch):
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    for httpd in servers:
        httpd.hits.clear()
        httpd.sent = 0
        httpd.done.clear()
    return servers[0]


@pytest.fixture
def public(servers, internal, monkeypatch):
    """The server on 127.0.0.2, which the guard is told to take for a public web server."""
    real = netguard.non_public_kind
    monkeypatch.setattr(netguard, "non_public_kind", lambda ip: None if str(ip) == "127.0.0.2" else real(ip))
    return servers[1]


def _url(httpd, path: str) -> str:
    host, port = httpd.server_address[:2]
    return f"http://{host}:{port}{path}"


def _visit(url: str, **settings) -> str:
    settings.setdefault("jina_api_key", "")
    return VisitTool(ToolSettings(**settings), extractor=lambda **_: None)(url, "what the page says")


def _refused(out: str) -> bool:
    return out.startswith("Error: ") and "visit reads public web pages only" in out and SECRET not in out


# --- the guard on its own ------------------------------------------------------------------------


@pytest.mark.parametrize("address, kind", [
    ("127.0.0.1", "loopback"), ("::1", "loopback"), ("::ffff:127.0.0.1", "loopback"), ("10.1.2.3", "private"),
    ("192.168.0.1", "private"), ("172.16.5.4", "private"), ("169.254.169.254", "link-local"), ("fe80::1", "link-local"),
    ("224.0.0.1", "multicast"), ("0.0.0.0", "unspecified"), ("::", "unspecified"), ("100.64.0.1", "non-global"),
    ("64:ff9b::a00:1", "private"), ("2002:c0a8:1::", "private"), ("fc00::1", "private"),
])
def test_non_public_addresses_are_named(address, kind):
    import ipaddress

    assert non_public_kind(ipaddress.ip_address(address)) == kind


@pytest.mark.parametrize("address", ["93.184.216.34", "1.1.1.1", "2606:4700:4700::1111", "::ffff:93.184.216.34"])
def test_public_addresses_pass(address):
    import ipaddress

    assert non_public_kind(ipaddress.ip_address(address)) is None


def test_check_url_needs_no_network_to_refuse_private_addresses():
    check_url("http://93.184.216.34/page", allow_private=False)  # a public address: no error
    for url in ("http://169.254.169.254/latest/meta-data/", "http://[::ffff:10.0.0.1]/", "http://0x0a000001/"):
        with pytest.raises(netguard.URLRefused, match=r"(link-local|private) address"):
            check_url(url, allow_private=False)
    check_url("http://10.0.0.1/", allow_private=True)
    with pytest.raises(netguard.URLRefused, match=r"credentials \(user@host\)"):
        check_url("http://admin:pw@example.org/", allow_private=True)  # credentials are refused either way


# --- SSRF: direct URLs -------------------------------------------------------------------------------


@pytest.mark.parametrize("form", [
    "127.0.0.1", "localhost", "[::ffff:127.0.0.1]", "2130706433", "0x7f000001", "0177.0.0.1", "127.1", "[::1]",
])
def test_every_form_of_loopback_is_refused_before_any_request(internal, form):
    port = internal.server_address[1]
    out = _visit(f"http://{form}:{port}/secret")
    assert _refused(out), out
    assert "loopback address" in out
    assert internal.hits == []


def test_a_url_with_credentials_is_refused(internal):
    port = internal.server_address[1]
    for url in (f"http://user@127.0.0.1:{port}/secret", f"http://example.org@127.0.0.1:{port}/secret"):
        out = _visit(url, allow_private_urls=True)
        assert out.startswith("Error: cannot visit") and "credentials (user@host)" in out and SECRET not in out
    assert internal.hits == []


def test_with_private_urls_allowed_the_internal_page_is_read(internal):
    out = _visit(_url(internal, "/secret"), allow_private_urls=True)
    assert SECRET in out and [h["path"] for h in internal.hits] == ["/secret"]


def test_the_allow_setting_comes_from_the_environment(internal, monkeypatch):
    monkeypatch.setenv("AMB_ALLOW_PRIVATE_URLS", "1")
    assert AmbConfig().allow_private_urls is True
    assert SECRET in VisitTool(ToolSettings(jina_api_key=""), extractor=lambda **_: None)(_url(internal, "/secret"), "x")


# --- SSRF: redirects and DNS rebinding -------------------------------------------------------------------


def test_the_public_stand_in_is_read_with_the_guard_on(public):
    out = _visit(_url(public, "/page"))
    assert "Ordinary public text." in out


@pytest.mark.parametrize("target", [
    "http://127.0.0.1:{port}/secret", "http://localhost:{port}/secret", "http://[::ffff:127.0.0.1]:{port}/secret",
    "http://2130706433:{port}/secret", "http://user@127.0.0.2:{public_port}/page", "file:///etc/passwd",
])
def test_a_redirect_to_an_internal_address_is_refused(public, internal, target):
    target = target.format(port=internal.server_address[1], public_port=public.server_address[1])
    out = _visit(_url(public, f"/redirect?to={target}"))
    assert out.startswith("Error: ") and SECRET not in out, out
    assert internal.hits == [] and len(public.hits) == 1


def test_with_private_urls_allowed_redirects_are_followed(public, internal):
    out = _visit(_url(public, f"/redirect?to={_url(internal, '/secret')}"), allow_private_urls=True)
    assert SECRET in out


def test_redirects_are_bounded(internal):
    out = _visit(_url(internal, "/loop"), allow_private_urls=True)
    assert out.startswith("Error: too many redirects: more than 5")
    assert len(internal.hits) == 6


def test_a_name_is_connected_to_at_the_address_that_was_checked(public, monkeypatch):
    # DNS rebinding: the name resolves to the public stand-in for the check and to this machine a moment
    # later, where a server with the secret listens on the same port. The connection goes where the check looked.
    port = public.server_address[1]
    try:
        trap = _serve("127.0.0.1", port=port)
    except OSError:
        pytest.skip(f"port {port} is taken on 127.0.0.1")
    lookups = []

    def rebinding(host, port):
        lookups.append(host)
        return ["127.0.0.2"] if len(lookups) == 1 else ["127.0.0.1"]

    monkeypatch.setattr(netguard, "resolve", rebinding)
    try:
        out = _visit(f"http://rebind.example:{port}/page")
    finally:
        trap.shutdown()
        trap.server_close()
    assert "Ordinary public text." in out and SECRET not in out, out
    assert lookups == ["rebind.example"] and trap.hits == [] and len(public.hits) == 1


def test_authorization_stays_with_its_host_across_redirects(public, internal):
    tool = VisitTool(ToolSettings(jina_api_key="jina-secret-key", allow_private_urls=True), extractor=lambda **_: None,
                     jina_endpoint=_url(public, "/redirect?to=") + _url(internal, "/page") + "&u=")
    out = tool("https://example.org/article", "x")
    assert "Ordinary public text." in out
    assert public.hits[0]["headers"]["Authorization"] == "Bearer jina-secret-key"
    assert "Authorization" not in internal.hits[0]["headers"]


# --- time and size ---------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/drip", "/drip-headers"])
def test_a_slow_drip_cannot_hold_a_visit_past_its_timeout(internal, path):
    out = _visit(_url(internal, path), allow_private_urls=True, http_timeout_s=1)
    assert out == f"Error: timed out after 1 s fetching {_url(internal, path)}"
    assert internal.done.wait(10)
    assert internal.sent < DRIP_BYTES // 4  # the server was cut off long before the end of its drip (writes)


def test_an_endless_body_is_cut_at_the_size_cap(internal):
    tool = VisitTool(ToolSettings(jina_api_key="", allow_private_urls=True), extractor=lambda **_: None,
                     max_download_bytes=200_000)
    _, _, text = tool.read(_url(internal, "/endless"))
    assert text.startswith("endless text") and text.endswith("[... page cut at 200000 bytes]")
    assert internal.done.wait(10)
    assert internal.sent < 20_000_000


@pytest.mark.parametrize("path, media", [("/binary-as-text", "text/plain"), ("/nul-as-text", "text/plain")])
def test_binary_served_as_text_is_named_as_such(internal, path, media):
    out = _visit(_url(internal, path), allow_private_urls=True)
    assert out == (f"Error: {_url(internal, path)} is served as {media} but holds binary data, not text; "
                   "visit reads HTML and plain text only")


# --- one-line errors -------------------------------------------------------------------------------


@pytest.mark.parametrize("url", [
    "http://127.0.0.1:9/a\r\nX-Injected: 1\r\n",
    "http://127.0.0.1:9/" + "a" * 100_000,
    "ftp://example.org/\r\n" + "b" * 100_000,
    "http://bad host\nname/x",
    "corpus://missing\r\n" + "c" * 100_000,
])
def test_error_lines_never_echo_raw_urls(internal, url):
    for allow in (False, True):
        out = _visit(url, allow_private_urls=allow, http_timeout_s=1)
        assert out.startswith("Error: ")
        assert "\n" not in out and "\r" not in out and len(out) < 700, out[:300]


# --- https ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory):
    """The hostile server over TLS, with a self-signed certificate for 127.0.0.1 made by openssl."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("needs the openssl command to make a test certificate")
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run([openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
                    "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    httpd = _serve("127.0.0.1", context)
    httpd.cert = cert
    yield httpd
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def https(tls_server, internal, monkeypatch):
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(tls_server.cert))  # trust the test certificate
    tls_server.hits.clear()
    tls_server.sent = 0
    tls_server.done.clear()
    return tls_server


def _https_url(httpd, path: str) -> str:
    return f"https://127.0.0.1:{httpd.server_address[1]}{path}"


def test_https_pages_are_read_and_a_drip_over_tls_is_cut_at_the_deadline(https):
    assert "Ordinary public text." in _visit(_https_url(https, "/page"), allow_private_urls=True)
    out = _visit(_https_url(https, "/drip"), allow_private_urls=True, http_timeout_s=1)
    assert out == f"Error: timed out after 1 s fetching {_https_url(https, '/drip')}"
    assert https.done.wait(10) and https.sent < DRIP_BYTES // 4


def test_over_https_the_address_is_checked_where_the_connection_lands(https):
    assert _refused(_visit(_https_url(https, "/page")))
    # Used on its own (no check_url, no FetchGuard), a guarded session still checks each connection's
    # peer, before the TLS handshake.
    with pytest.raises(netguard.URLRefused, match="loopback address"):
        netguard.guarded_session().get(f"https://localhost:{https.server_address[1]}/page", timeout=5)
    assert https.hits == []

