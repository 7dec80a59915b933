// ONNX import: Gemm, MatMul and Einsum.
#include "import/onnx/importer.hpp"
#include "core/weight_quant.hpp"

namespace softneuro {
namespace onnx_import {

void Importer::gemm(const Node& n) {
  const double alpha = n.get_float("alpha", 1.0), beta = n.get_float("beta", 1.0);
  const bool trans_a = n.get_int("transA", 0) != 0, trans_b = n.get_int("transB", 0) != 0;
  if (shape_of(n, n.in(0)).rank() != 2 || shape_of(n, n.in(1)).rank() != 2) throw n.error("Gemm takes 2-D A and B", "input");
  std::string a = input(n, 0);
  if (trans_a) {
    std::string t = fresh_blob(n.out(0) + "/a_t");
    add_unary(n, "transpose", a, t, {{"perm", std::vector<int64_t>{1, 0}}}, "transpose_a");
    a = t;
  }
  const std::string y = n.out(0);
  const Blob* b = constant(n.in(1));
  const Blob* c = n.has_in(2) ? constant(n.in(2)) : nullptr;
  if (b) {
    // y = alpha * a * B' + beta * C as a dense layer: weight [N,K] = alpha * B' transposed.
    Blob w = trans_b ? to_float(*b) : transposed(to_float(*b), {1, 0});
    if (alpha != 1.0) w = binary(BinaryOp::mul, w, float_blob({}, {static_cast<float>(alpha)}));
    const int64_t nn = w.shape()[0];
    // C folds into the bias when it is one row ([N], [1,N], or a scalar).
    const bool row = c && c->shape().rank() <= 2 && (c->numel() == 1 || (c->numel() == nn && c->shape()[c->shape().rank() - 1] == nn));
    const bool add_after = n.has_in(2) && !row;
    Layer d = make("dense", n.name, {a}, {add_after ? fresh_blob(y + "/matmul") : y});
    d.weights["weight"] = w;
    if (row)  // [N], [1,N] or a scalar: broadcast to [1,N] at most, then [N]
      d.weights["bias"] = reshaped(expanded(binary(BinaryOp::mul, to_float(*c), float_blob({}, {static_cast<float>(beta)})), Shape{nn}), Shape{nn});
    const std::string product = d.outputs[0];
    add(std::move(d));
    if (!add_after) return;
    std::string cb = input(n, 2);
    if (beta != 1.0) {
      std::string scaled = fresh_blob(y + "/beta_c");
      Layer m = make("mul", n.name + "/beta", {cb, scalar_constant(n, y + "/beta", beta)}, {scaled});
      add(std::move(m));
      cb = scaled;
    }
    add(make("add", n.name + "/add_c", {product, cb}, {y}));
    return;
  }
  // B computed at run time: matmul, then the scalings and C as layers.
  std::string bb = input(n, 1);
  if (trans_b) {
    std::string t = fresh_blob(y + "/b_t");
    add_unary(n, "transpose", bb, t, {{"perm", std::vector<int64_t>{1, 0}}}, "transpose_b");
    bb = t;
  }
  std::string cur = (alpha != 1.0 || n.has_in(2)) ? fresh_blob(y + "/matmul") : y;
  add(make("matmul", n.name, {a, bb}, {cur}));
  if (alpha != 1.0) {
    std::string next = n.has_in(2) ? fresh_blob(y + "/alpha_ab") : y;
    add(make("mul", n.name + "/alpha", {cur, scalar_constant(n, y + "/alpha", alpha)}, {next}));
    cur = next;
  }
  if (n.has_in(2)) {
    std::string cb = input(n, 2);
    if (beta != 1.0) {
      std::string scaled = fresh_blob(y + "/beta_c");
      add(make("mul", n.name + "/beta", {cb, scalar_constant(n, y + "/beta", beta)}, {scaled}));
      cb = scaled;
    }
    add(make("add", n.name + "/add_c", {cur, cb}, {y}));
  }
}

// A blocked DequantizeLinear's codes [K, N] in blocks along K (axis 0, as
// ONNX Runtime's weight-only quantizer writes them for a MatMul) as a dense
// weight [N, K] in blocks along K: codes and scales transposed. Nothing for
// blocks along N.
std::optional<Blob> Importer::blockwise_weight(const Blob& codes) {
  const QuantParams& q = codes.quant();
  if (q.axis != 0 || q.block_size <= 0) return std::nullopt;
  const int64_t K = codes.shape()[0], N = codes.shape()[1], blocks = K == 0 ? 0 : (K - 1) / q.block_size + 1;
  Blob w = Blob::allocate(Shape{N, K}, codes.dtype());
  for (int64_t k = 0; k < K; ++k)
    for (int64_t o = 0; o < N; ++o) w.data_as<uint8_t>()[o * K + k] = codes.data_as<uint8_t>()[k * N + o];
  QuantParams& t = w.quant();
  t.axis = 1;
  t.block_size = q.block_size;
  t.scales.resize(q.scales.size());
  if (!q.zero_points.empty()) t.zero_points.resize(q.zero_points.size());
  for (int64_t b = 0; b < blocks; ++b)
    for (int64_t o = 0; o < N; ++o) {
      t.scales[static_cast<std::size_t>(o * blocks + b)] = q.scales[static_cast<std::size_t>(b * N + o)];
      if (!q.zero_points.empty()) t.zero_points[static_cast<std::size_t>(o * blocks + b)] = q.zero_points[static_cast<std::size_t>(b * N + o)];
    }
  if (!core::block_quantized(w)) return std::nullopt;
  try {
    core::check_weight_quant(w, "weight");
  } catch (const Error&) {
    return std::nullopt;  // (its float32 values are what the model computes)
  }
  if (auto packed = core::packed_codes4(w)) return packed;  // int4 and uint4 codes two a byte
  return w;
}

void Importer::matmul(const Node& n) {
  // (A value computed from sizes, an eye of the sequence's length, is no weight: a matmul reads it.)
  const Blob* b = size_dependent(n.in(1)) ? nullptr : constant(n.in(1));
  // A constant 2-D right operand is a weight: dense computes [...,K] x [K,N] with weight [N,K].
  if (b && b->shape().rank() == 2 && !constant(n.in(0)) && shape_of(n, n.in(0)).rank() >= 1) {
    Layer d = make("dense", n.name, {input(n, 0)}, {n.out(0)});
    std::optional<Blob> blockwise;
    if (auto codes = blocked_codes_.find(n.in(1)); codes != blocked_codes_.end()) blockwise = blockwise_weight(codes->second);
    d.weights["weight"] = blockwise ? std::move(*blockwise) : transposed(to_float(*b), {1, 0});
    add(std::move(d));
    return;
  }
  add(make("matmul", n.name, {input(n, 0), input(n, 1)}, {n.out(0)}));
}

void Importer::einsum(const Node& n) {
  // The batched matrix products attention blocks write as Einsum
  // ("bhid,bhjd->bhij", "...ij,...jk->...ik"): a matmul, with the operands'
  // last two dims swapped where the equation says so. Other equations: an einsum layer.
  std::string eq;
  for (char ch : n.get_string("equation"))
    if (ch != ' ') eq += ch;
  const auto comma = eq.find(','), arrow = eq.find("->");
  if (n.num_inputs() != 2 || comma == std::string::npos || arrow == std::string::npos || arrow < comma)
    return general_einsum(n, eq);
  std::string a = eq.substr(0, comma), b = eq.substr(comma + 1, arrow - comma - 1), c = eq.substr(arrow + 2);
  auto strip_ellipsis = [](std::string& t) {
    if (t.rfind("...", 0) != 0) return false;
    t = t.substr(3);
    return true;
  };
  const bool ea = strip_ellipsis(a), eb = strip_ellipsis(b), ec = strip_ellipsis(c);
  const std::size_t r = c.size();
  const bool shapes_fit = ea == eb && eb == ec && a.size() == r && b.size() == r && r >= 2 &&
                          a.compare(0, r - 2, c, 0, r - 2) == 0 && b.compare(0, r - 2, c, 0, r - 2) == 0;
  const std::string a2 = shapes_fit ? a.substr(r - 2) : "", b2 = shapes_fit ? b.substr(r - 2) : "", c2 = shapes_fit ? c.substr(r - 2) : "";
  // c2 = "ij": i from a2, j from b2, the contracted k in both and not in c2.
  const bool product = shapes_fit && a2[0] != a2[1] && b2[0] != b2[1] && c2[0] != c2[1] &&
                       a2.find(c2[0]) != std::string::npos && b2.find(c2[1]) != std::string::npos;
  const char k = product ? a2[a2[0] == c2[0] ? 1 : 0] : 0;
  if (!product || b2.find(k) == std::string::npos || c2.find(k) != std::string::npos) return general_einsum(n, eq);
  auto operand = [&](int idx, bool transpose, const char* which) {
    std::string x = input(n, idx);
    if (!transpose) return x;
    const auto rank = static_cast<std::size_t>(shape_of(n, x).rank());
    if (rank < 2) throw n.error("Einsum operand of rank < 2", "equation");
    std::vector<int64_t> swap_last(rank);
    std::iota(swap_last.begin(), swap_last.end(), 0);
    std::swap(swap_last[rank - 1], swap_last[rank - 2]);
    std::string t = fresh_blob(fmt::format("{}/{}_t", n.out(0), which));
    add_unary(n, "transpose", x, t, {{"perm", swap_last}}, std::string("transpose_") + which);
    return t;
  };
  const std::string lhs = operand(0, a2[1] != k, "a");  // wants [.., i, k]
  const std::string rhs = operand(1, b2[0] != k, "b");  // wants [.., k, j]
  add(make("matmul", n.name, {lhs, rhs}, {n.out(0)}));
}

// Any Einsum as an einsum layer (cpu/ref): the equation spelled out with
// letters only, ellipses as letters the equation does not use (right-aligned
// across the operands, as NumPy broadcasts them), an implicit output as NumPy
// makes it (the ellipsis, then the letters used once, in alphabetical order).
void Importer::general_einsum(const Node& n, const std::string& eq) {
  if (n.num_inputs() < 1 || n.num_inputs() > 8) throw Unsupported{fmt::format("Einsum of {} operands (1 to 8)", n.num_inputs())};
  const auto arrow = eq.find("->");
  std::vector<std::string> ops;
  std::string cur;
  for (char c : eq.substr(0, arrow) + ",") {
    if (c == ',') ops.push_back(cur), cur.clear();
    else cur += c;
  }
  if (static_cast<int>(ops.size()) != n.num_inputs())
    throw n.error(fmt::format("equation '{}' has {} operands for {} inputs", eq, ops.size(), n.num_inputs()), "equation");
  std::string spare;  // letters free for the ellipsis
  for (char c = 'A'; c <= 'Z'; ++c)
    if (eq.find(c) == std::string::npos) spare += c;
  int ellipsis_rank = 0;
  std::vector<int> op_ellipsis(ops.size(), -1);
  for (std::size_t k = 0; k < ops.size(); ++k) {
    const auto dots = ops[k].find("...");
    if (dots == std::string::npos) continue;
    const int rank = shape_of(n, n.in(static_cast<int>(k))).rank();
    const int named = static_cast<int>(ops[k].size()) - 3;
    if (rank < named) throw n.error(fmt::format("operand {} '{}' names more dims than its rank {}", k, ops[k], rank), "equation");
    op_ellipsis[k] = rank - named;
    ellipsis_rank = std::max(ellipsis_rank, rank - named);
  }
  if (ellipsis_rank > static_cast<int>(spare.size())) throw n.error("too many dims under '...'", "equation");
  const std::string all_dots = spare.substr(0, static_cast<std::size_t>(ellipsis_rank));
  for (std::size_t k = 0; k < ops.size(); ++k)
    if (op_ellipsis[k] >= 0)
      ops[k].replace(ops[k].find("..."), 3, all_dots.substr(all_dots.size() - static_cast<std::size_t>(op_ellipsis[k])));
  std::string out;
  if (arrow != std::string::npos) {
    out = eq.substr(arrow + 2);
    if (const auto dots = out.find("..."); dots != std::string::npos) out.replace(dots, 3, all_dots);
  } else {
    std::map<char, int> uses;
    for (const auto& o : ops)
      for (char c : o) ++uses[c];
    out = all_dots;
    for (const auto& [c, count] : uses)  // map order: alphabetical (upper case first, as NumPy's)
      if (count == 1 && all_dots.find(c) == std::string::npos) out += c;
  }
  std::string spelled;
  for (std::size_t k = 0; k < ops.size(); ++k) spelled += (k ? "," : "") + ops[k];
  spelled += "->" + out;
  std::vector<std::string> inputs;
  for (int k = 0; k < n.num_inputs(); ++k) inputs.push_back(input(n, k));
  Layer l = make("einsum", n.name, inputs, {n.out(0)});
  l.params["equation"] = spelled;
  add(std::move(l));
}

}  // namespace onnx_import
}  // namespace softneuro
