"""Each module sits above what it uses: no import circle inside a topic package, counting the
imports inside functions too (a circle hidden by a late import is still a circle)."""

import ast
from pathlib import Path

import pytest

import tpviz

SRC = Path(tpviz.__file__).parent


def imports(package: str) -> dict[str, set[str]]:
    """``{module: the modules of the same package it imports}`` for ``tpviz.<package>``."""
    folder = SRC / package
    names = {p.stem for p in folder.glob("*.py") if p.stem != "__init__"}
    graph = {}
    for name in names:
        found = set()
        for node in ast.walk(ast.parse((folder / f"{name}.py").read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                if node.module == f"tpviz.{package}":  # from tpviz.<package> import x
                    found |= {a.name for a in node.names if a.name in names}
                    if any(a.name not in names for a in node.names):
                        found.add("__init__")  # a name of the package: it imports all
                elif node.module.startswith(f"tpviz.{package}."):
                    found.add(node.module.split(".")[2])
            elif isinstance(node, ast.Import):
                found |= {a.name.split(".")[2] for a in node.names
                          if a.name.startswith(f"tpviz.{package}.")}
        graph[name] = found - {name}
    return graph


def circle(graph: dict[str, set[str]]) -> list[str]:
    """One import circle of ``graph`` (a list of modules, the first repeated last), or []."""
    state: dict[str, int] = {}

    def visit(node, path):
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt):], nxt]
            if nxt in graph and not state.get(nxt):
                found = visit(nxt, [*path, nxt])
                if found:
                    return found
        state[node] = 2
        return []

    for start in sorted(graph):
        if not state.get(start):
            found = visit(start, [start])
            if found:
                return found
    return []


def test_the_circle_finder_finds_a_circle():
    assert circle({"plan": {"zoo"}, "zoo": {"zbv"}, "zbv": {"plan"}}) == [
        "plan", "zoo", "zbv", "plan"]
    assert circle({"plan": {"zoo", "ops"}, "zoo": {"zbv", "ops"}, "zbv": {"ops"},
                   "ops": set()}) == []


@pytest.mark.parametrize("package", ["pipeline", "asyncpipe", "grading"])
def test_no_import_circle_in_the_package(package):
    graph = imports(package)
    assert graph, package
    assert "__init__" not in set().union(*graph.values()), package
    assert circle(graph) == [], " -> ".join(circle(graph))


def test_the_pipeline_layers_are_ops_orders_zbv_zoo_plan():
    graph = imports("pipeline")
    assert graph["ops"] == set()
    assert graph["orders"] == {"ops"} and graph["zbv"] == {"ops"}
    assert graph["zoo"] == {"ops", "orders", "zbv"}
    assert {"zoo", "orders", "ops"} <= graph["plan"]
