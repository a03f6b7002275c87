"""Plan level (no torch, no processes): torch's pipeline actions read as tpviz ops and compared
with :func:`tpviz.pipeline.schedule`; FSDP2's bytes and collectives from :mod:`tpviz.zero`;
Megatron's f and g; the JAX ↔ PyTorch table.

A torch action is a string such as ``"4F0"`` (stage 4, forward, microbatch 0), ``"7I3"`` (the
input-gradient part of the backward), ``"7W3"`` (the weight-gradient part), ``"0B2"`` (the full
backward) or ``"(0F7;7B3)OVERLAP_F_B"`` (DualPipeV: a forward and a backward overlapped). Torch's
stage index is tpviz's chunk: the model's ``stages × chunks`` pieces in model order.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tpviz.compat import torch_v_schedules_on_gloo
from tpviz.core import validate
from tpviz.core.collectives import Collectives
from tpviz.errors import ArgumentError
from tpviz.pipeline import NAMES, schedule
from tpviz.pipeline.plan import ZOO, Op
from tpviz.zero import plan as zero

# torch's class -> (the tpviz schedule it implements, model chunks per rank, placement)
TORCH_SCHEDULES = {
    "ScheduleGPipe": ("gpipe", 1, "loop"),
    "Schedule1F1B": ("1f1b", 1, "loop"),
    "ScheduleInterleaved1F1B": ("interleaved", 2, "loop"),
    "ScheduleLoopedBFS": ("looped-bfs", 2, "loop"),
    "ScheduleInterleavedZeroBubble": ("interleaved-zb", 2, "loop"),
    "ScheduleZBVZeroBubble": ("zb-v", 2, "v"),
    "ScheduleDualPipeV": ("dualpipev", 2, "v"),
}
# where a tpviz name is missing, the nearest tpviz schedule, and what differs from it (ZB-V and
# DualPipeV are chapter 8's pipeline.ZOO schedules: compared directly)
NEAREST = {"looped-bfs": "interleaved", "interleaved-zb": "interleaved"}
def runnable_schedules(has=None) -> tuple[tuple, dict[str, str]]:
    """The ``(class, stages per rank, placement)`` this torch runs on gloo, and the reason for
    each it cannot (``has(name)``: whether torch has the class at all)."""
    why_not_v = torch_v_schedules_on_gloo()
    run, skipped = [], {}
    for name, (_, v, where) in TORCH_SCHEDULES.items():
        if has is not None and not has(name):
            skipped[name] = "this torch has no such schedule"
        elif where == "v" and why_not_v:
            skipped[name] = why_not_v
        else:
            run.append((name, v, where))
    return tuple(run), skipped


#: what the process server imports once (tpviz.core.launch.warm), so that no worker does
PRELOAD = ("tpviz.pytorch.check", "tpviz.pytorch.blocks", "torch.distributed.fsdp",
           "torch.distributed.tensor.parallel",
           "torch.distributed.tensor.debug", "torch.distributed.pipelining")
_ACTION = re.compile(r"^(\d+)(F|I|W|B)(\d+)$")
_OTHER = re.compile(r"^\d+(SEND_F|RECV_F|SEND_B|RECV_B|UNSHARD|RESHARD|REDUCE_GRAD"
                    r"|OVERLAP_F_B)\d*$")  # torch's actions that run no F, B or W


def parse(action: str) -> list[Op]:
    """Torch's action string as tpviz ops: ``F`` stays ``F``; ``I`` (input gradient) and ``B``
    (the whole backward) become ``B``; ``W`` stays ``W``; an overlapped pair becomes its two
    ops in order. Communication and bookkeeping actions (``SEND_F``, ``REDUCE_GRAD``, ...)
    give no op."""
    validate.instance("action", action, str, "torch's action as text, e.g. '0F1'")
    text = action.strip()
    if text.startswith("(") and ")" in text:
        return [op for part in text[1:text.index(")")].split(";") for op in parse(part)]
    m = _ACTION.match(text)
    if not m:
        if _OTHER.match(text):
            return []
        raise ArgumentError(f"action = {action!r} is not one of torch's pipeline actions "
                            "(stage, kind, microbatch: '0F1', '1I0', '1W0', '0SEND_F1', ...).")
    stage, kind, mb = m.groups()
    return [Op("B" if kind == "I" else kind, int(mb), int(stage))]


def ops_of(order: dict[int, list[str | None]]) -> tuple[tuple[Op, ...], ...]:
    """Torch's ``pipeline_order`` (rank -> actions, ``None`` for a deliberate idle step) as
    tpviz's per-device op lists."""
    validate.instance("order", order, dict, "a dict rank -> list of actions (torch's "
                      "pipeline_order)")
    if sorted(order, key=repr) != list(range(len(order))):
        raise ArgumentError(f"order's ranks must be 0, 1, ..., {len(order) - 1}; got "
                            f"{sorted(order, key=repr)}.")
    for r, actions in order.items():
        validate.instance(f"order[{r}]", actions, list | tuple, "a list of actions")
    try:
        return tuple(tuple(op for a in order[r] if a is not None for op in parse(str(a)))
                     for r in sorted(order))
    except ArgumentError as e:
        raise ArgumentError(f"order: {e}") from None


@dataclass(frozen=True)
class Comparison:
    """Torch's per-rank op order against tpviz's, op by op."""

    torch_name: str
    tpviz_name: str  # the tpviz schedule compared with (the nearest one where none matches)
    exact: bool  # whether tpviz has this very schedule (False: the nearest one)
    torch_ops: tuple[tuple[Op, ...], ...]
    tpviz_ops: tuple[tuple[Op, ...], ...]
    first_difference: tuple[int | None, ...]  # per rank: the first position that differs

    @property
    def equal(self) -> bool:
        return all(d is None for d in self.first_difference)

    @property
    def explanation(self) -> str:
        """What differs, in words (read from the two op lists, not assumed)."""
        if self.equal:
            return "identical, op by op on every rank"
        notes = []
        torch_kinds = {op[0] for ops in self.torch_ops for op in ops}
        tpviz_kinds = {op[0] for ops in self.tpviz_ops for op in ops}
        if "W" in torch_kinds - tpviz_kinds:
            notes.append("torch splits each backward into I (input gradient) and W (weight "
                         "gradient); tpviz's schedule runs one B")
        if "W" in tpviz_kinds - torch_kinds:
            notes.append("tpviz splits W off the backward; torch runs one B")
        if not self.exact:
            notes.append(f"tpviz.pipeline has no {self._own!r} schedule; compared with the "
                         f"nearest, {self.tpviz_name!r}")
        if _strip_w(self.torch_ops) == _strip_w(self.tpviz_ops):
            notes.append("the same F and B order once W is set aside")
        elif _multiset(_strip_w(self.torch_ops)) != _multiset(_strip_w(self.tpviz_ops)):
            extra = sorted(_multiset(_strip_w(self.torch_ops))
                           - _multiset(_strip_w(self.tpviz_ops)))[:3]
            if extra:
                notes.append("torch's order lists ops tpviz does not run, e.g. "
                             + ", ".join(f"{k}{mb} of chunk {c}" for k, mb, c in extra))
        if _chunk_placement(self.torch_ops) != _chunk_placement(self.tpviz_ops):
            notes.append("the chunks sit on other ranks (torch's V: rank r holds chunks r "
                         "and 2p-1-r; tpviz's loop: chunk c on device c mod p)")
        diff = [f"rank {r} from op {d}" for r, d in enumerate(self.first_difference)
                if d is not None]
        return "; ".join([*notes, "differs at " + ", ".join(diff)])

    @property
    def _own(self) -> str:
        return TORCH_SCHEDULES.get(self.torch_name, (self.torch_name,))[0]


def _strip_w(ops) -> tuple:
    return tuple(tuple(op for op in o if op[0] != "W") for o in ops)


def _multiset(ops) -> set:
    return {tuple(op) for o in ops for op in o}


def _chunk_placement(ops) -> tuple:
    return tuple(frozenset(op[2] for op in o) for o in ops)


def compare(torch_name: str, order: dict[int, list], microbatches: int) -> Comparison:
    """Compare torch's ``pipeline_order`` of schedule class ``torch_name`` with tpviz's
    schedule of the same name (:data:`tpviz.pipeline.NAMES` or chapter 8's ``ZOO``: ZB-V and
    DualPipeV), or with the nearest one while tpviz lacks it (a name added to either is
    picked up at once).

    Raises:
        ArgumentError: a torch class not in :data:`TORCH_SCHEDULES`.
    """
    if torch_name not in TORCH_SCHEDULES:
        raise ArgumentError(f"compare(torch_name={torch_name!r}): give one of "
                            f"{', '.join(TORCH_SCHEDULES)}.")
    own, chunks, _ = TORCH_SCHEDULES[torch_name]
    exact = own in NAMES or own in ZOO
    name = own if exact else NEAREST[own]
    theirs = ops_of(order)
    stages = len(theirs)
    try:
        ours = schedule(name, stages, microbatches, chunks).ops
    except ValueError:  # the nearest schedule runs one chunk per device
        ours = schedule(name, stages, microbatches).ops
    # DualPipe's full backward (tpviz's "BW") is torch's B
    ours = tuple(tuple(Op("B", *op[1:]) if op[0] == "BW" else op for op in o) for o in ours)
    first = tuple(_first_difference(t, o) for t, o in zip(theirs, ours, strict=True))
    return Comparison(torch_name, name, exact, theirs, ours, first)


def _first_difference(a, b) -> int | None:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if tuple(x) != tuple(y):
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


# ---- measured timelines -----------------------------------------------------------------

def bubble(spans: list[list[tuple]]) -> float:
    """1 - busy / (ranks x makespan) from the recorded ``(kind, chunk, start, end)`` of every
    rank's ops: the share of the processes' time outside compute (waiting, or sending)."""
    t0 = min(s[2] for rank in spans for s in rank)
    t1 = max(s[3] for rank in spans for s in rank)
    busy = sum(s[3] - s[2] for rank in spans for s in rank)
    return 1 - busy / (len(spans) * (t1 - t0))


# ---- FSDP2 and ZeRO ---------------------------------------------------------------------

#: FSDP2's options, and the ZeRO stage each gives (Rajbhandari et al.; torch's fully_shard)
FSDP_TO_ZERO = (
    ("fully_shard(reshard_after_forward=True)", "ZeRO-3: parameters, gradients and "
     "optimizer state sharded; parameters all-gathered again for the backward"),
    ("fully_shard(reshard_after_forward=False)", "ZeRO-2 during the step: parameters stay "
     "whole from forward to backward (one all-gather fewer per unit), gradients and optimizer "
     "state sharded"),
    ("fully_shard(reshard_after_forward=k) (an int)", "ZeRO++'s hpZ: reshard to a smaller "
     "group of k ranks after forward, so the backward all-gather stays inside it"),
    ("DDP (no fully_shard)", "ZeRO-0: plain data parallelism; the gradients all-reduced "
     "bucket by bucket (one all-reduce per 25 MiB bucket, the first 1 MiB) during the backward"),
)


def fsdp_plan(params: int, devices: int, units: int, reshard_after_forward: bool,
              param_bytes: int = 4) -> dict:
    """The per-rank parameter bytes (tpviz.zero stage 3) and the collectives of one step: per
    ``fully_shard`` unit, an all-gather for forward, another for backward unless
    ``reshard_after_forward`` is False, and a reduce-scatter of gradients."""
    units = validate.integer("units", units, maximum=10**6)
    reshard_after_forward = validate.flag("reshard_after_forward", reshard_after_forward)
    params = validate.integer("params", params, maximum=10**15)
    mem = zero.memory(params, devices, 3, param_bytes=param_bytes)
    steps: Collectives = zero.collectives(params, devices, 3, param_bytes=param_bytes)
    gathers = sum(c.kind == "all-gather" for c in steps) - (0 if reshard_after_forward else 1)
    scatters = sum(c.kind == "reduce-scatter" for c in steps)
    return {"param_bytes": mem.params, "all-gather": units * gathers,
            "reduce-scatter": units * scatters}


#: Megatron's conjugate operators per MLP and step (chapter 4): f is the identity forward and
#: an all-reduce backward; g an all-reduce forward and the identity backward
MEGATRON_MLP = {"forward": {"all-reduce": 1}, "backward": {"all-reduce": 1}}

JAX_TO_TORCH = (
    ("jax.make_mesh((4,), ('x',))", "init_device_mesh('cpu', (4,), mesh_dim_names=('x',))"),
    ("NamedSharding(mesh, P('x', None))", "DTensor placements [Shard(0)]"),
    ("NamedSharding(mesh, P())", "[Replicate()]"),
    ("an unreduced sum inside shard_map", "[Partial()] (a pending sum)"),
    ("shard_map + lax.psum / all_gather / psum_scatter",
     "functional collectives: funcol.all_reduce / all_gather_tensor / reduce_scatter_tensor"),
    ("GSPMD / Shardy sharding propagation in jit", "DTensor's per-op sharding propagation "
     "(eager, op by op; redistribute where the placements disagree)"),
    ("jax.jit", "torch.compile (optional: DTensor and FSDP2 run eagerly)"),
)
