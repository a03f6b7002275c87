"""The same ideas in PyTorch (chapter 13): the seed lecture's model and pipeline parallelism,
``torch.distributed.pipelining`` against tpviz's schedules, FSDP2 against ZeRO and tensor
parallelism with DTensor, each run on local gloo processes and compared with one process.

Rooms: ``plan`` (no torch: torch's actions read as tpviz ops and compared with
:func:`tpviz.pipeline.schedule`; FSDP2's bytes and collectives from :mod:`tpviz.zero`; tables),
``orders`` (torch's schedules' orders at any p and m, without processes), ``run`` (workers: the
seed's split model, pipelining schedules), ``split`` (workers: the tutorial's ``split_size``
pipeline, timed), ``shard`` (workers: FSDP2 and DTensor), ``check`` (launch, compare with one
process), ``workers`` (the same workers under ``torchrun``), ``draw``, ``explore``
(``explore_schedules``) and ``exercises``. ``plan``, ``draw`` and ``explore`` import
without torch (the explorer's functions need it).
"""
