// A file mapped read-only into memory: the .dnn loader and the importers read
// their files in place (weights can be hundreds of MB; no heap copy).
#pragma once

#include <cstddef>
#include <memory>
#include <string>

namespace softneuro::core {

struct MappedFile {
  std::shared_ptr<const void> owner;  ///< unmaps when the last holder goes
  const unsigned char* data = nullptr;
  std::size_t size = 0;
};

/// Maps `path`; Error naming the file when it cannot be opened, is not a
/// regular file, or cannot be mapped. An empty file maps to no data.
/// `copy_on_write`: the pages may be written, privately (a blob viewing them
/// may be changed in place; the file never is).
MappedFile map_file(const std::string& path, bool copy_on_write = false);

}  // namespace softneuro::core
