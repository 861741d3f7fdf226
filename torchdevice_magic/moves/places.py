"""Where a move finds tensors and where it puts their copies back.

Containers and objects are entered ONLY through :mod:`torchdevice_magic.objects` (the one walker
the scan also uses), so what the table marks movable is what "Move all" moves. A tensor found
under a name is a :class:`Reached`: its value, what users call it, and the chain of holders up
to the name, which is what the commit needs to put the copy back (mutable holders changed in
place, immutable ones rebuilt).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from .. import objects

#: the kind of a :class:`Reached` that is a second place holding an immutable composite
ALIAS = "alias"

#: the holder kind of a top-level name (the namespace is written with ``ns[name] = value``)
NAMESPACE = "namespace"

#: one step from a found value up to its name: (holder, holder kind, key in the holder)
Link = tuple[Any, str, Any]


class Reached(NamedTuple):
    """A tensor, Parameter, module or optimizer the walker found under a top-level name."""

    label: str  # what users read: ``trainer.model``, ``batch['x']``
    path: tuple[Any, ...]  # the keys from the name down (what undo finds it by)
    chain: tuple[Link, ...]  # (holder, holder kind, key), leaf's holder first
    value: Any
    kind: str
    #: the path of the DataLoader it is data of (None: none): it stays where it is
    loader: str | None = None


def is_mutable(holder: Any, kind: str) -> bool:
    return kind == NAMESPACE or objects.is_mutable(holder, kind)


def put_back(holder: Any, kind: str, key: Any, value: Any) -> None:
    """Put ``value`` at ``key`` of ``holder``: a name, or in place through objects/putback.py."""
    if kind == NAMESPACE:
        holder[key] = value
    else:
        objects.set_child(holder, kind, key, value)


def reach(T: Any, ns: Any, name: str, value: Any) -> tuple[list[Reached], Any]:
    """Everything the one walker (objects.walk) finds under ``ns[name]``, with where each is
    held, up to the name: what a move needs to put moved tensors back."""
    walked = objects.walk(T, value, name)
    nodes = walked.nodes

    def held(index: int, key: Any, label: str, child: Any, kind: str) -> Reached:
        loader = objects.loader_above(walked, index)
        chain: list[Link] = []
        keys: list[Any] = []
        while index >= 0:
            node = nodes[index]
            chain.append((node.value, node.kind, key))
            keys.append(key)
            index, key = node.parent, node.key
        chain.append((ns, NAMESPACE, name))
        keys.reverse()
        return Reached(label, tuple(keys), tuple(chain), child, kind, loader)

    found = [held(leaf.node, leaf.key, leaf.path, leaf.value, leaf.kind) for leaf in walked.leaves]
    # an immutable composite held a second time (one tuple in two lists): when it is rebuilt,
    # the rebuilt one goes to both places
    found.extend(
        held(index, key, nodes[index].path, child, ALIAS)
        for index, key, child in walked.aliases
        if not objects.is_mutable(child, objects.kind_of(T, child))
    )
    return found, walked
