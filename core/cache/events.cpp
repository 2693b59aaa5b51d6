#include "cache/events.h"

namespace kvscope {

const char* event_name(EventKind kind) {
  switch (kind) {
    case EventKind::BlockAllocated: return "block_allocated";
    case EventKind::BlockFreed: return "block_freed";
    case EventKind::SlotWritten: return "slot_written";
    case EventKind::SlotEvicted: return "slot_evicted";
    case EventKind::SlotMoved: return "slot_moved";
    case EventKind::RoundBegin: return "round_begin";
    case EventKind::RoundEnd: return "round_end";
  }
  return "?";
}

std::string describe(const Event& e) {
  std::string s = std::string(event_name(e.kind)) + " seq " + std::to_string(e.seq);
  if (e.block >= 0) s += " block " + std::to_string(e.block);
  if (e.slot >= 0) s += " slot " + std::to_string(e.slot);
  if (e.kind == EventKind::SlotMoved)
    s += " <- block " + std::to_string(e.from_block) + " slot " + std::to_string(e.from_slot);
  if (e.kind == EventKind::RoundBegin || e.kind == EventKind::RoundEnd) return s + " live " + std::to_string(e.pos);
  if (e.kind != EventKind::BlockAllocated && e.kind != EventKind::BlockFreed) s += " pos " + std::to_string(e.pos);
  return s;
}

}  // namespace kvscope
