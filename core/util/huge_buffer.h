// HugeBuffer: heap memory for big arrays that are streamed end to end (weights).
//
// Decode reads every weight once per token, so its speed is the memory read
// bandwidth. With 4 KiB pages the hardware prefetchers stop at every page
// boundary; 2 MiB-aligned memory with a transparent-huge-page hint (madvise),
// given before the first touch, lets the kernel back it with 2 MiB pages.
#pragma once

#include <cstddef>

namespace kvscope {

class HugeBuffer {
 public:
  explicit HugeBuffer(size_t bytes);  // uninitialised; throws kvscope::Error when out of memory
  HugeBuffer(HugeBuffer&& other) noexcept;
  HugeBuffer& operator=(HugeBuffer&&) = delete;
  HugeBuffer(const HugeBuffer&) = delete;
  ~HugeBuffer();

  void* data() const { return data_; }
  size_t size() const { return size_; }
  template <class T>
  T* as() const { return static_cast<T*>(data_); }

 private:
  void* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace kvscope
