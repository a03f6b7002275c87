"""Write the tree of the ``student`` branch: what the book's launch buttons open.

Colab and Binder open a notebook from a branch of the repository; ``_config.yml`` points the
launch buttons at ``student``, and ``.github/workflows/book.yml`` publishes this tree there after
each build of ``main``. It holds:

- ``book/NN_*.ipynb``: the student version of every chapter (``make student``: nbgrader's
  release with tpviz's stubs; no solution and no worked answer), its install cell pinned to the
  commit the book was built from, so the library is the one the chapter was written for;
- ``binder/``: Binder's environment (the pinned requirements and tpviz at that commit) and
  JupyterLab's setting that saves widget state in the notebooks (``tools/lab/overrides.json``:
  a notebook reopened after its kernel stopped still shows each explorer's last figure);
- ``README.md``: what this branch is, and where the book and the full chapters are.

Usage: ``python tools/student_branch.py OUT --commit SHA`` (needs the ``instructor`` extra).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import markup  # noqa: E402

POST_BUILD = """\
#!/bin/bash
# Binder: JupyterLab saves widget state in the notebooks (tools/lab/overrides.json of tpviz)
set -e
settings="$(python -c 'import sys; print(sys.prefix)')/share/jupyter/lab/settings"
mkdir -p "$settings"
cp binder/overrides.json "$settings/overrides.json"
"""

README = """\
# tpviz: the chapters for learners

This branch is written by tpviz's book workflow from commit {commit} of `main`: the chapters
without their solutions, as the book's launch buttons (Colab, Binder) open them. Each chapter's
first cell installs tpviz at that commit.

- The book: {book}
- The full chapters, with solutions, and the library: {repo} (branch `main`, folder `book/`)

Changes pushed here are replaced by the next build.
"""


def write(out: Path, commit: str, names: list[str] | None = None) -> list[Path]:
    """Write the branch's tree into ``out`` (emptied first); returns the notebooks written."""
    from tpviz.grading.files import MANIFEST
    from tpviz.grading.release import release

    if out.exists():
        shutil.rmtree(out)
    book = out / "book"
    written = release(markup.BOOK, book, names, force=True)
    (book / MANIFEST).unlink(missing_ok=True)
    install = markup.first_cell(ref=commit)
    for path in written:
        nb = json.loads(path.read_text(encoding="utf-8"))
        cell = next(c for c in nb["cells"] if c["cell_type"] == "code")
        if not markup.is_install_cell("".join(cell["source"])):
            raise SystemExit(f"{path.name}: the first code cell is not the install cell")
        cell["source"] = install.splitlines(keepends=True)
        path.write_text(markup.dump(nb), encoding="utf-8")
    binder = out / "binder"
    binder.mkdir()
    url = markup.config()["repository"]["url"]
    requirements = (ROOT / "requirements.txt").read_text()
    (binder / "requirements.txt").write_text(f"{requirements}tpviz @ git+{url}@{commit}\n")
    (binder / "runtime.txt").write_text("python-3.11\n")
    shutil.copyfile(ROOT / "tools" / "lab" / "overrides.json", binder / "overrides.json")
    (binder / "postBuild").write_text(POST_BUILD)
    (binder / "postBuild").chmod(0o755)
    (out / "README.md").write_text(README.format(commit=commit, repo=url,
                                                 book=markup.config()["html"]["baseurl"]))
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="folder to write the tree into (emptied)")
    parser.add_argument("--commit", required=True, help="the commit of main the book is built from")
    parser.add_argument("chapters", nargs="*", help="chapter names (default: all)")
    args = parser.parse_intermixed_args(argv)
    for path in write(args.out, args.commit, args.chapters or None):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
