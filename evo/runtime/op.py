"""An exported op at run time: which kernel a call runs, decided by measurement and remembered on disk,
the kernels loaded once per device, and the torch custom op with its fake and its backward.

Imports torch and its siblings in evo.runtime only (`evo export` ships the package whole as evo_runtime/,
beside the op's module). What a call of the op does:
1. The family's public function (its runtime's ``PUBLIC``) checks the arguments and runs PyTorch's own
   computation for what no kernel takes (a mask, CPU tensors, ...); the rest it hands to ``Op.__call__``
   with the custom op's arguments (its ``SCHEMA``).
2. ``Op.__call__`` runs the family's ``compute`` at once in plain eager calls; through the custom op
   ``torch.ops.evo.<name>`` where that is needed: under torch.compile (which traces the public function and
   keeps the op opaque), under autograd (the op's backward is the family's ``gradient``, PyTorch's own
   computation of the input gradients), and for tensor subclasses. An op with no ``gradient`` refuses an
   input that requires a gradient, loudly, rather than return a detached output.
3. ``compute`` asks ``Op.choose(dims, device)`` for a kernel (None: PyTorch), see ``choose``.

Decisions persist on disk per device model (decisions.py says where). ``EVO_OP_MEASURE=0`` turns
measuring off: the op then runs PyTorch at shapes with no decision (a workload shape: its search's choice).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import statistics
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Sequence

import torch

from .decisions import DecisionFile, bucket_key, cache_path, device_context, time_calls, within
from .dispatch import DispatchTable

PYTORCH = "pytorch"  # a decision's choice where PyTorch's computation runs
MARGIN = 0.01  # a kernel is chosen only where it is at least this much faster than PyTorch as the caller sees it
CANDIDATES = 3  # the kernels a decision measures at most: those of the nearest workload shapes that take the shape
ROUNDS = 3  # each candidate timed this many times, in turns with the others; the median counts
FAST_PATHS = 4096  # call signatures whose eager path is remembered (then forgotten all at once)


@contextlib.contextmanager
def autograd_inside():
    """Autograd inside a custom op's body, where the dispatcher has it switched off."""
    excluded = torch._C._dispatch_tls_local_exclude_set()
    for key in ("AutogradOther", "AutogradCPU", "AutogradCUDA", "ADInplaceOrView"):
        excluded = excluded.remove(getattr(torch._C.DispatchKey, key))
    with torch._C._ForceDispatchKeyGuard(torch._C._dispatch_tls_local_include_set(), excluded), torch.enable_grad():
        yield


@dataclass(frozen=True)
class Decision:
    choice: str | None  # kernel id, or None for PyTorch
    why: str


class Op:
    """One exported op: ``kernels`` (id -> {"genome", "artifact"}), the workload's ``table`` (dispatch.py's
    dict), the family's runtime module, the package's folder and the family's tolerance."""

    def __init__(self, name: str, family, kernels: Mapping, table: Mapping, here: Path, tolerance: Mapping) -> None:
        self.name, self.family, self.here, self.tolerance = name, family, Path(here), dict(tolerance)
        self.kernels = dict(kernels)
        self.table = DispatchTable.from_dict(table)
        self.takes = getattr(family, "takes", lambda genome, dims: True)
        self.bucket = getattr(family, "bucket", lambda dims: dict(dims))
        self.verify_dims = getattr(family, "verify_dims", lambda dims: dict(dims))
        self.package_id = hashlib.sha256(json.dumps([name, self.kernels, dict(table)], sort_keys=True).encode()
                                         ).hexdigest()[:16]
        self.file = DecisionFile(cache_path(name))
        self._lock = threading.RLock()
        self._loaded: dict = {}  # (device index or -1, kernel id) -> what family.load returned
        self._decided: dict = {}  # (context, bucket key) -> Decision
        self._memo: dict = {}  # (device as given, the call's dimensions) -> (choice, why)
        self._fast: dict = {}  # a plain eager call's signature -> what it runs (``fast``)
        self._on_disk: dict | None = None
        self._contexts: dict = {}
        self._forced = threading.local()
        self.custom = torch.library.custom_op(f"evo::{name}", self._compute, mutates_args=(), schema=family.SCHEMA)
        self.custom.register_fake(family.fake)
        self.overload = getattr(torch.ops.evo, name).default  # what torch.compile traces
        self.gradient_op = None
        if hasattr(family, "gradient"):
            self.gradient_op = torch.library.custom_op(f"evo::{name}_gradient", self._gradient, mutates_args=(),
                                                       schema=family.GRADIENT_SCHEMA)
            self.gradient_op.register_fake(family.gradient_fake)
            self.custom.register_autograd(self._backward, setup_context=self._setup_context)

    # -- calling ----------------------------------------------------------------------------------
    def __call__(self, *args):
        """The op on the custom op's arguments: ``compute`` at once in a plain eager call, else the custom op."""
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        wants_grad = torch.is_grad_enabled() and any(t.requires_grad for t in tensors)
        if wants_grad and self.gradient_op is None:
            raise RuntimeError(f"evo op {self.name} has no backward ({getattr(self.family, 'NO_GRADIENT', 'none was written')}): "
                               f"an input requires a gradient; call it under torch.no_grad() or detach the input")
        if wants_grad or torch.compiler.is_compiling() or torch.overrides.has_torch_function(tensors):
            return self.overload(*args)
        return self._compute(*args)

    def _compute(self, *args):
        return self.family.compute(self, *args)

    def _gradient(self, *args):
        """The family's gradient, with autograd on (a custom op's body runs below it): it may recompute
        PyTorch's forward and differentiate it."""
        with autograd_inside():
            return self.family.gradient(*args)

    def _setup_context(self, ctx, inputs, output) -> None:
        ctx.tensor_positions = [i for i, a in enumerate(inputs) if isinstance(a, torch.Tensor)]
        ctx.others = [a for a in inputs if not isinstance(a, torch.Tensor)]
        ctx.save_for_backward(*[inputs[i] for i in ctx.tensor_positions])

    def _backward(self, ctx, grad):
        saved, others = list(ctx.saved_tensors), iter(ctx.others)
        inputs = [saved.pop(0) if i in ctx.tensor_positions else next(others)
                  for i in range(len(ctx.tensor_positions) + len(ctx.others))]
        grads = iter(self.gradient_op(grad, *inputs))
        return tuple(next(grads) if i in ctx.tensor_positions else None for i in range(len(inputs)))

    @contextlib.contextmanager
    def forcing(self, choice: str | None):
        """Calls in this thread run ``choice`` (a kernel id, or None for PyTorch) whatever the decision."""
        previous = getattr(self._forced, "choice", False)
        self._forced.choice = choice
        try:
            yield
        finally:
            self._forced.choice = previous

    def launch_kernel(self, kernel_id: str, dims: Mapping, inputs, out) -> None:
        """Kernel ``kernel_id`` on ``inputs`` into ``out`` on the current device, loaded once per device."""
        self.family.launch(self.loaded(kernel_id), dims, inputs, out)

    def loaded(self, kernel_id: str):
        """What the family's load returned for kernel ``kernel_id`` on the current device (loaded at first use)."""
        key = (torch.cuda.current_device() if self.family.DEVICE == "cuda" else -1, kernel_id)
        loaded = self._loaded.get(key)
        if loaded is None:
            with self._lock:  # concurrent first calls load it once
                loaded = self._loaded.get(key)
                if loaded is None:
                    loaded = self.family.load(self.here / self.kernels[kernel_id]["artifact"],
                                              self.kernels[kernel_id]["genome"])
                    self._loaded[key] = loaded
        return loaded

    # -- the eager fast path ------------------------------------------------------------------------------
    @staticmethod
    def signature(tensors, *flags) -> tuple | None:
        """A plain eager call's signature: ``flags`` and each tensor's sizes, strides, dtype and device; None
        where the call must take the full path (traced by torch.compile, a tensor subclass, a gradient wanted)."""
        if torch.compiler.is_compiling():
            return None
        grad = torch.is_grad_enabled()
        key = list(flags)
        for tensor in tensors:
            if type(tensor) is not torch.Tensor or (grad and tensor.requires_grad):
                return None
            key += (tensor.shape, tensor.stride(), tensor.dtype, tensor.device)
        return tuple(key)

    def fast(self, signature):
        """What a plain eager call of this signature runs (remembered after its first), or None: then the
        public function takes its full path. ``signature`` holds everything the choice and the launch depend on
        (sizes, strides, dtypes, devices, flags), never the data's addresses. A forced choice has its own."""
        return self._fast.get((getattr(self._forced, "choice", False), signature))

    def remember(self, signature, run: Callable) -> None:
        """``run`` (the arguments of the public function's plain call -> its result) for ``signature``."""
        if len(self._fast) >= FAST_PATHS:
            self._fast.clear()
        self._fast[getattr(self._forced, "choice", False), signature] = run

    def remember_choice(self, signature, dims: Mapping[str, int], device: torch.device, pytorch: Callable,
                        full_path: Callable, kernel_call: Callable[[str], Callable | None]) -> None:
        """After a plain call's full path: what its signature runs from now on, where the choice for ``dims`` on
        ``device`` is final. PyTorch's choice runs ``pytorch``. A kernel's runs ``kernel_call(kernel_id)``, a
        launch prepared once (made with ``device`` current), on that device whichever one is current; or
        ``full_path`` where ``kernel_call`` gives None (operands whose layout the prepared launch does not take)."""
        decided = self.decided(dims, device)
        if decided is None:  # not final: no measurement could be made
            return
        if decided[0] is None:
            self.remember(signature, pytorch)
            return
        with torch.cuda.device(device):
            call = kernel_call(decided[0])
        self.remember(signature, full_path if call is None else _on_device(device.index, call))

    def decided(self, dims: Mapping[str, int], device) -> tuple[str | None, str] | None:
        """The choice already made for ``dims`` on ``device`` (as ``choose`` was asked; the forced one while a
        choice is forced), None where none is final."""
        forced = getattr(self._forced, "choice", False)
        if forced is not False:
            return forced, "forced"
        return self._memo.get((device, *dims.values()))

    # -- choosing -----------------------------------------------------------------------------------
    def choose(self, dims: Mapping[str, int], device: torch.device | None = None) -> tuple[str | None, str]:
        """(kernel id or None for PyTorch, why) for a call of ``dims`` on ``device``. A decision is kept per
        device model and shape bucket (``bucket``): from memory, else from the decision file, else measured
        here (``decide``) where it can be: not while a CUDA graph is captured, nor with EVO_OP_MEASURE=0.
        Where it cannot, a workload shape's own entry (measured in the search), else PyTorch."""
        forced = getattr(self._forced, "choice", False)
        if forced is not False:
            return forced, "forced"
        if device is None and self.family.DEVICE == "cuda":
            device = torch.cuda.current_device()
        memo = (device, *dims.values())  # a call costs this lookup once its shape was seen
        known = self._memo.get(memo)
        if known is not None:
            return known
        device = self._device(device)
        context = self._context(device)
        bucket = bucket_key(self.bucket(dims))
        decision = self._decided.get((context, bucket))
        if decision is None:
            decision = self._recall(context, bucket)
            if decision is None:
                if not self.measuring(device):
                    return self._unmeasured(dims)
                try:
                    decision = self.decide(dims, device)
                except Exception as error:  # e.g. no memory for the inputs: this process runs PyTorch there
                    self._memo[memo] = None, f"could not measure ({type(error).__name__}: {error}): PyTorch"
                    return self._memo[memo]
            self._decided[(context, bucket)] = decision
        self._memo[memo] = decision.choice, decision.why
        return decision.choice, decision.why

    def _device(self, device) -> torch.device:
        if self.family.DEVICE != "cuda":
            return torch.device("cpu")
        device = torch.device(device if device is not None else "cuda")
        return device if device.index is not None else torch.device("cuda", torch.cuda.current_device())

    def _context(self, device: torch.device) -> str:
        key = str(device)
        if key not in self._contexts:
            self._contexts[key] = f"{device_context(device)}; package {self.package_id}"
        return self._contexts[key]

    def measuring(self, device: torch.device) -> bool:
        if os.environ.get("EVO_OP_MEASURE", "1").strip().lower() in ("0", "off", "false", "no"):
            return False
        return not (device.type == "cuda" and torch.cuda.is_current_stream_capturing())

    def _unmeasured(self, dims: Mapping) -> tuple[str | None, str]:
        entry = self.table.exact(dims)
        if entry is not None and entry["choice"] is not None and self.takes(self.kernels[entry["choice"]]["genome"], dims):
            return entry["choice"], f"workload shape {entry['shape']} (not measured here)"
        return None, "no decision for this shape's bucket, and none could be measured now: PyTorch"

    def _recall(self, context: str, bucket: str) -> Decision | None:
        if self._on_disk is None:
            self._on_disk = self.file.read()
        record = self._on_disk.get(context, {}).get(bucket)
        if not isinstance(record, dict) or "choice" not in record:
            return None
        choice = None if record["choice"] == PYTORCH else record["choice"]
        if choice is not None and choice not in self.kernels:
            return None
        return Decision(choice, f"decided {record.get('at', '')} ({self.file.path})")

    def candidates(self, dims: Mapping[str, int]) -> list[str]:
        """The kernels a decision measures: the exact workload shape's choice, else those of the nearest
        workload shapes (and a single kernel's package's own), that can take ``dims``; at most CANDIDATES."""
        exact = self.table.exact(dims)
        if exact is not None:
            ordered = [exact["choice"]] if exact["choice"] is not None else []
        else:
            ordered = [e["choice"] for e in self.table.nearest(dims) if e["choice"] is not None]
            ordered += [self.table.default] if self.table.default is not None else []
        chosen: list[str] = []
        for kernel in ordered:
            if kernel not in chosen and self.takes(self.kernels[kernel]["genome"], dims):
                chosen.append(kernel)
        return chosen[:CANDIDATES]

    def decide(self, dims: Mapping[str, int], device: torch.device | None = None) -> Decision:
        """Verify each candidate kernel on fresh inputs (at ``dims`` and at its bucket's largest shape, made
        smaller by ``verify_dims``), then time the op as a caller sees it with each verified kernel and with
        PyTorch, in turns; keep the fastest (a kernel only where MARGIN faster), on disk and in memory."""
        device = self._device(device)
        started = time.perf_counter()
        with self._lock, torch.no_grad(), (torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext()):
            verified, failures = [], []
            for kernel in self.candidates(dims):
                problem = self._verify(kernel, dims, device)
                (failures.append(f"{kernel}: {problem}") if problem else verified.append(kernel))
            times: dict[str | None, list[float]] = {}
            if verified:
                inputs = self.family.make_inputs(dict(dims), self._generator(device))
                def run():  # the public function, as a caller calls it
                    return self.family.call_with(self, dict(dims), inputs)

                for choice in [None, *verified]:  # warm: loads, workspaces, the library's first call
                    with self.forcing(choice):
                        run()
                for _ in range(ROUNDS):
                    for choice in [None, *verified]:
                        with self.forcing(choice):
                            times.setdefault(choice, []).append(time_calls(run, device))
        medians = {choice: statistics.median(values) for choice, values in times.items()}
        best = min(verified, key=lambda k: medians[k], default=None)
        if best is not None and medians[best] >= medians[None] * (1 - MARGIN):
            best = None
        seconds = time.perf_counter() - started
        record = dict(choice=best or PYTORCH, shape=dict(dims), seconds=round(seconds, 4),
                      at=time.strftime("%Y-%m-%d %H:%M:%S"),
                      times_us={(k or PYTORCH): round(v * 1e6, 3) for k, v in medians.items()}, failed=failures)
        self.file.add(self._context(device), bucket_key(self.bucket(dims)), record)
        why = (f"measured here in {seconds * 1e3:.0f} ms: " + ", ".join(f"{k}: {v}us" for k, v in record["times_us"].items())
               if medians else "no shipped kernel takes this shape: PyTorch")
        return Decision(best, why + (f"; failed verification: {'; '.join(failures)}" if failures else ""))

    def _generator(self, device: torch.device) -> torch.Generator:
        generator = torch.Generator(device=device)
        generator.manual_seed(time.time_ns() % (1 << 62))
        return generator

    def _verify(self, kernel: str, dims: Mapping[str, int], device: torch.device) -> str | None:
        """None where the kernel computes the call's shape and its bucket's largest within the tolerance."""
        shapes = [self.verify_dims(dims), self.verify_dims(self.bucket(dims))]
        for shape in shapes[:1] if shapes[0] == shapes[1] else shapes:
            if not self.takes(self.kernels[kernel]["genome"], shape):
                return f"cannot take {bucket_key(shape)}"
            inputs = self.family.make_inputs(dict(shape), self._generator(device))
            out = self.family.make_output(dict(shape))
            out.fill_(float("nan")) if out.is_floating_point() else out.fill_(-1)
            try:
                self.launch_kernel(kernel, shape, inputs, out)
                ok, max_abs, rel = within(out, self.family.reference(dict(shape), inputs), self.tolerance)
            except Exception as error:  # a kernel that fails to run is not chosen; the call goes on
                return f"{type(error).__name__}: {error}"
            if not ok:
                return f"wrong at {bucket_key(shape)} (max abs error {max_abs:.3g}, relative L2 {rel:.3g})"
        return None

    # -- preparing ahead of time ------------------------------------------------------------------------
    def complete(self, dims: Mapping[str, int]) -> dict:
        """``dims`` as a caller of ``choose`` or ``prepare`` may write them, with the dimensions the family lets
        them leave out filled in (its runtime's ``complete_dims``; e.g. flashcore's keys kv: as many as s)."""
        complete = getattr(self.family, "complete_dims", None)
        return complete(dims) if complete is not None else dict(dims)

    def prepare(self, shapes: Sequence[Mapping[str, int]], device: torch.device | None = None,
                report: Callable[[str], None] = print) -> int:
        """Decide every bucket of ``shapes`` not yet decided on this device (measured at the bucket's
        largest shape); how many were measured."""
        device = self._device(device)
        context, measured, seen = self._context(device), 0, set()
        for dims in map(self.complete, shapes):
            top = self.bucket(dims)
            key = bucket_key(top)
            if key in seen or self._recall(context, key) is not None:
                continue
            seen.add(key)
            decision = self.decide(top, device)
            self._decided[(context, key)] = decision
            measured += 1
            report(f"{key}: {decision.choice or 'PyTorch'} ({decision.why})")
        self._on_disk = None  # read again: other processes may have added theirs
        self._memo.clear()
        self._fast.clear()
        return measured


def _on_device(index: int, call: Callable) -> Callable:
    """``call`` run with device ``index`` current (a prepared launch's stream and allocations are that device's)."""
    def run(*args):
        if torch.cuda.current_device() != index:
            with torch.cuda.device(index):
                return call(*args)
        return call(*args)

    return run
