import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import tpviz
from tpviz.core import layout, notation
from tpviz.errors import NotationError, ShardingError


@pytest.mark.parametrize(
    ("text", "spec"),
    [("A[I_XY, J]", P(("X", "Y"), None)), ("A[I_X, J_Y]", P("X", "Y")), ("A[I, J]", P(None, None)),
     ("W[D, F_Y]", P(None, "Y")), ("A[I_{data}, J_{model}]", P("data", "model")),
     ("A[I_{data,model}, J]", P(("data", "model"), None))],
)
def test_notation_round_trip(text, spec):
    parsed = notation.parse(text)
    assert parsed.spec == spec
    assert str(parsed) == text


def test_issue_example_bytes_per_device():
    # int8[128, 2048] as A[I_XY, J] on {X: 2, Y: 8, Z: 2}: 128 / 16 rows of 2048 one-byte elements
    assert layout.bytes_per_device((128, 2048), "int8", "A[I_XY, J]", {"X": 2, "Y": 8, "Z": 2}) == 16_384


def test_shard_shape_and_replication():
    mesh = {"X": 2, "Y": 4}
    assert layout.shard_shape((8, 16), P("X", "Y"), mesh) == (4, 4)
    assert layout.shard_shape((8, 16), P(("X", "Y")), mesh) == (1, 16)
    assert layout.replication(P("X"), mesh) == 4
    assert layout.replication(P("X", "Y"), mesh) == 1
    assert layout.bytes_per_device((8, 16), "bf16", P(None, "Y"), mesh) == 8 * 4 * 2


@pytest.mark.parametrize("spec", [P("X", "Y"), P(("X", "Y")), P(None, ("Y", "X")), P("Y"), P()])
def test_blocks_match_jax_placement(spec):
    """The plan's blocks are where JAX really puts them (reference: devices_indices_map)."""
    mesh = tpviz.make_mesh((2, 4), ("X", "Y"))
    shape = (8, 16)
    real = NamedSharding(mesh, spec).devices_indices_map(shape)
    planned = layout.blocks(shape, spec, dict(mesh.shape))
    seen = 0
    for block in planned:
        for position in block.devices:
            device = mesh.devices.flat[position]
            got = tuple(slice(s.start or 0, shape[i] if s.stop is None else s.stop)
                        for i, s in enumerate(real[device]))
            assert got == block.slices
            seen += 1
    assert seen == 8


@pytest.mark.parametrize(
    ("call", "words"),
    [(lambda: layout.shard_shape((6, 16), P("Y"), {"X": 2, "Y": 4}), "does not divide into 4"),
     (lambda: layout.shard_shape((8, 16), P("X", "X"), {"X": 2}), "used twice"),
     (lambda: layout.shard_shape((8, 16), P("Z"), {"X": 2, "Y": 4}), "unknown mesh axis 'Z'"),
     (lambda: layout.shard_shape((8,), P("X", "Y"), {"X": 2, "Y": 4}), "at most one entry"),
     (lambda: layout.bytes_per_device((8,), "float99", P(), {"X": 2}), "unknown dtype")],
)
def test_bad_layouts_have_clear_errors(call, words):
    with pytest.raises(ShardingError, match=words):
        call()


@pytest.mark.parametrize(("text", "words"),
                         [("A(I, J)", "write an array name"), ("A[I_X, J_X]", "more than one"),
                          ("A[1_X]", "cannot read the dimension"),
                          ("A[I_model, J]", "multi-letter axis names need braces"),
                          ("A[I_data, J]", r"I_\{data\}"),
                          ("A[I_X1, J]", "cannot read the mesh axes 'X1'"),
                          ("A[I_1, J]", "cannot read the mesh axes '1'"),
                          ("A[I_Χ, J]", "Greek")])  # a Greek chi, not an X
def test_malformed_notation(text, words):
    with pytest.raises(NotationError, match=words):
        notation.parse(text)


def test_notation_of_the_wrong_kind_is_a_type_error():
    with pytest.raises(TypeError, match="notation must be a string"):
        notation.parse(42)


def test_errors_are_value_errors_for_learners():
    with pytest.raises(ValueError):
        notation.parse("nonsense")
    assert issubclass(ShardingError, ValueError)


def test_bytes_per_device_matches_real_shards():
    mesh = tpviz.make_mesh((2, 4), ("X", "Y"))
    x = np.zeros((8, 32), np.float32)
    for spec in [P("X", "Y"), P(None, ("X", "Y")), P()]:
        placed = jax.device_put(x, NamedSharding(mesh, spec))
        sizes = {s.data.nbytes for s in placed.addressable_shards}
        assert sizes == {layout.bytes_per_device(x.shape, x.dtype, spec, dict(mesh.shape))}
