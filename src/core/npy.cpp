#include <softneuro/npy.hpp>
#include <softneuro/error.hpp>

#include "core/aligned_memory.hpp"
#include "core/dnn_file.hpp"

#include <fmt/format.h>
#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <unordered_set>
#include <vector>


namespace softneuro {
namespace {

struct Descr {
  const char* text;
  DType dtype;
};
// Read as the first entry of their text; written by dtype (the quantised types
// as their integers: a quantised blob's scale has no .npy field).
constexpr Descr kDescrs[] = {{"<f4", DType::float32}, {"<f2", DType::float16}, {"<f8", DType::float64},
                             {"|i1", DType::int8},    {"|u1", DType::uint8},   {"<i2", DType::int16},
                             {"<u2", DType::uint16},  {"<i4", DType::int32},   {"<u4", DType::uint32},
                             {"<i8", DType::int64},   {"<u8", DType::uint64},  {"|b1", DType::boolean},
                             {"|i1", DType::qint8},   {"|u1", DType::quint8},
                             // bfloat16: NumPy has none; ml_dtypes' arrays save as 2-byte voids
                             {"<V2", DType::bfloat16}, {"|V2", DType::bfloat16},
                             // the narrow types: 1-byte voids, whose type the reader must be told (load_npy)
                             {"|V1", DType::float8e4m3fn}, {"|V1", DType::float8e4m3fnuz}, {"|V1", DType::float8e5m2},
                             {"|V1", DType::float8e5m2fnuz}, {"|V1", DType::float8e8m0}, {"|V1", DType::float4e2m1},
                             {"|V1", DType::int4}, {"|V1", DType::uint4}, {"|V1", DType::int2}, {"|V1", DType::uint2}};

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


/// A .npy image in memory (`label` names it in errors: a file, or an archive member).
/// The data size the header claims is checked against the bytes there before anything is allocated.
Blob parse_npy(const unsigned char* bytes, std::size_t size, const std::string& label,
               std::optional<DType> narrow_type = std::nullopt) {
  if (size < 10 || std::memcmp(bytes, "\x93NUMPY", 6) != 0) throw Error("not a .npy file", label);
  int major = bytes[6];
  std::size_t header_len, start;
  if (major == 1) {
    header_len = bytes[8] | (bytes[9] << 8);
    start = 10;
  } else if (major == 2 || major == 3) {
    if (size < 12) throw Error("truncated .npy header", label);
    uint32_t n;
    std::memcpy(&n, bytes + 8, 4);
    header_len = n;
    start = 12;
  } else {
    throw Error(fmt::format("unsupported .npy version {}", major), label);
  }
  if (header_len > size - start) throw Error("truncated .npy header", label);
  std::string header(reinterpret_cast<const char*>(bytes) + start, header_len);
  std::string descr = dict_value(header, "descr", label);
  if (dict_value(header, "fortran_order", label).find("True") != std::string::npos)
    throw Error("Fortran-ordered arrays are not supported; save with np.ascontiguousarray", label, {}, "fortran_order");
  const Descr* d = nullptr;
  // ml_dtypes saves its narrow types as 1-byte voids (float8e5m2 as '<f1'): which one, only the caller knows.
  const bool one_byte = descr == "|V1" || descr == "<V1" || descr == "=V1" || descr == "<f1" || descr == "|f1";
  for (const auto& c : kDescrs)
    if (!d && (one_byte ? narrow_type && c.dtype == *narrow_type
                        : !is_narrow(c.dtype) && (descr == c.text || (descr.size() == 3 && descr[0] == '=' &&
                                                                      descr.substr(1) == std::string(c.text).substr(1)))))
      d = &c;
  if (!d && one_byte)
    throw Error(fmt::format("dtype '{}' is one of ml_dtypes' 1-byte types (float8, float4, int4, int2), read only where "
                            "the model's input says which",
                            descr),
                label, {}, "descr");
  if (!d) throw Error(fmt::format("unsupported dtype '{}' (float16/32/64, int8/16/32/64, uint8/16/32/64, bool; <V2 as bfloat16; "
                                  "1-byte voids as a narrow input's type)", descr), label, {}, "descr");
  Shape shape;
  std::string dims = dict_value(header, "shape", label);
  std::size_t p = 0;
  const std::size_t data_bytes = size - start - header_len;
  std::size_t need = dtype_size(d->dtype);  // bytes the shape claims so far (capped past what is there)
  bool empty = false;
  while (p < dims.size()) {
    while (p < dims.size() && (dims[p] == ' ' || dims[p] == ',')) ++p;
    if (p >= dims.size()) break;
    std::size_t used = 0;
    long long v;
    try {
      v = std::stoll(dims.substr(p), &used);
    } catch (...) {
      throw Error(fmt::format("malformed shape '({})'", dims), label, {}, "shape");
    }
    if (v < 0) throw Error("negative dim", label, {}, "shape");
    if (shape.rank() == Shape::max_rank) throw Error(fmt::format("rank exceeds the maximum {}", Shape::max_rank), label, {}, "shape");
    shape.push_back(v);
    empty = empty || v == 0;
    if (v > 0 && need > data_bytes / static_cast<std::size_t>(v)) need = data_bytes + 1;  // more than there is: stop growing
    else need *= static_cast<std::size_t>(v);
    p += used;
  }
  if (!empty && need > data_bytes)
    throw Error(fmt::format("truncated: {} data bytes, shape ({}) of {} needs more", data_bytes, dims, to_string(d->dtype)), label,
                {}, "shape");
  Blob b = Blob::allocate(shape, d->dtype);
  if (b.byte_size()) std::memcpy(b.data(), bytes + start + header_len, b.byte_size());
  return b;
}

/// A whole regular file's bytes (a FIFO or a device would block or never end).
std::vector<unsigned char> read_regular_file(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) throw Error(ec ? "cannot open" : "not a regular file", path);
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot open", path);
  return std::vector<unsigned char>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// ---------------------------------------------------------------------------
// .npz: a zip archive of .npy members (np.savez: stored; np.savez_compressed:
// deflated), read through its central directory, zip64 included (numpy writes
// zip64 extra fields).

uint64_t le(const unsigned char* p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

struct ZipMember {
  std::string name;
  uint16_t method = 0;
  uint32_t crc = 0;
  uint64_t compressed = 0, size = 0, local_offset = 0;
};

std::vector<ZipMember> zip_directory(const std::vector<unsigned char>& z, const std::string& path) {
  auto fail = [&](const std::string& why) -> Error { return Error(fmt::format("not a readable .npz (zip) archive: {}", why), path); };
  if (z.size() < 22) throw fail("too short");
  // The end of central directory record: its signature within the last 64 KiB + 22 bytes (a comment may follow it).
  std::size_t eocd = std::string::npos;
  for (std::size_t i = z.size() - 22 + 1; i-- > (z.size() > 65557 ? z.size() - 65557 : 0);)
    if (le(&z[i], 4) == 0x06054b50) {
      eocd = i;
      break;
    }
  if (eocd == std::string::npos) throw fail("no end of central directory");
  uint64_t entries = le(&z[eocd + 10], 2), cd_size = le(&z[eocd + 12], 4), cd_offset = le(&z[eocd + 16], 4);
  if ((entries == 0xffff || cd_offset == 0xffffffff || cd_size == 0xffffffff) && eocd >= 20 && le(&z[eocd - 20], 4) == 0x07064b50) {
    const uint64_t z64 = le(&z[eocd - 20 + 8], 8);
    if (z64 > z.size() || z.size() - z64 < 56 || le(&z[z64], 4) != 0x06064b50) throw fail("bad zip64 end of central directory");
    entries = le(&z[z64 + 32], 8);
    cd_size = le(&z[z64 + 40], 8);
    cd_offset = le(&z[z64 + 48], 8);
  }
  if (cd_offset > z.size() || cd_size > z.size() - cd_offset) throw fail("central directory outside the file");
  if (entries > cd_size / 46) throw fail("more entries than the central directory holds");
  std::vector<ZipMember> out;
  std::size_t p = cd_offset;
  const std::size_t end = cd_offset + cd_size;
  for (uint64_t k = 0; k < entries; ++k) {
    if (end - p < 46 || le(&z[p], 4) != 0x02014b50) throw fail("bad central directory entry");
    ZipMember m;
    m.method = static_cast<uint16_t>(le(&z[p + 10], 2));
    m.crc = static_cast<uint32_t>(le(&z[p + 16], 4));
    m.compressed = le(&z[p + 20], 4);
    m.size = le(&z[p + 24], 4);
    const std::size_t name_len = le(&z[p + 28], 2), extra_len = le(&z[p + 30], 2), comment_len = le(&z[p + 32], 2);
    m.local_offset = le(&z[p + 42], 4);
    if (end - p - 46 < name_len + extra_len + comment_len) throw fail("central directory entry overruns");
    m.name.assign(reinterpret_cast<const char*>(&z[p + 46]), name_len);
    // zip64: the 8-byte values of the fields that read 0xffffffff, in this order.
    for (std::size_t e = p + 46 + name_len; e + 4 <= p + 46 + name_len + extra_len;) {
      const std::size_t id = le(&z[e], 2), len = le(&z[e + 2], 2);
      if (e + 4 + len > p + 46 + name_len + extra_len) throw fail("extra field overruns");
      if (id == 1) {
        std::size_t f = e + 4;
        for (uint64_t* v : {&m.size, &m.compressed, &m.local_offset})
          if (*v == 0xffffffff) {
            if (f + 8 > e + 4 + len) throw fail("short zip64 extra field");
            *v = le(&z[f], 8);
            f += 8;
          }
      }
      e += 4 + len;
    }
    p += 46 + name_len + extra_len + comment_len;
    out.push_back(std::move(m));
  }
  return out;
}

/// A member's bytes, inflated where deflated, its size and CRC checked.
std::vector<unsigned char> zip_extract(const std::vector<unsigned char>& z, const ZipMember& m, const std::string& path) {
  const std::string label = path + ":" + m.name;
  if (m.local_offset > z.size() || z.size() - m.local_offset < 30 || le(&z[m.local_offset], 4) != 0x04034b50)
    throw Error("bad local header", label);
  const std::size_t data = m.local_offset + 30 + le(&z[m.local_offset + 26], 2) + le(&z[m.local_offset + 28], 2);
  if (data > z.size() || m.compressed > z.size() - data) throw Error("member data outside the archive", label);
  // A deflated member can expand at most ~1032x; a size beyond that is a lie, not an allocation to make.
  if (m.method == 8 ? m.size / 1032 > m.compressed + 1 : m.size != m.compressed)
    throw Error(fmt::format("member claims {} bytes from {} stored", m.size, m.compressed), label);
  std::vector<unsigned char> out;
  if (m.method == 0) {
    out.assign(z.begin() + static_cast<std::ptrdiff_t>(data), z.begin() + static_cast<std::ptrdiff_t>(data + m.size));
  } else if (m.method == 8) {
    // Inflated in steps, the buffer growing with the bytes that really come
    // out: a member that lies about its size costs what it holds, not what it claims.
    z_stream s{};
    if (inflateInit2(&s, -MAX_WBITS) != Z_OK) throw Error("zlib cannot start", label);
    s.next_in = const_cast<Bytef*>(&z[data]);
    uint64_t in_left = m.compressed;
    int rc = Z_OK;
    while (rc == Z_OK) {
      if (s.avail_in == 0 && in_left > 0) {
        s.avail_in = static_cast<uInt>(std::min<uint64_t>(in_left, 1u << 30));
        in_left -= s.avail_in;
      }
      const std::size_t have = out.size();
      const uint64_t room =  // +1: sees an overrun
          std::min<uint64_t>({m.size - have + 1, std::max<uint64_t>(have, 1u << 16), 1u << 30});
      if (room == 0) break;
      out.resize(have + static_cast<std::size_t>(room));
      s.next_out = out.data() + have;
      s.avail_out = static_cast<uInt>(room);
      rc = inflate(&s, Z_NO_FLUSH);
      out.resize(have + static_cast<std::size_t>(room - s.avail_out));
      if (rc == Z_BUF_ERROR && s.avail_in == 0 && in_left == 0) break;  // the stored bytes end mid-stream
      if (out.size() > m.size) break;
    }
    inflateEnd(&s);
    if (rc != Z_STREAM_END || out.size() != m.size) throw Error("corrupt deflate data", label);
  } else {
    throw Error(fmt::format("compression method {} (np.savez stores, np.savez_compressed deflates; nothing else)", m.method), label);
  }
  const uint32_t crc = static_cast<uint32_t>(crc32(crc32(0L, Z_NULL, 0), out.data(), static_cast<uInt>(out.size())));
  if (crc != m.crc) throw Error("CRC mismatch: the archive is damaged", label);
  return out;
}

}  // namespace

Blob load_npy(const std::string& path, std::optional<DType> narrow_type) {
  const auto bytes = read_regular_file(path);
  return parse_npy(bytes.data(), bytes.size(), path, narrow_type);
}

std::vector<NamedBlob> load_npz(const std::string& path) {
  const auto z = read_regular_file(path);
  const std::vector<ZipMember> members = zip_directory(z, path);
  // Members may share their stored bytes, so the archive's own size does not
  // bound what it inflates to: deflate's ratio does (about 1032x), once per
  // archive, and so does three quarters of this machine's memory.
  const std::size_t limit = core::default_memory_limit();
  const uint64_t memory = limit ? limit : UINT64_MAX;
  const uint64_t budget = std::min<uint64_t>(memory, uint64_t(z.size()) * 1032);
  uint64_t claimed = 0;
  std::unordered_set<std::string> names;
  for (const ZipMember& m : members) {
    const std::string label = path + ":" + m.name;
    if (m.name.size() < 5 || m.name.compare(m.name.size() - 4, 4, ".npy") != 0)
      throw Error("every member of a .npz must be a .npy array", label);
    if (!names.insert(m.name).second) throw Error("two members of one name", label);
    if (m.size > budget - claimed)
      throw Error(fmt::format("the members up to this one inflate to more than {} bytes ({}x the archive's {} bytes, or "
                              "three quarters of this machine's memory)", budget, 1032, z.size()), label);
    claimed += m.size;
  }
  std::vector<NamedBlob> out;
  for (const ZipMember& m : members) {
    const std::string label = path + ":" + m.name;
    try {
      const auto bytes = zip_extract(z, m, path);
      out.push_back({m.name.substr(0, m.name.size() - 4), parse_npy(bytes.data(), bytes.size(), label)});
    } catch (const std::bad_alloc&) {
      throw Error(fmt::format("out of memory reading a member of {} bytes", m.size), label);
    }
  }
  if (out.empty()) throw Error("the archive holds no arrays", path);
  return out;
}

void save_npy(const std::string& path, const Blob& blob) {
  if (blob.layout() != Layout::nchw || blob.device() != Device::cpu)
    throw Error("only CPU blobs in nchw layout can be saved as .npy", path);
  const char* descr = nullptr;
  for (const auto& c : kDescrs)
    if (c.dtype == blob.dtype() && !descr) descr = c.text;
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

void save_npz(const std::string& path, std::span<const NamedBlob> arrays) {
  // Stored members (what np.savez writes), no zip64: members and offsets below 4 GiB.
  std::vector<unsigned char> z, directory;
  auto put = [](std::vector<unsigned char>& v, uint64_t x, int bytes) {  // bytes <= 8
    for (int i = 0; i < bytes; ++i) v.push_back(static_cast<unsigned char>(x >> (8 * i)));
  };
  const std::string tmp = path + ".member.tmp";
  for (const auto& a : arrays) {
    if (a.name.empty() || a.name.find('/') != std::string::npos)
      throw Error(fmt::format("array name '{}' cannot be a .npz member", a.name), path);
    save_npy(tmp, a.blob);  // one way to write a .npy
    std::vector<unsigned char> member;
    try {
      member = read_regular_file(tmp);
    } catch (...) {
      std::filesystem::remove(tmp);
      throw;
    }
    std::filesystem::remove(tmp);
    const std::string name = a.name + ".npy";
    if (member.size() >= 0xffffffffu || z.size() >= 0xffffffffu - member.size() - 30 - name.size())
      throw Error("a .npz of 4 GiB or more is not written (no zip64)", path, {}, a.name);
    const uint32_t crc = static_cast<uint32_t>(crc32(crc32(0L, Z_NULL, 0), member.data(), static_cast<uInt>(member.size())));
    const uint64_t offset = z.size();
    for (auto* v : {&z, &directory}) {
      const bool central = v == &directory;
      put(*v, central ? 0x02014b50 : 0x04034b50, 4);
      if (central) put(*v, 20, 2);  // made by
      put(*v, 20, 2);               // version needed
      put(*v, 0, 2);                // flags
      put(*v, 0, 2);                // stored
      put(*v, 0, 4);                // time, date
      put(*v, crc, 4);
      put(*v, member.size(), 4);
      put(*v, member.size(), 4);
      put(*v, name.size(), 2);
      put(*v, 0, 2);  // extra
      if (central) {
        put(*v, 0, 2);  // comment length
        put(*v, 0, 2);  // disk
        put(*v, 0, 2);  // internal attributes
        put(*v, 0, 4);  // external attributes
        put(*v, offset, 4);
      }
      v->insert(v->end(), name.begin(), name.end());
    }
    z.insert(z.end(), member.begin(), member.end());
  }
  const uint64_t cd_offset = z.size();
  z.insert(z.end(), directory.begin(), directory.end());
  put(z, 0x06054b50, 4);
  put(z, 0, 4);  // disks
  put(z, arrays.size(), 2);
  put(z, arrays.size(), 2);
  put(z, directory.size(), 4);
  put(z, cd_offset, 4);
  put(z, 0, 2);
  core::write_file_atomically(path, z.data(), z.size());
}

std::vector<std::vector<NamedBlob>> load_samples(const std::string& dir, const std::vector<std::string>& input_names,
                                                 std::size_t max_samples, const std::vector<DType>& input_dtypes) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw Error("not a folder of samples", dir);
  if (input_names.empty()) throw Error("the model has no inputs to bind samples to", dir);
  if (!input_dtypes.empty() && input_dtypes.size() != input_names.size())
    throw Error(fmt::format("{} input dtypes for {} inputs", input_dtypes.size(), input_names.size()), dir);
  auto dtype_of = [&](const std::string& name) {
    if (input_dtypes.empty()) return DType::float32;
    return input_dtypes[static_cast<std::size_t>(std::find(input_names.begin(), input_names.end(), name) - input_names.begin())];
  };
  std::vector<std::string> files;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const auto ext = it->path().extension();
    if ((ext != ".npy" && ext != ".npz") || !it->is_regular_file(ec)) continue;
    if (files.size() == max_samples)
      throw Error(fmt::format("more than {} samples; give a smaller folder", max_samples), dir);
    files.push_back(it->path().string());
  }
  if (ec) throw Error(fmt::format("cannot list the folder: {}", ec.message()), dir);
  if (files.empty()) throw Error("no .npy or .npz samples in the folder", dir);
  std::sort(files.begin(), files.end());
  std::vector<std::vector<NamedBlob>> out;
  for (const auto& f : files) {
    std::vector<NamedBlob> sample;
    if (fs::path(f).extension() == ".npy") {
      if (input_names.size() != 1)
        throw Error(fmt::format("a .npy sample binds one input, the model has {} ({}): give one .npz per sample, one "
                                "member per input (np.savez(f, {}=..., ...))",
                                input_names.size(), fmt::join(input_names, ", "), input_names[0]),
                    f);
      sample.push_back({input_names[0], load_npy(f)});
    } else {
      auto members = load_npz(f);
      for (const auto& name : input_names) {
        auto it = std::find_if(members.begin(), members.end(), [&](const NamedBlob& m) { return m.name == name; });
        if (it == members.end()) throw Error(fmt::format("no member for the model's input '{}'", name), f, {}, name);
        sample.push_back(*it);
      }
      for (const auto& m : members)
        if (std::find(input_names.begin(), input_names.end(), m.name) == input_names.end())
          throw Error(fmt::format("member '{}' names no input of the model ({})", m.name, fmt::join(input_names, ", ")), f, {},
                      m.name);
    }
    for (const auto& in : sample)
      if (in.blob.dtype() != dtype_of(in.name))
        throw Error(fmt::format("a sample of input '{}' must be {} (the model's input), the file holds {}", in.name,
                                to_string(dtype_of(in.name)), to_string(in.blob.dtype())),
                    f, {}, in.name);
    out.push_back(std::move(sample));
  }
  return out;
}

}  // namespace softneuro
