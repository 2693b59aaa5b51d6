#include "cache/trace.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <type_traits>

#include "cache/occupancy.h"
#include "util/error.h"
#include "util/file.h"

namespace kvscope {

namespace {

constexpr const char* kMagic = "kvscope-trace";
constexpr int kVersion = 1;
constexpr int kNumKinds = int(EventKind::RoundEnd) + 1;
// Events are read and written this many at a time, through one buffer. (The limits
// that keep a corrupt file from asking for gigabytes are kMaxTraceSlots in trace.h
// and kMaxSequenceId in occupancy.h.)
constexpr size_t kChunkEvents = 1 << 16;  // records per read or write: 1.7 MB of buffer

// ---- the 26-byte record ------------------------------------------------------

// Little-endian stores and loads, one byte at a time, so the file is the same on every host.
template <typename T>
void put(uint8_t* p, T v) {
  const auto u = static_cast<std::make_unsigned_t<T>>(v);
  for (size_t i = 0; i < sizeof(T); ++i) p[i] = uint8_t(u >> (8 * i));
}

template <typename T>
T get(const uint8_t* p) {
  std::make_unsigned_t<T> u = 0;
  for (size_t i = 0; i < sizeof(T); ++i) u |= std::make_unsigned_t<T>(p[i]) << (8 * i);
  return static_cast<T>(u);
}

void encode(const Event& e, uint8_t* r) {
  put<uint8_t>(r + 0, uint8_t(e.kind));
  put<uint8_t>(r + 1, 0);
  put<int16_t>(r + 2, int16_t(e.slot));
  put<int16_t>(r + 4, int16_t(e.from_slot));
  put<int32_t>(r + 6, e.seq);
  put<int32_t>(r + 10, e.block);
  put<int32_t>(r + 14, e.from_block);
  put<int64_t>(r + 18, e.pos);
}

Event decode(const uint8_t* r) {
  Event e{EventKind(r[0])};
  e.slot = get<int16_t>(r + 2);
  e.from_slot = get<int16_t>(r + 4);
  e.seq = get<int32_t>(r + 6);
  e.block = get<int32_t>(r + 10);
  e.from_block = get<int32_t>(r + 14);
  e.pos = get<int64_t>(r + 18);
  return e;
}

// ---- the header line ---------------------------------------------------------

// Metadata values travel as one space-free word: bytes that would break the line
// (spaces, control characters, '%') become %XX.
std::string escape(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c <= ' ' || c == '%' || c == 0x7f) {
      char buf[4];
      std::snprintf(buf, sizeof buf, "%%%02X", c);
      out += buf;
    } else {
      out += char(c);
    }
  }
  return out;
}

std::string unescape(const std::string& s, const std::string& path) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out += s[i];
      continue;
    }
    if (i + 2 >= s.size() || !std::isxdigit((unsigned char)s[i + 1]) || !std::isxdigit((unsigned char)s[i + 2]))
      throw file_error(path, "bad %-escape in header value \"" + s + "\"");
    out += char(std::stoi(s.substr(i + 1, 2), nullptr, 16));
    i += 2;
  }
  return out;
}

bool is_plain_key(const std::string& k) {
  if (k.empty()) return false;
  for (unsigned char c : k)
    if (!std::isalnum(c) && c != '_' && c != '-' && c != '.') return false;
  return true;
}

bool is_reserved_key(const std::string& k) {
  return k == "block_size" || k == "num_blocks" || k == "strategy" || k == "events";
}

std::string header_line(const TraceHeader& h, size_t num_events) {
  std::string line = std::string(kMagic) + " " + std::to_string(kVersion) +
                     " block_size=" + std::to_string(h.block_size) + " num_blocks=" + std::to_string(h.num_blocks) +
                     " strategy=" + strategy_name(h.strategy) + " events=" + std::to_string(num_events);
  for (const auto& [k, v] : h.meta) line += " " + k + "=" + escape(v);
  return line + "\n";
}

// A header integer, e.g. "block_size=16" -> 16; the whole value must be a number.
int64_t header_int(const std::map<std::string, std::string>& fields, const std::string& key, const std::string& path) {
  auto it = fields.find(key);
  if (it == fields.end()) throw file_error(path, "header has no " + key + "=");
  const std::string& v = it->second;
  size_t used = 0;
  int64_t n = -1;
  try {
    n = std::stoll(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != v.size() || n < 0) throw file_error(path, "header " + key + "=" + v + " is not a count");
  return n;
}

struct ParsedHeader {
  TraceHeader header;
  size_t num_events = 0;
};

ParsedHeader parse_header(const std::string& line, const std::string& path) {
  std::istringstream words(line);
  std::string magic, version, word;
  words >> magic >> version;
  if (magic != kMagic)
    throw file_error(path, "not a kvscope trace (bad magic: the file must start with \"kvscope-trace\")");
  if (version != std::to_string(kVersion))
    throw file_error(path, "trace format version \"" + version + "\" is not supported (this build reads version 1)");

  std::map<std::string, std::string> fields;
  while (words >> word) {
    const size_t eq = word.find('=');
    if (eq == std::string::npos || !is_plain_key(word.substr(0, eq)))
      throw file_error(path, "header item \"" + word + "\" is not key=value");
    fields[word.substr(0, eq)] = unescape(word.substr(eq + 1), path);
  }

  ParsedHeader p;
  const int64_t bs = header_int(fields, "block_size", path), nb = header_int(fields, "num_blocks", path);
  check_trace_pool(bs, nb, path);
  p.header.block_size = int(bs);
  p.header.num_blocks = int(nb);
  p.num_events = size_t(header_int(fields, "events", path));
  if (!fields.count("strategy")) throw file_error(path, "header has no strategy=");
  try {
    p.header.strategy = parse_strategy(fields["strategy"]);
  } catch (const Error& e) {
    throw file_error(path, std::string("header: ") + e.what());
  }
  for (auto& [k, v] : fields)
    if (!is_reserved_key(k)) p.header.meta[k] = v;
  return p;
}

// ---- record checks -----------------------------------------------------------

// Ranges only, one record at a time: is every field in range or -1 where the
// kind has no such field? Whether the events make sense together is Occupancy's job.
void check_record(const Event& e, const TraceHeader& h, size_t i, const std::string& path) {
  const auto fail = [&](const std::string& what) {
    throw file_error(path, "event " + std::to_string(i) + " (" + event_name(e.kind) + "): " + what);
  };
  const auto in_range = [](int v, int n) { return v >= 0 && v < n; };
  if (int(e.kind) >= kNumKinds)
    throw file_error(path, "event " + std::to_string(i) + ": unknown event kind " + std::to_string(int(e.kind)));
  if (!in_range(e.seq, kMaxSequenceId))
    fail("sequence id " + std::to_string(e.seq) + " out of range [0, " + std::to_string(kMaxSequenceId) + ")");

  const bool round = e.kind == EventKind::RoundBegin || e.kind == EventKind::RoundEnd;
  const bool slot_event =
      e.kind == EventKind::SlotWritten || e.kind == EventKind::SlotEvicted || e.kind == EventKind::SlotMoved;
  const bool move = e.kind == EventKind::SlotMoved;
  if (round ? e.block != -1 : !in_range(e.block, h.num_blocks))
    fail("block " + std::to_string(e.block) + " out of range [0, " + std::to_string(h.num_blocks) + ")");
  if (slot_event ? !in_range(e.slot, h.block_size) : e.slot != -1)
    fail("slot " + std::to_string(e.slot) + " out of range [0, " + std::to_string(h.block_size) + ")");
  if (move ? !in_range(e.from_block, h.num_blocks) : e.from_block != -1)
    fail("source block " + std::to_string(e.from_block) + " out of range");
  if (move ? !in_range(e.from_slot, h.block_size) : e.from_slot != -1)
    fail("source slot " + std::to_string(e.from_slot) + " out of range");
  const bool has_pos = slot_event || round;
  if (has_pos && e.pos < 0) fail("position " + std::to_string(e.pos) + " is negative");
  if (!has_pos && e.pos != -1) fail("position " + std::to_string(e.pos) + " on a block event (must be -1)");
}

}  // namespace

// ---- writing and reading -----------------------------------------------------

void check_trace_pool(int64_t block_size, int64_t num_blocks, const std::string& path) {
  if (block_size < 1 || block_size > kMaxBlockSize)
    throw file_error(path, "header block_size=" + std::to_string(block_size) + " is out of range [1, " +
                               std::to_string(kMaxBlockSize) + "]");
  if (num_blocks < 1 || num_blocks > kMaxTraceSlots / block_size)
    throw file_error(path, "header num_blocks=" + std::to_string(num_blocks) + " is out of range [1, " +
                               std::to_string(kMaxTraceSlots / block_size) + "] for block_size=" +
                               std::to_string(block_size));
}

void write_trace(const std::string& path, const TraceHeader& header, const EventLog& events) {
  check_trace_pool(header.block_size, header.num_blocks, path);
  for (const auto& [k, v] : header.meta)
    if (!is_plain_key(k) || is_reserved_key(k))
      throw file_error(path, "trace metadata key \"" + k +
                                 "\" must be a plain word other than block_size, num_blocks, strategy, events");
  // What read_trace would refuse is not written (a serve-bench run of 2^20 sequences
  // could write one): the same checks, header and records.
  for (size_t i = 0; i < events.size(); ++i) check_record(events[i], header, i, path);
  write_file_atomically(path, [&](std::ostream& out) {  // whole, or the file before stays
    const std::string line = header_line(header, events.size());
    out.write(line.data(), std::streamsize(line.size()));
    std::vector<uint8_t> buf(kChunkEvents * kTraceRecordBytes);
    for (size_t first = 0; first < events.size(); first += kChunkEvents) {
      const size_t n = std::min(kChunkEvents, events.size() - first);
      for (size_t i = 0; i < n; ++i) encode(events[first + i], buf.data() + i * kTraceRecordBytes);
      out.write(reinterpret_cast<const char*>(buf.data()), std::streamsize(n * kTraceRecordBytes));
    }
  });
}

Trace read_trace(const std::string& path) {
  check_not_a_directory(path);
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) throw file_error(path, "cannot open trace");
  const size_t file_bytes = size_t(in.tellg());
  in.seekg(0);

  // The header: one line, which must start with the magic.
  char start[sizeof("kvscope-trace") - 1] = {};
  in.read(start, sizeof start);
  if (size_t(in.gcount()) != sizeof start || std::memcmp(start, kMagic, sizeof start) != 0)
    throw file_error(path, "not a kvscope trace (bad magic: the file must start with \"kvscope-trace\")");
  in.seekg(0);
  std::string line;
  if (!std::getline(in, line) || in.eof()) throw file_error(path, "the header line has no end (file cut short?)");
  const ParsedHeader p = parse_header(line, path);

  // The size must be exactly header + events x record, compared by division: a
  // crafted event count times 26 can wrap around 2^64 to the bytes that follow.
  const size_t header_bytes = line.size() + 1;
  const size_t body = file_bytes - header_bytes, whole = body / kTraceRecordBytes;
  if (p.num_events > whole)
    throw file_error(path, "file cut short: the header promises " + std::to_string(p.num_events) + " events (" +
                               std::to_string(kTraceRecordBytes) + " bytes each) but " + std::to_string(body) +
                               " bytes follow it (" + std::to_string(whole) + " whole records" +
                               (body % kTraceRecordBytes ? " and a partial one)" : ")"));
  if (body > p.num_events * kTraceRecordBytes)  // no wrap: num_events <= whole
    throw file_error(path, std::to_string(body - p.num_events * kTraceRecordBytes) + " unexpected bytes after the " +
                               std::to_string(p.num_events) + " events");

  Trace t{p.header, {}};
  t.events.reserve(p.num_events);
  std::vector<uint8_t> buf(std::min(kChunkEvents, p.num_events) * kTraceRecordBytes);  // small files, small buffer
  for (size_t first = 0; first < p.num_events; first += kChunkEvents) {
    const size_t n = std::min(kChunkEvents, p.num_events - first);
    in.read(reinterpret_cast<char*>(buf.data()), std::streamsize(n * kTraceRecordBytes));
    if (size_t(in.gcount()) != n * kTraceRecordBytes)
      throw file_error(path, "read failed at event " + std::to_string(first));
    for (size_t i = 0; i < n; ++i) {
      const uint8_t* r = buf.data() + i * kTraceRecordBytes;
      if (r[1] != 0) throw file_error(path, "event " + std::to_string(first + i) + ": reserved byte is not 0");
      t.events.push_back(decode(r));
      check_record(t.events.back(), t.header, first + i, path);
    }
  }
  return t;
}

// ---- token ids in the header --------------------------------------------------

std::string token_ids_value(const std::vector<int>& ids) {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) out += ',';
    out += std::to_string(ids[i]);
  }
  return out;
}

namespace {

// "785" -> 785: digits only, at most `max`; nullopt otherwise.
std::optional<int64_t> small_count(const std::string& s, int64_t max) {
  if (s.empty() || s.size() > 10) return std::nullopt;
  int64_t n = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    n = n * 10 + (c - '0');
  }
  return n <= max ? std::optional<int64_t>(n) : std::nullopt;
}

}  // namespace

std::map<int, std::vector<int>> trace_token_ids(const TraceHeader& header, const std::string& path) {
  const std::string prefix = "tokens.";
  std::map<int, std::vector<int>> out;
  for (const auto& [key, value] : header.meta) {
    if (key.compare(0, prefix.size(), prefix) != 0) continue;
    const auto seq = small_count(key.substr(prefix.size()), kMaxSequenceId - 1);
    if (!seq) throw file_error(path, "header " + key + "=: \"" + key.substr(prefix.size()) + "\" is not a sequence id");
    std::vector<int>& ids = out[int(*seq)];
    for (size_t start = 0; !value.empty();) {  // "785,2038,4688": an id, then a comma or the end
      const size_t end = std::min(value.find(',', start), value.size());
      const std::string item = value.substr(start, end - start);
      const auto id = small_count(item, INT32_MAX);
      if (!id)
        throw file_error(path, "header " + key + "=: \"" + item + "\" (item " + std::to_string(ids.size() + 1) +
                                   ") is not a token id");
      ids.push_back(int(*id));
      if (end == value.size()) break;
      start = end + 1;
    }
  }
  return out;
}

}  // namespace kvscope
