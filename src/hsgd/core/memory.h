// This process's memory as Linux reports it (/proc/self): the peak resident
// set (VmHWM), for the benchmarks and the mpi runtime's per-rank figures.
#pragma once
#include <cstdint>

namespace hsgd {

// Peak resident bytes so far, or -1 where /proc has none.
int64_t peak_rss_bytes();
// Resets the peak to the current resident set (clear_refs 5; a no-op where
// /proc has none).
void reset_peak_rss();

}  // namespace hsgd
