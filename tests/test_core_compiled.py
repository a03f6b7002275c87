import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import tpviz
from tpviz.core import compiled
from tpviz.errors import CompileError

HEADER = "HloModule m, num_partitions=8\n"


def test_list_replica_groups():
    text = HEADER + ("  %ar = f32[4,2]{1,0} all-reduce(%p), channel_id=1, "
                     "replica_groups={{0,4},{1,5},{2,6},{3,7}}, use_global_device_ids=true, to_apply=%add\n")
    (op,) = compiled.parse_hlo(text)
    assert (op.kind, op.dtype, op.shape, op.bytes, op.group_size) == ("all-reduce", "float32", (4, 2), 32, 2)
    assert op.groups == ((0, 4), (1, 5), (2, 6), (3, 7))


def test_iota_replica_groups_with_transpose():
    # [4,2]<=[2,4]T(1,0): iota(8) as 2x4, transposed to 4x2, read as 4 groups of 2
    text = HEADER + "  %ag = bf16[8,16]{1,0} all-gather(%p), replica_groups=[4,2]<=[2,4]T(1,0), dimensions={0}\n"
    (op,) = compiled.parse_hlo(text)
    assert op.groups == ((0, 4), (1, 5), (2, 6), (3, 7))
    assert (op.kind, op.bytes, op.group_size) == ("all-gather", 8 * 16 * 2, 2)


def test_mesh_replica_groups():
    text = HEADER + ("  %ar = f32[] all-reduce(%p), replica_groups=mesh['a'=2,'b'=4] {'a'}, "
                     "to_apply=%add\n")
    (op,) = compiled.parse_hlo(text)
    assert op.groups == ((0, 4), (1, 5), (2, 6), (3, 7))


def test_async_pairs_are_counted_once_with_their_result_shape():
    text = HEADER + (
        "  %s = (f32[2,8]{1,0}, f32[16,8]{1,0}) all-gather-start(%p), replica_groups=[1,8]<=[8], dimensions={0}\n"
        "  %d = f32[16,8]{1,0} all-gather-done(%s)\n"
        "  %r = f32[8]{0} all-reduce-start(%q), replica_groups={}, to_apply=%add\n"
        "  %e = f32[8]{0} all-reduce-done(%r)\n")
    ops = compiled.parse_hlo(text)
    assert [(o.kind, o.shape, o.group_size) for o in ops] == [("all-gather", (16, 8), 8),
                                                              ("all-reduce", (8,), 8)]


def test_metadata_mentioning_a_collective_is_not_a_collective():
    text = HEADER + '  %c = f32[4]{0} copy(%p), metadata={op_name="all-gather(x)"}\n'
    assert compiled.parse_hlo(text) == []


@pytest.fixture(scope="module")
def mesh8():
    return tpviz.make_mesh((8,), ("X",))


def _compiled(mesh, body, out_specs, x):
    return compiled.collectives(jax.shard_map(body, mesh=mesh, in_specs=P("X"), out_specs=out_specs), x)


def test_psum_is_one_all_reduce(mesh8):
    x = jnp.ones((8, 16), jnp.float32)
    (op,) = _compiled(mesh8, lambda b: jax.lax.psum(b, "X"), P(), x)
    assert (op.kind, op.shape, op.bytes, op.group_size) == ("all-reduce", (1, 16), 64, 8)
    assert op.sent_bytes == pytest.approx(2 * 7 / 8 * 64)


def test_all_gather_reduce_scatter_all_to_all_permute(mesh8):
    x = jnp.ones((64, 16), jnp.float32)  # blocks f32[8, 16]
    gather = _compiled(mesh8, lambda b: jax.lax.all_gather(b, "X", tiled=True), P("X"), x)
    assert [(o.kind, o.shape) for o in gather] == [("all-gather", (64, 16))]
    scatter = _compiled(mesh8, lambda b: jax.lax.psum_scatter(b, "X", tiled=True), P("X"), x)
    assert [(o.kind, o.shape, o.bytes) for o in scatter] == [("reduce-scatter", (1, 16), 64)]
    a2a = _compiled(mesh8, lambda b: jax.lax.all_to_all(b, "X", 0, 0, tiled=True), P("X"), x)
    assert a2a.kinds() == {"all-to-all": 1}
    ring = [(i, (i + 1) % 8) for i in range(8)]
    permute = _compiled(mesh8, lambda b: jax.lax.ppermute(b, "X", ring), P("X"), x)
    assert permute.kinds() == {"collective-permute": 1}
    assert sorted(permute[0].groups) == ring


def test_gspmd_inserts_collectives():
    mesh = tpviz.make_mesh((2, 4), ("X", "Y"))
    x = jax.device_put(np.ones((8, 16), np.float32), NamedSharding(mesh, P("X", "Y")))
    ops = compiled.collectives(lambda a: a.sum(), x)
    assert sorted(o.group_size for o in ops) == [2, 4]
    assert compiled.collectives(lambda a: a * 2, x) == []
    assert "no collectives" in str(compiled.collectives(lambda a: a * 2, x))


def test_table_prints_every_collective(mesh8):
    ops = _compiled(mesh8, lambda b: jax.lax.psum(b, "X"), P(), jnp.ones((8, 4)))
    assert "all-reduce" in str(ops) and "<table>" in ops._repr_html_()


def test_a_function_that_does_not_compile():
    with pytest.raises(CompileError, match=r"float32\[8, 16\], float32\[8, 16\]"):
        compiled.collectives(lambda a, b: a @ b, jnp.ones((8, 16)), jnp.ones((8, 16)))


def test_a_permute_runs_along_the_axes_its_pairs_differ_in():
    mesh = tpviz.make_mesh((2, 4), ("X", "Y"))

    def shift(x):  # x: f32[1, 1], one value per device; send to the next position along Y
        return jax.lax.ppermute(x, "Y", [(i, (i + 1) % 4) for i in range(4)])

    program = jax.shard_map(shift, mesh=mesh, in_specs=P("X", "Y"), out_specs=P("X", "Y"))
    (op,) = compiled.collectives(program, np.zeros((2, 4), np.float32))
    assert op.kind == "collective-permute"
    # positions x*4 + y: every pair keeps x and moves y
    assert all(s // 4 == d // 4 and s != d for s, d in op.groups)
    assert compiled.mesh_axes(op, mesh) == ("Y",)
