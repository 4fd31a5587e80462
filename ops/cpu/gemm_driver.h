// The packed GEMM driver's own types (internal to gemm_packed.cc and
// gemm_split.cc): one product (Problem), its kernels and blocking (Engine),
// one block of it (Block), and the per-thread buffers (Workspace).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <new>
#include <string>

#include "core/allocator.h"
#include "ops/cpu/gemm_blocking.h"
#include "ops/cpu/gemm_kernels.h"

namespace gpipe::ops::cpu::gemm_driver {

using packed::Bf16DotKernelSet;
using packed::EpilogueFn;
using packed::GemmEpilogue;
using packed::KernelSet;

// What the operands hold and how they are multiplied: float32; bfloat16
// converted to float32 while packing (then the float32 kernels); bfloat16
// packed in pairs for the dot-product kernel.
enum class Src { kF32, kBf16Convert, kBf16Dot };

struct Problem {
  bool ta, tb;
  int64_t m, n, k;
  float alpha;
  const void* a;  // float or bfloat16 bits, as src says
  int64_t lda;
  const void* b;
  int64_t ldb;
  float beta;
  float*
      c;  // nullptr: no C (Note [bfloat16 results] with one k-slice: tiles in registers' scratch)
  int64_t ldc;
  bool ct = false;  // C stored transposed: element (i, j) of this product lives at c[j * ldc + i]
  Src src = Src::kF32;
  const GemmEpilogue* ep = nullptr;  // applied after the last k-slice (Note [GEMM epilogue])
  EpilogueFn epilogue = nullptr;     // the active level's
  int64_t c_row0 = 0, c_col0 = 0;    // c holds the product's C from (c_row0, c_col0) on
  bool direct_a = false;    // Note [Direct A] in gemm_kernels.h: no A panels, tiles read A's rows
  bool prefetch_a = false;  // Note [Prefetched A sources] in gemm_pack.cc, read on the caller
};

// The kernels of one product and their blocking.
struct Engine {
  const KernelSet* ks = nullptr;          // float32 and convert paths
  const Bf16DotKernelSet* dot = nullptr;  // dot path
  int mr, nr, kc, nc, mc;
  int64_t esize;  // bytes per packed element
  // The depth for a product over the pool whose C is at most kSmallCFloats
  // (Note [Tile kernels' blocking] in gemm_blocking.cc): kc but for
  // b_panel_in_l1 kernels under the model's blocking, which take their
  // kc_cap. Not for a product on its caller alone: callers that deal rows
  // to tasks (the fused loss) would get another depth per thread count.
  int kc_small_c = 0;
  static constexpr int64_t kSmallCFloats = int64_t{1} << 16;
  int64_t depth_for(int64_t m, int64_t n, bool parallel) const {
    return parallel && m * n <= kSmallCFloats ? kc_small_c : kc;
  }

  static Engine of(const KernelSet& k) {
    const GemmBlocking b = gemm_blocking(k.mr, k.nr, 4, k.kc_cap);
    return Engine{&k, nullptr, k.mr, k.nr, b.kc, b.nc, b.mc, 4, b.kc};
  }
  static Engine of(const Bf16DotKernelSet& k) {
    std::string source;
    const GemmBlocking b = gemm_blocking(k.mr, k.nr, 2, k.kc_cap, &source, k.b_panel_in_l1);
    const int small = k.b_panel_in_l1 && source == "model" ? std::max(b.kc, k.kc_cap) : b.kc;
    return Engine{nullptr, &k, k.mr, k.nr, b.kc, b.nc, b.mc, 2, small};
  }
  // Packed depth of a kc-deep slice: whole pairs (or AMX tiles) for the dot kernels.
  int64_t depth(int64_t kc_) const {
    return dot ? (kc_ + dot->k_align - 1) / dot->k_align * dot->k_align : kc_;
  }
  void micro(int64_t kc_, const char* pa, const char* pb, float* c, int64_t ldc, float alpha,
             float beta) const {
    if (dot)
      dot->kernel(depth(kc_), reinterpret_cast<const uint16_t*>(pa),
                  reinterpret_cast<const uint16_t*>(pb), c, ldc, alpha, beta);
    else
      ks->kernel(kc_, reinterpret_cast<const float*>(pa), reinterpret_cast<const float*>(pb), c,
                 ldc, alpha, beta);
  }
};

// One (rows, columns, k-slice) block of the product.
struct Block {
  int64_t i0, rows, j0, cols, p0, kc;
  float beta;  // beta for the first k-slice, 1 afterwards
  int64_t a_panels, b_panels;
  char* pa;  // a_panels * mr * depth(kc) packed elements
  char* pb;  // b_panels * nr * depth(kc)
  char* a_panel(const Engine& e, int64_t ip) const {
    return pa + ip * e.mr * e.depth(kc) * e.esize;
  }
  char* b_panel(const Engine& e, int64_t jp) const {
    return pb + jp * e.nr * e.depth(kc) * e.esize;
  }
};

// A float buffer that grows to the largest request (system_allocate: huge
// pages from 2 MB on, Note [Huge pages] in core/allocator.cc).
class AlignedFloats {
 public:
  AlignedFloats() = default;
  AlignedFloats(const AlignedFloats&) = delete;
  AlignedFloats& operator=(const AlignedFloats&) = delete;
  ~AlignedFloats() { release(); }
  float* get(int64_t count) {
    if (count > size_) {
      release();
      ptr_ = static_cast<float*>(system_allocate(static_cast<size_t>(count) * sizeof(float)));
      if (ptr_ == nullptr) throw std::bad_alloc();
      size_ = count;
    }
    return ptr_;
  }

 private:
  void release() {
    if (ptr_ != nullptr) system_free(ptr_, static_cast<size_t>(size_) * sizeof(float));
    ptr_ = nullptr;
    size_ = 0;
  }
  float* ptr_ = nullptr;
  int64_t size_ = 0;
};

// `count` atomics set to zero, in a buffer that grows to the largest request.
template <class T>
class ZeroedAtomics {
 public:
  std::atomic<T>* get(int64_t count) {
    if (count > size_) {
      v_.reset(new std::atomic<T>[count]);
      size_ = count;
    }
    for (int64_t i = 0; i < count; ++i) v_[i].store(0, std::memory_order_relaxed);
    return v_.get();
  }

 private:
  std::unique_ptr<std::atomic<T>[]> v_;
  int64_t size_ = 0;
};

struct Workspace {
  AlignedFloats a, b;
  ZeroedAtomics<uint8_t> b_state;       // Note [Shared B panels]: 0 free, 1 packing, 2 ready
  ZeroedAtomics<uint8_t> a_state;       // Note [Claimed A units]: 0 not packed, 2 packed
  ZeroedAtomics<uint64_t> unit_ranges;  // Note [Claimed A units]: per B chunk and thread
  std::atomic<uint8_t>* states(int64_t count) { return b_state.get(count); }
};

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Rows [i0, i0 + rows), columns [j0, j0 + cols) and depths [p0, p0 + kc) of
// a product as one block, its panels packed into pa and pb.
inline Block make_block(const Engine& e, int64_t i0, int64_t rows, int64_t j0, int64_t cols,
                        int64_t p0, int64_t kc, float beta, char* pa, char* pb) {
  return Block{i0, rows, j0, cols, p0, kc, beta, ceil_div(rows, e.mr), ceil_div(cols, e.nr),
               pa, pb};
}

// Room in buf for `elements` packed elements of the engine's size.
inline char* packed_room(AlignedFloats& buf, const Engine& e, int64_t elements) {
  return reinterpret_cast<char*>(buf.get(ceil_div(elements, 4 / e.esize)));
}

// gemm_pack.cc: packs one A or B panel (nothing for A under Note [Direct A]
// in gemm_kernels.h); gemm_packed.cc: runs one tile of a block.
void pack_a_panel(const Problem& P, const Engine& e, int64_t i0, int64_t p0, int64_t kc, char* dst);
void pack_b_panel(const Problem& P, const Engine& e, int64_t j0, int64_t p0, int64_t kc, char* dst);
// A panels [ip, ip + count) of a block at once (Note [Grouped transposed A] in gemm_pack.cc).
void pack_a_panels(const Problem& P, const Engine& e, const Block& blk, int64_t ip, int64_t count);
// How many A panels a block packs at once (1: one at a time, as it runs them).
int64_t a_panel_group(const Problem& P, const Engine& e);
// Part `part` of `parts` of the source of A panels [ip, ip + count), into L2.
void prefetch_a_panels(const Problem& P, const Engine& e, const Block& blk, int64_t ip,
                       int64_t count, int64_t part, int64_t parts);
void run_tile(const Problem& P, const Engine& ks, const Block& blk, int64_t ip, int64_t jp);

// gemm_split.cc: the calling thread's packing buffers and flags.
Workspace& thread_workspace();

// gemm_split.cc: one block over `threads` threads of the pool (Note [Shared
// B panels]).
void run_block(const Problem& P, const Engine& ks, const Block& blk, Workspace& ws, int threads);

// gemm_split.cc: Note [Two k-slices on two threads]. Whether a product of
// `k_slices` slices of depth kc_max, in one block of rows and one of
// columns, on `threads` threads, runs its two slices side by side; and
// running it so.
bool split_k_fits(const Problem& P, const Engine& ks, int threads, int64_t k_slices,
                  bool one_block);
void run_split_k(const Problem& P, const Engine& ks, int64_t kc_max);

}  // namespace gpipe::ops::cpu::gemm_driver
