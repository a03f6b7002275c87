"""For instructors: the student version of the chapters (and, later, grading)."""
