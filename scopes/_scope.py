"""Lock scopes and the one store key each scope maps to.

A scope names what a lock protects: a whole cluster, one participant or one resource of a cluster
(Apache Helix's scopes), or any other path. Every scope has exactly one key, and
:meth:`LockScope.from_key` turns that key back into the scope::

    v1/cluster/<cluster>
    v1/participant/<cluster>/<participant>
    v1/resource/<cluster>/<resource>
    v1/path/<part>[/<part>...]

``v1`` is the layout version. A later layout gets a new version segment; this module refuses a
version it does not know rather than guess. No escaping is needed: a part may not contain ``/``,
so splitting a key on ``/`` gives back its parts, and the kind says how many there are.

Pure naming: no I/O, and nothing here knows about leases or stores.
"""

from __future__ import annotations

import enum
import unicodedata
from typing import ClassVar

import attrs

_MAX_PART_BYTES = 255
_MAX_KEY_BYTES = 1024
_VERSION = "v1"
_SEP = "/"

# Characters that would make a name unprintable, unencodable or look like more than one line.
_FORBIDDEN_CATEGORIES = {
    "Cc": "control character",
    "Cs": "lone surrogate",
    "Zl": "line separator",
    "Zp": "paragraph separator",
}


class ScopeKind(enum.Enum):
    """What a :class:`LockScope` names. The value is the kind's segment in the key."""

    CLUSTER = "cluster"
    PARTICIPANT = "participant"
    RESOURCE = "resource"
    PATH = "path"


# What each part of a fixed-arity kind is called in error messages. PATH has one or more parts.
_PART_NAMES: dict[ScopeKind, tuple[str, ...]] = {
    ScopeKind.CLUSTER: ("cluster name",),
    ScopeKind.PARTICIPANT: ("cluster name", "participant name"),
    ScopeKind.RESOURCE: ("cluster name", "resource name"),
}


def _show(value: str, limit: int = 60) -> str:
    """``repr`` of *value*, shortened so an error message stays readable."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 4] + "...'"


def _part_problem(part: str) -> str | None:
    """Why *part* (already NFC) cannot be a scope part, or ``None`` if it can."""
    if not part:
        return "is empty"
    if part in (".", ".."):
        return "is '.' or '..'"
    if _SEP in part:
        return "contains '/'"
    for char in part:
        what = _FORBIDDEN_CATEGORIES.get(unicodedata.category(char))
        if what is not None:
            return f"contains {what} U+{ord(char):04X}"
    if part != part.strip():
        return "has leading or trailing whitespace"
    size = len(part.encode("utf-8"))
    if size > _MAX_PART_BYTES:
        return f"is {size} UTF-8 bytes, more than the limit of {_MAX_PART_BYTES}"
    return None


def _check_part(part: object, name: str) -> str:
    """Return *part* in Unicode NFC form.

    :raises ValueError: if *part* is not a str or is not a valid part; the message names it and
        says why.
    """
    if not isinstance(part, str):
        raise ValueError(f"invalid {name} {part!r}: must be str, not {type(part).__name__}")
    normal = unicodedata.normalize("NFC", part)
    problem = _part_problem(normal)
    if problem is not None:
        raise ValueError(f"invalid {name} {_show(part)}: {problem}")
    return normal


@attrs.frozen(repr=False)
class LockScope:
    """What a lock protects, and the one store key that names it.

    Build scopes with :meth:`cluster`, :meth:`participant`, :meth:`resource` and :meth:`path`.
    Scopes are immutable and hashable; two scopes are equal exactly when their keys are equal.

    Every part must be a non-empty str that, after Unicode NFC normalization (so names that look
    the same name the same lock):

    - is not ``.`` or ``..``, and contains no ``/``;
    - contains no control character (``\\x00``-``\\x1f``, ``\\x7f``-``\\x9f``), lone surrogate,
      or line or paragraph separator (U+2028, U+2029);
    - has no leading or trailing whitespace;
    - is at most :attr:`MAX_PART_BYTES` (255) UTF-8 bytes;

    and the whole key must be at most :attr:`MAX_KEY_BYTES` (1024) UTF-8 bytes. Case is kept as
    given. Calling ``LockScope(kind, parts)`` directly applies the same rules.

    :raises ValueError: on an invalid kind, part or number of parts, naming the part and the
        reason.
    """

    MAX_PART_BYTES: ClassVar[int] = _MAX_PART_BYTES
    """The longest a part may be, in UTF-8 bytes."""
    MAX_KEY_BYTES: ClassVar[int] = _MAX_KEY_BYTES
    """The longest a whole key may be, in UTF-8 bytes (S3's and GCS's limit on an object name)."""

    kind: ScopeKind
    parts: tuple[str, ...]

    def __attrs_post_init__(self) -> None:
        """Check the kind, the number of parts and each part; store the parts in NFC form.

        :raises ValueError: naming the bad part and the reason.
        """
        kind: object = self.kind
        parts: object = self.parts
        if not isinstance(kind, ScopeKind):
            raise ValueError(f"invalid scope kind {kind!r}: must be a ScopeKind")
        if not isinstance(parts, tuple):
            raise ValueError(f"invalid scope parts {parts!r}: must be a tuple of str")
        if kind is ScopeKind.PATH:
            if not parts:
                raise ValueError("invalid path: needs at least one part")
            names = tuple(f"path part {i}" for i in range(1, len(parts) + 1))
        else:
            names = _PART_NAMES[kind]
            if len(parts) != len(names):
                raise ValueError(
                    f"invalid {kind.value} scope: needs {len(names)} part(s) "
                    f"({', '.join(names)}), got {len(parts)}"
                )
        normal = tuple(_check_part(part, name) for part, name in zip(parts, names, strict=True))
        # Frozen: attrs allows this one write while the instance is being built.
        object.__setattr__(self, "parts", normal)
        size = len(self.key.encode("utf-8"))
        if size > _MAX_KEY_BYTES:
            raise ValueError(
                f"invalid {kind.value} scope: its key is {size} UTF-8 bytes, "
                f"more than the limit of {_MAX_KEY_BYTES}"
            )

    @classmethod
    def cluster(cls, name: str) -> LockScope:
        """A whole cluster: key ``v1/cluster/<name>``.

        :raises ValueError: if *name* is not a valid part.
        """
        return cls(ScopeKind.CLUSTER, (name,))

    @classmethod
    def participant(cls, cluster: str, participant: str) -> LockScope:
        """One participant of a cluster: key ``v1/participant/<cluster>/<participant>``.

        :raises ValueError: if either name is not a valid part.
        """
        return cls(ScopeKind.PARTICIPANT, (cluster, participant))

    @classmethod
    def resource(cls, cluster: str, resource: str) -> LockScope:
        """One resource of a cluster: key ``v1/resource/<cluster>/<resource>``.

        :raises ValueError: if either name is not a valid part.
        """
        return cls(ScopeKind.RESOURCE, (cluster, resource))

    @classmethod
    def path(cls, *parts: str) -> LockScope:
        """Any other path: key ``v1/path/<part>/<part>...``.

        Each argument is split on ``/``, so ``path("jobs/nightly")`` is ``path("jobs", "nightly")``
        (the form ``LockBuilder.path`` takes). Every piece must then be a valid part, so a leading,
        trailing or doubled ``/`` is an error, not ignored.

        :raises ValueError: if no parts are given or a piece is not a valid part.
        """
        if not parts:
            raise ValueError("invalid path: needs at least one part")
        pieces: list[str] = []
        for part in parts:
            if isinstance(part, str) and _SEP in part:
                split = part.split(_SEP)
                if "" in split:
                    raise ValueError(
                        f"invalid path {_show(part)}: has an empty part "
                        "(a leading, trailing or doubled '/')"
                    )
                pieces.extend(split)
            else:
                pieces.append(part)
        return cls(ScopeKind.PATH, tuple(pieces))

    @classmethod
    def from_key(cls, key: str) -> LockScope:
        """The scope whose :attr:`key` is *key*.

        Accepts exactly the strings that :attr:`key` produces.

        :raises ValueError: if *key* is not such a string (not a str, an unknown version or
            kind, the wrong number of parts, an invalid or non-NFC part, too long); the message
            says why.
        """
        if not isinstance(key, str):
            raise ValueError(f"not a scope key: {key!r} is {type(key).__name__}, not str")
        version, _, rest = key.partition(_SEP)
        if version != _VERSION:
            raise ValueError(
                f"not a scope key: {_show(key)}: unknown layout version {_show(version)} "
                f"(this version of scopes reads {_VERSION!r})"
            )
        kind_name, _, rest = rest.partition(_SEP)
        try:
            kind = ScopeKind(kind_name)
        except ValueError:
            raise ValueError(
                f"not a scope key: {_show(key)}: unknown scope kind {_show(kind_name)}"
            ) from None
        try:
            scope = cls(kind, tuple(rest.split(_SEP)))
        except ValueError as exc:
            raise ValueError(f"not a scope key: {_show(key)}: {exc}") from None
        if scope.key != key:
            # Only reachable for parts not in NFC form: the scope normalized them.
            raise ValueError(
                f"not a scope key: {_show(key)}: not in canonical form "
                f"(parts must be Unicode NFC; the canonical key is {_show(scope.key)})"
            )
        return scope

    @property
    def key(self) -> str:
        """The one store key for this scope; :meth:`from_key` gives the scope back."""
        return _SEP.join((_VERSION, self.kind.value, *self.parts))

    @property
    def cluster_name(self) -> str | None:
        """The cluster of a cluster, participant or resource scope; ``None`` for a path."""
        return None if self.kind is ScopeKind.PATH else self.parts[0]

    @property
    def parent(self) -> LockScope | None:
        """The enclosing scope: a participant's or resource's cluster, a path without its last
        part; ``None`` for a cluster or a one-part path."""
        if self.kind in (ScopeKind.PARTICIPANT, ScopeKind.RESOURCE):
            return LockScope(ScopeKind.CLUSTER, self.parts[:1])
        if self.kind is ScopeKind.PATH and len(self.parts) > 1:
            return LockScope(ScopeKind.PATH, self.parts[:-1])
        return None

    def __str__(self) -> str:
        """A readable form, e.g. ``resource prod/orders-db``; distinct scopes read differently."""
        return f"{self.kind.value} {_SEP.join(self.parts)}"

    def __repr__(self) -> str:
        """The constructor call that makes this scope, e.g. ``LockScope.cluster('prod')``."""
        return f"LockScope.{self.kind.value}({', '.join(map(repr, self.parts))})"
