"""The kernel client's channels poll in slices (tpviz.grading.runner.poll_in_slices, used by the
grading runner and tools/run_chapter.py): a message a poll missed is read by the next slice,
a timeout still ends in ``Empty`` at its limit, and no limit waits on."""

import asyncio
import importlib.util
import time
from pathlib import Path
from queue import Empty

import pytest

RUNNER = Path(__file__).resolve().parents[1] / "src" / "tpviz" / "grading" / "runner.py"


def _runner():
    spec = importlib.util.spec_from_file_location("runner_for_test", RUNNER)
    runner = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(runner)
    return runner


CHANNEL = _runner().async_channel()  # jupyter_client 8's AsyncZMQSocketChannel, or 7's


def test_the_channel_reads_asynchronously():
    assert asyncio.iscoroutinefunction(CHANNEL.get_msg)  # what nbclient awaits


@pytest.fixture
def sliced(monkeypatch):
    """get_msg patched over a channel whose poll misses the first ``misses`` wake-ups: each
    such poll waits its whole timeout and finds nothing, as a poll that lost its edge does."""
    state = {"misses": 0, "polls": []}

    async def whole(self, timeout=None):
        state["polls"].append(timeout)
        if state["misses"] is None or len(state["polls"]) <= state["misses"]:
            await asyncio.sleep(timeout)
            raise Empty
        return {"msg": "reply"}

    monkeypatch.setattr(CHANNEL, "get_msg", whole)
    _runner().poll_in_slices(seconds=0.05)
    return state


def _get(timeout):
    return asyncio.run(CHANNEL.get_msg(object(), timeout=timeout))


def test_a_missed_wake_up_costs_one_slice_not_the_limit(sliced):
    sliced["misses"] = 1
    start = time.monotonic()
    assert _get(timeout=30) == {"msg": "reply"}
    assert time.monotonic() - start < 1  # not the 30-s limit
    assert sliced["polls"] == [0.05, 0.05]


def test_no_message_is_empty_at_the_limit(sliced):
    sliced["misses"] = None  # never a message
    start = time.monotonic()
    with pytest.raises(Empty):
        _get(timeout=0.3)
    assert 0.29 < time.monotonic() - start < 1.5
    assert all(p <= 0.05 + 1e-9 for p in sliced["polls"]) and len(sliced["polls"]) >= 5


def test_no_limit_keeps_polling(sliced):
    sliced["misses"] = 4
    assert _get(timeout=None) == {"msg": "reply"}
    assert sliced["polls"] == [0.05] * 5
