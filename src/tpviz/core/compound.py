"""The rules that combine others (:mod:`tpviz.core.rules` holds the single kinds): a list of
items, an optional value, and one of several kinds."""

from __future__ import annotations

from collections.abc import Mapping

from tpviz.core import validate as v
from tpviz.core.rules import Rule
from tpviz.errors import ArgumentTypeError


class Seq(Rule):
    """A list or tuple (never a string or a mapping) of at least ``minimum`` items, each of kind
    ``item`` (None: any)."""

    __slots__ = ("item", "maximum", "minimum")

    def __init__(self, item: Rule | None = None, minimum: int = 1, maximum: int | None = None):
        self.item, self.minimum, self.maximum = item, minimum, maximum

    what = "a list or tuple"

    def check(self, name, value, error):
        if isinstance(value, str):
            raise ArgumentTypeError(f"{name} must be a list or tuple, got the string "
                                    f"{v._short(value)}; for one item write ({value!r},).")
        if isinstance(value, bytes | Mapping) or not hasattr(value, "__len__") \
                or not hasattr(value, "__iter__"):
            raise ArgumentTypeError(f"{name} must be a list or tuple, got "
                                    f"{type(value).__name__} {v._short(value)}.")
        if len(value) < self.minimum:
            raise error(f"{name} must hold at least {self.minimum} item(s), got "
                        f"{v._short(value)}.")
        if self.maximum is not None and len(value) > self.maximum:
            raise error(f"{name} holds {len(value):,} items, more than the bound of "
                        f"{self.maximum:,}.")
        if self.item is not None:
            for i, item in enumerate(value):
                self.item.check(f"{name}[{i}]", item, error)

    def result(self, value):
        if self.item is None or not isinstance(value, list | tuple):
            return ""
        return next((f"[{i}] is {bad}" for i, x in enumerate(value)
                     if (bad := self.item.result(x))), "")


class Maybe(Rule):
    """None, or a value of kind ``rule``."""

    __slots__ = ("rule",)

    def __init__(self, rule: Rule):
        self.rule = rule

    def check(self, name, value, error):
        if value is not None:
            self.rule.check(name, value, error)

    def result(self, value):
        return "" if value is None else self.rule.result(value)


class Either(Rule):
    """A value of any one of ``rules`` (the error names what each would need)."""

    __slots__ = ("rules",)

    def __init__(self, *rules: Rule):
        self.rules = rules

    def check(self, name, value, error):
        problems = []
        for rule in self.rules:
            try:
                rule.check(name, value, error)
                return
            except (ValueError, TypeError) as e:
                problems.append(e)
        if len(problems) == 1:
            raise problems[0]
        kinds = " or ".join(rule.what for rule in self.rules)
        first = next((p for p in problems if not isinstance(p, TypeError)), None)
        if first is not None:
            raise first
        raise ArgumentTypeError(f"{name} must be {kinds}, got {type(value).__name__} "
                                f"{v._short(value)}.")
