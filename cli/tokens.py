"""`planq tokens …`: the admin API's principals, each a name, its roles and one token.

A token is shown once, when it is made (or rotated): the ledger keeps only its hash.
Revoking or rotating reaches every API process at its next request (each request reads
the principal's row), so a leaked token is dead as soon as the command returns.
"""

from __future__ import annotations

from typing import Annotated

import typer

from planq.cli.context import planq
from planq.cli.output import Refused, boundary, emit_json, print_fields, print_table

tokens_app = typer.Typer(help="The admin API's principals and their tokens.", no_args_is_help=True)

Name = Annotated[str, typer.Argument(help="The principal's name (a-z 0-9 . _ -).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON document (for scripts).")]
Quiet = Annotated[bool, typer.Option("--quiet", "-q", help="Print the token alone, one line.")]
COLUMNS = ("name", "roles", "created", "last used", "expires", "revoked")


def _show_token(title: str, token: str, fields: dict[str, object], quiet: bool) -> None:
    if quiet:
        typer.echo(token)
        return
    print_fields(title, fields)
    typer.echo(token)
    typer.echo(
        "planq: the token is shown once: keep it now (the ledger has only its hash)", err=True
    )


@tokens_app.command("create")
@boundary
def create(
    name: Name,
    role: Annotated[
        list[str],
        typer.Option("--role", help="read, operate, approve or admin (repeat for several)."),
    ],
    expires: Annotated[
        int | None, typer.Option("--expires", help="Days until the token expires (1..3650).")
    ] = None,
    quiet: Quiet = False,
) -> None:
    """Make a principal and print its token once; exit 2 on a bad name or role."""
    from planq.domain.principals import (
        Principal,
        check_name,
        expiry,
        new_token,
        parse_roles,
        token_hash,
    )

    principal = Principal(
        name=check_name(name), roles=parse_roles(role), expires_at=expiry(expires)
    )
    token = new_token()
    with planq() as session:
        session.ledger.principals.add(principal, token_hash(token))
    _show_token(f"principal {principal.name}", token, principal.as_cli_dict(), quiet)


@tokens_app.command("rotate")
@boundary
def rotate(name: Name, quiet: Quiet = False) -> None:
    """A new token for NAME (same roles); the old one is refused from now on; exit 1 if none."""
    from planq.domain.principals import new_token, token_hash

    token = new_token()
    with planq() as session:
        store = session.ledger.principals
        if not store.rotate(name, token_hash(token)):
            raise Refused(f"no active principal named {name[:70]!r}")
        principal = store.get(name)
    _show_token(f"principal {name}", token, principal.as_cli_dict() if principal else {}, quiet)


@tokens_app.command("list")
@boundary
def list_tokens(as_json: JsonOpt = False) -> None:
    """Principals by name: roles, created, last used, expires (never a token)."""
    with planq() as session:
        principals = session.ledger.principals.list()
    if as_json:
        emit_json([p.as_cli_dict() for p in principals])
        return
    rows = (
        [
            p.name,
            " ".join(sorted(r.value for r in p.roles)),
            p.created_at,
            p.last_used_at,
            p.expires_at,
            p.revoked_at,
        ]
        for p in principals
    )
    print_table("principals", COLUMNS, rows, empty="no principals (`planq tokens create`)")


@tokens_app.command("revoke")
@boundary
def revoke(name: Name) -> None:
    """Refuse NAME's token from now on, in every API process; exit 1 if none is active."""
    with planq() as session:
        if not session.ledger.principals.revoke(name):
            raise Refused(f"no active principal named {name[:70]!r}")
    typer.echo(f"principal {name} revoked")
