"""Grading one submission, and remembering the result.

:func:`grade_one` prepares the notebook (:mod:`tpviz.grading.prepare`), runs it in its own
sandbox (:mod:`tpviz.grading.runner`: the check cells write the answers out as plain data),
then judges each exercise outside the learner's code: a value answer in the judge process
(:mod:`tpviz.grading.judge`), a function answer in a fresh sandboxed process of its own
(:mod:`tpviz.grading.fnrun`). An exercise earns its points when, and only when, its checker
says ✓; nothing the notebook prints or writes counts.

:class:`Cache` keeps each result in ``<out>/.tpviz-cache/``, written by the grading process
only, under a key made of what the sandbox cannot change: the submitted file's bytes, the
chapter, the settings and tpviz's own code. A rerun skips a submission unchanged since.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tpviz.grading import inner
from tpviz.grading.prepare import Exercise, prepare

CACHE = ".tpviz-cache"
# the runner as a script: it imports nothing of tpviz (see its docstring); -P keeps its folder
# off sys.path
PHASE_A = [sys.executable, "-P", str(Path(__file__).resolve().with_name("runner.py"))]
PHASE_B = [sys.executable, "-P", "-m", "tpviz.grading.fnserve", "--many"]
STARTUP_S = 90  # a sandboxed Python's imports and devices, on a loaded machine


@dataclass
class Result:
    """One submission's grade: rows ``[exercise, points, max_points, note]``, the checkers'
    messages, the executed notebook (for the feedback page), and what went wrong."""

    student: str
    chapter: str
    rows: list[list] = field(default_factory=list)
    messages: dict = field(default_factory=dict)  # grade_id -> (status, message)
    notebook: dict | None = None
    checks: dict = field(default_factory=dict)  # grade_id -> cell index in the notebook
    notes: list = field(default_factory=list)
    problem: str = ""
    seconds: float = 0.0
    phases: dict = field(default_factory=dict)  # seconds: the notebook, values, functions

    @property
    def points(self) -> tuple[float, float]:
        return (sum(float(r[1]) for r in self.rows), sum(float(r[2]) for r in self.rows))


@dataclass
class Context:
    """What every job of a run shares."""

    sandbox: object
    judge: inner.Judge
    releases: dict  # chapter -> released notebook (dict)
    exercises: dict  # chapter -> list[Exercise]
    timeout: int
    caches: dict = field(default_factory=dict)  # chapter -> its compile cache (tpviz.grading.warm)


def run_notebook(ctx: Context, prepared, cache: Path | None,
                 fill: bool = False) -> tuple[dict, set, dict | None, str]:
    """Run the prepared notebook in a sandbox, with a compile cache read-only (or writable:
    ``fill``, the warm-up); its answers, the exercises that timed out, the executed notebook and
    what went wrong."""
    answers, late, box = {}, set(), {}

    def on_line(line: bytes) -> None:
        try:
            event = json.loads(line)
        except ValueError:
            return
        if not isinstance(event, dict):
            return
        if isinstance(event.get("answer"), str) and isinstance(event.get("data"), dict):
            answers.setdefault(event["answer"], event["data"])  # the first one counts
        elif isinstance(event.get("timed_out"), str):
            late.add(event["timed_out"])
        elif isinstance(event.get("notebook"), dict):
            box["nb"] = event["notebook"]

    job = json.dumps({"notebook": prepared.notebook, "exercises": prepared.exercises,
                      "timeout": ctx.timeout}).encode()
    seconds = STARTUP_S + max(600, 6 * ctx.timeout)
    code, _, cut = inner.run(ctx.sandbox, PHASE_A, job, seconds, on_line,
                             cache=cache, fill=fill)
    why = ""
    if code is None:
        why = f"the notebook was stopped after {seconds} s"
    elif cut:
        why = f"the notebook printed more than {inner.MAX_OUTPUT // 2**20} MiB"
    elif "nb" not in box:
        how = f"killed by signal {-code}" if code < 0 else f"exit code {code}"
        why = (f"the notebook's run ended early ({how}); the exercises it had not reached "
               "score 0")
    return answers, late, box.get("nb"), why


def function_verdict(checks: inner.Server, ex: Exercise, data: dict,
                     seconds: float) -> tuple[str, str]:
    """A function answer's verdict, from a fresh fork of the submission's function-check
    process (:mod:`tpviz.grading.fnserve`), accepted only with the key given for it."""
    key = secrets.token_hex(16)
    reply = checks.ask({"checker": ex.checker, "args": data["args"], "kwargs": data["kwargs"],
                        "source": data.get("source", ""), "context": data.get("context", {}),
                        "key": key, "seconds": seconds})
    if reply is None:
        return "wrong", "✗ your function's check did not report (its process was stopped)"
    if not reply.get("more"):
        checks.close()  # it checks no other job: the next one gets a new process
    if reply.get("timed_out"):
        return "wrong", f"✗ checking your function took more than {seconds:.0f} s"
    lines = str(reply.get("verdict", "")).splitlines()
    try:
        (verdict,) = [json.loads(ln) for ln in lines]
        if verdict["key"] != key:
            raise ValueError("a verdict without the key")
        return str(verdict["status"]), str(verdict["message"])
    except (ValueError, KeyError, TypeError):
        errors = str(reply.get("errors", ""))
        last = [ln for ln in errors.splitlines() if ln.strip()][-1:] or ["no output"]
        return "wrong", ("✗ your function's check did not report normally (its process wrote "
                         f"{len(lines)} verdicts; it ended with: {last[0][:200]})")


def judge_one(ctx: Context, ex: Exercise, data: dict | None, untouched: bool,
              checks: inner.Server) -> tuple[str, str]:
    if data is None:
        return "wrong", "✗ the notebook stopped before this exercise was reached"
    if "failed" in data:
        return "wrong", f"✗ your answer could not be read ({data['failed']})"
    specs = [*data.get("args", []), *data.get("kwargs", {}).values()]
    errors = [s["error"] for s in specs if "error" in s]
    if errors:
        return "wrong", f"✗ your answer could not be read: {errors[0]}"
    if data.get("code"):
        if untouched:
            return "stub", "✗ not attempted yet."
        if not ex.takes_code:  # decided by the release: the submission cannot choose its judge
            return "wrong", ("✗ this exercise's answer is plain data (a number, text, or a list, "
                             "tuple or dict of them; NumPy and JAX arrays, PartitionSpecs and "
                             "meshes too), and yours is an object of your own; the grader does "
                             "not run it. Give the value itself.")
        return function_verdict(checks, ex, data, STARTUP_S + ctx.timeout)
    return ctx.judge(ex.checker, [s["value"] for s in data["args"]],
                     {k: s["value"] for k, s in data["kwargs"].items()})


def grade_one(ctx: Context, student: str, chapter: str, data: bytes) -> Result:
    start = time.perf_counter()
    result = Result(student, chapter)
    exercises = ctx.exercises[chapter]
    try:
        prepared = prepare(data, ctx.releases[chapter])
    except ValueError as e:  # UnicodeDecodeError too
        return not_graded(student, chapter, exercises, f"could not be graded ({e}): 0 points")
    result.notes = prepared.notes
    answers, late, result.notebook, why = run_notebook(ctx, prepared, ctx.caches.get(chapter))
    result.phases = {"notebook": round(time.perf_counter() - start, 1), "values": 0.0,
                     "functions": 0.0}
    if why:
        result.problem = why
    result.checks = {e["grade_id"]: e["index"] for e in prepared.exercises}
    checks = inner.Server(ctx.sandbox, [*PHASE_B, *sorted({ex.checker for ex in exercises})],
                          2 * STARTUP_S + ctx.timeout)  # started at the first function answer
    try:
        for ex in exercises:
            data, begun = answers.get(ex.grade_id), time.perf_counter()
            status, message = judge_one(ctx, ex, data, ex.grade_id in prepared.untouched, checks)
            phase = "functions" if data and data.get("code") else "values"
            result.phases[phase] = round(result.phases[phase] + time.perf_counter() - begun, 1)
            if ex.grade_id in late:
                status, message = "wrong", "✗ a cell of this exercise ran past the time limit"
            result.messages[ex.grade_id] = [status, message]
            note = "timed out" if ex.grade_id in late else ""
            result.rows.append([ex.grade_id, _n(ex.points) if status == "ok" else 0,
                                _n(ex.points), note])
    finally:
        checks.close()
    result.seconds = time.perf_counter() - start
    return result


def not_graded(student: str, chapter: str, exercises: list[Exercise], problem: str) -> Result:
    """A submission none of whose exercises could be graded: 0 points each, and why."""
    return Result(student, chapter, [[ex.grade_id, 0, _n(ex.points), "not graded"]
                                     for ex in exercises], problem=problem)


def _n(x: float) -> int | float:
    return int(x) if float(x).is_integer() else x


def code_digest() -> str:
    """SHA-256 of tpviz's own source: a fixed checker makes every cached grade stale."""
    import tpviz

    h = hashlib.sha256()
    for path in sorted(Path(tpviz.__file__).parent.rglob("*.py")):
        h.update(path.as_posix().encode() + path.read_bytes())
    return h.hexdigest()


class Cache:
    """Results in ``<out>/.tpviz-cache/<student>/<chapter>.json``, each under its key."""

    def __init__(self, out: Path, settings: str, releases: dict, digest: str | None = None):
        self.folder, self.releases = out / CACHE, releases
        self.settings = settings + (digest or code_digest())

    def key(self, chapter: str, data: bytes) -> str:
        h = hashlib.sha256(self.settings.encode())
        for part in (chapter.encode(), json.dumps(self.releases[chapter]).encode(), data):
            h.update(hashlib.sha256(part).digest())
        return h.hexdigest()

    def get(self, student: str, chapter: str, data: bytes, exercises) -> Result | None:
        try:
            saved = json.loads((self.folder / student / f"{chapter}.json").read_text())
            if saved.pop("key") != self.key(chapter, data):
                return None
            result = Result(**saved)
        except (OSError, ValueError, TypeError, KeyError):
            return None
        top = {ex.grade_id: ex.points for ex in exercises}  # never above the book's points
        if [r[0] for r in result.rows] != list(top):
            return None
        for row in result.rows:
            row[2] = _n(top[row[0]])
            row[1] = _n(min(float(row[1]), top[row[0]])) if result.messages.get(
                row[0], ["wrong"])[0] == "ok" else 0
        return result

    def put(self, result: Result, data: bytes) -> None:
        file = self.folder / result.student / f"{result.chapter}.json"
        file.parent.mkdir(parents=True, exist_ok=True)
        temporary = file.with_suffix(".tmp")
        temporary.write_text(json.dumps({"key": self.key(result.chapter, data),
                                         **asdict(result)}))
        os.replace(temporary, file)
