// A stand-in for torch's c10/cuda/CUDACachingAllocator.h, for kname's tests without torch: the
// names kname's allocator tracker (kname/profiling/_torch_tracker/tracker.cpp) uses, as torch
// declares them (TraceEntry's action_, addr_ and size_; attachAllocatorTraceTracker).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

namespace c10::cuda::CUDACachingAllocator {

struct TraceEntry {
  enum Action {
    ALLOC,
    FREE_REQUESTED,
    FREE_COMPLETED,
    SEGMENT_ALLOC,
    SEGMENT_FREE,
    SEGMENT_MAP,
    SEGMENT_UNMAP,
    SNAPSHOT,
    OOM
  };
  TraceEntry(Action action, std::size_t addr, std::size_t size)
      : action_(action), addr_(addr), size_(size) {}
  Action action_;
  std::int8_t device_ = 0;
  std::size_t addr_;
  std::size_t size_;
};

using AllocatorTraceTracker = std::function<void(const TraceEntry&)>;

void attachAllocatorTraceTracker(AllocatorTraceTracker tracker);

}  // namespace c10::cuda::CUDACachingAllocator
