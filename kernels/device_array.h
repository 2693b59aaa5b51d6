// DeviceArray<T>: an owned array in GPU memory, and its copies to and from the host.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <utility>
#include <vector>

#include "cuda_check.h"

namespace kvscope::cuda {

template <class T>
class DeviceArray {
 public:
  DeviceArray() = default;
  explicit DeviceArray(size_t n) { reserve(n); }
  ~DeviceArray() { cudaFree(data_); }  // cudaFree(nullptr) is a no-op
  DeviceArray(DeviceArray&& o) noexcept : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  DeviceArray& operator=(DeviceArray&& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(size_, o.size_);
    return *this;
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  // Room for at least n elements. Growing drops the contents (it is scratch space).
  void reserve(size_t n) {
    if (n <= size_) return;
    CUDA_CHECK(cudaFree(data_));
    data_ = nullptr;
    size_ = 0;
    CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&data_), n * sizeof(T)));
    size_ = n;
  }
  void upload(const T* host, size_t n) {
    reserve(n);
    if (n) CUDA_CHECK(cudaMemcpy(data_, host, n * sizeof(T), cudaMemcpyHostToDevice));
  }
  void upload(const std::vector<T>& host) { upload(host.data(), host.size()); }
  void download(T* host, size_t n) const {
    if (n) CUDA_CHECK(cudaMemcpy(host, data_, n * sizeof(T), cudaMemcpyDeviceToHost));
  }
  std::vector<T> to_host(size_t n) const {
    std::vector<T> out(n);
    download(out.data(), n);
    return out;
  }
  void zero(size_t n) {
    if (n) CUDA_CHECK(cudaMemset(data_, 0, n * sizeof(T)));
  }

  T* get() { return data_; }
  const T* get() const { return data_; }
  size_t size() const { return size_; }

 private:
  T* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace kvscope::cuda
