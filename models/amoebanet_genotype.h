// AmoebaNet's cells on paper, for models/amoebanet.cc alone: the D and B
// genotypes (each node's two ops and inputs), the channel plan of every
// cell (plan_cells) and the parameter count that plan gives, so the builder
// and amoebanet_parameter_count share one plan and the count is exact
// without allocating anything.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "models/amoebanet.h"

namespace gpipe::models {
namespace {

// --- genotype ---------------------------------------------------------------

enum class OpKind {
  kConv1x1,
  kConv3x3,
  kConv1x7_7x1,
  kAvgPool3x3,
  kMaxPool3x3,
  kMaxPool2x2,
  kNone,
  kSep3x3x2,     // AmoebaNet-B: (ReLU, separable 3x3, BN) twice
  kDilSep5x5x2,  // AmoebaNet-B: (ReLU, separable 5x5 dilated 2, BN) twice
};

struct Gene {
  int input;  // index into the cell's states (0: prev, 1: prev_prev, k >= 2: node k)
  OpKind op;
};
struct NodeGenes {
  Gene a, b;
};
struct Genotype {
  std::array<NodeGenes, 5> nodes;  // nodes 2..6
  std::vector<int> concat;         // states concatenated into the cell's output
};

const Genotype& genotype_b(bool reduction) {
  using enum OpKind;
  static const Genotype normal{{{{{1, kConv1x1}, {1, kMaxPool3x3}},
                                 {{1, kNone}, {0, kSep3x3x2}},
                                 {{1, kConv1x1}, {0, kSep3x3x2}},
                                 {{2, kConv1x1}, {2, kNone}},
                                 {{1, kAvgPool3x3}, {5, kConv1x1}}}},
                               {0, 3, 4, 6}};
  static const Genotype reduce{{{{{0, kMaxPool2x2}, {0, kMaxPool3x3}},
                                 {{2, kNone}, {1, kConv3x3}},
                                 {{2, kDilSep5x5x2}, {2, kMaxPool3x3}},
                                 {{3, kNone}, {1, kSep3x3x2}},
                                 {{4, kAvgPool3x3}, {3, kConv1x1}}}},
                               {5, 6}};
  return reduction ? reduce : normal;
}

const Genotype& genotype(bool reduction, AmoebaNetGenotype which = AmoebaNetGenotype::kD) {
  if (which == AmoebaNetGenotype::kB) return genotype_b(reduction);
  using enum OpKind;
  static const Genotype normal{{{{{1, kConv1x1}, {1, kMaxPool3x3}},
                                 {{1, kNone}, {0, kConv1x7_7x1}},
                                 {{0, kConv1x1}, {0, kConv1x7_7x1}},
                                 {{2, kMaxPool3x3}, {2, kNone}},
                                 {{1, kAvgPool3x3}, {5, kConv1x1}}}},
                               {0, 3, 4, 6}};
  static const Genotype reduce{{{{{0, kMaxPool2x2}, {0, kMaxPool3x3}},
                                 {{2, kNone}, {1, kConv3x3}},
                                 {{2, kConv1x7_7x1}, {2, kMaxPool3x3}},
                                 {{3, kNone}, {1, kMaxPool2x2}},
                                 {{2, kAvgPool3x3}, {3, kConv1x1}}}},
                               {4, 5, 6}};
  return reduction ? reduce : normal;
}

// In a reduction cell the ops reading the cell inputs (states 0 and 1) halve the size.
int64_t op_stride(bool reduction, const Gene& g) { return reduction && g.input < 2 ? 2 : 1; }

// --- channel plan -------------------------------------------------------------

struct CellPlan {
  int64_t c_pp, c_p, c;  // channels of prev_prev, of prev, of each state
  bool reduction, reduction_prev;
  AmoebaNetGenotype genotype;
  const Genotype& genes() const { return gpipe::models::genotype(reduction, genotype); }
};

struct NetPlan {
  int64_t stem_channels = 0;
  std::vector<CellPlan> cells;
  int64_t out_channels = 0;  // of the last cell, the classifier's input
};

NetPlan plan_cells(const AmoebaNetConfig& c) {
  GPIPE_CHECK(c.num_normal_cells >= 0, "amoebanet: num_normal_cells (N) must be >= 0, got ",
              c.num_normal_cells);
  GPIPE_CHECK(c.filters >= 8,
              "amoebanet: filters (F) must be >= 8 (the narrowest op has F / 8 channels), got ",
              c.filters);
  GPIPE_CHECK(c.in_channels >= 1, "amoebanet: in_channels must be >= 1, got ", c.in_channels);
  GPIPE_CHECK(c.num_classes >= 1, "amoebanet: num_classes must be >= 1, got ", c.num_classes);
  NetPlan p;
  // The normal cells have C = F, 2F, 4F in both layouts: the paper's reaches
  // F through two stem reduction cells from a stem of F / 4 channels.
  p.stem_channels = c.small_input ? c.filters : c.filters / 4;
  int64_t ch = p.stem_channels, c_pp = ch, c_p = ch;
  bool reduction_prev = false;
  auto add = [&](bool reduction) {
    if (reduction) ch *= 2;
    p.cells.push_back({c_pp, c_p, ch, reduction, reduction_prev, c.genotype});
    c_pp = c_p;
    c_p = ch * static_cast<int64_t>(genotype(reduction, c.genotype).concat.size());
    reduction_prev = reduction;
  };
  auto add_normal = [&] {
    for (int64_t i = 0; i < c.num_normal_cells; ++i) add(false);
  };
  if (!c.small_input) {
    add(true);  // the two stem reduction cells
    add(true);
  }
  add_normal();
  add(true);
  add_normal();
  add(true);
  add_normal();
  p.out_channels = c_p;
  return p;
}

// --- parameter count (mirrors the constructors below) -------------------------

int64_t rcb_params(int64_t cin, int64_t cout, int64_t taps) { return cin * cout * taps + 2 * cout; }
int64_t factorized_reduce_params(int64_t cin, int64_t cout) {
  return 2 * cin * (cout / 2) + 2 * cout;
}

int64_t op_params(OpKind op, int64_t ch, int64_t stride) {
  const int64_t q = ch / 4;
  switch (op) {
    case OpKind::kConv1x1:
      return rcb_params(ch, ch, 1);
    case OpKind::kConv3x3:
      return rcb_params(ch, q, 1) + rcb_params(q, q, 9) + rcb_params(q, ch, 1);
    case OpKind::kConv1x7_7x1:
      return rcb_params(ch, q, 1) + 2 * rcb_params(q, q, 7) + rcb_params(q, ch, 1);
    case OpKind::kNone:
      return stride == 1 ? 0 : factorized_reduce_params(ch, ch);
    case OpKind::kSep3x3x2:
      return 2 * (ch * 9 + ch * ch + 2 * ch);
    case OpKind::kDilSep5x5x2:
      return 2 * (ch * 25 + ch * ch + 2 * ch);
    default:
      return 0;  // pooling
  }
}

int64_t cell_params(const CellPlan& p) {
  int64_t n = rcb_params(p.c_p, p.c, 1);
  if (p.reduction_prev)
    n += factorized_reduce_params(p.c_pp, p.c);
  else if (p.c_pp != p.c)
    n += rcb_params(p.c_pp, p.c, 1);
  for (const NodeGenes& g : p.genes().nodes)
    n += op_params(g.a.op, p.c, op_stride(p.reduction, g.a)) +
         op_params(g.b.op, p.c, op_stride(p.reduction, g.b));
  return n;
}

}  // namespace
}  // namespace gpipe::models
