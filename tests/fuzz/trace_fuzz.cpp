// Fuzz target: a trace file, read and then replayed (what kvscope-viz does with
// a file it is given). Each step either succeeds or throws kvscope::Error;
// anything else (a crash, a huge allocation, another exception) is a bug.
#include "cache/occupancy.h"
#include "cache/trace.h"
#include "fuzz_util.h"
#include "util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = kvscope::fuzz::input_file(data, size, "run.trace");
  try {
    const kvscope::Trace t = kvscope::read_trace(path);
    kvscope::trace_token_ids(t.header, path);  // "tokens.S" lists, when the header has them
    kvscope::replay(t.header, t.events);       // checks every event, and that the stream is finished
  } catch (const kvscope::Error&) {
  }
  return 0;
}
