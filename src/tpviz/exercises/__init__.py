"""Exercise checkers, one ``check_<name>`` per exercise (see :mod:`._framework`)."""

from tpviz.exercises._framework import ExerciseFailed, NotAttempted, Wrong, checker
from tpviz.exercises.layouts import (
    check_bytes_per_device,
    check_holders,
    check_rows_over_mesh,
    check_total,
)

__all__ = ["ExerciseFailed", "NotAttempted", "Wrong", "check_bytes_per_device", "check_holders",
           "check_rows_over_mesh", "check_total", "checker"]
