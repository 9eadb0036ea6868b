// Blackwell (sm_100a) pieces shared by the tcgen05 variants (spliced into each variant's source by
// seeds/_blackwell.py, after _hopper.cuh, whose mbarriers and TMA copies work the same on sm_100a):
// tensor memory (TMEM) allocation, the fences around thread synchronisation, shared-memory matrix
// descriptors, the commit of issued MMAs to an mbarrier, one elected lane, and 16-column TMEM loads.

// the whole warp allocates COLUMNS columns x 128 lanes of TMEM; the address lands in *slot
template <int COLUMNS>
__device__ __forceinline__ void tmem_allocate(unsigned* slot) {
    static_assert(COLUMNS >= 32 && COLUMNS <= 512 && (COLUMNS & (COLUMNS - 1)) == 0,
                  "a TMEM allocation is a power of two of 32..512 columns");
    asm volatile("tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%0], %1;"
                 ::"r"(smem_address(slot)), "n"(COLUMNS) : "memory");
    asm volatile("tcgen05.relinquish_alloc_permit.cta_group::1.sync.aligned;" ::: "memory");
}

template <int COLUMNS>
__device__ __forceinline__ void tmem_free(unsigned base) {  // the whole warp that allocated
    asm volatile("tcgen05.dealloc.cta_group::1.sync.aligned.b32 %0, %1;" ::"r"(base), "n"(COLUMNS) : "memory");
}

__device__ __forceinline__ void tcgen05_before_sync() { asm volatile("tcgen05.fence::before_thread_sync;" ::: "memory"); }
__device__ __forceinline__ void tcgen05_after_sync() { asm volatile("tcgen05.fence::after_thread_sync;" ::: "memory"); }

// smallest power of two of TMEM columns (at least 32) holding `columns`
__host__ __device__ constexpr int tmem_allocation(int columns) {
    int n = 32;
    while (n < columns) n *= 2;
    return n;
}

// shared-memory matrix descriptor (sm_100): K-major rows of 128 bytes, 128-byte swizzle, 8-row
// groups 1024 bytes apart (version 1). Advancing K by 32 bytes adds 2 (the address is in 16 bytes)
__device__ __forceinline__ uint64_t swizzled_descriptor(unsigned address) {
    return uint64_t((address & 0x3FFFF) >> 4) | (uint64_t(1) << 16) | (uint64_t(1024 >> 4) << 32) |
           (uint64_t(1) << 46) | (uint64_t(2) << 61);
}

// one arrival on `bar` once every tcgen05 operation this thread issued so far is complete
__device__ __forceinline__ void mma_commit(uint64_t* bar) {
    asm volatile("tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64 [%0];"
                 ::"r"(smem_address(bar)) : "memory");
}

__device__ __forceinline__ bool elect_one() {
    unsigned elected;
    asm volatile("{\n.reg .pred p;\nelect.sync _|p, 0xffffffff;\nselp.u32 %0, 1, 0, p;\n}" : "=r"(elected));
    return elected != 0;
}

// this thread's lane of 16 consecutive TMEM columns, asynchronously (a warp reads its 32 lanes)
__device__ __forceinline__ void tmem_load16(unsigned address, uint32_t (&v)[16]) {
    asm volatile("tcgen05.ld.sync.aligned.32x32b.x16.b32 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, "
                 "%13, %14, %15}, [%16];"
                 : "=r"(v[0]), "=r"(v[1]), "=r"(v[2]), "=r"(v[3]), "=r"(v[4]), "=r"(v[5]), "=r"(v[6]), "=r"(v[7]),
                   "=r"(v[8]), "=r"(v[9]), "=r"(v[10]), "=r"(v[11]), "=r"(v[12]), "=r"(v[13]), "=r"(v[14]), "=r"(v[15])
                 : "r"(address) : "memory");
}

// wait for this thread's TMEM loads; the registers pass through so that no use moves above it
__device__ __forceinline__ void tmem_wait16(uint32_t (&v)[16]) {
    asm volatile("tcgen05.wait::ld.sync.aligned;"
                 : "+r"(v[0]), "+r"(v[1]), "+r"(v[2]), "+r"(v[3]), "+r"(v[4]), "+r"(v[5]), "+r"(v[6]), "+r"(v[7]),
                   "+r"(v[8]), "+r"(v[9]), "+r"(v[10]), "+r"(v[11]), "+r"(v[12]), "+r"(v[13]), "+r"(v[14]), "+r"(v[15])
                 :: "memory");
}

// The start of a block of warp roles (producer warp 0, MMA warp 1, epilogue warps after): thread 0
// initialises the barriers, laid out one after another: `stages` full and empty (one arrival each:
// the TMA's expected bytes, the MMA warp's commit), then `buffers` accumulator full (the MMA warp's
// commit) and empty (one arrival per epilogue warp); warp 1 allocates COLUMNS of TMEM into *slot.
// Every thread returns the TMEM address.
template <int COLUMNS>
__device__ __forceinline__ unsigned start_warp_roles(uint64_t* barriers, int stages, int buffers, int epilogue_warps,
                                                     unsigned* slot) {
    if (threadIdx.x == 0) {
        for (int b = 0; b < 2 * stages; ++b) barrier_init(barriers + b, 1);
        for (int b = 0; b < buffers; ++b) {
            barrier_init(barriers + 2 * stages + b, 1);
            barrier_init(barriers + 2 * stages + buffers + b, epilogue_warps);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    if (threadIdx.x / 32 == 1) tmem_allocate<COLUMNS>(slot);
    tcgen05_before_sync();
    __syncthreads();
    tcgen05_after_sync();
    return *slot;
}

// The end: once every warp is done with TMEM (the epilogue's loads fenced before the barrier), warp 1
// frees it. Warp 0's lanes, of which one ran the producer, converge first.
template <int COLUMNS>
__device__ __forceinline__ void end_warp_roles(unsigned tmem) {
    tcgen05_before_sync();
    __syncwarp();
    __syncthreads();
    if (threadIdx.x / 32 == 1) {
        tcgen05_after_sync();
        tmem_free<COLUMNS>(tmem);
    }
}
