"""Who may do what: the tokens file (TOML, `[[token]] name, sha256, roles, groups`), bearer
tokens checked against it, and the rule that decides each command and read.

Only the sha256 of a token is stored: `offset-ledger token add` prints the token once. Roles:
`consume` (pull, commit, and the progress and lag of its groups), `produce` (queue append,
truncate, bounds), `sync` (what a broker, a mirror, an importer or a follower sends: sync,
and queue append, truncate and bounds, the MaxOffset and MinOffset a sync brings along; a
group delete the cluster made, naming its source; it reads the progress of its groups, where a
follower keeps its position), `operate`
(resets, group set and delete, sync), `audit` (every read, SQL included), `backfill` (may give
a `ts` beyond the ledger's clock skew: alone it allows nothing else). `groups` are globs
restricting the groups a token may touch (default: all).
"""

from __future__ import annotations

import fnmatch
import functools
import hashlib
import hmac
import os
import re
import secrets
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ledger.commands.command import Command, op_of
from ledger.errors import InvalidInput
from ledger.limits import check_name

ROLES = ("consume", "produce", "operate", "audit", "sync", "backfill")
#: The roles that may send a command (any one of them suffices). A sync moves an offset
#: anywhere, as a reset does: a consumer may not (it commits, forward only, fenced).
ROLES_OF_OP = {"pull": ("consume",), "commit": ("consume",), "sync": ("sync", "operate"),
               "queue_append": ("produce", "sync"), "queue_truncate": ("produce", "sync"),
               "queue_bounds": ("produce", "sync"), "reset": ("operate",),
               "group_set": ("operate",), "group_delete": ("operate",)}
#: (A `sync` token may also delete a group the cluster removed, when the delete names its source.)
#: The role that may give a command's `ts` beyond the clock skew (ledger Writer.ts_limit_ms).
BACKFILL = "backfill"
TOKEN_BYTES = 32
#: A token's groups when it names none: every group.
ALL_GROUPS = ("*",)


@dataclass(frozen=True, slots=True)
class Token:
    """A token's entry: its name (the actor of everything it does), roles and group globs."""

    name: str
    sha256: str
    roles: tuple[str, ...]
    groups: tuple[str, ...] = ALL_GROUPS

    def may_group(self, group: str | None) -> bool:
        return (group is None or self.groups == ALL_GROUPS
                or _globs(self.groups).match(group) is not None)

    def denies(self, cmd: Command) -> str | None:
        """Why this token may not send `cmd` ("role" or "group"), or None."""
        op = op_of(cmd)
        if op not in _ops_of(self.roles) and not (
                op == "group_delete" and "sync" in self.roles
                and getattr(cmd, "source", None) is not None):
            return "role"
        return None if self.may_group(getattr(cmd, "group", None)) else "group"

    def may_backfill(self) -> bool:
        return BACKFILL in self.roles

    def may_read(self, group: str | None = None) -> bool:
        """Reads: audit reads everything; consume reads progress and lag of its groups."""
        return "audit" in self.roles or (group is not None and self.may_group(group) and (
            "consume" in self.roles or "sync" in self.roles))


@functools.lru_cache(maxsize=1024)
def _ops_of(roles: tuple[str, ...]) -> frozenset[str]:
    """The ops some role of `roles` may send (ROLES_OF_OP), once per set of roles."""
    return frozenset(op for op, allowed in ROLES_OF_OP.items() if set(allowed) & set(roles))


@functools.lru_cache(maxsize=1024)
def _globs(groups: tuple[str, ...]) -> re.Pattern[str]:
    """A token's group globs as one compiled pattern (fnmatch's, case-sensitive), once."""
    return re.compile("|".join(f"(?:{fnmatch.translate(g)})" for g in groups))


#: The sender when tokens are off (loopback only), the actor of its resets and group changes
#: that name none: everything is allowed but a backfill (a `ts` beyond the clock skew is
#: refused as from any sender; give a token the backfill role to send one).
ANYONE = Token(name="loopback", sha256="", roles=tuple(r for r in ROLES if r != BACKFILL))


class TokenFile:
    """The tokens of a file, looked up by the sha256 of what a client presents."""

    def __init__(self, tokens: Sequence[Token]) -> None:
        self.tokens = tuple(tokens)

    @classmethod
    def load(cls, path: Path) -> TokenFile:
        try:
            doc = tomllib.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise InvalidInput(f"tokens file {str(path)!r} does not exist") from None
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
            raise InvalidInput(f"unreadable tokens file {str(path)!r}: {e}") from None
        unknown = sorted(set(doc) - {"token"})
        if unknown:
            raise InvalidInput(f"unknown key {unknown[0]!r} in {path}: use [[token]] tables")
        tokens = []
        for i, entry in enumerate(doc.get("token", []), start=1):
            tokens.append(_token(entry, f"{path} token {i}"))
        names = [t.name for t in tokens]
        if len(set(names)) != len(names):
            dup = next(n for n in names if names.count(n) > 1)
            raise InvalidInput(f"token name {dup!r} appears twice in {path}")
        return cls(tokens)

    def find(self, presented: str) -> Token | None:
        """The token whose sha256 matches (every entry compared in constant time)."""
        digest = hashlib.sha256(presented.encode()).hexdigest()
        found = None
        for t in self.tokens:
            if hmac.compare_digest(t.sha256, digest):
                found = t
        return found


def _token(entry: object, where: str) -> Token:
    if not isinstance(entry, dict):
        raise InvalidInput(f"{where}: must be a table")
    unknown = sorted(set(entry) - {"name", "sha256", "roles", "groups"})
    if unknown:
        raise InvalidInput(f"{where}: unknown key {unknown[0]!r}: use name, sha256, roles, "
                           "groups")
    name = check_name(entry.get("name"), "token name")
    digest = entry.get("sha256")
    if not isinstance(digest, str) or len(digest) != 64 or not all(
            c in "0123456789abcdef" for c in digest):
        raise InvalidInput(f"{where}: sha256 must be 64 lowercase hex digits")
    roles = entry.get("roles")
    if not isinstance(roles, list) or not roles or any(r not in ROLES for r in roles):
        raise InvalidInput(f"{where}: roles must be a list of {', '.join(ROLES)}; "
                           f"got {roles!r}")
    groups = entry.get("groups", ["*"])
    if not isinstance(groups, list) or not all(isinstance(g, str) and g for g in groups):
        raise InvalidInput(f"{where}: groups must be a list of globs; got {groups!r}")
    return Token(name, digest, tuple(roles), tuple(groups))


def add_token(path: Path, name: str, roles: Sequence[str], groups: Sequence[str]) -> str:
    """Add a token to the file (created if needed, rewritten atomically) and return it: the
    only time it is shown; the file keeps its sha256."""
    check_name(name, "token name")
    bad = [r for r in roles if r not in ROLES]
    if not roles or bad:
        raise InvalidInput(f"invalid role {bad[0] if bad else None!r}: use {', '.join(ROLES)}")
    existing = TokenFile.load(path).tokens if path.exists() else ()
    if any(t.name == name for t in existing):
        raise InvalidInput(f"a token named {name!r} is already in {path}")
    token = secrets.token_urlsafe(TOKEN_BYTES)
    entry = Token(name, hashlib.sha256(token.encode()).hexdigest(), tuple(roles),
                  tuple(groups) or ("*",))
    text = "".join(_toml(t) for t in (*existing, entry))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)
    return token


def _toml(t: Token) -> str:
    def strings(xs: Sequence[str]) -> str:
        return "[" + ", ".join('"' + x.replace("\\", "\\\\").replace('"', '\\"') + '"'
                               for x in xs) + "]"

    return (f'[[token]]\nname = "{t.name}"\nsha256 = "{t.sha256}"\nroles = {strings(t.roles)}\n'
            f"groups = {strings(t.groups)}\n\n")
