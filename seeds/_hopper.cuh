// Hopper (sm_90a) pieces shared by the CUDA families (spliced into each family's source by its
// spec.py): shared-memory addresses, cp.async groups and mma.sync, wgmma descriptors and fences,
// mbarriers (local, and arrivals from the other blocks of a thread-block cluster), the cluster's
// rank / barrier / peer addresses and loads, TMA descriptors and 2-d copies.
#include <stdint.h>

__device__ __forceinline__ unsigned smem_address(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// -- cp.async groups and mma.sync (sm_80 and later)
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// 16 bytes global -> shared by cp.async (through L2, no registers), zero-filled when !inside; the
// destination as a shared-memory address (smem_address) or as a pointer
__device__ __forceinline__ void copy16_async(unsigned dst, const void* src, bool inside = true) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(inside ? 16 : 0));
}
__device__ __forceinline__ void copy16_async(void* dst, const void* src, bool inside = true) {
    copy16_async(smem_address(dst), src, inside);
}

// D (16x8, f32) += A (16x16 f16, row-major fragment) * B (16x8 f16, column-major fragment)
__device__ __forceinline__ void mma16816(float* c, const uint32_t* a, uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// -- wgmma (sm_90a): operand descriptor of a K-major tile whose rows are 128 bytes, 128-byte
// swizzled (8-row groups 1024 bytes apart, 16-byte chunk c of row r at chunk c ^ (r % 8)),
// starting at `tile`; the warpgroup's fence, commit and wait
__device__ __forceinline__ uint64_t descriptor(const void* tile) {
    const uint64_t address = smem_address(tile);
    return ((address & 0x3FFFF) >> 4) | (uint64_t(1) << 16) | (uint64_t(1024 >> 4) << 32) | (uint64_t(1) << 62);
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int PENDING>
__device__ __forceinline__ void wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(PENDING) : "memory"); }

// the accumulators of a finished wgmma, tied to this point (after wgmma_wait): the compiler cannot
// move their reads above the wait, which does not name them
template <int N>
__device__ __forceinline__ void pin_registers(float (&r)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}

// the same for registers a wgmma reads (its A fragments): held until here, not reused before
template <int N>
__device__ __forceinline__ void pin_registers(uint32_t (&r)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+r"(r[i])::"memory");
}

// this thread's shared-memory writes (generic proxy) become visible to wgmma and TMA (async proxy)
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }

// -- the last of `arrivals` blocks: every block calls this after writing its partial results to
// global memory; it returns true in exactly one of them, the last to take a ticket, whose later
// (L2, .cg) reads see every block's writes. The counter counts on across launches (the last is the
// one whose ticket is arrivals - 1 modulo arrivals), so it is never reset. All threads call it.
__device__ __forceinline__ bool last_to_arrive(unsigned* counter, unsigned arrivals) {
    __threadfence();  // this block's writes are visible to the GPU before its ticket is
    __syncthreads();
    unsigned ticket = 0;
    if (threadIdx.x == 0) ticket = atomicAdd(counter, 1u);
    if (!__syncthreads_or(threadIdx.x == 0 && ticket % arrivals == arrivals - 1)) return false;
    __threadfence();  // the other blocks' writes are read after their tickets
    return true;
}

// -- every one of `arrivals` blocks waits here until all of them have written their partial results to
// global memory (then each reads the others' through L2, .cg). The blocks must run at once (a launch
// that keeps its grid to one wave); the counter counts on across launches: a launch's arrivals take
// tickets base .. base + arrivals - 1, base a multiple of arrivals (a power of two, so the count may
// wrap). All threads call it.
__device__ __forceinline__ void all_arrived(unsigned* counter, unsigned arrivals) {
    __threadfence();  // this block's writes are visible to the GPU before its ticket is
    __syncthreads();
    if (threadIdx.x == 0) {
        const unsigned ticket = atomicAdd(counter, 1u), target = ticket - ticket % arrivals + arrivals;
        unsigned seen;
        for (;;) {
            asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(seen) : "l"(counter) : "memory");
            if (static_cast<int>(seen - target) >= 0) break;
            __nanosleep(32);
        }
    }
    __syncthreads();
    __threadfence();  // the other blocks' writes are read after their tickets
}

// -- mbarriers: a "full" barrier completes when its bytes have landed (expect_tx / complete_tx), an
// "empty" one when every reader is done. Arrivals from another block of the cluster release at CTA
// scope and waits acquire at CTA scope, as for local ones (what they order is each block's reads of
// its own shared memory, finished before it arrives); the .cluster-scope variants measured 1.3-2.7x
// slower on the H100 for the same work.
__device__ __forceinline__ void barrier_init(uint64_t* bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_address(bar)), "r"(count) : "memory");
}

// after barrier_init: the barriers are initialised before any block of the cluster arrives on them
// (ordered by a cluster barrier after this)
__device__ __forceinline__ void barrier_init_fence() { asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); }

__device__ __forceinline__ void barrier_expect_bytes(uint64_t* bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_address(bar)), "r"(bytes)
                 : "memory");
}

__device__ __forceinline__ void barrier_arrive(uint64_t* bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_address(bar)) : "memory");
}

__device__ __forceinline__ void barrier_wait(uint64_t* bar, unsigned parity) {
    asm volatile("{\n.reg .pred ready;\nretry:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 ready, [%0], %1;\n"
                 "@!ready bra retry;\n}" ::"r"(smem_address(bar)), "r"(parity) : "memory");
}

// -- thread-block clusters
__device__ __forceinline__ int cluster_rank() {
    unsigned rank;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
    return static_cast<int>(rank);
}

// every thread of every block of the cluster meets here; shared-memory writes before it are
// visible to every block of the cluster after it (release / acquire)
__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}

// the two halves of cluster_sync, apart: arrive (ordering nothing) early, wait later
__device__ __forceinline__ void cluster_arrive_relaxed() {
    asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
}

__device__ __forceinline__ void cluster_wait() {
    asm volatile("barrier.cluster.wait.aligned;" ::: "memory");
}

// `local`'s place in the shared memory of block `rank` of the cluster
__device__ __forceinline__ unsigned peer_address(const void* local, int rank) {
    unsigned remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(smem_address(local)), "r"(rank));
    return remote;
}

// a store to a shared::cluster address (peer_address; it does not wait for the write: a cluster_sync
// orders it before the other block's reads)
__device__ __forceinline__ void store_cluster2(unsigned address, float x, float y) {
    asm volatile("st.shared::cluster.v2.f32 [%0], {%1, %2};" ::"r"(address), "f"(x), "f"(y) : "memory");
}

// a float4 into `address` (shared::cluster, from peer_address) of a block of the cluster, counted in
// bytes (complete_tx) on the mbarrier at `bar` of the same block: the store does not wait, the
// receiver learns from its barrier that it has landed
__device__ __forceinline__ void store_async4(unsigned address, float4 v, unsigned bar) {
    asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.f32 [%0], {%1, %2, %3, %4}, [%5];"
                 ::"r"(address), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w), "r"(bar) : "memory");
}

// one arrival on the barrier at `bar`'s place in block `rank` of the cluster
__device__ __forceinline__ void barrier_arrive_peer(uint64_t* bar, int rank) {
    asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];" ::"r"(peer_address(bar, rank)) : "memory");
}

// -- TMA: a descriptor (CUtensorMap, encoded on the host by cuTensorMapEncodeTiled) passed by value
struct alignas(64) TensorMap {
    unsigned long long bits[16];
};

// a 2-d box of `map` at (column, row) into shared memory, counted on `bar`
__device__ __forceinline__ void tma_load(void* dst, const TensorMap* map, int column, int row, uint64_t* bar) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
                 ::"r"(smem_address(dst)), "l"(reinterpret_cast<uint64_t>(map)), "r"(column), "r"(row),
                 "r"(smem_address(bar)) : "memory");
}

// a 3-d box of `map` at (x, y, z) into shared memory, counted on `bar`
__device__ __forceinline__ void tma_load_3d(void* dst, const TensorMap* map, int x, int y, int z, uint64_t* bar) {
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];"
                 ::"r"(smem_address(dst)), "l"(reinterpret_cast<uint64_t>(map)), "r"(x), "r"(y), "r"(z),
                 "r"(smem_address(bar)) : "memory");
}

// a 4-d box of `map` at (x, y, z, w) into shared memory, counted on `bar`
__device__ __forceinline__ void tma_load_4d(void* dst, const TensorMap* map, int x, int y, int z, int w, uint64_t* bar) {
    asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], [%6];"
                 ::"r"(smem_address(dst)), "l"(reinterpret_cast<uint64_t>(map)), "r"(x), "r"(y), "r"(z), "r"(w),
                 "r"(smem_address(bar)) : "memory");
}

// the same box into `dst`'s place in every block of `mask`, each counting it on `bar`'s place
__device__ __forceinline__ void tma_load_multicast(void* dst, const TensorMap* map, int column, int row, uint64_t* bar,
                                                   unsigned short mask) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster "
                 "[%0], [%1, {%2, %3}], [%4], %5;"
                 ::"r"(smem_address(dst)), "l"(reinterpret_cast<uint64_t>(map)), "r"(column), "r"(row),
                 "r"(smem_address(bar)), "h"(mask) : "memory");
}
