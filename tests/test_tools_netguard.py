"""visit's network guard through a proxy, with a reader service, and with a slow resolver: real servers on
127.0.0.1 (those of tests/test_tools_hostile.py) and a real forwarding proxy; only name lookups are
scripted where a test needs a name to resolve slowly."""

from __future__ import annotations

import http.client
import threading
from http.server import BaseHTTPRequestHandler
from urllib.parse import urlsplit

import pytest
import test_tools_hostile as hostile
from test_tools_hostile import SECRET, _refused, _serve, _url, _visit

from amb_dspy.config import ToolSettings
from amb_dspy.tools import VisitTool, netguard

servers, internal, public = hostile.servers, hostile.internal, hostile.public  # the same servers and fixtures


def test_a_private_page_is_not_handed_to_a_reader_service_either(public, internal):
    tool = VisitTool(ToolSettings(jina_api_key="jina-key"), extractor=lambda **_: None, jina_endpoint=_url(public, "/page?u="))
    out = tool(_url(internal, "/secret"), "x")
    assert _refused(out) and "Jina" not in out, out  # refused once, with no direct download tried after
    assert public.hits == [] and internal.hits == []


# --- through an HTTP proxy ------------------------------------------------------------------------------


class _Forwarder(BaseHTTPRequestHandler):
    """A minimal HTTP proxy: ``GET http://host:port/path`` is fetched from that server and relayed."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_GET(self):
        self.server.hits.append(self.path)
        target = urlsplit(self.path)
        upstream = http.client.HTTPConnection(target.hostname, target.port, timeout=10)
        upstream.request("GET", target.path + (f"?{target.query}" if target.query else ""),
                         headers={"Host": target.netloc})
        response = upstream.getresponse()
        body = response.read()
        upstream.close()
        self.send_response(response.status)
        for name, value in response.getheaders():
            if name.lower() not in ("connection", "content-length", "transfer-encoding"):
                self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def proxy(internal, monkeypatch):
    """A forwarding proxy on 127.0.0.1, configured the way users do: HTTP_PROXY in the environment."""
    forwarder = _serve("127.0.0.1", handler=_Forwarder)
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{forwarder.server_address[1]}")
    yield forwarder
    forwarder.shutdown()
    forwarder.server_close()


def test_through_a_proxy_a_private_target_is_refused_before_any_request(proxy, internal):
    out = _visit(_url(internal, "/secret"))
    assert _refused(out) and "loopback address" in out, out
    assert proxy.hits == [] and internal.hits == []


def test_through_a_proxy_a_private_target_is_read_when_private_urls_are_allowed(proxy, internal, monkeypatch):
    monkeypatch.setenv("AMB_ALLOW_PRIVATE_URLS", "1")
    out = VisitTool(ToolSettings(jina_api_key=""), extractor=lambda **_: None)(_url(internal, "/secret"), "x")
    assert SECRET in out
    assert proxy.hits == [_url(internal, "/secret")] and [h["path"] for h in internal.hits] == ["/secret"]


def test_through_a_proxy_public_pages_are_read_and_redirects_inward_refused(proxy, public, internal):
    # The connection's peer is the proxy, on 127.0.0.1: the user's choice, so it is not refused.
    assert "Ordinary public text." in _visit(_url(public, "/page"))
    out = _visit(_url(public, f"/redirect?to={_url(internal, '/secret')}"))
    assert _refused(out) and "loopback address" in out, out
    assert proxy.hits == [_url(public, "/page"), _url(public, f"/redirect?to={_url(internal, '/secret')}")]
    assert internal.hits == []


# --- name lookups under the deadline --------------------------------------------------------------------


@pytest.mark.parametrize("allow_private", [False, True], ids=["checked-lookup", "connection-lookup"])
def test_a_slow_name_lookup_cannot_hold_a_visit_past_its_timeout(internal, monkeypatch, allow_private):
    release, started, finished = threading.Event(), [], []

    def slow(host, port):  # a resolver that answers only when the test lets it
        started.append(host)
        release.wait(30)
        finished.append(host)
        return ["127.0.0.1"]

    monkeypatch.setattr(netguard, "resolve", slow)
    url = f"http://slow.example:{internal.server_address[1]}/secret"
    try:
        out = _visit(url, allow_private_urls=allow_private, http_timeout_s=1)
        assert out == f"Error: timed out after 1 s fetching {url}"
        assert started == ["slow.example"] and finished == []  # visit answered while the lookup still hung
    finally:
        release.set()
    assert internal.hits == []
