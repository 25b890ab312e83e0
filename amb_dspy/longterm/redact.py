"""Redaction of personal data and secrets before anything is written to long-term memory.

Three kinds, each replaced by a placeholder (``[EMAIL]``, ``[PHONE]``, ``[SECRET]``):

* phone numbers: found by ``phonenumbers`` (the Python port of Google's libphonenumber), which knows
  every country's numbering plan. Phone numbers are where hand-written patterns fail most (they miss
  ``+33 1 42 68 53 00`` or take a year range or an ISBN for a number); the library finds numbers in
  international format anywhere, and national ones for ``region`` (default ``US``), and only numbers
  that are valid in their plan;
* e-mail addresses: the "valid e-mail address" pattern of the HTML Living Standard (what browsers
  check ``<input type=email>`` with), with a dot in the domain required;
* API keys and tokens: the fixed formats their issuers document (OpenAI, Anthropic, GitHub, AWS,
  Google, Slack, Stripe, JWTs, ``Bearer`` headers), the value of ``api_key=`` / ``token:``-style
  assignments, and, as a catch-all, long base64-like strings with the character mix and entropy of
  random keys (hex digests and UUIDs stay: their entropy is lower).

Heavier PII libraries (Presidio, scrubadub) need spaCy or NLTK models, which cannot be loaded offline.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field

import phonenumbers

EMAIL = "[EMAIL]"
PHONE = "[PHONE]"
SECRET = "[SECRET]"

_EMAIL = re.compile(
    r"[A-Za-z0-9.!#$%&'*+/=?^_`{|}~-]+@[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
    r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)+"
)
_KNOWN_KEYS = re.compile(
    r"""(?x)
    \b(?:
        sk-(?:ant-|proj-)?[A-Za-z0-9_-]{20,}          # OpenAI, Anthropic
      | gh[pousr]_[A-Za-z0-9]{30,}                      # GitHub tokens
      | github_pat_[A-Za-z0-9_]{30,}                    # GitHub fine-grained tokens
      | (?:AKIA|ASIA)[0-9A-Z]{16}                       # AWS access key ids
      | AIza[0-9A-Za-z_-]{35}                           # Google API keys
      | xox[abposr]-[A-Za-z0-9-]{10,}                   # Slack tokens
      | (?:sk|rk|pk)_(?:live|test)_[0-9A-Za-z]{16,}     # Stripe keys
      | eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}  # JSON Web Tokens
    )
    """
)
_BEARER = re.compile(r"(?i)\b(bearer\s+)(?!\[)([A-Za-z0-9._~+/-]{16,}=*)")
_ASSIGNED = re.compile(
    r"""(?ix)
    \b((?:api[_-]?key|apikey|secret(?:[_-]?key)?|access[_-]?(?:key|token)|auth[_-]?token|token|password|passwd)
    ["']?\s*[:=]\s*["']?)
    (?!\[)([^\s"',;]{8,})      # not a value redacted already
    """
)
_LONG_TOKEN = re.compile(r"[A-Za-z0-9+/_=-]{32,}")
_MIN_ENTROPY = 4.0  # bits per character; hex tops out at 4.0, random base64 keys are near 5


@dataclass(frozen=True)
class Redaction:
    """The redacted text and how many of each kind were replaced."""

    text: str
    found: dict[str, int] = field(default_factory=dict)


def _entropy(token: str) -> float:
    counts = Counter(token)
    return -sum(c / len(token) * math.log2(c / len(token)) for c in counts.values())


def _looks_random(token: str) -> bool:
    return (any(c.isdigit() for c in token) and any(c.isupper() for c in token)
            and any(c.islower() for c in token) and _entropy(token) > _MIN_ENTROPY)


def redact(text: str, *, region: str = "US") -> Redaction:
    """Replace e-mail addresses, phone numbers and API-key-like strings in ``text``.

    Secrets go first (a key may contain digit runs that parse as a phone number), then e-mails, then
    phone numbers.
    """
    found: Counter[str] = Counter()

    def replace(placeholder: str, kind: str):
        def sub(match: re.Match) -> str:
            found[kind] += 1
            return placeholder
        return sub

    def replace_value(kind: str):
        def sub(match: re.Match) -> str:
            found[kind] += 1
            return match.group(1) + SECRET
        return sub

    text = _KNOWN_KEYS.sub(replace(SECRET, "secret"), text)
    text = _BEARER.sub(replace_value("secret"), text)
    text = _ASSIGNED.sub(replace_value("secret"), text)
    text = _LONG_TOKEN.sub(lambda m: replace(SECRET, "secret")(m) if _looks_random(m.group()) else m.group(), text)
    text = _EMAIL.sub(replace(EMAIL, "email"), text)
    pieces, last = [], 0
    for match in phonenumbers.PhoneNumberMatcher(text, region, leniency=phonenumbers.Leniency.VALID):
        pieces += [text[last:match.start], PHONE]
        last = match.end
        found["phone"] += 1
    text = "".join(pieces) + text[last:]
    return Redaction(text, dict(found))
