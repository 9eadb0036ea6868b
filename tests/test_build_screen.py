import pytest

from evo.fitness import BuildConfig, Builder, Status, parse_ptxas, screen
from evo.seeds import BuildRecipe, ScreenLimits, get_family

GEMM = get_family("cpu_gemm")

PTXAS_REPORT = """ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_Z3addPf' for 'sm_90a'
ptxas info    : Function properties for _Z3addPf
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 12 registers, used 1 barriers, 4096 bytes smem, 360 bytes cmem[0]
ptxas info    : Compiling entry function '_Z3mulPf' for 'sm_90a'
ptxas info    : Function properties for _Z3mulPf
    16 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads
ptxas info    : Used 40 registers, used 0 barriers, 360 bytes cmem[0]
"""


def test_parse_ptxas_takes_the_worst_entry():
    usage = parse_ptxas(PTXAS_REPORT)
    assert (usage.registers, usage.shared_bytes, usage.stack_bytes) == (40, 4096, 16)
    assert (usage.spill_store_bytes, usage.spill_load_bytes, usage.constant_bytes) == (8, 4, 360)
    assert parse_ptxas("nothing here") is None


def test_builds_a_shared_library_and_caches_it(cache_dir):
    builder = Builder(BuildConfig(cache_dir))
    genome = GEMM.seed_genomes[0]
    first = builder.build(genome.id, GEMM.build_recipe(genome))
    assert first.status is Status.OK and not first.cached and first.artifact[:4] == b"\x7fELF"
    second = builder.build(genome.id, GEMM.build_recipe(genome))
    assert second.cached and second.artifact == first.artifact and second.artifact_key == first.artifact_key
    other = GEMM.space.genome({**genome.as_dict(), "block_m": 64})
    assert builder.build(other.id, GEMM.build_recipe(other)).artifact_key != first.artifact_key
    passed = screen(first, "shared_library", ScreenLimits())
    assert passed.status is Status.OK


UNROLLED = """extern "C" void twice(float* x, int n) {
#pragma GCC unroll UNROLL
    for (int i = 0; i < n; ++i) x[i] *= 2;
}
"""


def test_knob_macros_reach_pragmas_where_the_preprocessor_does_not_expand_them(cache_dir):
    from evo.fitness.build import expand_macros_in_pragmas

    flags = ("-O2", "-fPIC", "-shared", "-DUNROLL=4")
    built = Builder(BuildConfig(cache_dir)).build("g", BuildRecipe(UNROLLED, "twice.cpp", "c++", flags, "shared_library"))
    assert built.status is Status.OK, built.message  # g++ alone: "'UNROLL' was not declared in this scope"
    source = "#pragma omp parallel for num_threads(THREADS) // THREADSX\nint x = THREADS;\n"
    assert expand_macros_in_pragmas(source, ("-DTHREADS=2",)) == \
        "#pragma omp parallel for num_threads(2) // THREADSX\nint x = THREADS;\n"


def test_compile_error_is_a_record_with_diagnostics(cache_dir):
    recipe = BuildRecipe("int main( { return 0; }\n", "broken.cpp", "c++", ("-shared", "-fPIC"), "shared_library")
    result = Builder(BuildConfig(cache_dir)).build("g1", recipe)
    assert result.status is Status.COMPILE_ERROR and result.artifact is None
    assert "error" in result.message and "broken.cpp" in result.log
    again = Builder(BuildConfig(cache_dir)).build("g1", recipe)
    assert again.cached and again.status is Status.COMPILE_ERROR
    assert screen(result, "shared_library", ScreenLimits()).status is Status.COMPILE_ERROR


SLOW_TO_COMPILE = """
constexpr unsigned long spin(unsigned long n) { unsigned long s = 0; for (unsigned long i = 0; i < n; ++i) s += i ^ (s >> 3); return s; }
static_assert(spin(4000000000ul) != 1, "forces the compiler to run the loop");
"""


def test_compile_timeout_kills_the_compiler(cache_dir):
    recipe = BuildRecipe(SLOW_TO_COMPILE, "slow.cpp", "c++",
                         ("-std=c++17", "-fconstexpr-ops-limit=1000000000000", "-fconstexpr-loop-limit=2000000000",
                          "-fPIC", "-shared"), "shared_library")
    result = Builder(BuildConfig(cache_dir, timeout_s=1.5)).build("slow", recipe)
    assert result.status is Status.COMPILE_TIMEOUT
    assert result.seconds < 10
    assert not list(cache_dir.glob("*/*/meta.json"))  # a timeout is not cached


CUDA_KERNEL = """
extern "C" __global__ void scale(float* x, int n) {
    __shared__ float tile[REGS_TILE];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    tile[threadIdx.x % REGS_TILE] = i < n ? x[i] : 0.f;
    __syncthreads();
    if (i < n) x[i] = 2.f * tile[(threadIdx.x + 1) % REGS_TILE];
}
"""


@pytest.mark.nvcc
def test_nvcc_cubin_build_reads_ptxas_stats_and_screens(cache_dir):
    recipe = BuildRecipe(CUDA_KERNEL, "scale.cu", "nvcc",
                         ("-gencode", "arch=compute_90a,code=sm_90a", "-DREGS_TILE=256"), "cubin")
    result = Builder(BuildConfig(cache_dir)).build("cuda", recipe)
    assert result.status is Status.OK, result.log
    assert result.artifact[:4] == b"\x7fELF"
    passed = screen(result, "cubin", ScreenLimits())
    assert passed.status is Status.OK
    assert passed.usage.registers > 0 and passed.usage.shared_bytes == 1024
    tight = screen(result, "cubin", ScreenLimits(max_shared_bytes=512))
    assert tight.status is Status.SCREENED_OUT and "shared memory bytes 1024 > limit 512" in tight.message
