"""Scrub secret values out of text before it reaches the job ledger, logs or error reports.

Job errors and tracebacks are stored and shown to people; a failed connection string or an
echoed request header must not put a credential there. Key names are kept so the message
still says *which* setting was involved.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

__all__ = [
    "BUILTIN",
    "REDACTED",
    "Redactor",
    "describe_exception",
    "printable",
    "redact_secrets",
]

REDACTED = "***REDACTED***"

_MARK = re.escape(REDACTED)

# Authorization schemes whose name is kept in front of the redacted credential.
_SCHEMES = (
    r"(?:basic|bearer|digest|token|negotiate|ntlm|hoba|mutual|api-?key|jwt|oauth|dpop|ssws"
    r"|aws4-hmac-sha256)"
)

# Key names whose value is secret. A key is a whole word made of [\w.-]: any prefix
# (db_password, X-Api-Key, aws_secret_access_key) but no suffix, so token_count, max_tokens,
# password_reset_url and passwordless stay readable.
_KEY_CORE = r"""
    (?: pass(?:word|wd|phrase)s?
      | pwd
      | secrets?
      | token
      | (?:api|access|secret|private|signing|encryption)[_-]?keys?
      | authorization
      | credentials?
      | session[_-]?(?:id|key)
      | sessid
      | (?P<cookie>cookies?)
    )
"""

_KV_RE = re.compile(
    rf"""
    (?<![\w.-])
    (?P<key>[\w.-]*?{_KEY_CORE})
    (?![\w.-])
    (?P<sep>(?>\\*["']?[ \t]*(?::=|=>|==|[:=])[ \t]*))
    (?P<q>\\*["'])?
    (?!(?:{_SCHEMES}[ \t]+)?{_MARK}|[\[{{]{_MARK}[\]}}]|-----BEGIN\ )
    (?!(?:null|none|nil)(?(q)(?P=q)|(?:[\s,;&)\]}}"']|$)))
    (?P<scheme>{_SCHEMES}[ \t]+)?
    (?P<value>
        (?(q)
            (?:(?!(?P=q))(?:\\.|[^\\\r\n]))+
        |
            (?(cookie)
                [^\s"'\\](?:[^\r\n"'\\]*[^\s"'\\])?
            |
                (?: \{{[^{{}}\r\n]*\}}
                  | \[[^\[\]\r\n]*\]
                  | (?![{{\[])(?:[^\s&,;"'\\]|\\(?![nrt"'\\]))+
                )
            )
        )
    )
    """,
    re.IGNORECASE | re.VERBOSE,
)

# scheme://user:password@host; the password runs to the last "@" of the authority.
_URL_RE = re.compile(
    rf"""
    (?P<prefix>(?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]*://[^\s:/@"'<>\\\[\]{{}}`]*:)
    (?!{_MARK}@)
    (?P<secret>[^\s/"'<>\\\[\]{{}}`]+)
    (?=@)
    """,
    re.VERBOSE,
)

# "Bearer <token>" anywhere; a following prose word ("bearer token expired") is not a token.
_BEARER_RE = re.compile(
    r"""
    (?<![\w-])
    (?P<prefix>bearer[ \t]+)
    (?!(?:a|an|the|of|to|in|is|was|for|and|or|with
          |tokens?|auth|authentication|authorization|scheme|header)
       (?![A-Za-z0-9._~+/=-]))
    (?P<secret>[A-Za-z0-9._~+/-]+=*)
    """,
    re.IGNORECASE | re.VERBOSE,
)

# A missing END line (truncated log) redacts to the end of the text rather than leak the key.
_PEM_RE = re.compile(
    r"""
    (?P<begin>-----BEGIN[ A-Z0-9]*PRIVATE\ KEY[ A-Z0-9]*-----)
    (?P<pre>(?:\s|\\[rn])*)
    (?P<body>.*?)
    (?P<post>(?:\s|\\[rn])*)
    (?P<end>-----END[ A-Z0-9]*PRIVATE\ KEY[ A-Z0-9]*-----|\Z)
    """,
    re.DOTALL | re.VERBOSE,
)

# Credentials recognisable by their shape alone, wherever they appear.
_TOKEN_RES: tuple[re.Pattern[str], ...] = (
    re.compile(r"(?<![A-Za-z0-9])(?:AKIA|ASIA)[A-Z0-9]{16}(?![A-Za-z0-9])"),
    re.compile(r"(?<![A-Za-z0-9_])gh[pousr]_[A-Za-z0-9]{36,255}(?![A-Za-z0-9_])"),
    re.compile(r"(?<![A-Za-z0-9_])github_pat_[A-Za-z0-9_]{22,255}(?![A-Za-z0-9_])"),
    re.compile(r"(?<![A-Za-z0-9_-])xox[abeoprs]-[A-Za-z0-9-]+"),
    # planq's API tokens (domain/principals.py): `planq_` and 43 URL-safe characters, one at
    # least upper-case or a digit, so a metric's name (planq_jobs_total) stays readable.
    re.compile(r"(?<![A-Za-z0-9_-])planq_(?=[a-z_-]{0,42}[A-Z0-9])[A-Za-z0-9_-]{43}(?![\w-])"),
    # JWT: base64url JSON objects start "ey" ('{"' gives "eyJ" only when a letter follows).
    re.compile(r"(?<![A-Za-z0-9_-])ey[A-Za-z0-9_-]{10,}\.ey[A-Za-z0-9_-]{2,}\.[A-Za-z0-9_-]*"),
)

_MARK_RE = re.compile(_MARK)


def _kv_replace(match: re.Match[str]) -> str:
    """Keep key, separator, quotes, scheme and brackets so the message still reads right."""
    value = match["value"]
    if value[0] in "[{" and value[-1] in "]}":
        secret = f"{value[0]}{REDACTED}{value[-1]}"
    else:
        secret = REDACTED
    start = match.start("value") - match.start()
    end = match.end("value") - match.start()
    whole = match[0]
    return whole[:start] + secret + whole[end:]


def _pem_replace(match: re.Match[str]) -> str:
    """Keep the BEGIN/END lines so readers can tell a key was there."""
    return match["begin"] + match["pre"] + REDACTED + match["post"] + match["end"]


def _prefix_replace(match: re.Match[str]) -> str:
    """Keep what identifies the credential (URL user, "Bearer") and drop the credential."""
    return match["prefix"] + REDACTED


def _builtin_redact(text: str) -> str:
    """Run the built-in passes; PEM first and URLs before key/value so neither gets split."""
    text = _PEM_RE.sub(_pem_replace, text)
    text = _URL_RE.sub(_prefix_replace, text)
    text = _KV_RE.sub(_kv_replace, text)
    text = _BEARER_RE.sub(_prefix_replace, text)
    for pattern in _TOKEN_RES:
        text = pattern.sub(REDACTED, text)
    return text


def _subtract_marks(start: int, end: int, marks: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Cut already-redacted spans out of a range so a second pass cannot change anything."""
    pieces: list[tuple[int, int]] = []
    for mark_start, mark_end in marks:
        if mark_end <= start or mark_start >= end:
            continue
        if mark_start > start:
            pieces.append((start, mark_start))
        start = max(start, mark_end)
    if start < end:
        pieces.append((start, end))
    return pieces


def _apply_extra(pattern: re.Pattern[str], text: str) -> str:
    """Redact one caller pattern: its ``secret`` group if it has one, else the whole match."""
    group: int | str = "secret" if "secret" in pattern.groupindex else 0
    marks = [m.span() for m in _MARK_RE.finditer(text)]
    spans: list[tuple[int, int]] = []
    for match in pattern.finditer(text):
        start, end = match.span(group)
        if start < end:
            spans.extend(_subtract_marks(start, end, marks))
    if not spans:
        return text
    spans.sort()
    merged: list[tuple[int, int]] = []
    for start, end in spans:
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    parts: list[str] = []
    last = 0
    for start, end in merged:
        parts.append(text[last:start])
        parts.append(REDACTED)
        last = end
    parts.append(text[last:])
    return "".join(parts)


def _as_tuple(patterns: Iterable[str | re.Pattern[str]]) -> tuple[str | re.Pattern[str], ...]:
    """Freeze the patterns into a hashable key; a bare string would iterate as characters."""
    if isinstance(patterns, str | re.Pattern):
        raise TypeError("patterns must be an iterable of regexes, not a single regex")
    return tuple(patterns)


@functools.lru_cache(maxsize=128)
def _compile_extra(patterns: tuple[str | re.Pattern[str], ...]) -> tuple[re.Pattern[str], ...]:
    """Compile caller patterns once; a typo must fail loudly, naming the pattern."""
    compiled: list[re.Pattern[str]] = []
    for pattern in patterns:
        if isinstance(pattern, re.Pattern):
            if not isinstance(pattern.pattern, str):
                raise TypeError(f"redaction pattern {pattern!r} must be a str pattern")
            compiled.append(pattern)
        elif isinstance(pattern, str):
            try:
                compiled.append(re.compile(pattern))
            except re.error as exc:
                raise ValueError(f"invalid redaction pattern {pattern!r}: {exc}") from exc
        else:
            raise TypeError(f"redaction pattern must be str or re.Pattern, got {pattern!r}")
    return tuple(compiled)


@dataclass(frozen=True, slots=True)
class Redactor:
    """Built-in secret redaction plus site-specific patterns, validated once at start-up.

    planq builds ONE from settings (`PlanqSettings.redactor()`) in each composition root
    and hands it to everything that turns text into stored or shown text: the job ledger,
    the run engine and run stores, the log filter, the Celery tasks, the CLI and the API.
    """

    extra_patterns: tuple[re.Pattern[str], ...] = ()

    @classmethod
    def from_patterns(cls, patterns: Iterable[str | re.Pattern[str]]) -> Redactor:
        """Compile caller regexes, raising ValueError for one that is not a valid regex."""
        return cls(_compile_extra(_as_tuple(patterns)))

    def __call__(self, text: str) -> str:
        """Return ``text`` with every secret value replaced by ``REDACTED``."""
        if not isinstance(text, str):
            raise TypeError(f"can only redact str, got {type(text).__name__}")
        text = _builtin_redact(text)
        for pattern in self.extra_patterns:
            text = _apply_extra(pattern, text)
        return text

    def bounded(self, text: str, limit: int) -> str:
        """Redacted, storable (no NULs or controls) and at most `limit` characters."""
        shown = printable(self(str(text)))
        return shown if len(shown) <= limit else shown[: limit - 1] + "\u2026"

    def json_value(self, value: Any) -> Any:
        """A JSON value (a finding's detail) with every secret in it redacted.

        The serialised text is redacted as a whole, so a key/value pair spread over a dict
        entry (`{"password": "…"}`) is caught as in any text; if a pattern's match broke
        the JSON, every string (keys too) is redacted on its own instead.
        """
        text = json.dumps(value, ensure_ascii=False)
        redacted = self(text)
        if redacted == text:
            return value
        try:
            return json.loads(redacted)
        except ValueError:
            return self._each_string(value)

    def _each_string(self, value: Any) -> Any:
        if isinstance(value, str):
            return self(value)
        if isinstance(value, dict):
            return {self(str(k)): self._each_string(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self._each_string(v) for v in value]
        return value


#: Built-in patterns only: the spec's `redact_secrets(text)`, and the default of library
#: entry points used without planq's settings (the spec's `AsyncWorker(config, store, …)`).
BUILTIN = Redactor()


def redact_secrets(text: str, extra_patterns: Iterable[str | re.Pattern[str]] = ()) -> str:
    """Replace secret values with ``REDACTED`` (built-in patterns, plus any given here).

    The spec's form. planq's own code paths use the `Redactor` built from settings.
    """
    redactor = Redactor.from_patterns(extra_patterns) if extra_patterns != () else BUILTIN
    return redactor(text)


_UNSTORABLE = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ud800-\udfff]")


def printable(text: str) -> str:
    """Text any ledger can store and any terminal can show: NULs, controls, lone surrogates out."""
    return _UNSTORABLE.sub("\ufffd", text)


def describe_exception(exc: BaseException, redactor: Redactor, *, brief: bool = False) -> str:
    """`ExcType: message`, redacted; never raises, even when the exception's __str__ does.

    An exception can carry a secret in its message, and its __str__ can itself fail: this
    is the one way an exception becomes text for the ledger, a log line, Flower, the CLI or
    the API. `brief` is what a person reads in one line (the CLI's and API's errors): the
    message alone on one line, a pydantic error's first problem, a SQLAlchemy error's
    driver error rather than its SQL.
    """
    name = type(exc).__name__
    try:
        message = _brief(exc) if brief else str(exc)
    except Exception:  # a broken __str__: its own text is not to be trusted either
        message = "<unprintable message>"
    if brief:
        return printable(redactor(" ".join((message or name).split())))
    return printable(redactor(f"{name}: {message}" if message else name))


def _brief(exc: BaseException) -> str:
    """The part of exc a person acts on (duck-typed: the domain imports neither library)."""
    errors = getattr(exc, "errors", None)
    if callable(errors) and type(exc).__name__ == "ValidationError":
        first = errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or "value"
        return f"{where}: {first.get('msg', exc)}"
    original = getattr(exc, "orig", None)  # SQLAlchemy wraps the driver's error
    return str(original if original is not None else exc)
