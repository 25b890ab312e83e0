"""The ``visit`` tool: read one page or corpus document and keep what serves the caller's goal.

Where the text comes from, in order: a document of the local corpus (by ``corpus://`` URL, its own
URL, id or title, so that visiting works offline), Jina Reader when ``JINA_API_KEY`` is set, or a
direct download turned into text with BeautifulSoup. Only ``http(s)`` URLs and corpus documents
are read. Web URLs must lead to public addresses (:mod:`amb_dspy.tools.netguard`; every redirect hop
is checked, and ``AMB_ALLOW_PRIVATE_URLS=1`` lifts this); downloads are streamed and stop at a size
cap and at a deadline that bounds the whole download, name lookups included; binary content is
refused. Error lines show URLs escaped and shortened, so they stay one line.

Short texts are returned as they are. Longer ones are cut to a budget (the passages that best match
the goal, by BM25) and handed to :class:`GoalExtractor`, a small DSPy module run with whatever LM is
configured. If extraction fails, the tool falls back to the cut text, shortened further.
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import urljoin, urlsplit

import dspy
import requests

from amb_dspy.errors import AmbError, one_line
from amb_dspy.text import is_binary
from amb_dspy.tools.netguard import FetchGuard, ResolutionTimeout, URLRefused, check_url, guarded_session, shown
from amb_dspy.tools.text import html_to_text, normalize_whitespace, select_for_goal, truncate

if TYPE_CHECKING:
    from amb_dspy.config import ToolSettings
    from amb_dspy.tools.corpus import LocalCorpus

JINA_ENDPOINT = "https://r.jina.ai/"
MAX_REDIRECTS = 5
USER_AGENT = "Mozilla/5.0 (compatible; amb-dspy visit tool; +https://github.com/)"
_HTML_TYPES = {"text/html", "application/xhtml+xml"}
_TEXT_TYPES = {"application/json", "application/ld+json", "application/xml", "application/rss+xml",
               "application/atom+xml", "application/javascript", "application/x-yaml", "application/yaml"}


class VisitError(AmbError, RuntimeError):
    """A page cannot be read; the message is one line."""


class _PageRefused(VisitError):
    """The page itself may not be fetched: no other way of reading it is tried."""


class ExtractForGoal(dspy.Signature):
    """Read a web page or document and extract what serves the goal.

    Keep facts exactly as written (names, dates, numbers, places). Quote the relevant sentences as
    evidence; if the content does not address the goal, say so plainly instead of guessing.
    """

    content: str = dspy.InputField(desc="text of the page or document (parts may be left out, marked [...])")
    goal: str = dspy.InputField(desc="what the reader wants to learn from this page")
    evidence: str = dspy.OutputField(desc="the sentences of the content that bear on the goal, quoted closely")
    summary: str = dspy.OutputField(desc="a short, self-contained statement of what the content says about the goal")


class GoalExtractor(dspy.Module):
    """One predictor, ``extract``, over :class:`ExtractForGoal`."""

    def __init__(self):
        super().__init__()
        self.extract = dspy.Predict(ExtractForGoal)

    def forward(self, content: str, goal: str) -> dspy.Prediction:
        return self.extract(content=content, goal=goal)


def _content_type(response: requests.Response) -> tuple[str, str | None]:
    """``(media type, charset or None)`` from the Content-Type header."""
    raw = response.headers.get("Content-Type", "")
    media, _, params = raw.partition(";")
    charset = None
    for param in params.split(";"):
        name, _, value = param.partition("=")
        if name.strip().lower() == "charset" and value.strip():
            charset = value.strip().strip("\"'")
    return media.strip().lower(), charset


def _decode(body: bytes, charset: str | None) -> str:
    for encoding in filter(None, (charset, "utf-8")):
        try:
            return body.decode(encoding)
        except (UnicodeDecodeError, LookupError):
            continue
    return body.decode("latin-1")


class VisitTool:
    """``visit(url, goal) -> str``: the goal-relevant content of a page, or one ``Error:`` line.

    Args:
        settings: the tools' section of the settings (``config.tools``): timeouts (``http_timeout_s``), caps
            (``visit_max_chars``), ``jina_api_key`` and ``allow_private_urls``.
        corpus: the local corpus, whose documents are served without any network.
        extractor: the goal extractor (a :class:`GoalExtractor` unless given; any callable
            ``(content=..., goal=...)`` returning an object with ``evidence`` and ``summary``).
        direct_chars: texts up to this size are returned whole, with no LM call.
        extract_chars: how much text, at most, goes to the extractor.
        fallback_chars: how much text comes back when extraction fails.
        max_download_bytes: download cap; defaults to 4 x ``visit_max_chars`` because HTML markup is
            typically several times the size of its text.
        jina_endpoint: Jina Reader's base URL (the page URL is appended to it).
    """

    def __init__(self, settings: ToolSettings, corpus: LocalCorpus | None = None, extractor=None, *,
                 direct_chars: int = 2500, extract_chars: int = 12_000, fallback_chars: int = 4_000,
                 max_download_bytes: int | None = None, jina_endpoint: str = JINA_ENDPOINT,
                 session: requests.Session | None = None):
        self.corpus = corpus
        self.extractor = extractor if extractor is not None else GoalExtractor()
        self.direct_chars = direct_chars
        self.extract_chars = extract_chars
        self.fallback_chars = fallback_chars
        self.max_chars = settings.visit_max_chars
        self.max_download_bytes = max_download_bytes or 4 * settings.visit_max_chars
        self.timeout = settings.http_timeout_s
        self.jina_api_key = settings.jina_api_key
        self.jina_endpoint = jina_endpoint
        self.allow_private = settings.allow_private_urls
        self.session = guarded_session(session)

    # --- the tool ----------------------------------------------------------------------------
    def __call__(self, url: str, goal: str) -> str:
        url = str(url).strip().strip("<>\"'`").strip()
        goal = " ".join(str(goal).split()) or "the main facts of this page"
        if not url:
            return "Error: no url given; pass a url from the search results."
        try:
            url, title, text = self.read(url)
        except VisitError as exc:
            return f"Error: {exc}"
        except Exception as exc:  # noqa: BLE001 - a tool reports, it never raises into the agent loop
            return f"Error: cannot read {shown(url)}: {type(exc).__name__}: {one_line(exc)}"
        if not text.strip():
            return f"Error: {shown(url)} has no readable text."
        return self.extract(url, title, text, goal)

    # --- reading -----------------------------------------------------------------------------
    def read(self, url: str) -> tuple[str, str, str]:
        """``(url, title, text)`` of a corpus document or a web page; raises :class:`VisitError`.

        The url returned is the document's own for a corpus document (the caller may have named
        it by title or id), else the one given.
        """
        if self.corpus is not None:
            doc = self.corpus.document(url)
            if doc is not None:
                return doc.url, doc.title, doc.text
        scheme = urlsplit(url).scheme.lower()
        if scheme == "corpus":
            hint = "" if self.corpus is not None else " (no local corpus is loaded)"
            raise VisitError(f"no document {shown(url)} in the local corpus{hint}; use a url from the search results")
        if scheme not in ("http", "https") or not urlsplit(url).netloc:
            raise VisitError(
                f"cannot visit {shown(url)}: only http(s) URLs and documents of the local corpus can be visited")
        if self.jina_api_key:
            try:
                return (url, *self._via_jina(url))
            except _PageRefused:
                raise
            except VisitError as jina_error:
                try:
                    return (url, *self._direct(url))
                except VisitError as exc:
                    raise VisitError(f"{exc} (Jina Reader failed too: {jina_error})") from None
        return (url, *self._direct(url))

    def _check(self, url: str, refused: type[VisitError] = VisitError) -> None:
        try:
            check_url(url, allow_private=self.allow_private)
        except URLRefused as exc:
            raise refused(str(exc)) from None

    def _get(self, url: str, headers: dict[str, str], page: str | None = None) -> tuple[bytes, str, str | None, bool]:
        """Stream a GET: ``(body, media type, charset, truncated)``, within the size cap and the deadline.

        Redirects are followed here, each hop checked like the first URL; the deadline bounds the
        whole download, name lookups and hops included (see :class:`~amb_dspy.tools.netguard.FetchGuard`).
        ``page``: the page a reader service (Jina) is asked for, checked first like a URL fetched here.
        """
        timed_out = VisitError(f"timed out after {self.timeout:g} s fetching {shown(url)}")
        with FetchGuard(self.timeout, allow_private=self.allow_private) as guard:
            try:
                if page is not None:
                    self._check(page, refused=_PageRefused)
                with self._follow(url, headers) as response:
                    media, charset = _content_type(response)
                    chunks: list[bytes] = []
                    size, truncated = 0, False
                    for chunk in response.iter_content(chunk_size=64 * 1024):
                        if guard.expired:
                            raise timed_out
                        chunks.append(chunk)
                        size += len(chunk)
                        if size >= self.max_download_bytes:
                            truncated = True
                            break
                    if guard.expired and not truncated:  # a shut-down socket can look like the end of the body
                        raise timed_out
            except URLRefused as exc:
                raise VisitError(str(exc)) from None
            except ResolutionTimeout:
                raise timed_out from None
            except requests.RequestException as exc:
                if guard.expired or isinstance(exc, requests.Timeout):
                    raise timed_out from None
                raise VisitError(f"cannot fetch {shown(url)}: {one_line(exc)}") from None
        return b"".join(chunks)[: self.max_download_bytes], media, charset, truncated

    def _follow(self, url: str, headers: dict[str, str]) -> requests.Response:
        """The streamed response at the end of ``url``'s redirects (at most ``MAX_REDIRECTS``), every hop checked."""
        for _ in range(MAX_REDIRECTS + 1):
            self._check(url)
            response = self.session.get(url, headers=headers, stream=True, timeout=self.timeout, allow_redirects=False)
            target = self.session.get_redirect_target(response)
            if target is None:
                if response.status_code >= 400:
                    response.close()
                    reason = " ".join(str(response.reason or "").split())[:100]
                    raise VisitError(f"{shown(url)} answered HTTP {response.status_code} {reason}".rstrip())
                return response
            response.close()
            target = urljoin(url, target)
            if urlsplit(target).netloc != urlsplit(url).netloc:  # credentials stay with their host
                headers = {k: v for k, v in headers.items() if k.lower() != "authorization"}
            url = target
        raise VisitError(f"too many redirects: more than {MAX_REDIRECTS}, the last to {shown(url)}")

    def _direct(self, url: str) -> tuple[str, str]:
        body, media, charset, truncated = self._get(url, {"User-Agent": USER_AGENT, "Accept": "text/html,text/plain;q=0.9,*/*;q=0.5"})
        head = body[:2048]
        is_html = media in _HTML_TYPES or (not media and head.lstrip()[:15].lower().startswith((b"<!doctype html", b"<html")))
        textual = is_html or media.startswith("text/") or media in _TEXT_TYPES or not media
        if not textual or (not media and is_binary(body)):
            raise VisitError(f"{shown(url)} is {media or 'binary data'}, not a web page or text; "
                             "visit reads HTML and plain text only")
        if is_binary(body):
            raise VisitError(f"{shown(url)} is served as {media} but holds binary data, not text; "
                             "visit reads HTML and plain text only")
        if is_html:
            title, text = html_to_text(body, encoding=charset)
        else:
            title, text = "", normalize_whitespace(_decode(body, charset))
        if truncated:
            text += f"\n\n[... page cut at {self.max_download_bytes} bytes]"
        return title, text

    def _via_jina(self, url: str) -> tuple[str, str]:
        body, _media, charset, truncated = self._get(
            self.jina_endpoint + url,
            {"Authorization": f"Bearer {self.jina_api_key}", "Accept": "text/plain", "User-Agent": USER_AGENT},
            page=url,
        )
        text = _decode(body, charset).strip()
        title = ""
        first = text.split("\n", 1)[0]
        if first.startswith("Title:"):
            title = first[len("Title:"):].strip()
        if truncated:
            text += f"\n\n[... page cut at {self.max_download_bytes} bytes]"
        return title, text

    # --- extraction --------------------------------------------------------------------------
    def extract(self, url: str, title: str, text: str, goal: str) -> str:
        """Short text whole; long text cut to the goal's passages, then the extractor's evidence and summary."""
        text = truncate(text, self.max_chars)
        heading = f"{shown(url)} ({truncate(' '.join(title.split()), 200)})" if title else shown(url)
        if len(text) <= self.direct_chars:
            return f"Content of {heading}:\n{text}"
        cut = select_for_goal(text, goal, self.extract_chars)
        try:
            prediction = self.extractor(content=cut, goal=goal)
            evidence = str(getattr(prediction, "evidence", "") or "").strip()
            summary = str(getattr(prediction, "summary", "") or "").strip()
        except Exception as exc:  # noqa: BLE001 - any LM trouble falls back to the raw text
            reason = f"{type(exc).__name__}: {one_line(exc, 150)}"
        else:
            if evidence or summary:
                return (f"The useful information in {heading} for the goal '{goal}':\n"
                        f"Evidence: {evidence or '(none quoted)'}\nSummary: {summary or '(none)'}")
            reason = "the extractor returned nothing"
        raw = select_for_goal(text, goal, self.fallback_chars)
        return f"Content of {heading} (goal extraction failed: {reason}; showing the parts closest to the goal):\n{raw}"
