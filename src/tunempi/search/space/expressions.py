"""Safe boolean expressions over parameter names: the `when` conditions and the constraints of a space.

Parsed with Python's `ast` and evaluated by walking the tree (never `eval`), so a space file cannot run code.
A configuration is a `dict[str, Value]` holding exactly the *active* parameters.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tunempi.errors import UsageError

Value = int | float | str | bool
Config = dict[str, Value]

_ALLOWED_NODES = (
    ast.Expression, ast.BoolOp, ast.And, ast.Or, ast.UnaryOp, ast.Not, ast.USub, ast.UAdd,
    ast.Compare, ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.In, ast.NotIn,
    ast.BinOp, ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod,
    ast.Name, ast.Load, ast.Constant, ast.Tuple, ast.List,
)


class _Inactive(Exception):
    """An expression referred to a parameter that is not active in the configuration."""


@dataclass(frozen=True)
class Expr:
    """A boolean expression over parameter names: comparisons, and/or/not, + - * / // %, `in (...)`.

    Parsed with Python's `ast` and evaluated by walking the tree (never `eval`), so a space file
    cannot run code. `true`/`false` are accepted as well as Python's spelling.
    """

    source: str
    names: frozenset[str] = field(default=frozenset(), compare=False)
    tree: ast.Expression | None = field(default=None, compare=False, repr=False)

    @classmethod
    def parse(cls, source: str) -> Expr:
        text = source.strip()
        try:
            tree = ast.parse(text, mode="eval")
        except SyntaxError as exc:
            raise UsageError(f"bad expression {source!r}: {exc.msg}") from None
        names: set[str] = set()
        for node in ast.walk(tree):
            if not isinstance(node, _ALLOWED_NODES):
                raise UsageError(
                    f"bad expression {source!r}: {type(node).__name__} is not allowed "
                    "(use names, numbers, strings, comparisons, and/or/not, + - * / // %, in (...))"
                )
            if isinstance(node, ast.Name) and node.id not in ("true", "false", "True", "False"):
                names.add(node.id)
        return cls(text, frozenset(names), tree)

    def evaluate(self, config: Mapping[str, Value]) -> bool:
        """Truth of the expression; False when it refers to a parameter that is not active."""
        try:
            tree = self.tree if self.tree is not None else ast.parse(self.source, mode="eval")
            return bool(_eval_node(tree.body, config))
        except _Inactive:
            return False
        except (TypeError, ZeroDivisionError):
            return False


def _eval_node(node: ast.AST, config: Mapping[str, Value]) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        if node.id in ("true", "True"):
            return True
        if node.id in ("false", "False"):
            return False
        if node.id not in config:
            raise _Inactive(node.id)
        return config[node.id]
    if isinstance(node, ast.Tuple | ast.List):
        return tuple(_eval_node(e, config) for e in node.elts)
    if isinstance(node, ast.BoolOp):
        if isinstance(node.op, ast.And):
            return all(_eval_node(v, config) for v in node.values)
        return any(_eval_node(v, config) for v in node.values)
    if isinstance(node, ast.UnaryOp):
        operand = _eval_node(node.operand, config)
        if isinstance(node.op, ast.Not):
            return not operand
        return -operand if isinstance(node.op, ast.USub) else +operand
    if isinstance(node, ast.BinOp):
        left, right = _eval_node(node.left, config), _eval_node(node.right, config)
        ops = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
               ast.Div: lambda a, b: a / b, ast.FloorDiv: lambda a, b: a // b, ast.Mod: lambda a, b: a % b}
        return ops[type(node.op)](left, right)
    if isinstance(node, ast.Compare):
        left = _eval_node(node.left, config)
        for op, comparator in zip(node.ops, node.comparators, strict=True):
            right = _eval_node(comparator, config)
            ok = {
                ast.Eq: lambda a, b: a == b, ast.NotEq: lambda a, b: a != b,
                ast.Lt: lambda a, b: a < b, ast.LtE: lambda a, b: a <= b,
                ast.Gt: lambda a, b: a > b, ast.GtE: lambda a, b: a >= b,
                ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b,
            }[type(op)](left, right)
            if not ok:
                return False
            left = right
        return True
    raise UsageError(f"unsupported expression node {type(node).__name__}")  # pragma: no cover
