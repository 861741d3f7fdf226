"""Putting moved children back (for the mover): in place where the composite is mutable
(list item, dict item through ``dict.__setitem__``, ``UserDict.data`` item, instance
``__dict__`` entry or slot; no setters, no properties), else a rebuilt immutable composite.
"""

from __future__ import annotations

import copy
from typing import Any

from .kinds import COMPOSITES, Kind, _class_attr, _layout, _mro_of, _userdict_data, instance_dict


def is_mutable(value: Any, kind: str) -> bool:
    if kind == Kind.SEQUENCE:
        return isinstance(value, list)
    if kind == Kind.NAMEDTUPLE:
        return False
    if kind == Kind.DATACLASS:
        params = _class_attr(_mro_of(type(value)), "__dataclass_params__")
        return not getattr(params, "frozen", False)
    return kind in COMPOSITES


def set_child(value: Any, kind: str, key: Any, child: Any) -> Any:
    """Put ``child`` at ``key`` in a mutable composite, in place; return what was there."""
    if kind == Kind.MAPPING:
        old = dict.__getitem__(value, key)
        dict.__setitem__(value, key, child)
        if type(value) is not dict and type(key) is str:
            # ModelOutput-style (an OrderedDict that is also a dataclass): the same child is
            # an attribute too; keep ``out.logits`` and ``out["logits"]`` the same object
            own = instance_dict(value)
            if own is not None and own.get(key) is old:
                own[key] = child
        return old
    if kind == Kind.SEQUENCE:
        old = list.__getitem__(value, key)
        list.__setitem__(value, key, child)
        return old
    if kind == Kind.USERDICT:
        data = _userdict_data(value)
        old = dict.__getitem__(data, key)
        dict.__setitem__(data, key, child)
        return old
    own = instance_dict(value)
    if own is not None and key in own:
        old = own[key]
        own[key] = child
        return old
    for name, member in _layout(type(value))[1]:
        if name == key:
            old = member.__get__(value)
            member.__set__(value, child)
            return old
    raise KeyError(key)


def rebuilt(value: Any, kind: str, replacements: dict[Any, Any]) -> Any:
    """A new immutable composite with ``replacements`` ({key: child}) in place."""
    if kind in (Kind.SEQUENCE, Kind.NAMEDTUPLE) and isinstance(value, tuple):
        items = [replacements.get(i, item) for i, item in enumerate(tuple.__iter__(value))]
        if kind == Kind.NAMEDTUPLE:
            # a namedtuple class (checked by kind_of); mypy sees only tuple
            return type(value)._make(items)  # type: ignore[attr-defined]
        if type(value) is tuple:
            return tuple(items)
        return type(value)(items)
    if kind == Kind.DATACLASS:
        new = copy.copy(value)
        for key, child in replacements.items():
            object.__setattr__(new, key, child)
        return new
    raise TypeError(f"{type(value).__name__} is not an immutable composite")
