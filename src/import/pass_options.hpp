// The graph passes ImportOptions asks for, the same for every importer.
#pragma once

#include "core/passes.hpp"

#include <softneuro/import.hpp>

namespace softneuro::import {

inline core::PassOptions pass_options(const ImportOptions& o) {
  core::PassOptions p;
  p.remove_identities = o.remove_identities;
  p.fold_constants = o.fold_constants;
  p.fold_dequantized_gather = o.fold_constants;  // constants too: the table's dequantisation
  p.fuse_dynamic_quant_dense = o.fold_constants;  // and a dense layer's (quantize_dynamic's)
  p.fold_pads = o.fold_pads;
  p.fold_batchnorm = o.fold_batchnorm;
  p.fold_scale_mul = o.fold_scale_mul;
  p.fold_bias_add = o.fold_bias_add;
  p.fold_input_affine = o.fold_input_affine;
  p.fuse_self_gating = o.fuse_self_gating;
  p.fuse_activations = o.fuse_activations;
  p.fuse_output_affine = o.fuse_output_affine;
  p.fuse_attention = o.fuse_attention;
  p.merge_duplicates = o.merge_duplicates;
  p.eliminate_dead_layers = o.eliminate_dead_layers;
  return p;
}

}  // namespace softneuro::import
