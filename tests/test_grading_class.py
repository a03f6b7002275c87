"""A class that tries to cheat, graded end to end (issue 41): every attack of the hostile probe,
replayed against a course generated from chapter 00, beside honest submissions.

Each notebook runs the whole chapter, so the cases share the fewest notebooks that keep them
apart. ada is honest: all right, with a secret comment no one else may read, a check cell's
grade_id renamed, an answer cell marked as graded, in a nested folder whose name has a space.
bob answers wrong, and his 0.1 is a number whose ``float()`` reads the expected value and his
0.6 has strings equal to everything beside the right count. mallory leaves every answer as
the stub (the untouched case) and tries, one cell each, what scored full marks before: reading
the solutions, the others' work and the instructor's folder, writing the compile cache every
submission reads, writing the gradebook, the grade sheet and the cache from a process left
behind, replacing the checkers, the reporter ``_judge``, the grading switch with a muted
``print``, a fake ``tpviz`` and an input transformer. lou shows what a submission may still
lose: an endless compiled loop in 0.1 costs that exercise only (0.2 is right and scores), then
its 0.3 kills everything in its own sandbox, the attack on the grading process: that costs the
rest of its own notebook only (its later answers are right but never reached). A notebook in no
student's folder is reported and not graded.
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
from tpviz.grading.jobs import CACHE, code_digest
from tpviz.grading.release import released_chapters

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
secret = "{secret[0]}" + "{secret[1]}"  # not ada's secret itself: this source is shown too
print("FOUND", len(found), "SECRET" if secret in text or ("BEGIN " + "SOLUTION") in text else "none")
"""
ATTACKS = {  # mallory's cells, in this order (the read first: the switch mutes print)
    "poison": "import glob, os\nd = os.environ.get('JAX_COMPILATION_CACHE_DIR', '/jax-cache')\n"
              "entries, done = glob.glob(d + '/*'), []\nfor f in entries + [d + '/jit_f-0-cache']:"
              "\n    try:\n        open(f, 'wb').write(b'poison')\n        done.append(f)\n"
              "    except OSError:\n        pass\n"
              "print('POISONED' if done else 'CACHE READ-ONLY', len(entries))\n",
    "records": "import glob, sqlite3, subprocess\nfor db in glob.glob('/tmp/**/gradebook.db', "
               "recursive=True) + glob.glob('/work/**/gradebook.db', recursive=True):\n"
               "    sqlite3.connect(db).execute('update grade set manual_score = 20, "
               "extra_credit = 6')\nsubprocess.Popen(['sh', '-c', 'sleep 4; for f in $(find / "
               "-name grades.csv -o -name \"*.json\" -path \"*tpviz-cache*\" 2>/dev/null); do "
               "echo ada,x,ex0_1,99,1, >> $f; done'], start_new_session=True)\n",
    "checkers": "import tpviz\nfor _n in dir(tpviz.exercises):\n    if _n.startswith('check_'):"
                "\n        setattr(tpviz.exercises, _n, lambda *a, **k: print('✓ correct!'))\n",
    "judge": "import tpviz.core.exercises as _e\n_e._judge = lambda *a, **k: ('ok', '')\n",
    "switch": "import builtins, tpviz.core.exercises as _e\n_e.GRADING = False\n"
              "builtins.print = lambda *a, **k: None\n",
    "fake": "import types\nclass _All:\n    def __getattr__(self, name):\n"
            "        return lambda *a, **k: None\ntpviz = types.SimpleNamespace(exercises=_All())\n",
    "transform": "get_ipython().input_transformers_post.append(lambda lines: ['pass\\n'] if "
                 "any('check_' in ln or 'capture' in ln for ln in lines) else lines)\n",
}
FRAMES = ("import sys\nclass _Sneaky(float):\n    def __float__(self):\n"
          "        f = sys._getframe(1)\n        while f is not None:\n"
          "            if 'expected' in f.f_locals:\n"
          "                return float(f.f_locals['expected'])\n"
          "            f = f.f_back\n        return 0.0\n    __int__ = __float__\n"
          "answer_bytes = _Sneaky(0)\n")  # after the answer: bob's 0.1
EQUAL = ("class _Yes(str):\n    __eq__ = lambda self, other: True\n"
         "    __ne__ = lambda self, other: False\n    __hash__ = str.__hash__\n"
         "in_layout = w_layout = _Yes('anything')\n")  # after the right answer: bob's 0.6
KILL = ("import os, signal\nfor _p in os.listdir('/proc'):\n    if _p.isdigit() and "
        "int(_p) != os.getpid():\n        try:\n            os.kill(int(_p), signal.SIGKILL)"
        "\n        except OSError:\n            pass\ntry:\n    os.kill(os.getppid(), 9)\n"
        "except OSError:\n    pass\n")
COMPILED_LOOP = ("import jax\njax.jit(lambda x: jax.lax.while_loop(lambda c: c > -1.0, "
                 "lambda c: c + 1.0, x))(0.0).block_until_ready()\n")


def _meta(cell):
    return cell["metadata"].get("nbgrader", {})


@pytest.fixture(scope="module")
def student(tmp_path_factory):
    """The class's folder, with the chapter released by nbgrader into the grading's own kept
    releases (as a first run keeps it); the student copy; the book's answers."""
    root = tmp_path_factory.mktemp("class")
    chapter = BOOK / f"{CHAPTER}.ipynb"
    (root / "tmp").mkdir()
    saved, tempfile.tempdir = tempfile.tempdir, str(root / "tmp")  # the course goes there
    try:
        released = released_chapters([chapter], root / "grades" / CACHE / ".releases",
                                     code_digest(), timeout=TIMEOUT_S)[CHAPTER]
    finally:
        tempfile.tempdir = saved
    (root / "student").mkdir()
    (root / "student" / chapter.name).write_text(json.dumps(released, indent=1))
    book_nb = json.loads(chapter.read_text())
    right = {_meta(c)["grade_id"]: "".join(c["source"]) for c in book_nb["cells"]
             if _meta(c).get("solution")}
    return root, root / "student" / chapter.name, right


def _cell(source: str) -> dict:
    return {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [],
            "source": source}


@pytest.fixture(scope="module")
def graded(student):
    root, copy, right = student
    subs, out = root / "submissions", root / "grades"
    expected = {}

    def hand_in(folder: str, points: dict, change) -> None:
        nb = json.loads(copy.read_text())
        change(nb)
        path = subs / folder / f"{CHAPTER}.ipynb"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(nb, indent=1))
        expected[Path(folder).parts[0]] = points

    def answer(nb, gid):
        return next(c for c in nb["cells"] if _meta(c).get("grade_id") == f"{gid}_answer")

    def answers(nb, which=FULL, first=""):
        for gid in which:
            answer(nb, gid)["source"] = right[f"{gid}_answer"]
        answer(nb, "ex0_1")["source"] = first + "".join(answer(nb, "ex0_1")["source"])

    def ada(nb):
        answers(nb, first=f"# {SECRET}\n")
        check = next(c for c in nb["cells"] if _meta(c).get("grade"))
        check["metadata"]["nbgrader"]["grade_id"] = "my_ex0_1"
        _meta(answer(nb, "ex0_1"))["grade"] = True

    def bob(nb):
        for cell in nb["cells"]:
            if _meta(cell).get("solution"):
                text = re.sub(r"= \.\.\.", "= -1", "".join(cell["source"]))
                cell["source"] = re.sub(r"raise NotImplementedError\(.*\)", "return None", text)
        answer(nb, "ex0_1")["source"] += "\n" + FRAMES
        answer(nb, "ex0_6")["source"] = right["ex0_6_answer"] + "\n" + EQUAL

    def mallory(nb):
        at = nb["cells"].index(answer(nb, "ex0_1"))
        read = FIND.format(book=BOOK, subs=subs, out=out, secret=(SECRET[:4], SECRET[4:]))
        nb["cells"][at:at] = [_cell(code) for code in (read, *ATTACKS.values())]

    def lou(nb):
        answers(nb, first=COMPILED_LOOP)
        answer(nb, "ex0_3")["source"] = KILL

    none = dict.fromkeys(FULL, 0)
    hand_in("ada lovelace/homework", FULL, ada)
    hand_in("bob", none, bob)
    hand_in("mallory", none, mallory)
    hand_in("lou", {**none, "ex0_2": 1}, lou)
    (subs / f"{CHAPTER}.ipynb").write_text(copy.read_text())  # in no student's folder
    started = time.monotonic()
    saved, tempfile.tempdir = tempfile.tempdir, str(root / "tmp")
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
    for cached in (root / "grades" / ".tpviz-cache").glob("*/*.json"):
        if not cached.parent.name.startswith("."):  # a result, not a kept release
            assert "99" not in json.loads(cached.read_text())["rows"].__repr__()
    assert not list((root / "tmp").iterdir())  # the course (the solutions) is gone, and all


def test_no_attack_reads_the_solutions_or_anothers_work(graded):
    root, _, _, _ = graded
    saved = json.loads((root / "grades" / ".tpviz-cache" / "mallory" / f"{CHAPTER}.json")
                       .read_text())
    printed = "".join(o.get("text", "") for c in saved["notebook"]["cells"]
                      for o in c.get("outputs", []))
    assert re.search(r"FOUND \d+ none", printed), printed  # it looked, and found nothing
    assert re.search(r"CACHE READ-ONLY [1-9]", printed), printed  # it saw the compile cache
    cached = [f for f in (root / "grades" / ".tpviz-cache" / ".jax").rglob("*") if f.is_file()]
    assert len(cached) > 1 and not any(f.read_bytes() == b"poison" for f in cached)
    pages = list((root / "grades" / "feedback").rglob("*.html"))
    assert sum(SECRET in page.read_text() for page in pages) == 1  # ada's notebook page only
    assert SECRET in (root / "grades" / "feedback" / "ada lovelace" / f"{CHAPTER}.html").read_text()


def test_layout_problems_are_reported_and_the_rest_graded(graded):
    root, _, _, _ = graded
    feedback = root / "grades" / "feedback"
    ada = (feedback / "ada lovelace.html").read_text()
    assert "found in a sub-folder; graded as ada lovelace&#x27;s" in ada
    assert (feedback / "ada lovelace" / f"{CHAPTER}.html").exists()
    assert "grade_id was changed from &#x27;ex0_1&#x27; to &#x27;my_ex0_1&#x27;" in ada
    assert "is marked as graded, but it is not a check cell" in ada
    assert "ended early" in (feedback / "lou.html").read_text()


def test_grading_again_keeps_everything_and_is_quick(graded, capsys, monkeypatch):
    """Nothing changed: no nbgrader (the release is kept), no sandbox, no page made again."""
    import tpviz.grading.feedback
    import tpviz.grading.grade
    import tpviz.grading.release

    def never(*args, **kwargs):
        raise AssertionError("not needed when nothing changed")

    monkeypatch.setattr(tpviz.grading.release, "Course", never)
    monkeypatch.setattr(tpviz.grading.feedback, "notebook_page", never)
    monkeypatch.setattr(tpviz.grading.grade, "grade_one", never)
    root, expected, sheet, _ = graded
    assert main([str(root / "submissions"), str(root / "grades"), "--book", str(BOOK),
                 "--timeout", str(TIMEOUT_S)]) == 0
    log = capsys.readouterr().err
    assert log.count("unchanged, kept") == len(expected)
    assert "compiled programs cached" not in log  # nothing to grade: no warm-up
    assert "done" in log and (root / "grades" / "grades.csv").read_text() == sheet
    assert os.path.exists(root / "grades" / "feedback" / "ada lovelace.html")


@pytest.mark.slow
def test_ctrl_c_stops_cleanly_and_the_next_run_goes_on(graded, tmp_path):
    """Ctrl-C while a submission runs, after another was graded: everything stops, nothing but
    the graded one's result is kept, and the same command goes on from there. (It starts from
    the release and the compile cache that the class's run kept, as a second run would.)"""
    import shutil
    import signal
    import subprocess
    import sys

    root = graded[0]
    for kept in (".releases", ".jax"):
        shutil.copytree(root / "grades" / CACHE / kept, tmp_path / "grades" / CACHE / kept)
    subs = tmp_path / "submissions"
    (subs / "a").mkdir(parents=True)
    (subs / "a" / f"{CHAPTER}.ipynb").write_text("not a notebook")  # graded at once: 0
    (subs / "b").mkdir(parents=True)
    slow = json.loads((root / "student" / f"{CHAPTER}.ipynb").read_text())
    slow["cells"].insert(0, {"cell_type": "code", "source": "import time\ntime.sleep(15)",
                             "metadata": {}, "outputs": [], "execution_count": None})
    (subs / "b" / f"{CHAPTER}.ipynb").write_text(json.dumps(slow))  # still running when stopped
    command = [sys.executable, "-m", "tpviz.grading.grade", str(subs), str(tmp_path / "grades"),
               "--book", str(BOOK), "--workers", "1", "--timeout", str(TIMEOUT_S)]
    (tmp_path / "tmp").mkdir()
    env = {**os.environ, "TMPDIR": str(tmp_path / "tmp")}
    run = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, env=env)
    seen = []
    for line in run.stderr:
        seen.append(line)
        if "a/" in line and "points" in line:  # a is graded, b's notebook runs: stop now
            time.sleep(2)
            run.send_signal(signal.SIGINT)
            break
    rest = run.communicate(timeout=120)[1]
    assert run.returncode == 130 and "interrupted: 1 of 2" in rest, rest
    assert "compiled programs kept from an earlier run" in "".join(seen), seen
    assert not (tmp_path / "grades" / "grades.csv").exists()
    assert not list((tmp_path / "tmp").iterdir())  # nothing left in the temporary folder
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert str(subs) not in ps and "grading/runner.py" not in ps, ps
    again = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)
    assert again.returncode == 0 and again.stderr.count("unchanged, kept") == 1, again.stderr
    assert len((tmp_path / "grades" / "grades.csv").read_text().splitlines()) == 1 + 2 * 6
