#include "core/tensor_math.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <cstdlib>
#include <limits>
#include <type_traits>

namespace softneuro::core {

/// A 64-byte aligned blob left uninitialised: Blob::allocate zero-fills, which
/// for hundreds of MB of weights about to be overwritten is wasted time.
Blob uninitialized_blob(const Shape& shape, DType dtype) {
  const std::size_t bytes = std::max<std::size_t>(64, (storage_bytes(shape, dtype, Layout::nchw) + 63) / 64 * 64);
  void* p = std::aligned_alloc(64, bytes);
  if (!p) throw Error(fmt::format("out of memory allocating {} bytes", bytes));
  std::shared_ptr<const void> owner(p, [](const void* q) { std::free(const_cast<void*>(q)); });
  return Blob::view(std::move(owner), p, shape, dtype);
}

namespace {

void contiguous_strides(const Shape& s, int64_t* st) {
  int64_t v = 1;
  for (int d = s.rank() - 1; d >= 0; --d) {
    st[d] = v;
    v *= s[d];
  }
}

/// Calls f(T{}) with T = int64_t or float by the blob's dtype. A blob of bytes
/// (an importer's MatMulNBits codes) is no constant these compute with: read as
/// float it would be read past its end.
template <class F>
decltype(auto) by_dtype(DType d, F&& f) {
  if (d == DType::int64) return f(int64_t{});
  if (d == DType::uint8 || d == DType::int8 || d == DType::quint8 || d == DType::qint8)
    throw Error(fmt::format("a {} tensor where float32 or int64 values are computed with", to_string(d)));
  return f(float{});
}

/// Offsets into a blob of shape `from` broadcast to `to` (stride 0 on broadcast dims).
void broadcast_strides(const Shape& from, const Shape& to, int64_t* st) {
  int64_t c[Shape::max_rank];
  contiguous_strides(from, c);
  for (int d = 0; d < to.rank(); ++d) {
    const int fd = d - (to.rank() - from.rank());
    st[d] = (fd >= 0 && from[fd] != 1) ? c[fd] : 0;
  }
}

/// For each linear index of `out`, the offset sum(coord_d * strides[d]).
template <class F>
void for_each_offset(const Shape& out, const int64_t* strides, F&& f) {
  const int64_t n = out.numel();
  if (n == 0) return;
  // An odometer over the coordinates: no division per element (a decoder's
  // [1,4,44,64] cache index expanded at each new length: 115 us with two a dim).
  int64_t at[Shape::max_rank] = {};
  int64_t off = 0;
  for (int64_t i = 0; i < n; ++i) {
    f(i, off);
    for (int d = out.rank() - 1; d >= 0; --d) {
      off += strides[d];
      if (++at[d] < out[d]) break;
      off -= strides[d] * out[d];
      at[d] = 0;
    }
  }
}

}  // namespace

Blob int_blob(const Shape& shape, const std::vector<int64_t>& values) {
  Blob b = Blob::allocate(shape, DType::int64);
  std::copy(values.begin(), values.end(), b.data_as<int64_t>());
  return b;
}

Blob float_blob(const Shape& shape, const std::vector<float>& values) {
  Blob b = Blob::allocate(shape);
  std::copy(values.begin(), values.end(), b.data_as<float>());
  return b;
}

namespace {

/// A float constant as an integer (truncated, as ONNX's Cast): an Error where
/// it has none (NaN, infinite, beyond int64), never undefined behaviour.
template <class D, class S>
D to_int_type(S v) {
  if constexpr (std::is_floating_point_v<S> && std::is_integral_v<D>) {
    if (!(v > -9223372036854775808.0f && v < 9223372036854775808.0f))
      throw Error(fmt::format("constant value {} has no int64 value", v));
  }
  return static_cast<D>(v);
}

}  // namespace

std::vector<int64_t> to_ints(const Blob& b) {
  return by_dtype(b.dtype(), [&](auto t) {
    using T = decltype(t);
    const T* p = b.data_as<T>();
    std::vector<int64_t> v(static_cast<std::size_t>(b.numel()));
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = to_int_type<int64_t>(p[i]);
    return v;
  });
}

std::vector<double> to_doubles(const Blob& b) {
  return by_dtype(b.dtype(), [&](auto t) {
    using T = decltype(t);
    const T* p = b.data_as<T>();
    return std::vector<double>(p, p + b.numel());
  });
}

Blob cast_to(const Blob& b, DType dtype) {
  if (b.dtype() == dtype) return b;
  Blob out = Blob::allocate(b.shape(), dtype);
  by_dtype(b.dtype(), [&](auto s) {
    using S = decltype(s);
    by_dtype(dtype, [&](auto d) {
      using D = decltype(d);
      std::transform(b.data_as<S>(), b.data_as<S>() + b.numel(), out.data_as<D>(), [](S v) { return to_int_type<D>(v); });
      return 0;
    });
    return 0;
  });
  return out;
}

Blob to_float(const Blob& b) { return cast_to(b, DType::float32); }

Blob reshaped(const Blob& b, const Shape& shape) {
  if (shape.numel() != b.numel())
    throw Error(fmt::format("cannot reshape {} into {}", b.shape().to_string(), shape.to_string()));
  Blob r = b;  // copies share memory: only the shape differs
  r.reshape(shape);
  return r;
}

Blob transposed(const Blob& b, const std::vector<int64_t>& perm) {
  const Shape& s = b.shape();
  if (static_cast<int>(perm.size()) != s.rank()) throw Error(fmt::format("perm has {} entries for rank {}", perm.size(), s.rank()));
  int64_t st[Shape::max_rank], ost[Shape::max_rank];
  contiguous_strides(s, st);
  Shape out;
  std::vector<bool> seen(perm.size());
  for (std::size_t d = 0; d < perm.size(); ++d) {
    const int64_t p = perm[d];
    if (p < 0 || p >= s.rank() || seen[static_cast<std::size_t>(p)]) throw Error("perm is not a permutation");
    seen[static_cast<std::size_t>(p)] = true;
    out.push_back(s[static_cast<int>(p)]);
    ost[d] = st[p];
  }
  Blob r = Blob::allocate(out, b.dtype());
  by_dtype(b.dtype(), [&](auto t) {
    using T = decltype(t);
    const T* x = b.data_as<T>();
    T* y = r.data_as<T>();
    if (s.rank() == 2 && perm[0] == 1) {  // a matrix (MatMul weights): cache-friendly tiles
      const int64_t rows = s[0], cols = s[1], tile = 64;
      for (int64_t i0 = 0; i0 < rows; i0 += tile)
        for (int64_t j0 = 0; j0 < cols; j0 += tile)
          for (int64_t i = i0; i < std::min(rows, i0 + tile); ++i)
            for (int64_t j = j0; j < std::min(cols, j0 + tile); ++j) y[j * rows + i] = x[i * cols + j];
    } else {
      for_each_offset(out, ost, [&](int64_t i, int64_t off) { y[i] = x[off]; });
    }
    return 0;
  });
  return r;
}

Blob concatenated(const std::vector<Blob>& parts, int axis) {
  if (parts.empty()) throw Error("concat of nothing");
  const Shape& first = parts[0].shape();
  const DType dtype = parts[0].dtype();
  if (axis < 0 || axis >= first.rank()) throw Error(fmt::format("axis {} out of range for rank {}", axis, first.rank()));
  Shape out = first;
  out[axis] = 0;
  for (const Blob& p : parts) {
    if (p.shape().rank() != first.rank() || p.dtype() != dtype) throw Error("concat inputs differ in rank or type");
    for (int d = 0; d < first.rank(); ++d)
      if (d != axis && p.shape()[d] != first[d])
        throw Error(fmt::format("concat inputs {} and {} differ off the axis", first.to_string(), p.shape().to_string()));
    out[axis] += p.shape()[axis];
  }
  int64_t outer = 1;
  for (int d = 0; d < axis; ++d) outer *= first[d];
  Blob r = Blob::allocate(out, dtype);
  by_dtype(dtype, [&](auto t) {
    using T = decltype(t);
    T* y = r.data_as<T>();
    for (int64_t o = 0; o < outer; ++o)
      for (const Blob& p : parts) {
        const int64_t chunk = outer ? p.numel() / outer : 0;
        y = std::copy_n(p.data_as<T>() + o * chunk, chunk, y);
      }
    return 0;
  });
  return r;
}

Blob gathered(const Blob& data, const Blob& indices, int axis) {
  const Shape& s = data.shape();
  if (axis < 0 || axis >= s.rank()) throw Error(fmt::format("axis {} out of range for rank {}", axis, s.rank()));
  Shape out;
  for (int d = 0; d < axis; ++d) out.push_back(s[d]);
  if (s.rank() - 1 + indices.shape().rank() > Shape::max_rank) throw Error("gather result has too many dims");
  for (auto d : indices.shape()) out.push_back(d);
  for (int d = axis + 1; d < s.rank(); ++d) out.push_back(s[d]);
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= s[d];
  for (int d = axis + 1; d < s.rank(); ++d) inner *= s[d];
  const int64_t len = s[axis];
  std::vector<int64_t> idx = to_ints(indices);
  for (auto& i : idx) {
    if (i < -len || i >= len) throw Error(fmt::format("index {} out of range for a dim of {}", i, len));
    if (i < 0) i += len;
  }
  Blob r = Blob::allocate(out, data.dtype());
  by_dtype(data.dtype(), [&](auto t) {
    using T = decltype(t);
    const T* x = data.data_as<T>();
    T* y = r.data_as<T>();
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i : idx) y = std::copy_n(x + (o * len + i) * inner, inner, y);
    return 0;
  });
  return r;
}

Blob sliced(const Blob& data, const std::vector<SliceAxis>& axes) {
  const Shape& s = data.shape();
  int64_t st[Shape::max_rank], start[Shape::max_rank] = {}, step[Shape::max_rank];
  contiguous_strides(s, st);
  Shape out = s;
  for (int d = 0; d < s.rank(); ++d) step[d] = 1;
  for (const auto& a : axes) {
    if (a.axis < 0 || a.axis >= s.rank() || a.step == 0) throw Error("invalid slice");
    start[a.axis] = a.start;
    step[a.axis] = a.step;
    const int64_t n = a.step > 0 ? (a.end - a.start + a.step - 1) / a.step : (a.start - a.end - a.step - 1) / -a.step;
    out[a.axis] = std::max<int64_t>(0, n);
  }
  int64_t ost[Shape::max_rank];
  int64_t base = 0;
  for (int d = 0; d < s.rank(); ++d) {
    ost[d] = st[d] * step[d];
    base += start[d] * st[d];
  }
  Blob r = Blob::allocate(out, data.dtype());
  by_dtype(data.dtype(), [&](auto t) {
    using T = decltype(t);
    const T* x = data.data_as<T>();
    T* y = r.data_as<T>();
    for_each_offset(out, ost, [&](int64_t i, int64_t off) { y[i] = x[base + off]; });
    return 0;
  });
  return r;
}

Shape broadcast(const Shape& a, const Shape& b) {
  const int rank = std::max(a.rank(), b.rank());
  Shape out;
  for (int i = 0; i < rank; ++i) {
    const int ia = i - (rank - a.rank()), ib = i - (rank - b.rank());
    const int64_t da = ia >= 0 ? a[ia] : 1, db = ib >= 0 ? b[ib] : 1;
    if (da != db && da != 1 && db != 1)
      throw Error(fmt::format("shapes {} and {} do not broadcast", a.to_string(), b.to_string()));
    out.push_back(da == 1 ? db : da);
  }
  return out;
}

void check_folded_growth(const Shape& shape, DType dtype, std::size_t from_bytes) {
  const std::size_t bytes = storage_bytes(shape, dtype, Layout::nchw);
  if (bytes > from_bytes && bytes > kMaxFoldedGrowthBytes)
    throw Error(fmt::format("folding it makes a constant {} of {} bytes from {} bytes; a folded constant may grow to "
                            "{} MiB at most",
                            shape.to_string(), bytes, from_bytes, kMaxFoldedGrowthBytes >> 20));
}

Blob expanded(const Blob& b, const Shape& shape) {
  const Shape out = broadcast(b.shape(), shape);
  check_folded_growth(out, b.dtype(), b.byte_size());
  int64_t st[Shape::max_rank];
  broadcast_strides(b.shape(), out, st);
  Blob r = Blob::allocate(out, b.dtype());
  by_dtype(b.dtype(), [&](auto t) {
    using T = decltype(t);
    const T* x = b.data_as<T>();
    T* y = r.data_as<T>();
    for_each_offset(out, st, [&](int64_t i, int64_t off) { y[i] = x[off]; });
    return 0;
  });
  return r;
}

namespace {

bool is_logic(BinaryOp op) {
  return op == BinaryOp::equal || op == BinaryOp::less || op == BinaryOp::greater || op == BinaryOp::logical_and ||
         op == BinaryOp::logical_or;
}

/// u ** v in int64, exact; an Error where the result does not fit. A negative
/// exponent truncates toward zero as ONNX Runtime's integer Pow does (1 and -1
/// stay themselves, any other base gives 0).
int64_t int_pow(int64_t u, int64_t v) {
  if (v < 0) {
    if (u == 0) throw Error("integer 0 to a negative power");
    return u == 1 ? 1 : u == -1 ? (v % 2 ? -1 : 1) : 0;
  }
  int64_t result = 1, base = u;
  for (int64_t e = v;;) {
    if ((e & 1) && __builtin_mul_overflow(result, base, &result))
      throw Error(fmt::format("int64 overflow: {} ** {}", u, v));
    e >>= 1;
    if (e == 0) break;
    if (__builtin_mul_overflow(base, base, &base)) throw Error(fmt::format("int64 overflow: {} ** {}", u, v));
  }
  return result;
}

/// One element of a binary op, in T (int64_t or double). int64 arithmetic is
/// checked: a result outside int64 is an Error (ONNX leaves it undefined),
/// INT64_MIN mod -1 is 0 as the spec's definition gives.
template <class T>
T apply_binary(BinaryOp op, T u, T v) {
  if constexpr (std::is_integral_v<T>) {
    T r{};
    auto overflow = [&](const char* sign) {
      return Error(fmt::format("int64 overflow: {} {} {}", u, sign, v));
    };
    switch (op) {
      case BinaryOp::add:
        if (__builtin_add_overflow(u, v, &r)) throw overflow("+");
        return r;
      case BinaryOp::sub:
        if (__builtin_sub_overflow(u, v, &r)) throw overflow("-");
        return r;
      case BinaryOp::mul:
        if (__builtin_mul_overflow(u, v, &r)) throw overflow("*");
        return r;
      case BinaryOp::div:
        if (v == 0) throw Error("integer division by zero");
        if (v == -1 && u == std::numeric_limits<T>::min()) throw overflow("/");
        return u / v;
      case BinaryOp::mod:
      case BinaryOp::fmod:
        if (v == 0) throw Error("integer division by zero");
        if (v == -1) return 0;  // INT64_MIN % -1 traps in hardware; every x mod -1 is 0
        r = u % v;
        if (op == BinaryOp::mod && r != 0 && ((r < 0) != (v < 0))) r += v;
        return r;
      case BinaryOp::pow: return int_pow(u, v);
      case BinaryOp::min: return std::min(u, v);
      case BinaryOp::max: return std::max(u, v);
      default: break;
    }
  } else {
    switch (op) {
      case BinaryOp::add: return u + v;
      case BinaryOp::sub: return u - v;
      case BinaryOp::mul: return u * v;
      case BinaryOp::div: return u / v;
      case BinaryOp::mod:
      case BinaryOp::fmod: {
        T r = std::fmod(u, v);
        if (op == BinaryOp::mod && r != 0 && ((r < 0) != (v < 0))) r += v;
        return r;
      }
      case BinaryOp::pow: return std::pow(u, v);
      case BinaryOp::min: return u != u || v != v ? u + v : std::min(u, v);  // NaN wins, as ONNX Min
      case BinaryOp::max: return u != u || v != v ? u + v : std::max(u, v);
      default: break;
    }
  }
  switch (op) {
    case BinaryOp::equal: return u == v;
    case BinaryOp::less: return u < v;
    case BinaryOp::greater: return u > v;
    case BinaryOp::logical_and: return u && v;
    case BinaryOp::logical_or: return u || v;
    default: return T{};
  }
}

}  // namespace

Blob binary(BinaryOp op, const Blob& a, const Blob& b) {
  const Shape out = broadcast(a.shape(), b.shape());
  const bool ints = a.dtype() == DType::int64 && b.dtype() == DType::int64;
  check_folded_growth(out, ints || is_logic(op) ? DType::int64 : DType::float32, a.byte_size() + b.byte_size());
  Blob r = Blob::allocate(out, ints || is_logic(op) ? DType::int64 : DType::float32);
  int64_t sa[Shape::max_rank], sb[Shape::max_rank];
  broadcast_strides(a.shape(), out, sa);
  broadcast_strides(b.shape(), out, sb);
  auto get = [](const Blob& x, int64_t off) -> double {
    return x.dtype() == DType::int64 ? static_cast<double>(x.data_as<int64_t>()[off]) : x.data_as<float>()[off];
  };
  // Walk the output once, keeping both operands' offsets (no per-element tables: weights can be large).
  const int rank = out.rank();
  int64_t coord[Shape::max_rank] = {}, oa = 0, ob = 0;
  for (int64_t i = 0; i < out.numel(); ++i) {
    if (ints) {
      r.data_as<int64_t>()[i] = apply_binary<int64_t>(op, a.data_as<int64_t>()[oa], b.data_as<int64_t>()[ob]);
    } else {
      const double z = apply_binary<double>(op, get(a, oa), get(b, ob));
      if (is_logic(op)) r.data_as<int64_t>()[i] = static_cast<int64_t>(z);
      else r.data_as<float>()[i] = static_cast<float>(z);
    }
    for (int d = rank - 1; d >= 0; --d) {  // next coordinate, odometer style
      oa += sa[d];
      ob += sb[d];
      if (++coord[d] < out[d]) break;
      oa -= sa[d] * out[d];
      ob -= sb[d] * out[d];
      coord[d] = 0;
    }
  }
  return r;
}

Blob unary(UnaryOp op, const Blob& a) {
  const DType dtype = op == UnaryOp::logical_not ? DType::int64 : a.dtype();
  Blob r = Blob::allocate(a.shape(), dtype);
  if (a.dtype() == DType::int64 && (op == UnaryOp::neg || op == UnaryOp::abs)) {
    // In int64 (a double holds 53 bits): -INT64_MIN does not fit.
    const int64_t* x = a.data_as<int64_t>();
    for (int64_t i = 0; i < a.numel(); ++i) {
      if (x[i] == std::numeric_limits<int64_t>::min() && (op == UnaryOp::neg || x[i] < 0))
        throw Error(fmt::format("int64 overflow: {} of {}", op == UnaryOp::neg ? "Neg" : "Abs", x[i]));
      r.data_as<int64_t>()[i] = op == UnaryOp::neg || x[i] < 0 ? -x[i] : x[i];
    }
    return r;
  }
  const std::vector<double> x = to_doubles(a);
  for (std::size_t i = 0; i < x.size(); ++i) {
    double v = x[i];
    switch (op) {
      case UnaryOp::neg: v = -v; break;
      case UnaryOp::abs: v = std::abs(v); break;
      case UnaryOp::sqrt: v = std::sqrt(v); break;
      case UnaryOp::floor: v = std::floor(v); break;
      case UnaryOp::ceil: v = std::ceil(v); break;
      case UnaryOp::logical_not: v = v == 0; break;
      case UnaryOp::relu: v = v > 0 ? v : (v == v ? 0.0 : v); break;  // (NaN stays)
    }
    if (dtype == DType::int64 && !(v >= -0x1p63 && v < 0x1p63))
      throw Error(fmt::format("the int64 result {} of element {} is not an int64", v, i));
    if (dtype == DType::int64) r.data_as<int64_t>()[i] = static_cast<int64_t>(v);
    else r.data_as<float>()[i] = static_cast<float>(v);
  }
  return r;
}

Blob scattered(const Blob& data, const Blob& indices, const Blob& updates) {
  const Shape& s = data.shape();
  const Shape& is = indices.shape();
  if (is.rank() < 1) throw Error("ScatterND indices need rank >= 1");
  const int k = static_cast<int>(is[is.rank() - 1]);
  if (k < 1 || k > s.rank()) throw Error(fmt::format("ScatterND index tuples of {} for data of rank {}", k, s.rank()));
  int64_t slice = 1;
  for (int d = k; d < s.rank(); ++d) slice *= s[d];
  const int64_t tuples = is.numel() / k;
  if (updates.numel() != tuples * slice) throw Error("ScatterND updates do not match the indices");
  int64_t st[Shape::max_rank];
  contiguous_strides(s, st);
  const std::vector<int64_t> idx = to_ints(indices);
  Blob r = cast_to(data, data.dtype()).clone();
  const Blob u = cast_to(updates, data.dtype());
  by_dtype(data.dtype(), [&](auto t) {
    using T = decltype(t);
    for (int64_t j = 0; j < tuples; ++j) {
      int64_t off = 0;
      for (int d = 0; d < k; ++d) {
        int64_t i = idx[static_cast<std::size_t>(j * k + d)];
        if (i < -s[d] || i >= s[d]) throw Error(fmt::format("ScatterND index {} out of range for a dim of {}", i, s[d]));
        off += (i < 0 ? i + s[d] : i) * st[d];
      }
      std::copy_n(u.data_as<T>() + j * slice, slice, r.data_as<T>() + off);
    }
    return 0;
  });
  return r;
}

Blob where(const Blob& cond, const Blob& a, const Blob& b) {
  const Shape out = broadcast(cond.shape(), broadcast(a.shape(), b.shape()));
  const Blob c = expanded(cond, out), x = expanded(a, out), y = expanded(b, out);
  const DType dtype = a.dtype() == DType::int64 && b.dtype() == DType::int64 ? DType::int64 : DType::float32;
  const Blob xs = cast_to(x, dtype), ys = cast_to(y, dtype);
  const std::vector<int64_t> cv = to_ints(c);
  Blob r = Blob::allocate(out, dtype);
  by_dtype(dtype, [&](auto t) {
    using T = decltype(t);
    for (std::size_t i = 0; i < cv.size(); ++i) r.data_as<T>()[i] = cv[i] ? xs.data_as<T>()[i] : ys.data_as<T>()[i];
    return 0;
  });
  return r;
}

Blob triangle(const Blob& x, int64_t k, bool upper) {
  const Shape& s = x.shape();
  if (s.rank() < 2) throw Error(fmt::format("input {} has fewer than 2 dims", s.to_string()));
  const int64_t rows = s[s.rank() - 2], cols = s[s.rank() - 1];
  Blob r = cast_to(x, x.dtype() == DType::int64 ? DType::int64 : DType::float32).clone();
  by_dtype(r.dtype(), [&](auto t) {
    using T = decltype(t);
    T* v = r.data_as<T>();
    const int64_t matrices = rows > 0 && cols > 0 ? r.numel() / (rows * cols) : 0;
    for (int64_t m = 0; m < matrices; ++m)
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < cols; ++j)
          if (upper ? j - i < k : j - i > k) v[(m * rows + i) * cols + j] = T{0};
    return 0;
  });
  return r;
}

Blob eye(const Shape& shape, int64_t k, DType dtype) {
  if (shape.rank() != 2) throw Error(fmt::format("shape {} is not 2-D", shape.to_string()));
  Blob r = Blob::allocate(shape, dtype);
  by_dtype(dtype, [&](auto t) {
    using T = decltype(t);
    T* v = r.data_as<T>();
    std::fill(v, v + r.numel(), T{0});
    for (int64_t i = 0; i < shape[0]; ++i)
      if (i + k >= 0 && i + k < shape[1]) v[i * shape[1] + i + k] = T{1};
    return 0;
  });
  return r;
}

Blob arange(const Blob& start, const Blob& limit, const Blob& delta, int64_t max_count) {
  if (start.numel() != 1 || limit.numel() != 1 || delta.numel() != 1) throw Error("start, limit and delta must be scalars");
  if (start.dtype() == DType::int64) {
    // In int64, exactly (a double holds 53 bits): the count in 128 bits, every element between start and limit.
    const int64_t first = to_ints(start)[0], last = to_ints(limit)[0], step = to_ints(delta)[0];
    if (step == 0) throw Error("delta 0");
    const __int128 span = static_cast<__int128>(last) - first;
    const __int128 length = span / step + (span % step != 0 && (span < 0) == (step < 0) ? 1 : 0);
    if (length > max_count) throw Error(fmt::format("a range of more than {} elements", max_count));
    const int64_t count = length > 0 ? static_cast<int64_t>(length) : 0;
    std::vector<int64_t> v(static_cast<std::size_t>(count));
    for (int64_t i = 0; i < count; ++i) v[static_cast<std::size_t>(i)] = static_cast<int64_t>(first + static_cast<__int128>(i) * step);
    return int_blob(Shape{count}, v);
  }
  const double first = to_doubles(start)[0], last = to_doubles(limit)[0], step = to_doubles(delta)[0];
  if (step == 0) throw Error("delta 0");
  const double length = std::ceil((last - first) / step);  // NaN for infinite bounds
  if (!(length <= double(max_count))) throw Error(fmt::format("a range of {} elements", length));
  const auto count = static_cast<int64_t>(std::max(0.0, length));
  std::vector<float> v(static_cast<std::size_t>(count));
  for (int64_t i = 0; i < count; ++i) v[static_cast<std::size_t>(i)] = static_cast<float>(first + static_cast<double>(i) * step);
  return float_blob(Shape{count}, v);
}

Blob window_values(std::string_view kind, int64_t size, bool periodic, bool integer) {
  if (size < 0 || size > (int64_t{1} << 24)) throw Error(fmt::format("size {} is outside 0..2^24", size), {}, {}, "size");
  if (kind != "hann" && kind != "hamming" && kind != "blackman") throw Error(fmt::format("unknown window '{}'", kind), {}, {}, "kind");
  const double last = periodic ? static_cast<double>(size) : static_cast<double>(size - 1);
  std::vector<float> w(static_cast<std::size_t>(size));
  for (int64_t i = 0; i < size; ++i) {
    const double t = 2 * std::numbers::pi * static_cast<double>(i) / last;
    const double v = kind == "hann"      ? std::pow(std::sin(std::numbers::pi * static_cast<double>(i) / last), 2)
                     : kind == "hamming" ? 25.0 / 46.0 - (1 - 25.0 / 46.0) * std::cos(t)
                                         : 0.42 - 0.5 * std::cos(t) + 0.08 * std::cos(2 * t);
    w[static_cast<std::size_t>(i)] = static_cast<float>(v);
  }
  if (!integer) return float_blob(Shape{size}, w);
  std::vector<int64_t> ints;
  for (float f : w) ints.push_back(static_cast<int64_t>(f));
  return int_blob(Shape{size}, ints);
}

}  // namespace softneuro::core
