// Whether a big allocation can fit in this machine's memory, asked before making it.
//
// The paged cache's two big arrays are sized by the user (--blocks, --kv-memory): the
// K/V storage, and the table of every slot's position. One larger than the machine's
// physical memory cannot succeed, and one that the kernel overcommits would be killed
// while it is zero-filled. So each is checked first, and named in the message.
#pragma once

#include <cstddef>
#include <string>

namespace kvscope {

// "2.05 GB": bytes in decimal gigabytes, as the memory messages give them.
std::string gigabytes(size_t bytes);

// The machine's physical memory in bytes (sysconf); 0 when it cannot be read.
size_t physical_memory_bytes();

// kvscope::Error "not enough memory for WHAT: X GB needed, this machine has Y GB"
// when `bytes` exceed the physical memory; nothing when they fit or it is unknown.
void check_fits_in_memory(size_t bytes, const std::string& what);

}  // namespace kvscope
