"""Tests for ``scopes``: keys, the key round trip, validation and the public surface."""

from __future__ import annotations

import re
import string
import subprocess
import sys
import unicodedata
from collections.abc import Callable

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

import scopes
from scopes import LockScope, ScopeKind


def _is_valid_part(text: str) -> bool:
    return text not in ("", ".", "..") and text == text.strip() and len(text.encode("utf-8")) <= 255


# The part rules, restated here rather than imported, so the tests check the module against them.
_unicode_parts = st.text(
    st.characters(exclude_categories=("Cc", "Cs", "Zl", "Zp"), exclude_characters="/"),
    min_size=1,
    max_size=16,
)
_ascii_parts = st.text(string.ascii_letters + string.digits + "-_.:@ ", min_size=1, max_size=16)
# NFC first: the scope normalizes, and the rules apply to the normalized part.
parts = (
    st.one_of(_ascii_parts, _unicode_parts)
    .map(lambda text: unicodedata.normalize("NFC", text))
    .filter(_is_valid_part)
)


def scopes_from(part: st.SearchStrategy[str], max_path_parts: int) -> st.SearchStrategy[LockScope]:
    return st.one_of(
        st.builds(LockScope.cluster, part),
        st.builds(LockScope.participant, part, part),
        st.builds(LockScope.resource, part, part),
        st.lists(part, min_size=1, max_size=max_path_parts).map(lambda ps: LockScope.path(*ps)),
    )


# Five parts of at most 16 characters stay well under the 1024-byte key limit even after NFC.
valid_scopes = scopes_from(parts, max_path_parts=5)
# A tiny alphabet makes equal and nearly equal scopes likely, which is what injectivity is about.
colliding_scopes = scopes_from(
    st.text("ab.", min_size=1, max_size=3).filter(lambda text: text not in (".", "..")),
    max_path_parts=3,
)


# --- keys ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("scope", "key"),
    [
        (LockScope.cluster("prod"), "v1/cluster/prod"),
        (LockScope.participant("prod", "host-1"), "v1/participant/prod/host-1"),
        (LockScope.resource("prod", "orders-db"), "v1/resource/prod/orders-db"),
        (LockScope.path("jobs"), "v1/path/jobs"),
        (LockScope.path("jobs", "nightly"), "v1/path/jobs/nightly"),
        (LockScope.resource("生产", "заказы"), "v1/resource/生产/заказы"),
    ],
)
def test_key(scope: LockScope, key: str) -> None:
    assert scope.key == key
    assert LockScope.from_key(key) == scope


@pytest.mark.parametrize(
    ("scope", "kind", "parts"),
    [
        (LockScope.cluster("prod"), ScopeKind.CLUSTER, ("prod",)),
        (LockScope.participant("prod", "h"), ScopeKind.PARTICIPANT, ("prod", "h")),
        (LockScope.resource("prod", "db"), ScopeKind.RESOURCE, ("prod", "db")),
        (LockScope.path("a", "b", "c"), ScopeKind.PATH, ("a", "b", "c")),
    ],
)
def test_kind_and_parts(scope: LockScope, kind: ScopeKind, parts: tuple[str, ...]) -> None:
    assert scope.kind is kind
    assert scope.parts == parts


def test_path_splits_each_argument_on_slash() -> None:
    assert LockScope.path("jobs/nightly") == LockScope.path("jobs", "nightly")
    assert LockScope.path("a/b", "c").parts == ("a", "b", "c")


def test_parts_are_nfc_normalized_so_lookalikes_are_one_scope() -> None:
    decomposed = LockScope.cluster("e\u0301te\u0301")
    assert decomposed == LockScope.cluster("\u00e9t\u00e9")
    assert decomposed.key == "v1/cluster/\u00e9t\u00e9"


def test_case_is_kept() -> None:
    assert LockScope.cluster("Prod") != LockScope.cluster("prod")


def test_parts_may_contain_dots_and_inner_spaces() -> None:
    scope = LockScope.path("...", ".hidden", "my job")
    assert scope.key == "v1/path/.../.hidden/my job"


@pytest.mark.parametrize(
    ("scope", "text"),
    [
        (LockScope.cluster("prod"), "cluster prod"),
        (LockScope.participant("prod", "host-1"), "participant prod/host-1"),
        (LockScope.resource("prod", "orders-db"), "resource prod/orders-db"),
        (LockScope.path("jobs", "nightly"), "path jobs/nightly"),
    ],
)
def test_str(scope: LockScope, text: str) -> None:
    assert str(scope) == text


def test_repr_is_the_constructor_call() -> None:
    assert repr(LockScope.resource("prod", "db")) == "LockScope.resource('prod', 'db')"
    assert repr(LockScope.path("a", "b")) == "LockScope.path('a', 'b')"


def test_cluster_name_and_parent() -> None:
    prod = LockScope.cluster("prod")
    assert prod.cluster_name == "prod"
    assert prod.parent is None
    assert LockScope.participant("prod", "h").parent == prod
    assert LockScope.resource("prod", "db").cluster_name == "prod"
    assert LockScope.resource("prod", "db").parent == prod
    assert LockScope.path("a", "b", "c").parent == LockScope.path("a", "b")
    assert LockScope.path("a").parent is None
    assert LockScope.path("a", "b").cluster_name is None


# --- properties ---------------------------------------------------------------------------------


@given(valid_scopes)
def test_from_key_inverts_key(scope: LockScope) -> None:
    assert LockScope.from_key(scope.key) == scope
    assert LockScope.from_key(scope.key).key == scope.key
    assert eval(repr(scope), {"LockScope": LockScope}) == scope


@given(colliding_scopes, colliding_scopes)
def test_distinct_scopes_have_distinct_keys_and_text(a: LockScope, b: LockScope) -> None:
    assert (a == b) == (a.key == b.key)
    assert (a == b) == (str(a) == str(b))


@given(valid_scopes, valid_scopes)
def test_distinct_unicode_scopes_have_distinct_keys(a: LockScope, b: LockScope) -> None:
    assert (a == b) == (a.key == b.key)


# --- validation ---------------------------------------------------------------------------------

Make = Callable[[], object]


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: LockScope.cluster(""), "invalid cluster name '': is empty"),
        (lambda: LockScope.resource("prod", ""), "invalid resource name '': is empty"),
        (lambda: LockScope.cluster("a/b"), "invalid cluster name 'a/b': contains '/'"),
        (
            lambda: LockScope.participant("prod", "h/1"),
            "invalid participant name 'h/1': contains '/'",
        ),
        (lambda: LockScope.cluster("."), "invalid cluster name '.': is '.' or '..'"),
        (lambda: LockScope.path("a", ".."), "invalid path part 2 '..': is '.' or '..'"),
        (lambda: LockScope.path("a/../b"), "invalid path part 2 '..': is '.' or '..'"),
        (lambda: LockScope.cluster("a\x00b"), "contains control character U+0000"),
        (lambda: LockScope.cluster("a\x1fb"), "contains control character U+001F"),
        (lambda: LockScope.cluster("a\x7fb"), "contains control character U+007F"),
        (lambda: LockScope.cluster("a\x9fb"), "contains control character U+009F"),
        (lambda: LockScope.cluster("a\nb"), "contains control character U+000A"),
        (lambda: LockScope.cluster("a\u2028b"), "contains line separator U+2028"),
        (lambda: LockScope.cluster("a\u2029b"), "contains paragraph separator U+2029"),
        (lambda: LockScope.cluster("a\ud800b"), "contains lone surrogate U+D800"),
        (lambda: LockScope.cluster(" prod"), "has leading or trailing whitespace"),
        (lambda: LockScope.cluster("prod "), "has leading or trailing whitespace"),
        (lambda: LockScope.cluster("\u00a0prod"), "has leading or trailing whitespace"),
        (lambda: LockScope.cluster("x" * 256), "is 256 UTF-8 bytes, more than the limit of 255"),
        (lambda: LockScope.cluster("\u00e9" * 128), "is 256 UTF-8 bytes"),
        (lambda: LockScope.cluster(1), "invalid cluster name 1: must be str, not int"),  # type: ignore[arg-type]
        (lambda: LockScope.cluster(b"prod"), "must be str, not bytes"),  # type: ignore[arg-type]
        (lambda: LockScope.path("a", None), "invalid path part 2 None: must be str"),  # type: ignore[arg-type]
        (LockScope.path, "invalid path: needs at least one part"),
        (lambda: LockScope.path("a//b"), "invalid path 'a//b': has an empty part"),
        (lambda: LockScope.path("/a"), "invalid path '/a': has an empty part"),
        (lambda: LockScope.path("a/"), "invalid path 'a/': has an empty part"),
        (lambda: LockScope.path("x" * 255, "x" * 255, "x" * 255, "x" * 249), "key is 1025"),
        (lambda: LockScope("cluster", ("prod",)), "invalid scope kind 'cluster'"),  # type: ignore[arg-type]
        (lambda: LockScope(ScopeKind.PATH, "ab"), "must be a tuple of str"),  # type: ignore[arg-type]
        (lambda: LockScope(ScopeKind.PATH, ()), "invalid path: needs at least one part"),
        (
            lambda: LockScope(ScopeKind.RESOURCE, ("prod",)),
            "invalid resource scope: needs 2 part(s) (cluster name, resource name), got 1",
        ),
    ],
)
def test_invalid_input_names_the_part_and_reason(make: Make, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        make()


def test_long_part_is_shortened_in_the_message() -> None:
    with pytest.raises(ValueError, match=r"^invalid cluster name 'x+\.\.\.': is 300") as info:
        LockScope.cluster("x" * 300)
    assert len(str(info.value)) < 150


def test_limits_are_inclusive() -> None:
    assert LockScope.cluster("\u00e9" * 127 + "x").parts == ("\u00e9" * 127 + "x",)
    longest = LockScope.path("x" * 255, "x" * 255, "x" * 255, "x" * 248)
    assert len(longest.key.encode("utf-8")) == LockScope.MAX_KEY_BYTES == 1024
    assert len(("x" * 255).encode("utf-8")) == LockScope.MAX_PART_BYTES


def test_evolve_validates() -> None:
    with pytest.raises(ValueError, match=re.escape("contains '/'")):
        attrs.evolve(LockScope.cluster("prod"), parts=("a/b",))


# --- from_key -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "reason"),
    [
        ("", "unknown layout version ''"),
        ("v2/cluster/prod", "unknown layout version 'v2'"),
        ("V1/cluster/prod", "unknown layout version 'V1'"),
        ("cluster/prod", "unknown layout version 'cluster'"),
        ("/v1/cluster/prod", "unknown layout version ''"),
        ("v1", "unknown scope kind ''"),
        ("v1/Cluster/prod", "unknown scope kind 'Cluster'"),
        ("v1/lock/prod", "unknown scope kind 'lock'"),
        ("v1/cluster/prod/extra", "needs 1 part(s)"),
        ("v1/cluster/prod/", "needs 1 part(s)"),
        ("v1/participant/prod", "needs 2 part(s)"),
        ("v1/resource/prod/a/b", "needs 2 part(s)"),
        ("v1/cluster", "invalid cluster name '': is empty"),
        ("v1/cluster/", "invalid cluster name '': is empty"),
        ("v1/resource//db", "invalid cluster name '': is empty"),
        ("v1/path/", "invalid path part 1 '': is empty"),
        ("v1/path/a//b", "invalid path part 2 '': is empty"),
        ("v1/path/a/..", "is '.' or '..'"),
        ("v1/cluster/ prod", "has leading or trailing whitespace"),
        ("v1/cluster/a\x00b", "contains control character U+0000"),
        ("v1/cluster/e\u0301", "not in canonical form (parts must be Unicode NFC"),
        ("v1/cluster/" + "x" * 256, "is 256 UTF-8 bytes"),
    ],
)
def test_from_key_rejects_foreign_keys(key: str, reason: str) -> None:
    with pytest.raises(ValueError, match=r"^not a scope key: .*" + re.escape(reason)):
        LockScope.from_key(key)


@pytest.mark.parametrize("key", [None, b"v1/cluster/prod", 1])
def test_from_key_rejects_non_str(key: object) -> None:
    with pytest.raises(ValueError, match=r"^not a scope key: .* not str$"):
        LockScope.from_key(key)  # type: ignore[arg-type]


# --- value semantics and surface ----------------------------------------------------------------


def test_scopes_are_hashable_values() -> None:
    a = LockScope.resource("prod", "db")
    b = LockScope.resource("prod", "db")
    assert a == b
    assert hash(a) == hash(b)
    assert {a, b, LockScope.participant("prod", "db")} == {a, LockScope.participant("prod", "db")}
    assert LockScope.resource("prod", "db") != LockScope.participant("prod", "db")


def test_scopes_are_immutable() -> None:
    scope = LockScope.cluster("prod")
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        scope.parts = ("other",)  # type: ignore[misc]
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        scope.kind = ScopeKind.PATH  # type: ignore[misc]
    with pytest.raises(AttributeError):
        scope.extra = 1  # type: ignore[attr-defined]
    assert scope == LockScope.cluster("prod")


def test_all_is_sorted_and_matches_public_names() -> None:
    public = sorted(name for name in vars(scopes) if not name.startswith("_"))
    assert scopes.__all__ == sorted(scopes.__all__)
    assert scopes.__all__ == public


def test_scopes_does_not_import_prioritylock() -> None:
    code = "import sys, scopes; assert 'prioritylock' not in sys.modules, sorted(sys.modules)"
    subprocess.run([sys.executable, "-c", code], check=True)
