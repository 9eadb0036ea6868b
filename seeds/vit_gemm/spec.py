"""ViT patch-embedding GEMM with its bias + positional-embedding epilogue, on the H100 (sm_90a).

C[b * P + p, n] = bf16(sum_k A[b * P + p, k] * W[n, k] + bias[n] + pos[p, n]), A bf16 [M, K],
W bf16 [N, K] (K-major, as nn.Linear and the patch convolution keep it), bias fp32 [N], pos fp32
[P, N], fp32 accumulation. One CUDA translation unit (vit_gemm_parts.cuh, vit_gemm_epilogue.cuh,
vit_gemm.cu): TMA loads into a ring of stages on mbarriers, a producer warpgroup and one or two
consumer warpgroups (sharing a tile, or ping-pong) multiplying with wgmma from shared memory,
clusters of two blocks sharing W by TMA multicast (the persistent grid sized by the driver's count
of clusters that fit at once), a persistent tile loop, and the epilogue's reads, prefetch and store
path as knobs (see vit_gemm.cu's header).
"""

from __future__ import annotations

from pathlib import Path

from evo.kernel_genome import Boolean, Choice, Constraint, IntRange, PowerOfTwo, Space
from evo.seeds._family import BLOCK_SHARED_BYTES, HOPPER_NVCC_FLAGS, BuildRecipe, ProblemShape, RuntimeFamily, TimingPlan, Tolerance, shape
from evo.seeds._workload import workload
from evo.seeds._wgmma import wgmma_wrapper
from evo.seeds.vit_gemm import runtime as vit_gemm_runtime
from evo.seeds.vit_gemm.launch import shared_bytes, wg_rows

HERE = Path(__file__).parent
SOURCES = tuple(HERE / name for name in ("vit_gemm_parts.cuh", "vit_gemm_table.cuh", "vit_gemm_epilogue.cuh",
                                          "vit_gemm.cu"))
HOPPER = HERE.parent / "_hopper.cuh"  # the Hopper pieces shared with flashcore
SMEM_LIMIT = BLOCK_SHARED_BYTES  # one block
SMEM_PER_SM = 228 * 1024  # all the blocks of an SM (each also reserves 1 KiB for the system)
REGISTER_MARGIN = 24  # registers a consumer thread needs beside its accumulators (descriptors, loop, addresses)
WGMMA_REGISTERS = 26  # ptxas needs one wgmma's block_n / 2 accumulators plus this many within the launch bound
PRODUCER_REGS = 40  # what the producer warpgroup keeps with setmaxnreg (PRODUCER_REGS in vit_gemm_parts.cuh)
STORES = ("tma", "direct4", "direct16")
SCHEDULES = ("cooperative", "pingpong")
RASTERS = ("along_n", "along_m")
TILE_SYNCS = ("syncthreads", "local")
EPILOGUE_READS = ("fragment", "rowwise")


def launch_registers(g) -> int:
    """Registers a thread gets at launch: the register file over the threads of blocks_per_sm
    blocks, in ptxas's steps of 8, at most 255 (what __launch_bounds__(threads, blocks_per_sm) imposes)."""
    threads = 128 * (g["consumers"] + 1) * g["blocks_per_sm"]
    return min(255, 65536 // threads // 8 * 8)


def consumer_registers(g) -> int:
    """A consumer thread's registers: the launch bound's, or with setmaxnreg those plus its share of
    what the producer warpgroup gives back (setmaxnreg takes multiples of 8; capped here at 240)."""
    start = launch_registers(g)
    if not g["setmaxnreg"]:
        return start
    return min(240, (start + (start - PRODUCER_REGS) // g["consumers"]) // 8 * 8)


def operand_registers(g) -> int:
    """Registers holding one chunk's bias and pos (ChunkOperands in vit_gemm_epilogue.cuh), twice when
    loaded ahead; none with the folded table (read from the staging value by value)."""
    if g["folded_table"]:
        return 0
    one = 4 + wg_rows(g) // 8 * 4 if g["epilogue_reads"] == "rowwise" else 16 + 32 * g["m_tiles"]
    return one * (2 if g["operands_ahead"] else 1)


def _implies(condition: bool, consequence: bool) -> bool:
    return consequence or not condition


SPACE = Space(
    [
        Choice("block_n", (64, 128, 192, 256), ordered=True,
               description="tile columns = wgmma N (192: N = 768 and 1152 in whole tiles, 4 and 6 of them)"),
        PowerOfTwo("consumers", 1, 2, description="consumer warpgroups (each beside one producer warpgroup)"),
        PowerOfTwo("m_tiles", 1, 2, description="m64 wgmma tiles a consumer warpgroup owns"),
        IntRange("stages", 2, 6, description="TMA pipeline stages of 64-deep K slices"),
        Choice("schedule", SCHEDULES, description="the consumers share one tile | each has its own and they take "
                                                  "turns at the tensor cores (one's epilogue under the other's main loop)"),
        PowerOfTwo("cluster", 1, 2, description="blocks of a thread-block cluster taking the two M tiles of one N band "
                                                 "together, each bringing in half of the W slice by a TMA multicast to both"),
        PowerOfTwo("split_k", 1, 8, description="blocks of a cluster sharing one tile, each an equal share of its K "
                                                "slices, the others' partial sums sent to block 0's shared memory, "
                                                "which finishes the tile (more blocks where M is small)"),
        Boolean("persistent", description="one block per SM slot looping over the tiles, its producer loading the next "
                                          "tile during the epilogue | one block a tile"),
        Choice("raster", RASTERS, description="tile order: along N (a row band's tiles together, A shared in L2) | along M"),
        Choice("tile_sync", TILE_SYNCS, description="after each tile: the whole block meets at __syncthreads | no "
                                                    "block-wide barrier (ring mbarriers, per-consumer barriers only)"),
        IntRange("wgmma_depth", 1, 2, description="wgmma groups in flight: 1 waits for each K slice before releasing "
                                                   "its stage, 2 releases the previous slice's stage while this one runs"),
        Choice("store", STORES, description="epilogue store: 64-column chunks staged in shared memory + TMA store | "
                                            "st.global 4 bytes a lane | 16 bytes a lane after a quad transpose"),
        Choice("epilogue_reads", EPILOGUE_READS,
               description="bias and pos read in the accumulators' layout (column pairs across 8 rows) | the chunk "
                           "staged in fp32 in shared memory and finished row by row, 16 bytes a lane along lines"),
        Boolean("operand_prefetch", description="pos copied into shared memory during the main loop by the producer "
                                                "warpgroup's idle warps (cp.async) | read by the consumer in its epilogue"),
        IntRange("prefetch_buffers", 1, 2, description="chunks of prefetched pos a consumer has in shared memory: 1 = "
                                                       "the next is copied once this one is read, 2 = while it is read"),
        Boolean("pos_tma", description="the prefetch is TMA boxes issued by one thread (rows past the last patch "
                                       "from a second box) | 16-byte cp.async copies by 96 threads"),
        Boolean("folded_table", description="bias + pos folded once a launch into an fp16 table (a prepass, the GEMM "
                                            "its programmatic dependent), each consumer's rows of it brought by TMA "
                                            "into its staging during the main loop and the tile finished there in "
                                            "place for the TMA store | bias and pos read as fp32 (|bias + pos| < "
                                            "65504: a larger sum shows in C as infinity)"),
        Boolean("operands_ahead", description="bias and pos of chunk 0 loaded while the tile's last wgmma runs and "
                                              "each next chunk's before this one is finished | each chunk's just before it"),
        IntRange("epi_depth", 1, 3, description="staging slots of the TMA store: 1 converts a chunk once the previous "
                                                 "chunk's store has read the slot, 2-3 overlap conversion and stores"),
        Boolean("setmaxnreg", description="the producer hands registers to the consumers (setmaxnreg)"),
        PowerOfTwo("blocks_per_sm", 1, 2, description="blocks sharing an SM (the register cap of __launch_bounds__)"),
    ],
    [
        Constraint("accumulators_fit_registers",
                   lambda g: g["m_tiles"] * g["block_n"] // 2 + operand_registers(g) + REGISTER_MARGIN
                   <= consumer_registers(g),
                   f"a consumer thread's fp32 accumulators, m_tiles * block_n / 2, the bias and pos of one chunk (two "
                   f"when loaded ahead), plus {REGISTER_MARGIN} fit its "
                   "registers: 65536 / (threads * blocks_per_sm) in steps of 8, at most 255, plus with setmaxnreg its "
                   f"share of what the producer gives back above {PRODUCER_REGS} (ptxas cannot assemble a wgmma whose "
                   "accumulators do not fit)"),
        Constraint("wgmma_fits_the_launch_bound",
                   lambda g: g["block_n"] // 2 + WGMMA_REGISTERS <= launch_registers(g),
                   f"one wgmma's block_n / 2 accumulators plus {WGMMA_REGISTERS} fit the registers of "
                   "__launch_bounds__ (ptxas assembles the wgmma there, whatever setmaxnreg gives at run time: "
                   "'Insufficient registers (128) ... register target of 154' for block_n 256 at 2 blocks an SM)"),
        Constraint("shared_memory_fits", lambda g: shared_bytes(g) <= SMEM_LIMIT,
                   f"stages * (block_m + block_n) * 128 bytes + staging slots (+ barriers) <= {SMEM_LIMIT}"),
        Constraint("blocks_fit_an_sm",
                   lambda g: g["blocks_per_sm"] * (shared_bytes(g) + 1024) <= SMEM_PER_SM,
                   f"blocks_per_sm * (shared bytes + 1 KiB) <= {SMEM_PER_SM}"),
        Constraint("pingpong_needs_two_consumers",
                   lambda g: _implies(g["schedule"] == "pingpong", g["consumers"] == 2),
                   "ping-pong alternates two consumer warpgroups"),
        Constraint("staging_slots_only_for_the_tma_store",
                   lambda g: _implies(g["store"] != "tma", g["epi_depth"] == 1),
                   "epi_depth counts the TMA store's staging slots: 1 for the direct stores"),
        Constraint("rowwise_stores_along_rows",
                   lambda g: _implies(g["epilogue_reads"] == "rowwise", g["store"] == "direct16"),
                   "the row-wise epilogue stores 16 bytes a lane along the rows: store = direct16"),
        Constraint("prefetch_beside_a_free_running_producer",
                   lambda g: _implies(g["operand_prefetch"], g["tile_sync"] == "local" and not g["operands_ahead"]
                                      and g["epilogue_reads"] == "fragment"),
                   "the prefetching warps keep one chunk a consumer and meet no block-wide barrier: operand_prefetch "
                   "needs tile_sync = local, operands_ahead off and the fragment epilogue"),
        Constraint("prefetch_buffers_only_with_the_prefetch",
                   lambda g: _implies(not g["operand_prefetch"], g["prefetch_buffers"] == 1),
                   "prefetch_buffers counts the prefetched pos chunks: 1 without operand_prefetch"),
        Constraint("pos_tma_is_a_way_to_prefetch",
                   lambda g: _implies(g["pos_tma"], g["operand_prefetch"]),
                   "pos_tma says how pos is prefetched: it needs operand_prefetch"),
        Constraint("folded_table_finishes_in_the_staging",
                   lambda g: _implies(g["folded_table"], g["store"] == "tma" and g["epilogue_reads"] == "fragment"
                                      and not g["operand_prefetch"] and not g["operands_ahead"]
                                      and g["epi_depth"] == 1 and g["tile_sync"] == "local"),
                   "the folded table lands in the TMA store's staging, a consumer's whole share of the tile, and is "
                   "brought by a thread that meets no block-wide barrier: folded_table needs store = tma, the "
                   "fragment epilogue, no other prefetch or early operand loads, epi_depth 1 and tile_sync = local"),
        Constraint("split_k_one_tile_a_block",
                   lambda g: _implies(g["split_k"] > 1, g["cluster"] == 1 and not g["persistent"]
                                      and not g["folded_table"] and not g["operand_prefetch"]),
                   "the blocks of a split tile are a cluster that sums one tile and finishes it in block 0: split_k "
                   "needs cluster 1, one block a tile (persistent off), and neither the folded table nor the "
                   "prefetch (the other blocks run no epilogue)"),
        Constraint("raster_only_matters_when_persistent",
                   lambda g: _implies(not g["persistent"], g["raster"] == "along_n"),
                   "one block a tile launches the tiles in along-N order"),
    ],
    added_later={"folded_table": False, "split_k": 1},  # runs stored before the knobs read as without them
)

SEED = SPACE.genome(dict(block_n=128, consumers=1, m_tiles=1, stages=2, schedule="cooperative", cluster=1, split_k=1,
                         persistent=False,
                         raster="along_n", tile_sync="syncthreads", wgmma_depth=1, store="tma", epilogue_reads="fragment", operand_prefetch=False,
                         operands_ahead=False, prefetch_buffers=1, pos_tma=False, folded_table=False,
                         epi_depth=1,
                         setmaxnreg=False, blocks_per_sm=1))


def vit_shape(name: str, batch: int, patches: int, n: int, k: int, *, mission: bool = False) -> ProblemShape:
    return shape(name, m=batch * patches, n=n, k=k, p=patches, mission=mission)


# The patch embeddings of real vision encoders: (model, patches P, hidden size N, K = 3 x patch^2)
ENCODERS = (("vit_b16", 196, 768, 768), ("vit_l16", 196, 1024, 768), ("vit_h14", 256, 1280, 588),
            ("clip_l14", 256, 1024, 588), ("dinov2_l14_518px", 1369, 1024, 588),
            ("siglip_so400m14_384px", 729, 1152, 588), ("vit_b32", 49, 768, 3072))
WORKLOADS = (workload("encoders", "the patch embeddings of ViT-B/16, ViT-L/16, ViT-H/14, CLIP ViT-L/14, "
                      "DINOv2-L/14 at 518 px, SigLIP-So400m/14 at 384 px and ViT-B/32 at batches 1, 8, 64 and 256; "
                      "every shape weighs 1",
                      [(vit_shape(f"{model}_b{batch}", batch, p, n, k), 1.0)
                       for model, p, n, k in ENCODERS for batch in (1, 8, 64, 256)]),)


class VitGemm(RuntimeFamily):
    default_strategy = "surrogate"  # the strategy its recorded searches were measured with (docs/JOURNAL.md)
    name = "vit_gemm"
    description = "bf16 GEMM + bias + positional embedding (ViT patch embedding), C = A W^T + bias + pos"
    device = "cuda"
    space = SPACE
    seed_genomes = (SEED,)
    shapes = (
        vit_shape("vit_b16_batch256", 256, 196, 768, 768, mission=True),
        vit_shape("vit_l16_batch256", 256, 196, 1024, 768),
        vit_shape("vit_b16_batch8", 8, 196, 768, 768),
        vit_shape("ragged", 5, 197, 712, 768),  # M = 985 and N = 712: multiples of no tile
        vit_shape("k588", 3, 256, 1024, 588),  # patch size 14: rows of A and W 1176 bytes apart
    )
    workloads = WORKLOADS
    # bf16 output (8 bits of mantissa) of values of a few units: rounding errors up to ~0.03
    tolerance = Tolerance(max_abs=0.08, max_rel_l2=1e-2)
    anchor_name = "cuBLAS matmul alone (torch a @ w.t(), bf16)"
    timing = TimingPlan(warmup=5, min_runs=20, max_runs=200, min_seconds=0.02)
    # inputs, reference, anchors, PyTorch's whole computation, load and launch: seeds/vit_gemm/runtime.py,
    # which an export ships with the files it imports
    runtime = vit_gemm_runtime
    export_files = (("vit_gemm_launch.py", HERE / "launch.py"), ("vit_gemm_problem.py", HERE / "problem.py"),
                    ("vit_gemm_timm.py", HERE / "timm_fusion.py"))

    def build_recipe(self, genome) -> BuildRecipe:
        g = genome.as_dict()
        macros = dict(BLOCK_N=g["block_n"], CONSUMERS=g["consumers"], M_TILES=g["m_tiles"], STAGES=g["stages"],
                      SCHEDULE=SCHEDULES.index(g["schedule"]), CLUSTER=g["cluster"], SPLIT_K=g["split_k"], RASTER=RASTERS.index(g["raster"]),
                      TILE_SYNC=TILE_SYNCS.index(g["tile_sync"]), WGMMA_DEPTH=g["wgmma_depth"],
                      STORE=STORES.index(g["store"]), EPILOGUE_READS=EPILOGUE_READS.index(g["epilogue_reads"]),
                      OPERANDS_AHEAD=int(g["operands_ahead"]), OPERAND_PREFETCH=int(g["operand_prefetch"]),
                      PREFETCH_BUFFERS=g["prefetch_buffers"], POS_TMA=int(g["pos_tma"]),
                      FOLDED_TABLE=int(g["folded_table"]),
                      EPI_DEPTH=g["epi_depth"], SETMAXNREG=int(g["setmaxnreg"]),
                      CONSUMER_REGS=consumer_registers(g), BLOCKS_PER_SM=g["blocks_per_sm"])
        flags = HOPPER_NVCC_FLAGS + tuple(
            f"-D{k}={v}" for k, v in sorted(macros.items()))
        parts, *rest = SOURCES
        text = parts.read_text()
        include_end = text.index("#include <stdint.h>") + len("#include <stdint.h>\n")
        source = (f'#line 1 "{parts.name}"\n{text[:include_end]}#line 1 "_hopper.cuh"\n{HOPPER.read_text()}'
                  f'{wgmma_wrapper("wgmma_bf16", g["block_n"], "bf16")}'
                  f'#line {text[:include_end].count(chr(10)) + 1} "{parts.name}"\n{text[include_end:]}'
                  + "".join(f'#line 1 "{path.name}"\n{path.read_text()}' for path in rest))
        return BuildRecipe(source, "vit_gemm.cu", "nvcc", flags, "cubin")

    def check_shape(self, shape: ProblemShape) -> None:
        if shape["n"] % 8:
            raise ValueError(f"vit_gemm needs N a multiple of 8 (16-byte rows of C and pos for the TMA), not {shape['n']}")
        if shape["m"] % shape["p"]:
            raise ValueError(f"vit_gemm needs M = batch * patches: M = {shape['m']} is no multiple of P = {shape['p']}")

    fallback_name = "PyTorch: addmm (matmul + bias, bf16) then + pos"

    def flops(self, shape: ProblemShape) -> float:
        return 2.0 * shape["m"] * shape["n"] * shape["k"]

    def bytes_moved(self, shape: ProblemShape) -> float:
        return 2.0 * (shape["m"] * shape["k"] + shape["n"] * shape["k"] + shape["m"] * shape["n"]) + \
            4.0 * (shape["n"] + shape["p"] * shape["n"])


FAMILY = VitGemm()
