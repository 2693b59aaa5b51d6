// Traces: the cache's event stream on disk.
//
// A trace is what the visualiser draws and what a test replays: every change the
// paged cache made (cache/events.h), in order, with a header saying what run made
// it. cache/occupancy.h replays one into the cache's state at any event.
//
// File format, version 1:
//
//   kvscope-trace 1 block_size=16 num_blocks=1000 strategy=holes events=123456 policy=random ...\n
//   events x 26 bytes, little-endian, no padding:
//
//     offset  type  field
//      0      u8    kind        EventKind: 0 block_allocated ... 6 round_end
//      1      u8    reserved    0
//      2      i16   slot        -1 when the event has none
//      4      i16   from_slot   the source of a move, else -1
//      6      i32   seq
//     10      i32   block       -1 for round markers
//     14      i32   from_block  the source of a move, else -1
//     18      i64   pos         the token's position (a live count for rounds)
//
// The header is one line of text so `head -1 trace.bin` tells what a file holds;
// metadata values are percent-escaped (space -> %20, % -> %25, newline -> %0A).
// Records are fixed-size so event i sits at a known offset, and 26 bytes is small
// enough: a 1M-token streaming run (budget 2048, slack 512, random, compact) makes
// 6.1M events, a 159 MB file, read in 0.6 s and replayed in 0.1 s (15 ns an event).
// Text would take 30-40 bytes an event and a parser; a varint stream would be
// smaller but gives up the fixed offsets.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "cache/events.h"
#include "cache/kv_cache.h"

namespace kvscope {

constexpr int kTraceRecordBytes = 26;

// The largest pool a trace may describe: num_blocks x block_size slots, 64M tokens,
// what a replay holds in 512 MB (the app, with its snapshot and slot tables, about 1.3 GB).
constexpr int64_t kMaxTraceSlots = int64_t(1) << 26;

// block_size in [1, kMaxBlockSize] and num_blocks in [1, kMaxTraceSlots / block_size]:
// what read_trace accepts and so what write_trace writes. Else kvscope::Error
// "PATH: header num_blocks=N is out of range [1, M] for block_size=B".
void check_trace_pool(int64_t block_size, int64_t num_blocks, const std::string& path);

struct TraceHeader {
  int block_size = 16;
  int num_blocks = 0;
  MemoryStrategy strategy = MemoryStrategy::HolesOnly;
  std::map<std::string, std::string> meta;  // free-form: policy, budget, source, seed, ...
};

struct Trace {
  TraceHeader header;
  EventLog events;
};

// Writes the header line and the events. Throws kvscope::Error naming the file
// when it cannot be written, or when a metadata key is not a plain word.
void write_trace(const std::string& path, const TraceHeader& header, const EventLog& events);

// Optional metadata: the tokens a sequence holds, so a viewer can show its text.
// "tokens.S" (S a sequence id) lists sequence S's token ids in position order,
// comma-separated: "tokens.0=785,2038,4688". kvscope generate and serve-bench write
// it; the ids become text with the tokenizer of the model the header names ("model").
std::string token_ids_value(const std::vector<int>& ids);  // {785, 2038} -> "785,2038"
// The header's "tokens.S" entries, by sequence id. Throws kvscope::Error naming
// `path` when a key's S is not a sequence id or a value is not a list of ids.
std::map<int, std::vector<int>> trace_token_ids(const TraceHeader& header, const std::string& path);

// Reads and checks a trace: the magic and version, the header fields, the event
// count against the file size (a file cut short), every record's kind and ranges
// (block in [0, num_blocks), slot in [0, block_size), -1 where a field is unused).
// Any problem is a one-line kvscope::Error "FILE: what". The events are not
// replayed here: Occupancy (cache/occupancy.h) checks that they make sense together.
Trace read_trace(const std::string& path);

}  // namespace kvscope
