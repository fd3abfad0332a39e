// kname's tracker of torch's caching allocator, for `kname profile --memory`: compiled on first
// use against the torch in use (its headers, c10 and c10_cuda, its C++ ABI) by
// kname/profiling/torch_tracker.py, and loaded with ctypes. torch calls the trackers attached to
// its allocator at every entry of its trace (record_trace, even with its history off), on the
// calling thread, inside its per-device lock, the GIL held or not: this one hands a block handed
// out (ALLOC) or a free asked (FREE_REQUESTED) to kname's C function (kname._native_cupti's
// TorchMemory.track gives its address), which takes no GIL and runs no Python. Trackers cannot
// be taken out of torch: kname_tracker_off makes this one return at once.
#include <c10/cuda/CUDACachingAllocator.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <exception>

namespace {

namespace allocator = c10::cuda::CUDACachingAllocator;

using Sink = void (*)(int action, std::uint64_t address, std::uint64_t size);

std::atomic<Sink> sink{nullptr};
std::atomic<bool> attached{false};
char failure[512];

void track(const allocator::TraceEntry& entry) {
  Sink to = sink.load(std::memory_order_acquire);
  if (to == nullptr) {
    return;
  }
  int action = 0;
  if (entry.action_ == allocator::TraceEntry::Action::ALLOC) {
    action = 1;
  } else if (entry.action_ == allocator::TraceEntry::Action::FREE_REQUESTED) {
    action = 2;
  } else {
    return;  // segments, frees completed later, snapshots, out-of-memory: not a block's line
  }
  to(action, static_cast<std::uint64_t>(entry.addr_), static_cast<std::uint64_t>(entry.size_));
}

void say(const char* what) {
  std::strncpy(failure, what, sizeof failure - 1);
}

}  // namespace

extern "C" {

// `to` called at each block from now on; the tracker attached to torch's allocator once (it must
// be initialised: after CUDA's). 0, or -1 where torch refused (kname_tracker_failure says why).
__attribute__((visibility("default"))) int kname_tracker_attach(Sink to) {
  if (!attached.load()) {
    try {
      allocator::attachAllocatorTraceTracker(track);
    } catch (const std::exception& error) {
      say(error.what());
      return -1;
    } catch (...) {
      say("an exception that is not a std::exception");
      return -1;
    }
    attached.store(true);
  }
  sink.store(to, std::memory_order_release);
  return 0;
}

// No block handed over from now on (the tracker stays in torch, returning at once).
__attribute__((visibility("default"))) void kname_tracker_off(void) {
  sink.store(nullptr, std::memory_order_release);
}

__attribute__((visibility("default"))) const char* kname_tracker_failure(void) {
  return failure;
}

}  // extern "C"
