// Whether a big allocation can fit in this machine's memory, asked before making it.
//
// The paged cache's two big arrays are sized by the user (--blocks, --kv-memory): the
// K/V storage, and the table of every slot's position. Both are zero-filled as they
// are made, so every page is touched at once: one larger than the memory the kernel
// can hand out without swapping would be killed (or thrash) half-way. So each is
// checked first against the available memory, and named in the message.
#pragma once

#include <cstddef>
#include <string>

namespace kvscope {

// "2.05 GB": bytes in decimal gigabytes, as the memory messages give them.
std::string gigabytes(size_t bytes);

// The machine's physical memory in bytes (sysconf); 0 when it cannot be read.
size_t physical_memory_bytes();

// What a new allocation can take without swapping, in bytes: MemAvailable in
// /proc/meminfo, the kernel's own estimate (free memory plus the caches it can
// drop). The physical memory where that cannot be read; 0 when neither can.
size_t available_memory_bytes();

// kvscope::Error "not enough memory for WHAT: X GB needed, Y GB available (of Z GB)"
// when `bytes` exceed the available memory; nothing when they fit or it is unknown.
void check_fits_in_memory(size_t bytes, const std::string& what);

}  // namespace kvscope
