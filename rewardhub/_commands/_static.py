"""Reward functions read from their source, not imported: ``rewardhub check`` runs nothing.

A ``path:`` (or ``module:``) reward term names a function in a Python file. Importing the file runs its
module code (which may train a model, open a socket, or exit); ``check`` instead parses the file and
finds the function's definition. What it returns is a *stand-in*: a function with the same name, the
same parameters (defaults shown as ``None``: a default is an expression, and evaluating it would run
code), the same ``async``-ness and docstring, and the ``@rewardhub.reward(...)`` metadata when the
decorator's arguments are literals. Its body is empty; it is never meant to be called.
"""

from __future__ import annotations

import ast
import copy
from typing import Any

from ..errors import UsageError

__all__ = ["read_reward"]


def _decorator_name(node: ast.expr) -> str:
    target = node.func if isinstance(node, ast.Call) else node
    parts = []
    while isinstance(target, ast.Attribute):
        parts.append(target.attr)
        target = target.value
    if isinstance(target, ast.Name):
        parts.append(target.id)
    return ".".join(reversed(parts))


def _defined_names(tree: ast.Module) -> list[str]:
    names = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.append(node.name)
    return names


def _bound_otherwise(tree: ast.Module, name: str) -> bool:
    """Whether ``name`` is bound at module level other than by a ``def`` (an import, an assignment)."""
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            if any((a.asname or a.name.split(".")[0]) == name for a in node.names) or \
                    any(a.name == "*" for a in node.names):
                return True
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(n, ast.Name) and n.id == name for t in targets for n in ast.walk(t)):
                return True
        elif isinstance(node, ast.ClassDef) and node.name == name:
            return True
    return False


def read_reward(file: str, function: str, target: str) -> tuple[Any, list[str]]:
    """``(stand-in, notes)`` for the function ``function`` defined in the Python file ``file``.

    :returns: the stand-in is ``None`` when the name is bound some other way (imported, assigned, a
        class): its signature cannot be known without running the file, which a note says.
    :raises UsageError: the file cannot be read or parsed, or defines no such name.
    """
    try:
        with open(file, "rb") as f:
            source = f.read()
        tree = ast.parse(source, filename=file)
    except OSError as exc:
        raise UsageError(f"cannot read reward file {file!r}: {exc.strerror}") from None
    except SyntaxError as exc:
        raise UsageError(f"{file}, line {exc.lineno}: not valid Python ({exc.msg})") from None
    except ValueError as exc:  # null bytes
        raise UsageError(f"{file}: not valid Python ({exc})") from None
    defs = [
        n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == function
    ]
    if not defs:
        if _bound_otherwise(tree, function):
            return None, [
                f"{target}: {function!r} is not a plain 'def' in the file (imported, assigned or a class); "
                "its signature is checked only when the reward runs"
            ]
        have = ", ".join(_defined_names(tree)) or "no functions"
        raise UsageError(f"{file} has no function {function!r} (it defines: {have})\n"
                         "set the term's function: to one of them")
    node = defs[-1]  # the last definition wins, as on import
    fn, notes = _stand_in(node, target)
    if fn is not None and getattr(fn, "__rewardhub__", None) is None:
        from .._source_facts import UNREADABLE
        from .._source_facts import static_meta

        plain = static_meta(file, function)  # `function.__rewardhub__ = {...}` (see decorator.plain_meta)
        if plain == UNREADABLE:
            notes.append(f"{target}: {function}.__rewardhub__ is not a literal dict; its policy is not read "
                         "without running the file")
        elif plain is not None:
            fn.__rewardhub__ = plain
    return fn, notes


def _stand_in(node: ast.FunctionDef | ast.AsyncFunctionDef, target: str) -> tuple[Any, list[str]]:
    notes: list[str] = []
    meta: dict[str, Any] | None = None
    for deco in node.decorator_list:
        dname = _decorator_name(deco)
        if dname.split(".")[-1] == "reward":
            meta = {}
            if isinstance(deco, ast.Call):
                try:
                    meta = {k.arg: ast.literal_eval(k.value) for k in deco.keywords if k.arg}
                except ValueError:
                    notes.append(
                        f"{target}: the arguments of @{dname}(...) are not literals; its metadata is not "
                        "read without running the file"
                    )
                    meta = {}
        else:
            notes.append(f"{target}: decorated with @{dname or '...'}, which may change its parameters; the "
                         "parameters as written are checked")
    stub = copy.deepcopy(node)
    stub.decorator_list = []
    stub.returns = None
    stub.body = [ast.Pass()]
    args = stub.args
    for a in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]:
        if a is not None:
            a.annotation = None
    args.defaults = [ast.Constant(None) for _ in args.defaults]
    args.kw_defaults = [None if d is None else ast.Constant(None) for d in args.kw_defaults]
    module = ast.fix_missing_locations(ast.Module(body=[stub], type_ignores=[]))
    namespace: dict[str, Any] = {}
    exec(compile(module, f"<stand-in for {target}>", "exec"), namespace)  # noqa: S102 - only a `def ...: pass`
    fn = namespace[node.name]
    fn.__doc__ = ast.get_docstring(node)
    fn.__module__ = target.rpartition(":")[0]
    if meta is not None:
        from ..decorator import reward

        try:
            fn = reward(**meta)(fn)
        except (TypeError, ValueError, UsageError) as exc:
            raise UsageError(f"{target}: @reward(...): {exc}") from None
    return fn, notes
