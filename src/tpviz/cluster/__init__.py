"""The book's checks across several processes, and scripts run on a loopback cluster.

``python -m tpviz.cluster --processes 2 --devices-per-process 4`` runs every topic's check in
one process of 8 devices and in 2 processes of 4 CPU devices joined by ``jax.distributed``
(loopback, gloo), and prints one line per topic, ``equal`` where the two agree (values and
compiled collectives); it exits 0 only when every topic is equal (:mod:`tpviz.cluster.checks`).

``python -m tpviz.cluster --processes 2 --script my_script.py`` runs ``my_script.py`` in 2
processes whose ``tpviz.setup_devices(n)`` join each other: the way to try a multi-process
program on one machine.
"""

from tpviz.cluster.checks import TOPICS, Verdict, run_checks
from tpviz.cluster.script import run_script
from tpviz.core.publish import publish

__all__ = ["TOPICS", "Verdict", "run_checks", "run_script"]

publish(globals())
