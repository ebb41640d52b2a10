// The GEMM tile function's body (see gemm.h): the K loop of broadcast-FMAs
// over MR x NV accumulator vectors, then partial sums or the epilogue.
//
// Accumulators and loop counters are allocas, as in kernel_emitter.cpp: mem2reg
// keeps the 24 accumulators in registers through the K loop. A full packed
// tile's sums go from the registers to the partial sums or the epilogue
// (unrolled, MR x NV vectors); edge tiles and the unpacked path go through
// a stack tile (MR x NR, in L1), whose scalar loops stop at the valid part.
#include "jit/llvm/gemm.h"

#include <cassert>
#include "jit/llvm/ir_loops.h"

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Intrinsics.h>

namespace loom::jit::llvm_cpu {

using llvm::Value;

GemmShape gemm_shape(const Target& t, ScalarType dt) {
  const int bytes = dt == kDouble ? 8 : 4;
  const int lanes = t.vector_width * 4 / bytes;  // vector_width counts float lanes
  const int mr = t.vector_width >= 16 ? 12 : t.vector_width >= 8 ? 6 : 4;
  return {mr, 2 * lanes, lanes};
}


namespace {

class TileEmitter {
 public:
  TileEmitter(llvm::IRBuilderBase& b, llvm::Function* fn, Value* tile, ScalarType dt, const GemmShape& s,
              const GemmEpilogue& epi, const GemmOperandOp& op, std::array<bool, 2> fused, bool dot,
              const GemmEpiloguePrefetch& epi_prefetch)
      : b_(b), fn_(fn), ctx_(fn->getContext()), dt_(dt), s_(s), nv_(s.nr / s.lanes), epi_(epi), op_(op), fused_(fused),
        dot_(dot), epi_prefetch_(epi_prefetch) {
    t_ = dt == kDouble ? b_.getDoubleTy() : b_.getFloatTy();
    vt_ = llvm::FixedVectorType::get(t_, s.lanes);
    auto field = [&](int f, bool ptr) {
      Value* at = b_.CreateConstGEP1_64(b_.getInt64Ty(), tile, f);
      return b_.CreateLoad(ptr ? static_cast<llvm::Type*>(b_.getPtrTy()) : b_.getInt64Ty(), at);
    };
    a_ = field(0, true), bp_ = field(1, true), kc_ = field(2, false);
    a_rs_ = field(3, false), a_ks_ = field(4, false), b_ks_ = field(5, false);
    batch_ = field(6, false), i_ = field(7, false), j_ = field(8, false);
    rows_ = field(9, false), cols_ = field(10, false);
    partial_ = field(11, true), ldp_ = field(12, false), flags_ = field(13, false);
    for (int r = 0; r < s.mr; ++r)
      for (int q = 0; q < nv_; ++q) acc_.push_back(b_.CreateAlloca(vt_));
    tile_ = b_.CreateAlloca(t_, b_.getInt64(s.mr * s.nr), "tile");
    tile_->setAlignment(llvm::Align(64));
  }

  void emit() { emit_from(0); }

 private:
  // A call that prepares a packed operand (kGemmPrepareA / B) does only
  // that; any other computes a tile.
  void emit_from(int w) {
    if (w == 2) return emit_tile();
    if (!fused_[w]) return emit_from(w + 1);
    if_else(flag(w == 0 ? kGemmPrepareA : kGemmPrepareB), [&] { prepare_operand(w); }, [&] { emit_from(w + 1); });
  }

  // In place over the kc elements at the operand: `lanes` at a time, then
  // one at a time.
  void prepare_operand(int w) {
    Value* base = w == 0 ? a_ : bp_;
    auto at = [&](Value* i) { return b_.CreateGEP(t_, base, i); };
    const llvm::Align al(dt_ == kDouble ? 8 : 4);
    Value* main = b_.CreateAnd(kc_, b_.getInt64(~int64_t{s_.lanes - 1}));
    for_range(b_.getInt64(0), main, [&](Value* i) {
      b_.CreateAlignedStore(op_(w, b_.CreateAlignedLoad(vt_, at(i), al), s_.lanes), at(i), al);
    }, s_.lanes);
    for_range(main, kc_, [&](Value* i) { b_.CreateAlignedStore(op_(w, b_.CreateAlignedLoad(t_, at(i), al), 1), at(i), al); });
  }

  void emit_tile() {
    for (auto* a : acc_) b_.CreateStore(llvm::Constant::getNullValue(vt_), a);
    // The partial sums' rows are read and written after the K loop: fetch
    // them now, so that the misses (the C block is far larger than L2)
    // overlap the FMAs instead of stalling after them.
    if_else(b_.CreateIsNotNull(partial_), [&] {
      const int lines = s_.nr * (dt_ == kDouble ? 8 : 4) / 64;
      for (int r = 0; r < s_.mr; ++r)
        for (int l = 0; l < lines; ++l) {
          Value* at = b_.CreateGEP(t_, partial_, b_.CreateAdd(b_.CreateMul(b_.getInt64(r), ldp_), b_.getInt64(l * 64 / (dt_ == kDouble ? 8 : 4))));
          prefetch(b_, at, true, 3);
        }
    }, [] {});
    // Likewise the epilogue's own memory (an SGD update's momentum and
    // weights, a fresh output's lines) on the last K block.
    if (epi_prefetch_)
      if_else(flag(kGemmLast), [&] {
        for_range(b_.getInt64(0), rows_, [&](Value* r) { epi_prefetch_(batch_, b_.CreateAdd(i_, r), j_, s_.nr); });
        if_else(flag(kGemmWide), [&] { epi_prefetch_(batch_, i_, b_.CreateAdd(j_, b_.getInt64(s_.nr)), s_.nr); }, [] {});
      }, [] {});
    if (dot_) {  // its tiles are all direct (the driver's GemmPlan::dot implies direct)
      dot_loops();
      through_tile();
      return;
    }
    Value* full = b_.CreateAnd(b_.CreateICmpEQ(rows_, b_.getInt64(s_.mr)), b_.CreateICmpEQ(cols_, b_.getInt64(s_.nr)));
    if_else(flag(kGemmDirect), [&] {
      if_else(flag(kGemmWide), [&] {
        wide_row();
        through_tile(true);
      }, [&] {
        direct_loops();
        through_tile();
      });
    }, [&] {
      packed_loop();
      // A full tile (all but the edges of a large product) leaves straight
      // from the registers; an edge tile through the stack tile, whose
      // loops stop at its valid part.
      if_else(full, [&] { from_registers(); }, [&] {
        spill();
        through_tile();
      });
    });
  }

  // The accumulators of a full packed tile: earlier K blocks' sums added
  // and the result stored as partial sums or handed to the epilogue, one
  // vector at a time, with no round trip through the stack tile.
  void from_registers() {
    Value* add = flag(kGemmAddPartial);
    Value* last = flag(kGemmLast);
    std::vector<Value*> v;
    for (auto* a : acc_) v.push_back(b_.CreateLoad(vt_, a));
    if_else(add, [&] {
      for (int r = 0; r < s_.mr; ++r)
        for (int q = 0; q < nv_; ++q) {
          Value* sum = b_.CreateFAdd(v[r * nv_ + q], partial(b_.getInt64(r), b_.getInt64(q * s_.lanes), s_.lanes, nullptr));
          b_.CreateStore(sum, acc_[r * nv_ + q]);
        }
    }, [] {});
    v.clear();
    for (auto* a : acc_) v.push_back(b_.CreateLoad(vt_, a));
    if_else(last, [&] {
      for (int r = 0; r < s_.mr; ++r)
        for (int q = 0; q < nv_; ++q)
          epi_(batch_, b_.CreateAdd(i_, b_.getInt64(r)), b_.CreateAdd(j_, b_.getInt64(q * s_.lanes)), v[r * nv_ + q], s_.lanes);
    }, [&] {
      for (int r = 0; r < s_.mr; ++r)
        for (int q = 0; q < nv_; ++q) partial(b_.getInt64(r), b_.getInt64(q * s_.lanes), s_.lanes, v[r * nv_ + q]);
    });
  }

  // The sums, in the stack tile: earlier K blocks' added, then the
  // epilogue or the partial sums. `wide`: a kGemmWide row, 2 NR columns of
  // tile row 0 (the tile's flat MR x NR elements hold them).
  void through_tile(bool wide = false) {
    if_else(flag(kGemmAddPartial), [&] {
      each([&](Value* r, Value* c, int w) { put(r, c, w, b_.CreateFAdd(get(r, c, w), partial(r, c, w, nullptr))); }, wide);
    }, [] {});
    if_else(flag(kGemmLast), [&] {
      each([&](Value* r, Value* c, int w) {
        epi_(batch_, b_.CreateAdd(i_, r), b_.CreateAdd(j_, c), get(r, c, w), w);
      }, wide);
    }, [&] { each([&](Value* r, Value* c, int w) { partial(r, c, w, get(r, c, w)); }, wide); });
  }

  // A kGemmWide row: all its 2 NV vectors of B at each k meet one
  // broadcast of A's element, in two interleaved chains (eight independent
  // FMAs a pair of k, added at the end). Split into NR-wide tiles, a 1 x 64
  // by 64 x 64 product (W5's) ran two calls, each with its own entry and
  // epilogue setup and one broadcast for two FMAs: with its tanh 2.80K ->
  // 2.06K instructions a product under callgrind (which runs AVX2 tiles).
  static constexpr int kWideChains = 2;
  void wide_row() {
    const int nv = 2 * nv_;
    assert(static_cast<int>(acc_.size()) >= kWideChains * nv);
    const std::vector<Value*> mask = b_masks(nv);
    for (int u = 0; u < kWideChains; ++u)
      for (int q = 0; q < nv; ++q) b_.CreateStore(llvm::Constant::getNullValue(vt_), acc_[u * nv + q]);
    auto step = [&](Value* k, int u) {
      Value* av = b_.CreateVectorSplat(s_.lanes, b_.CreateLoad(t_, b_.CreateGEP(t_, a_, b_.CreateMul(k, a_ks_))));
      for (int q = 0; q < nv; ++q) fma(acc_[u * nv + q], av, load_b(k, q, mask[q]));
    };
    chained_k(kWideChains, step);
    for (int q = 0; q < nv; ++q) {
      Value* sum = b_.CreateFAdd(b_.CreateLoad(vt_, acc_[q]), b_.CreateLoad(vt_, acc_[nv + q]));
      put(b_.getInt64(0), b_.getInt64(q * s_.lanes), s_.lanes, sum);
    }
  }

  Value* flag(int64_t f) { return b_.CreateICmpNE(b_.CreateAnd(flags_, b_.getInt64(f)), b_.getInt64(0)); }

  // Packed panels: A is kc x MR (one k after another), B kc x NR, both
  // zero padded, so every tile computes all MR x NR and no load is masked.
  // Four k per step: 96 FMAs around one loop branch, and one software
  // prefetch per cache line of A, kPrefetchA k ahead. The A panel comes
  // from L2 (the B strip, reused by every panel of the block, stays
  // nearer); prefetching past the panel's end fetches the next panel, the
  // one the next tile reads.
  static constexpr int kUnroll = 4, kPrefetchA = 16;
  static constexpr int kRowChains = 4;  // row_by_row's chains of a short product: <= MR
  static_assert(kRowChains == 4, "row_by_row adds its chains as (0 + 1) + (2 + 3)");
  void packed_loop() {
    const int64_t eb = dt_ == kDouble ? 8 : 4;
    auto step = [&](Value* k) {
      std::vector<Value*> bv;
      Value* brow = b_.CreateGEP(t_, bp_, b_.CreateMul(k, b_.getInt64(s_.nr)));
      for (int q = 0; q < nv_; ++q)
        bv.push_back(b_.CreateAlignedLoad(vt_, b_.CreateConstGEP1_64(t_, brow, q * s_.lanes), align(s_.lanes)));
      Value* arow = b_.CreateGEP(t_, a_, b_.CreateMul(k, b_.getInt64(s_.mr)));
      for (int r = 0; r < s_.mr; ++r) {
        Value* av = b_.CreateVectorSplat(s_.lanes, b_.CreateLoad(t_, b_.CreateConstGEP1_64(t_, arow, r)));
        for (int q = 0; q < nv_; ++q) fma(acc_[r * nv_ + q], av, bv[q]);
      }
    };
    Value* kmain = b_.CreateAnd(kc_, b_.getInt64(~int64_t{kUnroll - 1}));
    for_range(b_.getInt64(0), kmain, [&](Value* k) {
      Value* ahead = b_.CreateGEP(t_, a_, b_.CreateMul(b_.CreateAdd(k, b_.getInt64(kPrefetchA)), b_.getInt64(s_.mr)));
      for (int64_t off = 0; off < kUnroll * s_.mr * eb; off += 64)
        prefetch(b_, b_.CreateConstGEP1_64(b_.getInt8Ty(), ahead, off), false, 3);
      for (int u = 0; u < kUnroll; ++u) step(b_.CreateAdd(k, b_.getInt64(u)));
    }, kUnroll);
    for_range(kmain, kc_, step);
  }

  // Unpacked A (small products: packing would cost more than it saves),
  // read through its strides; B's columns past `cols` are masked off. A
  // tile of more than MR / 2 rows runs MR rows per k, the rows past `rows`
  // reading row 0 again (their sums are dropped: the tile leaves through
  // the stack tile, whose loops stop at the valid rows), so each element of
  // B is loaded once per tile; a lower one (M = 1: a control loop's state
  // times a matrix) one row at a time, so it pays for no padding rows. A
  // [10, 256] x [256, 1024] product (W4's last weight gradient) re-read
  // B's strip ten times, 4 KiB apart, and took 367 us; now 32 us.
  // Unpacked B (direct tiles): which lanes of each of the first `nv`
  // vectors of a row are columns below `cols`, and vector q of row k,
  // masked to them (zero past the edge).
  std::vector<Value*> b_masks(int nv) {
    std::vector<Value*> mask;
    for (int q = 0; q < nv; ++q) mask.push_back(lanes_below(cols_, q * s_.lanes));
    return mask;
  }
  Value* load_b(Value* k, int q, Value* mask) {
    Value* at = b_.CreateGEP(t_, bp_, b_.CreateAdd(b_.CreateMul(k, b_ks_), b_.getInt64(q * s_.lanes)));
    return b_.CreateMaskedLoad(vt_, at, llvm::Align(dt_ == kDouble ? 8 : 4), mask, llvm::Constant::getNullValue(vt_));
  }

  void direct_loops() {
    const std::vector<Value*> mask = b_masks(nv_);
    auto bload = [&](Value* k, int q) { return load_b(k, q, mask[q]); };
    // nv vectors of B per k: a product at most one vector wide (N = 10: a
    // classifier's last layer and its weight gradient) runs half the FMAs
    // of a full tile; its unused accumulators stay zero.
    auto full_height = [&](int nv) {
      std::vector<Value*> row;
      for (int r = 0; r < s_.mr; ++r) {
        Value* valid = b_.CreateSelect(b_.CreateICmpSLT(b_.getInt64(r), rows_), b_.getInt64(r), b_.getInt64(0));
        row.push_back(b_.CreateGEP(t_, a_, b_.CreateMul(valid, a_rs_)));
      }
      for_range(b_.getInt64(0), kc_, [&](Value* k) {
        std::vector<Value*> bv;
        for (int q = 0; q < nv; ++q) bv.push_back(bload(k, q));
        Value* ak = b_.CreateMul(k, a_ks_);
        for (int r = 0; r < s_.mr; ++r) {
          Value* av = b_.CreateVectorSplat(s_.lanes, b_.CreateLoad(t_, b_.CreateGEP(t_, row[r], ak)));
          for (int q = 0; q < nv; ++q) fma(acc_[r * nv_ + q], av, bv[q]);
        }
      });
      spill();
    };
    // One row has only NV accumulators, and one chain of K dependent FMAs
    // each waits on the FMA's latency every k (a 64 x 64 matrix times a
    // vector: ~256 cycles a tile where the loads allow ~64). A product
    // shorter than MR (kGemmShort) whose tile comes here (MR / 2 rows or
    // fewer) sums over kRowChains interleaved chains, added pairwise at the
    // end. Only then: an edge tile under full tiles keeps their order (one
    // chain, as full_height), so a row of a product does not change with
    // the rows around it.
    auto row_by_row = [&](int nv, int chains) {
      for_range(b_.getInt64(0), rows_, [&](Value* r) {
        Value* arow = b_.CreateGEP(t_, a_, b_.CreateMul(r, a_rs_));
        for (int u = 0; u < chains; ++u)
          for (int q = 0; q < nv_; ++q) b_.CreateStore(llvm::Constant::getNullValue(vt_), acc_[u * nv_ + q]);
        auto step = [&](Value* k, int u) {
          Value* av = b_.CreateVectorSplat(s_.lanes, b_.CreateLoad(t_, b_.CreateGEP(t_, arow, b_.CreateMul(k, a_ks_))));
          for (int q = 0; q < nv; ++q) fma(acc_[u * nv_ + q], av, bload(k, q));
        };
        chained_k(chains, step);
        for (int q = 0; q < nv_; ++q) {
          auto chain = [&](int u) { return b_.CreateLoad(vt_, acc_[u * nv_ + q]); };
          Value* sum = chains == 1 ? chain(0) : b_.CreateFAdd(b_.CreateFAdd(chain(0), chain(1)), b_.CreateFAdd(chain(2), chain(3)));
          put(r, b_.getInt64(q * s_.lanes), s_.lanes, sum);
        }
      });
    };
    auto short_rows = [&](int nv) {
      if_else(flag(kGemmShort), [&] { row_by_row(nv, kRowChains); }, [&] { row_by_row(nv, 1); });
    };
    Value* narrow = b_.CreateICmpSLE(cols_, b_.getInt64(s_.lanes));
    if_else(b_.CreateICmpSGT(rows_, b_.getInt64(s_.mr / 2)), [&] {
      if_else(narrow, [&] { full_height(1); }, [&] { full_height(nv_); });
    }, [&] {
      if_else(narrow, [&] { short_rows(1); }, [&] { short_rows(nv_); });
    });
  }

  // Which of a vector's lanes first, first + 1, ... are below n.
  Value* lanes_below(Value* n, int64_t first) {
    std::vector<llvm::Constant*> lane;
    for (int l = 0; l < s_.lanes; ++l) lane.push_back(b_.getInt64(first + l));
    return b_.CreateICmpSLT(llvm::ConstantVector::get(lane), b_.CreateVectorSplat(s_.lanes, n));
  }

  // B contiguous along K (x W^T: a Linear layer's weight) and a short or
  // narrow product (a dot kernel; b_ks is B's stride between columns):
  // each element is a dot product of A's row and B's column, both
  // contiguous, summed a vector of k at a time, kDotColumns columns at once
  // (one load of A for them), a masked vector for the last k, then across
  // the lanes. Packing B instead read all of it with a stride of K per
  // element on every call: a batch-1 Linear 1024 -> 1024 took 487 us
  // against 139 us for x W.
  //
  // Each column keeps `unroll` sums over alternate vectors of k (added at
  // the end): one sum per column waited on the FMA's latency every step (4
  // cycles on Zen 3 for 4 columns, and for a lone column); with two (four
  // for two columns or one) the loads set the pace. Zen 3, W4's logits,
  // [256, 1024] x [10, 1024]^T (a narrow product, before this path a
  // tile of 16 columns with 10 valid): 136-148 us alone -> 81-93 with
  // these sums -> 72-74 with the column groups outside the rows (below);
  // in W4's step 0.19-0.22 -> 0.14 ms.
  static constexpr int kDotColumns = 4;
  void dot_loops() {
    assert(acc_.size() >= 8);  // the columns' sums use the tile's accumulators
    const llvm::Align al(dt_ == kDouble ? 8 : 4);
    Value* zero = llvm::Constant::getNullValue(vt_);
    auto columns = [&](Value* arow, Value* r, Value* c0, int width) {
      const int unroll = width > 2 ? 2 : 4;
      auto acc = [&](int u, int q) { return acc_[q * width + u]; };  // column u, sum q
      std::vector<Value*> bcol;
      for (int u = 0; u < width; ++u)
        bcol.push_back(b_.CreateGEP(t_, bp_, b_.CreateMul(b_.CreateAdd(c0, b_.getInt64(u)), b_ks_)));
      for (int q = 0; q < unroll; ++q)
        for (int u = 0; u < width; ++u) b_.CreateStore(zero, acc(u, q));
      auto step = [&](Value* k, Value* mask, int q) {
        auto load = [&](Value* base) {
          Value* at = b_.CreateGEP(t_, base, k);
          if (mask) return static_cast<Value*>(b_.CreateMaskedLoad(vt_, at, al, mask, zero));
          return static_cast<Value*>(b_.CreateAlignedLoad(vt_, at, al));
        };
        Value* av = load(arow);
        for (int u = 0; u < width; ++u) fma(acc(u, q), av, load(bcol[u]));
      };
      // Whole groups of `unroll` vectors, then single vectors, then the
      // masked tail.
      Value* kgroups = b_.CreateAnd(kc_, b_.getInt64(~int64_t{s_.lanes * unroll - 1}));
      Value* kmain = b_.CreateAnd(kc_, b_.getInt64(~int64_t{s_.lanes - 1}));
      Value* rest = b_.CreateSub(kc_, kmain);
      for_range(b_.getInt64(0), kgroups, [&](Value* k) {
        for (int q = 0; q < unroll; ++q) step(b_.CreateAdd(k, b_.getInt64(q * s_.lanes)), nullptr, q);
      }, s_.lanes * unroll);
      for_range(kgroups, kmain, [&](Value* k) { step(k, nullptr, 0); }, s_.lanes);
      if_else(b_.CreateICmpSGT(rest, b_.getInt64(0)), [&] { step(kmain, lanes_below(rest, 0), 1); }, [] {});
      for (int u = 0; u < width; ++u) {
        Value* v = b_.CreateLoad(vt_, acc(u, 0));
        for (int q = 1; q < unroll; ++q) v = b_.CreateFAdd(v, b_.CreateLoad(vt_, acc(u, q)));
        auto* sum = b_.CreateFAddReduce(llvm::ConstantFP::get(t_, 0.0), v);
        llvm::cast<llvm::Instruction>(sum)->setHasAllowReassoc(true);  // a tree across the lanes
        put(r, b_.CreateAdd(c0, b_.getInt64(u)), 1, sum);
      }
    };
    // Each group of columns meets every row in turn: the group's columns
    // of B stay in L1 while the rows pass (row by row, a K of 1024 read all
    // of a 10-column B from L2 for every row).
    auto rows = [&](Value* c, int width) {
      for_range(b_.getInt64(0), rows_, [&](Value* r) { columns(b_.CreateGEP(t_, a_, b_.CreateMul(r, a_rs_)), r, c, width); });
    };
    Value* cgroups = b_.CreateAnd(cols_, b_.getInt64(~int64_t{kDotColumns - 1}));
    for_range(b_.getInt64(0), cgroups, [&](Value* c) { rows(c, kDotColumns); }, kDotColumns);
    Value* left = b_.CreateSub(cols_, cgroups);  // the last 1-3 columns, together
    for (int w = kDotColumns - 1; w >= 1; --w)
      if_else(b_.CreateICmpEQ(left, b_.getInt64(w)), [&] { rows(cgroups, w); }, [] {});
  }

  void fma(llvm::AllocaInst* acc, Value* a, Value* bv) {
    Value* sum = b_.CreateIntrinsic(llvm::Intrinsic::fmuladd, {vt_}, {a, bv, b_.CreateLoad(vt_, acc)});
    b_.CreateStore(sum, acc);
  }

  // The accumulators into the stack tile.
  void spill() {
    for (int r = 0; r < s_.mr; ++r)
      for (int q = 0; q < nv_; ++q) put(b_.getInt64(r), b_.getInt64(q * s_.lanes), s_.lanes, b_.CreateLoad(vt_, acc_[r * nv_ + q]));
  }

  // The tile's element (r, c), w lanes.
  Value* tile_at(Value* r, Value* c) { return b_.CreateGEP(t_, tile_, b_.CreateAdd(b_.CreateMul(r, b_.getInt64(s_.nr)), c)); }
  Value* get(Value* r, Value* c, int w) {
    return b_.CreateAlignedLoad(w == 1 ? t_ : static_cast<llvm::Type*>(vt_), tile_at(r, c), align(w));
  }
  void put(Value* r, Value* c, int w, Value* v) { b_.CreateAlignedStore(v, tile_at(r, c), align(w)); }
  // Tile rows are NR elements and vectors start at multiples of `lanes`.
  llvm::Align align(int w) const { return llvm::Align(w * (dt_ == kDouble ? 8 : 4)); }
  // Loads (v null) or stores partial[r * ldp + c], w lanes.
  Value* partial(Value* r, Value* c, int w, Value* v) {
    Value* at = b_.CreateGEP(t_, partial_, b_.CreateAdd(b_.CreateMul(r, ldp_), c));
    const llvm::Align al(dt_ == kDouble ? 8 : 4);
    if (!v) return b_.CreateAlignedLoad(w == 1 ? t_ : static_cast<llvm::Type*>(vt_), at, al);
    b_.CreateAlignedStore(v, at, al);
    return v;
  }

  // body(r, c, w) over the tile's valid part. Whole rows (all NR columns
  // valid: a full tile, and the bottom tile of a product whose M is no
  // multiple of MR, M = 1 among them) go NV vectors a row; only a tile cut
  // on the right goes element by element (where LLVM's vectorizer may or
  // may not step in). W5's 1 x 64 by 64 x 64 products, per call with their
  // epilogues (callgrind): with tanh 2.90K -> 2.73K instructions, with tanh
  // and ten clamped updates 4.16K -> 3.82K.
  void each(const std::function<void(Value*, Value*, int)>& body, bool wide = false) {
    const int nv = wide ? 2 * nv_ : nv_;
    if_else(b_.CreateICmpEQ(cols_, b_.getInt64(nv * s_.lanes)), [&] {
      for_range(b_.getInt64(0), rows_, [&](Value* r) {
        for (int q = 0; q < nv; ++q) body(r, b_.getInt64(q * s_.lanes), s_.lanes);
      });
    }, [&] {
      for_range(b_.getInt64(0), rows_, [&](Value* r) {
        for_range(b_.getInt64(0), cols_, [&](Value* c) { body(r, c, 1); });
      });
    });
  }

  // The K loop of an unpacked row in `chains` interleaved FMA chains:
  // step(k, u) adds k into chain u, `chains` k a trip (a power of two),
  // then the k past the last whole group into chain 0.
  void chained_k(int chains, const std::function<void(Value*, int)>& step) {
    Value* kmain = b_.CreateAnd(kc_, b_.getInt64(~int64_t{chains - 1}));
    for_range(b_.getInt64(0), kmain, [&](Value* k) {
      for (int u = 0; u < chains; ++u) step(b_.CreateAdd(k, b_.getInt64(u)), u);
    }, chains);
    for_range(kmain, kc_, [&](Value* k) { step(k, 0); });
  }

  // for (i = lo; i < hi; i += stride) body(i) (ir_loops.h).
  void for_range(Value* lo, Value* hi, const std::function<void(Value*)>& body, int64_t stride = 1) {
    llvm_cpu::for_range(b_, fn_, lo, hi, stride, "g", body);
  }

  void if_else(Value* c, const std::function<void()>& then, const std::function<void()>& otherwise) {
    auto* t = llvm::BasicBlock::Create(ctx_, "g_then", fn_);
    auto* e = llvm::BasicBlock::Create(ctx_, "g_else", fn_);
    auto* join = llvm::BasicBlock::Create(ctx_, "g_join", fn_);
    b_.CreateCondBr(c, t, e);
    b_.SetInsertPoint(t);
    then();
    b_.CreateBr(join);
    b_.SetInsertPoint(e);
    otherwise();
    b_.CreateBr(join);
    b_.SetInsertPoint(join);
  }

  llvm::IRBuilderBase& b_;
  llvm::Function* fn_;
  llvm::LLVMContext& ctx_;
  const ScalarType dt_;
  const GemmShape s_;
  const int nv_;  // vectors per tile row
  const GemmEpilogue& epi_;
  const GemmOperandOp& op_;
  const std::array<bool, 2> fused_;
  const bool dot_;  // gemm_dot_product: every tile is dot products, nothing else is emitted
  const GemmEpiloguePrefetch& epi_prefetch_;
  llvm::Type* t_;
  llvm::FixedVectorType* vt_;
  Value *a_, *bp_, *kc_, *a_rs_, *a_ks_, *b_ks_, *batch_, *i_, *j_, *rows_, *cols_, *partial_, *ldp_, *flags_;
  std::vector<llvm::AllocaInst*> acc_;
  llvm::AllocaInst* tile_;
};

}  // namespace

void emit_gemm_tile(llvm::IRBuilderBase& b, llvm::Function* fn, Value* tile, ScalarType dt, const GemmShape& s,
                    const GemmEpilogue& epilogue, const GemmOperandOp& operand_op, std::array<bool, 2> fused,
                    bool dot, const GemmEpiloguePrefetch& epilogue_prefetch) {
  TileEmitter(b, fn, tile, dt, s, epilogue, operand_op, fused, dot, epilogue_prefetch).emit();
}

bool gemm_dot_product(const ir::Kernel& k, const GemmShape& s, const ir::SizeArgs* sizes) {
  const ir::Contraction& c = *k.contraction;
  const int n = k.loop.n;
  // A lifted M or N is unknown to the code: the general tile, which serves every shape.
  if (sizes && (sizes->lifted_loop(n - 2) || sizes->lifted_loop(n - 1) || sizes->k != ir::SizeArgs::kFixed)) return false;
  const int64_t m = k.loop[n - 2], cols = k.loop[n - 1], b_n = k.accesses[c.b].strides[n - 1];
  const bool short_or_narrow = m < s.mr || (cols < s.nr && c.k >= 2 * s.lanes);
  return short_or_narrow && c.k > 0 && c.b_k == 1 && b_n != 1 && !c.fused_operand(1) &&
         (c.fused_operand(0) || c.a_k == 1);
}

}  // namespace loom::jit::llvm_cpu
