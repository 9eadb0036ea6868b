"""evo's runtime: what a kernel needs at run time, in evo's evaluators and in an exported package alike.

Imports torch and cuda.bindings only (and its own modules, relatively), never the rest of evo: `evo export`
copies this folder whole into the package as ``evo_runtime/``, so that the exported op dispatches, launches,
times and flushes exactly as the search did.
    cuda.py       cubins loaded into torch's CUDA context and launched on its stream (cuda.bindings)
    dispatch.py   a workload op's dispatch table, and the distance between two shapes
    decisions.py  where an op's measured choices are kept, and how a call is timed as a caller sees it
    op.py         the exported op: a torch custom op choosing a kernel per call shape
    queued.py     CUDA samples queued behind a spin kernel; a burst's graph capture and its sizing
    flush.py      the cache flush before a cold-cache sample
    spec.py       a short-spec family's runtime, made from its plain description
    protocol.py   what a family's runtime module defines (``FamilyRuntime``)
    attention.py  what attention families share: PyTorch's backward of SDPA as the op's gradient
    bandwidth.py  the read bandwidth a memory-bound kernel is set against, measured once per device
Nothing is imported here: ``import evo.runtime`` stays light, and each module is imported by name.
"""
