// The part of the CUDA runtime API that kvscope calls, on a CPU (see cuda_device.h):
// "device" memory is host memory, copies are memmove, there is one device.
#pragma once

#include <cstddef>

enum cudaError_t {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorInsufficientDriver = 35,  // never returned here: named by gpu_devices.cu
};
enum cudaMemcpyKind { cudaMemcpyHostToHost, cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost, cudaMemcpyDeviceToDevice };
enum cudaDeviceAttr {
  cudaDevAttrMemoryClockRate = 36,
  cudaDevAttrGlobalMemoryBusWidth = 37,
  cudaDevAttrL2CacheSize = 38,
};
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
typedef struct CUevent_st* cudaEvent_t;  // a time on the host's steady clock
struct cudaDeviceProp {
  char name[256];
  size_t totalGlobalMem;
  int major, minor;
};

cudaError_t cudaMalloc(void** p, size_t bytes);
cudaError_t cudaFree(void* p);
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemset(void* p, int value, size_t bytes);
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes);  // 16 GiB, all of it free
cudaError_t cudaGetDeviceCount(int* n);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int device);
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device);
cudaError_t cudaGetLastError();
cudaError_t cudaEventCreate(cudaEvent_t* event);
cudaError_t cudaEventRecord(cudaEvent_t event);  // launches are synchronous here: "now"
cudaError_t cudaEventSynchronize(cudaEvent_t event);
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t stop);
cudaError_t cudaEventDestroy(cudaEvent_t event);
const char* cudaGetErrorString(cudaError_t err);
// As on a GPU, a kernel launches with more than 48 KiB of dynamic shared memory only
// after it opts in to that much (at most 227 KiB, Hopper's limit) with this call.
// translate.py passes the kernel by name, as it does to each launch.
cudaError_t cudaFuncSetAttribute(const char* kernel, cudaFuncAttribute attr, int value);
