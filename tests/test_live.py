"""core.live: the live figures of the static book are the plan layer's numbers, precomputed."""

import json

import pytest

from tpviz.core import live
from tpviz.core.live import Grid, LiveFigure, bar_rows, words_and_bars
from tpviz.errors import ArgumentError

TOPICS = ["layouts", "machines", "matmul", "megatron", "mesh2d", "pipeline", "asyncpipe", "zero",
          "moe", "autoshard", "context", "inference"]


def _figure(**kw):
    return LiveFigure(controls={"n": Grid([1, 2, 3], "n"), "x": Grid([0.5, 1.0], "x")},
                      rows=lambda n, x: bar_rows([("n·x", n * x, f"{n * x}")]),
                      chart=lambda base: words_and_bars(base, "value"), **kw)


def test_keys_are_written_as_javascript_writes_them():
    # JavaScript: 4 + '' == "4", 1.0 + '' == "1", 0.5 + '' == "0.5", true + '' == "true"
    assert live.key([4, 1.0, 0.5, True, "1f1b"]) == "4|1|0.5|true|1f1b"


def test_every_setting_finds_its_own_rows():
    f = _figure()
    rows, ids = live.table(f)
    assert len(ids) == 6
    for n in (1, 2, 3):
        for x in (0.5, 1.0):
            mine = [r for r in rows if r["_id"] == ids[live.key([n, x])] and "what" in r]
            assert [r["value"] for r in mine] == [n * x]


def test_settings_that_draw_the_same_share_rows():
    f = LiveFigure(controls={"n": Grid([1, 2], "n"), "m": Grid([1, 2], "m")},
                   rows=lambda n, m: bar_rows([("n", n, "")]), chart=lambda b: b.mark_bar())
    rows, ids = live.table(f)
    assert len(rows) == 2 and ids["1|1"] == ids["1|2"] != ids["2|1"]


def test_refused_settings_show_the_reason():
    from tpviz.errors import ShardingError

    def rows(n):
        if n == 3:
            raise ShardingError("3 does not divide 8")
        return bar_rows([("n", n, "")])

    f = LiveFigure(controls={"n": Grid([2, 3], "n")}, rows=rows, chart=lambda b: b.mark_bar())
    table, ids = live.table(f)
    assert [r["note"] for r in table if r["_id"] == ids["3"]] == ["⚠ 3 does not divide 8"]


def test_bad_specs_are_refused():
    with pytest.raises(ArgumentError, match="'case'"):
        LiveFigure(controls={"case": Grid([1], "case")}, rows=dict, chart=None)
    big = LiveFigure(controls={f"c{i}": Grid(list(range(10)), "c") for i in range(4)},
                     rows=dict, chart=None)
    with pytest.raises(ArgumentError, match="10000 settings"):
        big.settings()


def test_embed_binds_every_control_and_starts_where_the_explorer_does():
    f = live.starting(_figure(), {"n": 2, "x": 7.0})  # 7.0 is not on the grid: ignored
    spec = json.loads(live.embed(f, "demo").split('json">')[1].split("</script>")[0])
    params = {p["name"]: p for p in spec["params"]}
    assert params["n"]["value"] == 2 and params["x"]["value"] == 0.5
    assert params["n"]["bind"]["input"] == "range" and params["x"]["bind"]["input"] == "select"
    assert "_id" in params and spec["datasets"]["rows"]


@pytest.mark.parametrize("topic", TOPICS)
def test_topic_live_figure_is_the_plan(topic):
    import importlib

    f = importlib.import_module(f"tpviz.{topic}.explore").LIVE
    rows, ids = live.table(f)
    assert len(ids) == len(f.settings()) <= live.MAX_SETTINGS
    from tpviz.errors import TpvizError

    for setting in f.settings():  # the first setting the plan accepts
        try:
            want = f.rows(**setting, **f.fixed)
            break
        except TpvizError:
            continue
    got = [{k: v for k, v in r.items() if k != "_id"} for r in rows
           if r["_id"] == ids[live.key(setting.values())]]
    assert got == want
