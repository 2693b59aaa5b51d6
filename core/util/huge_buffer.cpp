#include "util/huge_buffer.h"

#include <sys/mman.h>

#include <cstdlib>
#include <string>
#include <utility>

#include "util/error.h"

namespace kvscope {

constexpr size_t kHugePage = size_t(2) << 20;

HugeBuffer::HugeBuffer(size_t bytes) : size_(bytes) {
  const size_t rounded = (bytes + kHugePage - 1) / kHugePage * kHugePage;
  data_ = std::aligned_alloc(kHugePage, rounded == 0 ? kHugePage : rounded);
  if (!data_) throw Error("out of memory: could not allocate " + std::to_string(bytes) + " bytes");
#if defined(MADV_HUGEPAGE)
  madvise(data_, rounded, MADV_HUGEPAGE);  // a hint: failure only costs speed
#endif
}

HugeBuffer::HugeBuffer(HugeBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

HugeBuffer::~HugeBuffer() { std::free(data_); }

}  // namespace kvscope
