"""A class that tries to cheat, graded end to end (issue 41): every attack of the hostile probe,
replayed against a course generated from chapter 00, beside honest submissions.

Each submission is one student. The honest ones: ada (all right, and a secret comment no one
else may read), bob (all wrong), cy (untouched), dee (right, in a nested folder), "eve smith"
(right, a folder name with a space), gus (right, but a check cell's grade_id renamed and an
answer cell marked as graded). The attackers answer nothing right (their answers are the stubs)
and try, one each, what scored full marks before: replacing the checkers, the reporter ``_judge``,
the grading switch with a muted ``print``, a fake ``tpviz``, an input transformer, numbers and
strings that read or fake the expected value, writing the gradebook, the grade sheet and the
cache from a process left behind, reading the solutions, the others' work and the instructor's
folder, and killing the grading. Two more show what a submission may still lose: lou (right,
but an endless compiled loop in 0.1: that exercise only) and kim (0.1 and 0.2 right, then kills
everything in its own sandbox: the rest of its own notebook only).
"""

import csv
import json
import os
import re
import tempfile
import time
from pathlib import Path

import pytest

pytest.importorskip("nbgrader", reason="the instructor extra: pip install -e '.[instructor]'")

from tpviz.grading.grade import main
from tpviz.grading.isolate import Sandbox
from tpviz.grading.release import release

BOOK = Path(__file__).resolve().parents[1] / "book"
CHAPTER = "00_devices_meshes_shardings"
TIMEOUT_S = 20
SECRET = "ada-secret-0f9c27"  # in ada's notebook only
FULL = {"ex0_1": 1, "ex0_2": 1, "ex0_3": 1, "ex0_4": 3, "ex0_5": 3, "ex0_6": 3}  # 0.3: one-line
FIND = """
import glob, os
found = []
for pattern in ["/tmp/tpviz-course-*/**/*", "/tmp/**/gradebook.db", "/work/**/gradebook.db",
                "{book}/*.ipynb", "{subs}/*/*.ipynb", "{subs}/*/*/*.ipynb", "{out}/**/*",
                "/root/**/*.ipynb", "/home/**/*.ipynb"]:
    found += glob.glob(pattern, recursive=True)
for pid in os.listdir("/proc"):
    for what in ("cwd", "root", "environ", "cmdline"):
        try:
            found.append(pid + what + ":" + (os.readlink(f"/proc/{{pid}}/{{what}}")
                         if what in ("cwd", "root") else open(f"/proc/{{pid}}/{{what}}").read()))
        except OSError:
            pass
text = ""
for path in found:
    try:
        text += path + open(path.split(":", 1)[-1], errors="replace").read()
    except (OSError, ValueError):
        pass
print("FOUND", len(found), "SECRET" if "{secret}" in text or "BEGIN SOLUTION" in text else "none")
"""
ATTACKS = {
    "a_checkers": "import tpviz\nfor _n in dir(tpviz.exercises):\n    if _n.startswith('check_'):"
                  "\n        setattr(tpviz.exercises, _n, lambda *a, **k: print('✓ correct!'))\n",
    "a_judge": "import tpviz.core.exercises as _e\n_e._judge = lambda *a, **k: ('ok', '')\n",
    "a_switch": "import builtins, tpviz.core.exercises as _e\n_e.GRADING = False\n"
                "builtins.print = lambda *a, **k: None\n",
    "a_fake": "import types\nclass _All:\n    def __getattr__(self, name):\n"
              "        return lambda *a, **k: None\ntpviz = types.SimpleNamespace(exercises=_All())\n",
    "a_transform": "get_ipython().input_transformers_post.append(lambda lines: ['pass\\n'] if "
                   "any('check_' in ln or 'capture' in ln for ln in lines) else lines)\n",
    "a_frames": "import sys\nclass _Sneaky(float):\n    def __float__(self):\n"
                "        f = sys._getframe(1)\n        while f is not None:\n"
                "            if 'expected' in f.f_locals:\n"
                "                return float(f.f_locals['expected'])\n"
                "            f = f.f_back\n        return 0.0\n    __int__ = __float__\n"
                "answer_bytes = _Sneaky(0)\n",
    "a_equal": "class _Yes(str):\n    __eq__ = lambda self, other: True\n"
               "    __ne__ = lambda self, other: False\n    __hash__ = str.__hash__\n"
               "in_layout = w_layout = _Yes('anything')\n",
    "a_records": "import glob, sqlite3, subprocess\nfor db in glob.glob('/tmp/**/gradebook.db', "
                 "recursive=True) + glob.glob('/work/**/gradebook.db', recursive=True):\n    sqlite3.connect(db).execute('update grade set "
                 "manual_score = 20, extra_credit = 6')\nsubprocess.Popen(['sh', '-c', 'sleep 4; "
                 "for f in $(find / -name grades.csv -o -name \"*.json\" -path \"*tpviz-cache*\" "
                 "2>/dev/null); do echo ada,x,ex0_1,99,1, >> $f; done'], start_new_session=True)\n",
    "a_kill": "import os, signal\nfor _p in os.listdir('/proc'):\n    if _p.isdigit() and "
              "int(_p) != os.getpid():\n        try:\n            os.kill(int(_p), signal.SIGKILL)"
              "\n        except OSError:\n            pass\ntry:\n    os.kill(os.getppid(), 9)\n"
              "except OSError:\n    pass\n",
}
COMPILED_LOOP = ("import jax\njax.jit(lambda x: jax.lax.while_loop(lambda c: c > -1.0, "
                 "lambda c: c + 1.0, x))(0.0).block_until_ready()\n")


def _meta(cell):
    return cell["metadata"].get("nbgrader", {})


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    root = tmp_path_factory.mktemp("class")
    subs, out = root / "submissions", root / "grades"
    release(BOOK, root / "student", [CHAPTER])
    book_nb = json.loads((BOOK / f"{CHAPTER}.ipynb").read_text())
    right = {_meta(c)["grade_id"]: "".join(c["source"]) for c in book_nb["cells"]
             if _meta(c).get("solution")}
    expected = {}

    def hand_in(folder: str, points: dict, change) -> None:
        nb = json.loads((root / "student" / f"{CHAPTER}.ipynb").read_text())
        change(nb)
        path = subs / folder / f"{CHAPTER}.ipynb"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(nb, indent=1))
        expected[Path(folder).parts[0]] = points

    def answers(nb, which=FULL, first=""):
        for cell in nb["cells"]:
            gid = _meta(cell).get("grade_id", "")
            if _meta(cell).get("solution") and gid.removesuffix("_answer") in which:
                cell["source"] = right[gid]
        answer = next(c for c in nb["cells"] if _meta(c).get("solution"))
        answer["source"] = first + "".join(answer["source"])

    def wrong(nb):
        for cell in nb["cells"]:
            if _meta(cell).get("solution"):
                text = re.sub(r"= \.\.\.", "= -1", "".join(cell["source"]))
                cell["source"] = re.sub(r"raise NotImplementedError\(.*\)", "return None", text)

    def renamed(nb):
        answers(nb)
        check = next(c for c in nb["cells"] if _meta(c).get("grade"))
        check["metadata"]["nbgrader"]["grade_id"] = "my_ex0_1"
        _meta(next(c for c in nb["cells"] if _meta(c).get("solution")))["grade"] = True

    none = dict.fromkeys(FULL, 0)
    hand_in("ada", FULL, lambda nb: answers(nb, first=f"# {SECRET}\n"))
    hand_in("bob", none, wrong)
    hand_in("cy", none, lambda nb: None)
    hand_in("dee/homework", FULL, answers)
    hand_in("eve smith", FULL, answers)
    hand_in("gus", FULL, renamed)
    hand_in("lou", {**FULL, "ex0_1": 0}, lambda nb: answers(nb, first=COMPILED_LOOP))
    kim = ATTACKS["a_kill"]
    hand_in("kim", {**none, "ex0_1": 1, "ex0_2": 1}, lambda nb: [
        answers(nb, {"ex0_1", "ex0_2"}),
        next(c for c in nb["cells"] if _meta(c).get("grade_id") == "ex0_3_answer").update(
            source=kim)])
    for name, code in {**ATTACKS, "a_read": FIND.format(
            book=BOOK, subs=subs, out=out, secret=SECRET)}.items():
        hand_in(name, none, lambda nb, code=code: answers(nb, set(), first=code))
    (subs / f"{CHAPTER}.ipynb").write_text((subs / "ada" / f"{CHAPTER}.ipynb").read_text())
    started = time.monotonic()
    (root / "tmp").mkdir()
    saved, tempfile.tempdir = tempfile.tempdir, str(root / "tmp")  # the course goes there
    try:
        code = main([str(subs), str(out), "--book", str(BOOK), "--timeout", str(TIMEOUT_S)])
    finally:
        tempfile.tempdir = saved
    assert code == 0
    sheet = (out / "grades.csv").read_text()
    time.sleep(6)  # anything a submission left behind would have acted by now
    return root, expected, sheet, time.monotonic() - started


def _sheet(root):
    with open(root / "grades" / "grades.csv") as f:
        return list(csv.DictReader(f))


def test_sandbox_is_available_here():
    Sandbox()  # CI and this machine must grade in a sandbox, never silently without one


def test_every_attack_scores_what_it_earns(graded):
    root, expected, _, _ = graded
    got = {}
    for r in _sheet(root):
        got.setdefault(r["student"], {})[r["exercise"]] = float(r["points"])
    assert got == expected
    notes = {r["student"]: r["note"] for r in _sheet(root) if r["note"]}
    assert notes == {"lou": "timed out"}


def test_nothing_outlives_the_run_or_writes_the_records(graded):
    root, _, sheet, _ = graded
    assert (root / "grades" / "grades.csv").read_text() == sheet
    for cached in (root / "grades" / ".tpviz-cache").rglob("*.json"):
        assert "99" not in json.loads(cached.read_text())["rows"].__repr__()
    assert not list((root / "tmp").glob("tpviz-course-*"))  # the solutions are gone


def test_no_attack_reads_the_solutions_or_anothers_work(graded):
    root, _, _, _ = graded
    saved = json.loads((root / "grades" / ".tpviz-cache" / "a_read" / f"{CHAPTER}.json")
                       .read_text())
    printed = "".join(o.get("text", "") for c in saved["notebook"]["cells"]
                      for o in c.get("outputs", []))
    assert re.search(r"FOUND \d+ none", printed), printed  # it looked, and found nothing
    for page in (root / "grades" / "feedback").rglob("*.html"):
        if "ada" not in page.parts[-1] and page.parent.name != "ada" and "a_read" not in str(page):
            assert SECRET not in page.read_text(), page


def test_layout_problems_are_reported_and_the_rest_graded(graded):
    root, _, _, _ = graded
    feedback = root / "grades" / "feedback"
    assert "found in a sub-folder; graded as dee&#x27;s" in (feedback / "dee.html").read_text()
    assert (feedback / "eve smith" / f"{CHAPTER}.html").exists()
    gus = (feedback / "gus.html").read_text()
    assert "grade_id was changed from &#x27;ex0_1&#x27; to &#x27;my_ex0_1&#x27;" in gus
    assert "is marked as graded, but it is not a check cell" in gus


def test_grading_again_keeps_everything_and_is_quick(graded, capsys):
    root, expected, sheet, _ = graded
    assert main([str(root / "submissions"), str(root / "grades"), "--book", str(BOOK),
                 "--timeout", str(TIMEOUT_S)]) == 0
    log = capsys.readouterr().err
    assert log.count("unchanged, kept") == len(expected)
    assert "done" in log and (root / "grades" / "grades.csv").read_text() == sheet
    assert os.path.exists(root / "grades" / "feedback" / "ada.html")


@pytest.mark.slow
def test_ctrl_c_stops_cleanly_and_the_next_run_goes_on(graded, tmp_path):
    import signal
    import subprocess
    import sys

    root, _, _, _ = graded
    subs = tmp_path / "submissions"
    for n in range(3):
        (subs / f"s{n}").mkdir(parents=True)
        (subs / f"s{n}" / f"{CHAPTER}.ipynb").write_text(
            (root / "submissions" / "cy" / f"{CHAPTER}.ipynb").read_text())
    command = [sys.executable, "-m", "tpviz.grading.grade", str(subs), str(tmp_path / "grades"),
               "--book", str(BOOK), "--workers", "1"]
    (tmp_path / "tmp").mkdir()
    env = {**os.environ, "TMPDIR": str(tmp_path / "tmp")}
    run = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, env=env)
    for line in run.stderr:
        if "points" in line:  # the first submission is graded: stop now
            run.send_signal(signal.SIGINT)
            break
    rest = run.communicate(timeout=120)[1]
    assert run.returncode == 130 and "interrupted: 1 of 3" in rest, rest
    assert not (tmp_path / "grades" / "grades.csv").exists()
    assert not list((tmp_path / "tmp").iterdir())  # the course with the solutions: gone
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert str(subs) not in ps and "tpviz.grading.runner" not in ps.replace(str(root), "")
    again = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)
    assert again.returncode == 0 and again.stderr.count("unchanged, kept") == 1
    assert len((tmp_path / "grades" / "grades.csv").read_text().splitlines()) == 1 + 3 * 6
