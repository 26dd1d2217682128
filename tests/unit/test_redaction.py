"""Secret redaction: every supported shape loses its value, prose and key names survive."""

from __future__ import annotations

import base64
import dataclasses
import json
import re
import string
import time

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from planq.domain.redaction import BUILTIN, REDACTED, Redactor, describe_exception, redact_secrets

# No example database, as in the other unit tests: failures print their reproducing example.
PROPERTY = settings(
    database=None,
    deadline=None,
    max_examples=150,
    suppress_health_check=[HealthCheck.too_slow],
)

R = REDACTED


# --- example tables ------------------------------------------------------------------------

KEY_VALUE_CASES = [
    # k=v, k: v, k = v
    ("password=hunter2", f"password={R}"),
    ("login failed: password=hunter2 user=bob", f"login failed: password={R} user=bob"),
    ("db_password: s3cr3t, host=db", f"db_password: {R}, host=db"),
    ("PASSWD = abc123", f"PASSWD = {R}"),
    ("pwd=abc123", f"pwd={R}"),
    ("MYSQL_PWD=abc123", f"MYSQL_PWD={R}"),
    ("PGPASSWORD=abc123", f"PGPASSWORD={R}"),
    ("passphrase: open-sesame", f"passphrase: {R}"),
    ("secret=xyz", f"secret={R}"),
    ("client_secret=xyz", f"client_secret={R}"),
    ("token=xyz", f"token={R}"),
    ("auth_token=xyz", f"auth_token={R}"),
    ("refresh_token=xyz", f"refresh_token={R}"),
    ("access_token: xyz", f"access_token: {R}"),
    ("api_key=xyz", f"api_key={R}"),
    ("apikey=xyz", f"apikey={R}"),
    ("api-key=xyz", f"api-key={R}"),
    ("X-Api-Key: xyz", f"X-Api-Key: {R}"),
    ("access_key=xyz", f"access_key={R}"),
    ("secret_key=xyz", f"secret_key={R}"),
    ("private_key=xyz", f"private_key={R}"),
    ("AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG", f"AWS_SECRET_ACCESS_KEY={R}"),
    ("credential=xyz", f"credential={R}"),
    ("credentials: xyz", f"credentials: {R}"),
    ("sessionid=xyz", f"sessionid={R}"),
    ("session_id=xyz", f"session_id={R}"),
    ("database.password=xyz", f"database.password={R}"),
    ("--password=xyz --verbose", f"--password={R} --verbose"),
    ("password := xyz", f"password := {R}"),
    ("password => xyz", f"password => {R}"),
    # a value stops at whitespace, &, comma and semicolon
    ("token=abc&page=2", f"token={R}&page=2"),
    ("token=abc; path=/", f"token={R}; path=/"),
    # JSON, escaped quotes and spaces inside the value
    ('{"password": "hunter2"}', f'{{"password": "{R}"}}'),
    ('{"password":"a \\"quoted\\" pass","user":"bob"}', f'{{"password":"{R}","user":"bob"}}'),
    ('{"db_password": "with spaces in it", "n": 1}', f'{{"db_password": "{R}", "n": 1}}'),
    # JSON inside a JSON string
    ('{"msg": "{\\"token\\": \\"abc\\"}"}', f'{{"msg": "{{\\"token\\": \\"{R}\\"}}"}}'),
    # Python repr
    ("{'api_key': 'abc123', 'retries': 3}", f"{{'api_key': '{R}', 'retries': 3}}"),
    ("Settings(password='abc 123')", f"Settings(password='{R}')"),
    # flat containers lose their content, keep their brackets
    ("api_keys=['a', 'b']", f"api_keys=[{R}]"),
    ("credentials={'user': 'u', 'pw': 'p'}", f"credentials={{{R}}}"),
    # a nested container is left to the keys inside it
    (
        '{"credentials": {"db": {"user": "u"}, "password": "p"}}',
        f'{{"credentials": {{"db": {{"user": "u"}}, "password": "{R}"}}}}',
    ),
]

QUERY_STRING_CASES = [
    ("GET /cb?token=abc123&page=2 HTTP/1.1", f"GET /cb?token={R}&page=2 HTTP/1.1"),
    ("https://api.example.com/v1?api_key=abc&x=1", f"https://api.example.com/v1?api_key={R}&x=1"),
    ("/login?user=bob&password=p%40ss", f"/login?user=bob&password={R}"),
    ("?access_token=abc.def-ghi", f"?access_token={R}"),
]

HEADER_CASES = [
    ("Authorization: Basic dXNlcjpwYXNz", f"Authorization: Basic {R}"),
    ("Authorization: Bearer abc.def.ghi", f"Authorization: Bearer {R}"),
    ("authorization: bearer abc", f"authorization: bearer {R}"),
    ("Proxy-Authorization: Basic dXNlcjpwYXNz", f"Proxy-Authorization: Basic {R}"),
    ("Authorization: opaque-credential", f"Authorization: {R}"),
    ('{"Authorization": "Bearer abc def"}', f'{{"Authorization": "Bearer {R}"}}'),
    ("{'Authorization': 'Token abc'}", f"{{'Authorization': 'Token {R}'}}"),
    ("token: Bearer abc", f"token: Bearer {R}"),
    ("Cookie: sessionid=abc; csrftoken=def", f"Cookie: {R}"),
    ("Set-Cookie: session=abc; Path=/; HttpOnly\nnext line", f"Set-Cookie: {R}\nnext line"),
]

BEARER_CASES = [
    ("sent Bearer abc123 to the API", f"sent Bearer {R} to the API"),
    ("bearer dGhpcyBpcyBh+/==", f"bearer {R}"),
    ("BEARER abc.def_ghi~jkl", f"BEARER {R}"),
]

URL_CASES = [
    ("postgres://planq:s3cret@db:5432/planq", f"postgres://planq:{R}@db:5432/planq"),
    ("redis://:s3cret@cache:6379/0", f"redis://:{R}@cache:6379/0"),
    ("amqp://guest:pa:ss@rabbit//", f"amqp://guest:{R}@rabbit//"),
    ("redis://:p@ss@cache:6379", f"redis://:{R}@cache:6379"),
    ("sqlite+pysqlite://u:p%2Fq@h/x", f"sqlite+pysqlite://u:{R}@h/x"),
    ('{"url": "redis://:pw@h", "mail": "a@b.c"}', f'{{"url": "redis://:{R}@h", "mail": "a@b.c"}}'),
    ("broker=redis://:pw@cache", f"broker=redis://:{R}@cache"),
    ("https://token:abc@github.com/x", f"https://token:{R}@github.com/x"),
]

PEM_BODY = "MIIEowIBAAKCAQEA1\nb2xkZXIgc2VjcmV0\nc3R1ZmY=\n"

KNOWN_FORMAT_CASES = [
    ("key id AKIAIOSFODNN7EXAMPLE leaked", f"key id {R} leaked"),
    ("ASIAY34FZKBOKMUTVV7A", R),
    ("clone with ghp_" + "a1B2" * 9 + " failed", f"clone with {R} failed"),
    ("gho_" + "Z" * 36, R),
    ("ghs_" + "0" * 36, R),
    ("github_pat_" + "A1_b" * 10, R),
    ("slack xoxb-123456-789012-AbCdEf said no", f"slack {R} said no"),
    ("xoxp-1-2-3-abc", R),
    ("xoxa-2-abc", R),
    ("token in eyJhbGciOiJub25lIn0.eyIwIjoxfQ. header", f"token in {R} header"),
    (
        "jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c "
        "expired",
        f"jwt {R} expired",
    ),
    (
        f"-----BEGIN RSA PRIVATE KEY-----\n{PEM_BODY}-----END RSA PRIVATE KEY-----\nafter",
        f"-----BEGIN RSA PRIVATE KEY-----\n{R}\n-----END RSA PRIVATE KEY-----\nafter",
    ),
    (
        f"-----BEGIN PRIVATE KEY-----\n{PEM_BODY}-----END PRIVATE KEY-----",
        f"-----BEGIN PRIVATE KEY-----\n{R}\n-----END PRIVATE KEY-----",
    ),
    (
        f"-----BEGIN OPENSSH PRIVATE KEY-----\n{PEM_BODY}-----END OPENSSH PRIVATE KEY-----",
        f"-----BEGIN OPENSSH PRIVATE KEY-----\n{R}\n-----END OPENSSH PRIVATE KEY-----",
    ),
    # JSON-escaped newlines (a service-account file) keep the escapes and stay valid JSON
    (
        '{"private_key": "-----BEGIN PRIVATE KEY-----\\nMIIE\\nAbC='
        '\\n-----END PRIVATE KEY-----\\n"}',
        '{"private_key": "-----BEGIN PRIVATE KEY-----\\n' + R + '\\n-----END PRIVATE KEY-----\\n"}',
    ),
    # a truncated block is redacted to the end rather than leaked
    (f"-----BEGIN EC PRIVATE KEY-----\n{PEM_BODY}", f"-----BEGIN EC PRIVATE KEY-----\n{R}\n"),
]

ALL_CASES = (
    KEY_VALUE_CASES + QUERY_STRING_CASES + HEADER_CASES + BEARER_CASES + URL_CASES
) + KNOWN_FORMAT_CASES

# Ordinary text: a key name alone, without "=" or ":" and a value, is prose.
UNTOUCHED = [
    "",
    "token bucket refill failed",
    "passwordless login enabled",
    "the secret is to retry",
    "rotate the api key monthly",
    "max_tokens=4096 prompt_tokens: 12 token_count=5",
    "tokenizer=bert password_reset_url=https://example.com/reset",
    "password: None",
    "{'password': None, 'token': null}",
    '{"password": ""}',
    "bearer token expired",
    "Bearer authentication failed for the client",
    "connected to postgres://db:5432/planq",
    "http://host:8080/path@x",
    "mail bob@example.com about the session",
    "Phase execute finished in 3.2s (42 jobs, 0 retries)",
    "-----BEGIN PUBLIC KEY-----\nMIIBIjANBgkq\n-----END PUBLIC KEY-----",
    "AKIA is the prefix of an access key id",
    "ghp_tooshort",
    "look at eyes.eyebrows.json",
    "credential rotation scheduled",
    "ünïcødé text with secrets inside but no separator",
]


@pytest.mark.parametrize(("text", "expected"), KEY_VALUE_CASES)
def test_key_value_shapes(text: str, expected: str) -> None:
    assert redact_secrets(text) == expected


@pytest.mark.parametrize(("text", "expected"), QUERY_STRING_CASES)
def test_query_strings(text: str, expected: str) -> None:
    assert redact_secrets(text) == expected


@pytest.mark.parametrize(("text", "expected"), HEADER_CASES)
def test_headers_keep_the_scheme(text: str, expected: str) -> None:
    assert redact_secrets(text) == expected


@pytest.mark.parametrize(("text", "expected"), BEARER_CASES)
def test_bearer_tokens_anywhere(text: str, expected: str) -> None:
    assert redact_secrets(text) == expected


@pytest.mark.parametrize(("text", "expected"), URL_CASES)
def test_url_credentials(text: str, expected: str) -> None:
    assert redact_secrets(text) == expected


@pytest.mark.parametrize(("text", "expected"), KNOWN_FORMAT_CASES)
def test_known_key_formats(text: str, expected: str) -> None:
    assert redact_secrets(text) == expected


@pytest.mark.parametrize("text", UNTOUCHED)
def test_prose_is_untouched(text: str) -> None:
    assert redact_secrets(text) == text


@pytest.mark.parametrize("text", [t for t, _ in ALL_CASES] + UNTOUCHED)
def test_idempotent_on_examples(text: str) -> None:
    once = redact_secrets(text)
    assert redact_secrets(once) == once


def test_key_match_is_case_insensitive() -> None:
    assert redact_secrets("DB_PASSWORD=x Api_Key=y") == f"DB_PASSWORD={R} Api_Key={R}"


def test_yaml_key_with_empty_value_does_not_swallow_next_line() -> None:
    text = "password:\nretries: 3"
    assert redact_secrets(text) == text


def test_multiline_log_keeps_lines() -> None:
    text = "connecting\npassword=abc\ntoken: def\ndone"
    assert redact_secrets(text) == f"connecting\npassword={R}\ntoken: {R}\ndone"


# --- extra patterns and Redactor -----------------------------------------------------------


def test_extra_pattern_named_group_replaces_only_the_group() -> None:
    text = "tenant acme uses license LIC-1234-5678"
    result = redact_secrets(text, [r"license (?P<secret>LIC-[\d-]+)"])
    assert result == f"tenant acme uses license {R}"


def test_extra_pattern_without_group_replaces_whole_match() -> None:
    result = redact_secrets("charge with sk_live_abc123 now", [r"sk_live_\w+"])
    assert result == f"charge with {R} now"


def test_extra_pattern_accepts_compiled_regex() -> None:
    pattern = re.compile(r"(?i)internal-id: (?P<secret>\d+)")
    assert redact_secrets("Internal-ID: 991", [pattern]) == f"Internal-ID: {R}"


def test_extra_patterns_run_after_built_ins_and_stay_idempotent() -> None:
    patterns = [r".{4}"]  # matches everything, including an earlier replacement
    once = redact_secrets("password=abc tail", patterns)
    assert "abc" not in once
    assert "tail" not in once
    assert redact_secrets(once, patterns) == once


def test_extra_pattern_matching_empty_string_changes_nothing() -> None:
    assert redact_secrets("nothing here", [r"x*", r"(?P<secret>y?)z*"]) == "nothing here"


def test_extra_pattern_secret_group_in_lookbehind() -> None:
    result = redact_secrets("pin 4321 ok", [r"(?<=pin (?P<secret>\d{4})) ok"])
    assert result == f"pin {R} ok"


@pytest.mark.parametrize("bad", ["(unclosed", "[a-", "*oops", "(?P<secret>x)(?P<secret>y)"])
def test_invalid_extra_pattern_names_the_pattern(bad: str) -> None:
    with pytest.raises(ValueError, match=re.escape(repr(bad))):
        redact_secrets("text", [bad])
    with pytest.raises(ValueError, match=re.escape(repr(bad))):
        Redactor.from_patterns(["ok", bad])


def test_redactor_from_patterns_is_frozen_and_callable() -> None:
    redactor = Redactor.from_patterns([r"acct-(?P<secret>\d+)"])
    assert redactor("acct-42 password=x") == f"acct-{R} password={R}"
    assert redactor == Redactor.from_patterns([r"acct-(?P<secret>\d+)"])
    with pytest.raises(dataclasses.FrozenInstanceError):
        redactor.extra_patterns = ()  # type: ignore[misc]


def test_default_redactor_matches_redact_secrets() -> None:
    text = "password=abc Bearer xyz123"
    assert Redactor()(text) == redact_secrets(text) == f"password={R} Bearer {R}"


def test_extra_patterns_accept_any_iterable() -> None:
    assert redact_secrets("a-1 b-2", (p for p in [r"a-\d", r"b-\d"])) == f"{R} {R}"


@pytest.mark.parametrize("value", [None, b"password=x", 42, ["password=x"]])
def test_non_str_text_is_a_type_error(value: object) -> None:
    with pytest.raises(TypeError):
        redact_secrets(value)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        Redactor()(value)  # type: ignore[arg-type]


@pytest.mark.parametrize("patterns", ["abc", re.compile("abc"), [b"abc"], [re.compile(b"x")], [1]])
def test_bad_pattern_container_or_type_is_a_type_error(patterns: object) -> None:
    with pytest.raises(TypeError):
        Redactor.from_patterns(patterns)  # type: ignore[arg-type]


def test_large_pathological_inputs_stay_linear() -> None:
    n = 100_000
    inputs = [
        "a" * n,
        "xpassword=" * (n // 10),
        "a://" * (n // 4),
        "http://u:" + "p:" * (n // 2),
        'password="' + "\\" * n,
        "Bearer " * (n // 7),
        "eyJa." * (n // 5),
        "password" + " " * n + "x",
        "token=[" + "[" * n,
        "-----BEGIN RSA PRIVATE KEY-----" * (n // 31),
    ]
    started = time.perf_counter()
    for text in inputs:
        redact_secrets(text)
    assert time.perf_counter() - started < 10


# --- properties ----------------------------------------------------------------------------

SECRET_ALPHABET = string.ascii_letters + string.digits + "-_.~+/"
secrets = st.text(alphabet=SECRET_ALPHABET, min_size=8, max_size=40)
url_secrets = st.text(alphabet=SECRET_ALPHABET.replace("/", ""), min_size=8, max_size=40)

PROSE_WORDS = [
    "job",
    "failed",
    "retrying",
    "the",
    "token",
    "bucket",
    "password",
    "secret",
    "session",
    "credentials",
    "passwordless",
    "phase",
    "execute",
    "3",
    "after",
    "42s",
    "worker-1",
    "(attempt",
    "2)",
    "error.",
]
prose = st.lists(st.sampled_from(PROSE_WORDS), max_size=6).map(" ".join)

KEY_PREFIXES = ["", "db_", "DB_", "X-", "client_", "aws_", "auth_", "refresh_", "PG", "app.", "--"]
KEY_CORES = [
    "password",
    "passwd",
    "pwd",
    "secret",
    "token",
    "api_key",
    "apikey",
    "api-key",
    "Api-Key",
    "access_key",
    "secret_key",
    "private_key",
    "secret_access_key",
    "credential",
    "credentials",
    "sessionid",
    "session_id",
    "authorization",
    "cookie",
]
keys = st.builds(
    lambda prefix, core, case: case(prefix + core),
    st.sampled_from(KEY_PREFIXES),
    st.sampled_from(KEY_CORES),
    st.sampled_from([str, str.upper, str.lower, str.title]),
)

KEY_VALUE_TEMPLATES = [
    "{key}={secret}",
    "{key}: {secret}",
    "{key} = {secret}",
    "{key}:{secret}",
    '"{key}": "{secret}"',
    '{{"{key}":"{secret}","retries":3}}',
    "{{'{key}': '{secret}', 'n': 1}}",
    "{key}='{secret}'",
    "https://api.example.com/cb?{key}={secret}&other=1",
    "/cb?page=2&{key}={secret}",
    "{key}: Bearer {secret}",
]
OTHER_TEMPLATES = [
    ("Authorization: Basic {secret}", "Authorization: Basic"),
    ("Authorization: Bearer {secret}", "Authorization: Bearer"),
    ('"Authorization": "Bearer {secret}"', '"Authorization": "Bearer'),
    ("Bearer {secret}", "Bearer"),
    ("calling api with bearer {secret} now", "bearer"),
]
URL_TEMPLATES = [
    ("redis://:{secret}@cache:6379/0", "@cache:6379/0"),
    ("postgresql+psycopg://planq:{secret}@db:5432/planq", "planq:"),
    ("amqp://guest:{secret}@rabbit//", "amqp://guest:"),
    ("broker_url=redis://user:{secret}@cache", "@cache"),
]


def embed(template: str, before: str, after: str, **values: str) -> str:
    """Put a shape between two runs of prose."""
    return " ".join(part for part in (before, template.format(**values), after) if part)


def check_redacted(text: str, secret: str, must_keep: str) -> None:
    """Assert the secret is gone and the context is not."""
    assume(secret not in text.replace(secret, R))
    result = redact_secrets(text)
    assert secret not in result
    assert must_keep in result
    assert redact_secrets(result) == result


@PROPERTY
@given(
    template=st.sampled_from(KEY_VALUE_TEMPLATES),
    key=keys,
    secret=secrets,
    before=prose,
    after=prose,
)
def test_key_value_secret_never_survives(
    template: str, key: str, secret: str, before: str, after: str
) -> None:
    check_redacted(embed(template, before, after, key=key, secret=secret), secret, key)


@PROPERTY
@given(
    shape=st.sampled_from(OTHER_TEMPLATES),
    secret=secrets,
    before=prose,
    after=prose,
)
def test_header_and_bearer_secret_never_survives(
    shape: tuple[str, str], secret: str, before: str, after: str
) -> None:
    template, must_keep = shape
    check_redacted(embed(template, before, after, secret=secret), secret, must_keep)


@PROPERTY
@given(shape=st.sampled_from(URL_TEMPLATES), secret=url_secrets, before=prose, after=prose)
def test_url_password_never_survives(
    shape: tuple[str, str], secret: str, before: str, after: str
) -> None:
    template, must_keep = shape
    check_redacted(embed(template, before, after, secret=secret), secret, must_keep)


@PROPERTY
@given(key=keys, secret=st.text(min_size=8, max_size=40), before=prose, after=prose)
def test_json_encoded_secret_never_survives(key: str, secret: str, before: str, after: str) -> None:
    # Any characters at all, as a JSON encoder would write them (escaped quotes, spaces, \uXXXX).
    encoded = json.dumps(secret)[1:-1]
    text = embed("{payload}", before, after, payload=json.dumps({key: secret, "retries": 3}))
    check_redacted(text, encoded, json.dumps(key))


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


jwts = st.builds(
    lambda claims, sig: ".".join(
        [_b64url(b'{"alg":"HS256"}'), _b64url(json.dumps(claims).encode()), _b64url(sig)]
    ),
    st.dictionaries(st.text(min_size=1, max_size=8), st.integers(), min_size=1, max_size=3),
    st.binary(min_size=16, max_size=64),
)
known_tokens = st.one_of(
    st.from_regex(r"(?:AKIA|ASIA)[A-Z0-9]{16}", fullmatch=True),
    st.from_regex(r"gh[pos]_[A-Za-z0-9]{36}", fullmatch=True),
    st.from_regex(r"xox[abp]-[0-9]{6,12}-[A-Za-z0-9]{8,24}", fullmatch=True),
    jwts,
)


@PROPERTY
@given(token=known_tokens, before=prose, after=prose)
def test_known_token_never_survives(token: str, before: str, after: str) -> None:
    check_redacted(embed("{token}", before, after, token=token), token, before)


@PROPERTY
@given(body=st.text(alphabet=string.ascii_letters + string.digits + "+/=\n", min_size=8))
def test_private_key_block_never_survives(body: str) -> None:
    text = f"key:\n-----BEGIN RSA PRIVATE KEY-----\n{body}\n-----END RSA PRIVATE KEY-----\nok"
    assume(body.strip() and body.strip() not in text.replace(body, R))
    result = redact_secrets(text)
    assert body.strip() not in result
    assert result.endswith("-----END RSA PRIVATE KEY-----\nok")


@PROPERTY
@given(st.lists(st.sampled_from([*PROSE_WORDS, "key", "api", "ok,", "x.", "auth"])).map(" ".join))
def test_prose_without_a_value_shape_is_untouched(text: str) -> None:
    assert redact_secrets(text) == text


FRAGMENTS = [
    "password",
    "token",
    "api_key",
    "Authorization",
    "cookie",
    "x",
    "Bearer",
    "Basic",
    "=",
    ":",
    " = ",
    "==",
    '"',
    "'",
    "\\",
    " ",
    "\n",
    "&",
    ",",
    ";",
    "?",
    "@",
    "/",
    "://",
    "redis",
    "[",
    "]",
    "{",
    "}",
    R,
    "***",
    "None",
    "-----BEGIN RSA PRIVATE KEY-----",
    "-----END RSA PRIVATE KEY-----",
    "AKIAIOSFODNN7EXAMPLE",
    "eyJa.eyJb.c",
    "xoxb-1",
]


@settings(PROPERTY, max_examples=500)
@given(st.lists(st.sampled_from(FRAGMENTS), max_size=14).map("".join))
def test_idempotent_on_fragment_soup(text: str) -> None:
    once = redact_secrets(text)
    assert redact_secrets(once) == once


@PROPERTY
@given(st.text(max_size=200))
def test_arbitrary_text_is_idempotent(text: str) -> None:
    once = redact_secrets(text)
    assert redact_secrets(once) == once


def test_describe_exception_never_raises_and_redacts() -> None:
    class Broken(Exception):
        def __str__(self) -> str:
            raise RuntimeError("password=hunter2")

    assert describe_exception(Broken(), BUILTIN) == "Broken: <unprintable message>"
    described = describe_exception(ValueError("token=abc123secret\x00 tail"), BUILTIN)
    assert described.startswith("ValueError: ") and "abc123secret" not in described
    assert "\x00" not in described
    assert describe_exception(KeyError(), BUILTIN) == "KeyError"
