#include <softneuro/npy.hpp>
#include <softneuro/error.hpp>

#include "core/dnn_file.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

namespace softneuro {
namespace {

struct Descr {
  const char* text;
  DType dtype;
};
constexpr Descr kDescrs[] = {{"<f4", DType::float32}, {"<f2", DType::float16}, {"|i1", DType::qint8},
                             {"|u1", DType::quint8},  {"<i4", DType::int32},   {"<i8", DType::int64}};

// The value text after 'key': in the header dict, up to the matching delimiter.
std::string dict_value(const std::string& header, const std::string& key, const std::string& file) {
  auto k = header.find("'" + key + "'");
  if (k == std::string::npos) throw Error(fmt::format("npy header lacks '{}'", key), file, {}, key);
  auto colon = header.find(':', k);
  if (colon == std::string::npos) throw Error("malformed npy header", file, {}, key);
  std::size_t b = header.find_first_not_of(' ', colon + 1);
  if (b == std::string::npos) throw Error("malformed npy header", file, {}, key);
  if (header[b] == '(') {
    auto e = header.find(')', b);
    if (e == std::string::npos) throw Error("malformed npy shape", file, {}, key);
    return header.substr(b + 1, e - b - 1);
  }
  if (header[b] == '\'') {
    auto e = header.find('\'', b + 1);
    if (e == std::string::npos) throw Error("malformed npy header", file, {}, key);
    return header.substr(b + 1, e - b - 1);
  }
  auto e = header.find_first_of(",}", b);
  return header.substr(b, e - b);
}

}  // namespace

Blob load_npy(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot open", path);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (bytes.size() < 10 || std::memcmp(bytes.data(), "\x93NUMPY", 6) != 0) throw Error("not a .npy file", path);
  int major = static_cast<unsigned char>(bytes[6]);
  std::size_t header_len, start;
  if (major == 1) {
    header_len = static_cast<unsigned char>(bytes[8]) | (static_cast<unsigned char>(bytes[9]) << 8);
    start = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) throw Error("truncated .npy header", path);
    uint32_t n;
    std::memcpy(&n, bytes.data() + 8, 4);
    header_len = n;
    start = 12;
  } else {
    throw Error(fmt::format("unsupported .npy version {}", major), path);
  }
  if (start + header_len > bytes.size()) throw Error("truncated .npy header", path);
  std::string header(bytes.data() + start, header_len);
  std::string descr = dict_value(header, "descr", path);
  if (dict_value(header, "fortran_order", path).find("True") != std::string::npos)
    throw Error("Fortran-ordered arrays are not supported; save with np.ascontiguousarray", path, {}, "fortran_order");
  const Descr* d = nullptr;
  for (const auto& c : kDescrs)
    if (descr == c.text || (descr.size() == 3 && descr[0] == '=' && descr.substr(1) == std::string(c.text).substr(1))) d = &c;
  if (!d) throw Error(fmt::format("unsupported dtype '{}' (float32, float16, int8, uint8, int32, int64)", descr), path, {}, "descr");
  Shape shape;
  std::string dims = dict_value(header, "shape", path);
  std::size_t p = 0;
  while (p < dims.size()) {
    while (p < dims.size() && (dims[p] == ' ' || dims[p] == ',')) ++p;
    if (p >= dims.size()) break;
    std::size_t used = 0;
    long long v;
    try {
      v = std::stoll(dims.substr(p), &used);
    } catch (...) {
      throw Error(fmt::format("malformed shape '({})'", dims), path, {}, "shape");
    }
    if (v < 0) throw Error("negative dim", path, {}, "shape");
    shape.push_back(v);
    p += used;
  }
  Blob b = Blob::allocate(shape, d->dtype);
  std::size_t data_start = start + header_len;
  if (bytes.size() - data_start < b.byte_size())
    throw Error(fmt::format("truncated: {} data bytes for shape {} need {}", bytes.size() - data_start, shape.to_string(), b.byte_size()), path);
  if (b.byte_size()) std::memcpy(b.data(), bytes.data() + data_start, b.byte_size());
  return b;
}

void save_npy(const std::string& path, const Blob& blob) {
  if (blob.layout() != Layout::nchw || blob.device() != Device::cpu)
    throw Error("only CPU blobs in nchw layout can be saved as .npy", path);
  const char* descr = nullptr;
  for (const auto& c : kDescrs)
    if (c.dtype == blob.dtype()) descr = c.text;
  if (!descr) throw Error(fmt::format("dtype {} has no .npy equivalent", to_string(blob.dtype())), path);
  const Shape& s = blob.shape();
  std::string dims = s.rank() == 1 ? fmt::format("{},", s[0]) : fmt::format("{}", fmt::join(s.begin(), s.end(), ", "));
  std::string header = fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': ({}), }}", descr, dims);
  std::size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header.push_back('\n');
  std::vector<char> out(10);
  std::memcpy(out.data(), "\x93NUMPY\x01\x00", 8);
  out[8] = static_cast<char>(header.size() & 0xff);
  out[9] = static_cast<char>(header.size() >> 8);
  out.insert(out.end(), header.begin(), header.end());
  const auto* p = static_cast<const char*>(blob.data());
  out.insert(out.end(), p, p + blob.byte_size());
  core::write_file_atomically(path, out.data(), out.size());
}

std::vector<std::vector<NamedBlob>> load_samples(const std::string& dir, const std::string& input_name,
                                                 std::size_t max_samples) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw Error("not a folder of samples", dir);
  std::vector<std::string> files;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->path().extension() != ".npy" || !it->is_regular_file(ec)) continue;
    if (files.size() == max_samples)
      throw Error(fmt::format("more than {} .npy samples; give a smaller folder", max_samples), dir);
    files.push_back(it->path().string());
  }
  if (ec) throw Error(fmt::format("cannot list the folder: {}", ec.message()), dir);
  if (files.empty()) throw Error("no .npy samples in the folder", dir);
  std::sort(files.begin(), files.end());
  std::vector<std::vector<NamedBlob>> out;
  for (const auto& f : files) {
    Blob b = load_npy(f);
    if (b.dtype() != DType::float32)
      throw Error(fmt::format("a sample of input '{}' must be float32, the file holds {}", input_name, to_string(b.dtype())), f);
    out.push_back({{input_name, b}});
  }
  return out;
}

}  // namespace softneuro
