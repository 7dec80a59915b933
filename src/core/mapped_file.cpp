#include "core/mapped_file.hpp"

#include <softneuro/error.hpp>

#include <fmt/format.h>

#include <cerrno>
#include <cstring>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace softneuro::core {

MappedFile map_file(const std::string& path, bool copy_on_write) {
  // O_NONBLOCK: opening a FIFO for reading waits for a writer otherwise (a
  // FIFO given as a model hung forever); it is refused below as not regular.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw Error(fmt::format("cannot open the file: {}", std::strerror(errno)), path);
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error("cannot read the file: not a regular file", path);
  }
  MappedFile m;
  m.size = static_cast<std::size_t>(st.st_size);
  if (m.size == 0) {
    ::close(fd);
    return m;
  }
  void* p = ::mmap(nullptr, m.size, copy_on_write ? PROT_READ | PROT_WRITE : PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) throw Error(fmt::format("cannot map the file: {}", std::strerror(errno)), path);
  const std::size_t size = m.size;
  m.owner = std::shared_ptr<const void>(p, [size](const void* q) { ::munmap(const_cast<void*>(q), size); });
  m.data = static_cast<const unsigned char*>(p);
  return m;
}

}  // namespace softneuro::core
