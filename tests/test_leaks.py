"""No chapter shows an exercise's answer before the exercise (issue 39, gap 6).

For each exercise, the code cells before its heading must not print the source
(``inspect.getsource``) of a function the checker keeps out of reach while it runs (its
``Build.unavailable`` or the ``names`` it passes to ``harness.guarded``). For a solution that is
one numeric literal (``x = 5120``, ``x = 7 / 39``), that literal must not appear in a cell before
the exercise, unless the exercise's own prompt states it (then it is an input). A call the prompt
quotes with three or more numbers (12.2's ``auto.mlp(16384, 1024, 4096)``) must not be made
before the exercise with the same numbers or the same ratios (the question at another scale,
which answers it as well)."""

import ast
import inspect
import json
import re
import types
from pathlib import Path

import pytest

import tpviz
from tpviz.core.harness import Build

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "book").glob("*.ipynb"))
HEADING = re.compile(r"\*\*Exercise (\d+\.\d+) —")
CHECK = re.compile(r"tpviz\.exercises\.(check_\w+)\(")
# reviewed hits: (chapter file, exercise, what a cell before it shows) -> why that does not
# give the answer away
KNOWN: dict[tuple[str, str, str], str] = {
    ("06_mesh2d.ipynb", "6.6", "run.gspmd_forward"):
        "the one-device MLP under jax.jit, left to the compiler; 6.6 asks for the shard_map "
        "program with its collectives written out (refused so that jit's version is no answer)",
    ("10_moe.ipynb", "10.5", "moe.gshard_layer"):
        "GShard's einsum form under the compiler; 10.5 asks for the dispatch into the [E, C, H] "
        "buffer and the all-to-all in a shard_map (issue 39's audit: not the shard_map answer)",
    ("10_moe.ipynb", "10.6", "moe.gshard_layer"): "as for 10.5: the einsum form, not the "
                                                  "shard_map layer 10.6 asks for",
}


def _names_in(value) -> set[str]:
    if isinstance(value, Build):
        return set(value.unavailable)
    if isinstance(value, tuple | list) and value and all(
            isinstance(v, str) and v.startswith("tpviz.") for v in value):
        return set(value)
    return set()


def unavailable(fn, depth: int = 3, seen=None) -> set[str]:
    """The dotted names a checker keeps out of reach: Builds and tuples of ``tpviz.`` names its
    code refers to, following the tpviz functions it calls ``depth`` levels down."""
    fn = inspect.unwrap(fn)
    seen = set() if seen is None else seen
    if not isinstance(fn, types.FunctionType) or fn in seen or depth < 0:
        return set()
    seen.add(fn)
    names: set[str] = set()
    codes = [fn.__code__]
    while codes:  # the function's own code and the code of what it defines inside
        code = codes.pop()
        codes += [c for c in code.co_consts if isinstance(c, types.CodeType)]
        for name in code.co_names:
            value = fn.__globals__.get(name)
            names |= _names_in(value)
            if isinstance(value, types.FunctionType) and value.__module__.startswith("tpviz."):
                names |= unavailable(value, depth - 1, seen)
    return names


def exercises(path):
    """(exercise number, checker name, heading cell index, prompt text, solution source) for
    each check call of the chapter, with the chapter's cells."""
    cells = json.loads(path.read_text())["cells"]
    found, heading = [], None
    for i, cell in enumerate(cells):
        text = "".join(cell["source"])
        if cell["cell_type"] == "markdown" and (m := HEADING.search(text)):
            heading = (m.group(1), i, text)
        elif cell["cell_type"] == "code" and (m := CHECK.search(text)) and heading:
            solution = "".join(cells[i - 1]["source"])
            found.append((heading[0], m.group(1), heading[1], heading[2], solution))
    return cells, found


def shown_sources(source: str) -> list[str]:
    """The dotted expressions a cell passes to ``inspect.getsource``."""
    try:
        tree = ast.parse(source)
    except SyntaxError:  # IPython magics
        return []
    return [ast.unparse(node.args[0]) for node in ast.walk(tree)
            if isinstance(node, ast.Call) and node.args
            and ast.unparse(node.func).endswith("getsource")]


def same_function(expression: str, dotted: str) -> bool:
    """``run.step_fn`` names ``tpviz.zero.run.step_fn``: the same last name, and each module
    named before it is one of the dotted name's."""
    parts, full = expression.split("."), dotted.split(".")
    return parts[-1] == full[-1] and all(p in full or p == "tpviz" for p in parts[:-1])


def literal(solution: str) -> str | None:
    """The solution's value when it is one assignment of a number or a fraction of two."""
    body = solution.split("# BEGIN SOLUTION")[-1].split("# END SOLUTION")[0]
    try:
        tree = ast.parse(body)
    except SyntaxError:
        return None
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.Assign):
        return None
    value = tree.body[0].value
    if (isinstance(value, ast.BinOp) and isinstance(value.op, ast.Div)
            and all(isinstance(v, ast.Constant) for v in (value.left, value.right))):
        return f"{value.left.value}/{value.right.value}"
    number = _constant(value)
    if isinstance(number, int) or (isinstance(number, float) and number.is_integer()):
        return str(int(number))
    return None


def _constant(node):
    """The value of arithmetic on number literals only (``2 * 4096 * 1.25``), else None."""
    import operator

    ops = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
           ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Pow: operator.pow}
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float) \
            and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in ops:
        left, right = _constant(node.left), _constant(node.right)
        if left is None or right is None or (right == 0 and isinstance(node.op, ast.Div)):
            return None
        return ops[type(node.op)](left, right)
    return None


def _value(node, env: dict):
    """``_constant`` with the names of ``env`` known (``4 * F`` after ``H, F = 768, 3072``)."""
    if isinstance(node, ast.Name):
        return env.get(node.id)
    if isinstance(node, ast.BinOp):
        left, right = _value(node.left, env), _value(node.right, env)
        if left is None or right is None:
            return None
        return _constant(ast.BinOp(ast.Constant(left), node.op, ast.Constant(right)))
    return _constant(node)


def _numbers(call: ast.Call, env: dict) -> tuple | None:
    values = tuple(_value(a, env) for a in call.args)
    return values if len(values) >= 3 and None not in values else None


def quoted_calls(prompt: str) -> list[tuple[str, tuple]]:
    """The calls a prompt quotes in backticks with three or more numbers: (last name, args)."""
    found = []
    for span in re.findall(r"`([^`]+)`", prompt):
        try:
            node = ast.parse(span, mode="eval").body
        except SyntaxError:
            continue
        if isinstance(node, ast.Call) and (args := _numbers(node, {})):
            found.append((ast.unparse(node.func).split(".")[-1], args))
    return found


def _scaled(a: tuple, b: tuple) -> bool:
    """``b`` is ``a`` times one factor, every entry (16384, 1024, 4096 and 12288, 768, 3072)."""
    return len(a) == len(b) and all(x != 0 for x in a) and len({y / x for x, y in
                                                                zip(a, b, strict=True)}) == 1


def forms(text: str) -> set[str]:
    """How a literal may be written: 5120, 5,120; 7/39, 7 / 39."""
    if "/" in text:
        a, b = text.split("/")
        return {f"{a}/{b}", f"{a} / {b}", f"{a}}}{{{b}"}  # also \frac{7}{39}
    out = {text}
    if text.isdigit():
        out.add(f"{int(text):,}")
    return out


def test_the_checkers_names_are_found():
    """The helper sees a Build's names (3.1) and a guarded checker's (7.4, 10.3)."""
    ex = tpviz.exercises
    assert "tpviz.matmul.explicit" in unavailable(ex.check_column_parallel)
    assert "tpviz.pipeline.plan.balance" in unavailable(ex.check_balance)
    assert "tpviz.moe.plan.keep" in unavailable(ex.check_keep)
    assert same_function("run.step_fn", "tpviz.zero.run.step_fn")
    assert not same_function("run.step_fn", "tpviz.pipeline.spmd.step_fn_other")
    assert literal("# BEGIN SOLUTION\nx = 5120\n# END SOLUTION") == "5120"
    assert literal("# BEGIN SOLUTION\nx = 7 / 39\n# END SOLUTION") == "7/39"
    assert literal("# BEGIN SOLUTION\nx = 2 * 2560\n# END SOLUTION") == "5120"
    assert literal("# BEGIN SOLUTION\nx = f(3)\n# END SOLUTION") is None
    assert "5,120" in forms("5120")


def source_leaks(path) -> list[str]:
    cells, found = exercises(path)
    leaks = []
    for number, check, heading, _prompt, _solution in found:
        names = unavailable(getattr(tpviz.exercises, check))
        for i, cell in enumerate(cells[:heading]):
            if cell["cell_type"] != "code":
                continue
            for shown in shown_sources("".join(cell["source"])):
                hit = [n for n in names if same_function(shown, n)]
                if hit and (path.name, number, shown) not in KNOWN:
                    leaks.append(f"cell {i} prints {shown} before Exercise {number} ({hit[0]})")
    return leaks


def literal_leaks(path) -> list[str]:
    cells, found = exercises(path)
    leaks = []
    for number, _check, heading, prompt, solution in found:
        value = literal(solution)
        if value is None:
            continue
        written = {f for f in forms(value) if len(f.replace(",", "")) >= 3}
        written = {f for f in written if f not in prompt}
        for i, cell in enumerate(cells[:heading]):
            text = "".join(cell["source"])
            hit = [f for f in written if re.search(rf"(?<![\d.,]){re.escape(f)}(?![\d.,]\d)", text)]
            if hit:
                leaks.append(f"cell {i} holds {hit[0]}, Exercise {number}'s answer")
    return leaks


def question_leaks(path) -> list[str]:
    cells, found = exercises(path)
    leaks = []
    for number, _check, heading, prompt, _solution in found:
        quoted = quoted_calls(prompt)
        env: dict = {}
        for i, cell in enumerate(cells[:heading] if quoted else ()):
            if cell["cell_type"] != "code":
                continue
            try:
                tree = ast.parse("".join(cell["source"]))
            except SyntaxError:
                continue
            for statement in tree.body:  # in order: its calls, then the numbers it names
                for node in ast.walk(statement):
                    if not isinstance(node, ast.Call) or not (args := _numbers(node, env)):
                        continue
                    name = ast.unparse(node.func).split(".")[-1]
                    if any(name == q and _scaled(want, args) for q, want in quoted):
                        leaks.append(f"cell {i} calls {name}{args}, Exercise {number}'s "
                                     "question")
                if isinstance(statement, ast.Assign) and len(statement.targets) == 1:
                    target, value = statement.targets[0], statement.value
                    if isinstance(target, ast.Name):
                        env[target.id] = _value(value, env)
                    elif isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple):
                        env.update((t.id, _value(v, env)) for t, v in
                                   zip(target.elts, value.elts, strict=False)
                                   if isinstance(t, ast.Name))
    return leaks


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_no_question_of_an_exercise_asked_before_it(path):
    leaks = question_leaks(path)
    assert not leaks, leaks


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_no_source_of_a_kept_out_function_before_its_exercise(path):
    leaks = source_leaks(path)
    assert not leaks, leaks


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_no_one_literal_answer_before_its_exercise(path):
    leaks = literal_leaks(path)
    assert not leaks, leaks


def test_a_leaky_chapter_is_caught(tmp_path):
    """Both checks catch a chapter that prints 7.4's library split, and states a one-literal
    answer, before the exercises."""
    def cell(kind, text):
        return {"cell_type": kind, "source": [text], "metadata": {},
                **({"outputs": [], "execution_count": None} if kind == "code" else {})}

    chapter = tmp_path / "leaky.ipynb"
    chapter.write_text(json.dumps({"cells": [
        cell("code", "print(inspect.getsource(pipeline.balance))\nprint(2 * 2560)"),
        cell("markdown", "Here B* = 5,120 tokens."),
        cell("markdown", "**Exercise 7.4 — split (medium, multi-step).** Write it."),
        cell("code", "# BEGIN SOLUTION\ndef split(c, p):\n    return c\n# END SOLUTION"),
        cell("code", "tpviz.exercises.check_balance(split)"),
        cell("markdown", "**Exercise 12.6 — the switch (medium, one-line).** GPT-2 large."),
        cell("code", "# BEGIN SOLUTION\nswitch_tokens = 5120\n# END SOLUTION"),
        cell("code", "tpviz.exercises.check_switch_batch(switch_tokens)")]}))
    assert source_leaks(chapter) == [
        "cell 0 prints pipeline.balance before Exercise 7.4 (tpviz.pipeline.plan.balance)"]
    assert literal_leaks(chapter) == ["cell 1 holds 5,120, Exercise 12.6's answer"]


def test_the_question_at_another_scale_is_caught(tmp_path):
    """12.2 asks for gelu's layout in ``auto.mlp(16384, 1024, 4096)`` (B = 4F); a cell before it
    that solves ``auto.mlp(4 * F, H, F)`` with H, F = 768, 3072 asks the same question."""
    def cell(kind, text):
        return {"cell_type": kind, "source": [text], "metadata": {},
                **({"outputs": [], "execution_count": None} if kind == "code" else {})}

    prompt = ("**Exercise 12.2 — gelu (easy, one-line).** The layout of `gelu.1` of "
              "`auto.mlp(16384, 1024, 4096)` on 8 devices.")
    chapter = tmp_path / "leaky.ipynb"
    chapter.write_text(json.dumps({"cells": [
        cell("code", "H, F = 768, 3072\nsolve(auto.mlp(F // 2, H, F))"),
        cell("code", "print(auto.mlp(2 * F, H, F), auto.mlp(4 * F, H, F))"),
        cell("markdown", prompt),
        cell("code", '# BEGIN SOLUTION\ngelu_layout = "A[B_X, F]"\n# END SOLUTION'),
        cell("code", "tpviz.exercises.check_gelu_layout(gelu_layout)")]}))
    assert quoted_calls(prompt) == [("mlp", (16384, 1024, 4096))]
    assert question_leaks(chapter) == [
        "cell 1 calls mlp(12288, 768, 3072), Exercise 12.2's question"]
