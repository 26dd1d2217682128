"""`planq tokens create|list|rotate|revoke` on the ledger (SQLite and PostgreSQL).

A token is printed once (`--quiet`: alone, one line), the ledger keeps its hash only, a
listing never shows one, a rotation refuses the old token, a revoke refuses the current.
Found as every API process finds a caller: by the token's hash, in the ledger.
"""

from __future__ import annotations

import re

from sqlalchemy import text

from planq.domain.principals import token_hash
from planq.store.sql_principals import SqlPrincipalStore
from tests.integration import test_cli as cli_tests

ledger = cli_tests.ledger
env = cli_tests.env
Ledger = cli_tests.Ledger
TOKEN = re.compile(r"^planq_[A-Za-z0-9_-]{43}$")


def principal_of(led: Ledger, token: str) -> str | None:
    """The active principal token stands for, as the API finds it (by hash, then active)."""
    found = SqlPrincipalStore(led.db).find(token_hash(token))
    return found.name if found is not None and found.active() else None


def test_create_prints_the_token_once_and_the_ledger_keeps_its_hash(
    env: dict[str, str], ledger: Ledger
) -> None:
    token = cli_tests.ok("tokens", "create", "ci-bot", "--role", "operate", "--quiet").stdout
    assert TOKEN.match(token.strip()) and token.count("\n") == 1  # the token alone
    assert principal_of(ledger, token.strip()) == "ci-bot"
    shown = cli_tests.ok("tokens", "create", "alice", "--role", "approve", "--expires", "90")
    [second] = [w for w in shown.stdout.split() if w.startswith("planq_")]
    assert principal_of(ledger, second) == "alice"
    listing = cli_tests.ok("tokens", "list").stdout + str(cli_tests.ok_json("tokens", "list"))
    assert "ci-bot" in listing and "alice" in listing
    assert token.strip() not in listing and second not in listing and "planq_" not in listing
    with ledger.db.session() as s:  # the hash, never the token
        stored = s.execute(text("SELECT * FROM api_principals")).all()
    assert token.strip() not in str(stored) and token_hash(token.strip()) in str(stored)


def test_rotate_refuses_the_old_token_and_revoke_the_current(
    env: dict[str, str], ledger: Ledger
) -> None:
    old = cli_tests.ok("tokens", "create", "deployer", "--role", "operate", "-q").stdout.strip()
    new = cli_tests.ok("tokens", "rotate", "deployer", "--quiet").stdout.strip()
    assert TOKEN.match(new) and new != old
    assert principal_of(ledger, old) is None and principal_of(ledger, new) == "deployer"
    assert (
        cli_tests.ok("tokens", "revoke", "deployer").stdout.strip() == "principal deployer revoked"
    )
    assert principal_of(ledger, new) is None
    line = cli_tests.fails(1, "tokens", "revoke", "deployer")
    assert "no active principal" in line


def test_bad_names_and_roles_are_exit_2_and_write_nothing(
    env: dict[str, str], ledger: Ledger
) -> None:
    for args in (
        ("Bad Name", "--role", "read"),
        ("ok-name", "--role", "root"),
        ("x", "--role", ""),
    ):
        line = cli_tests.fails(2, "tokens", "create", *args)
        assert line.startswith("planq: ")
    assert cli_tests.ok_json("tokens", "list") == []
