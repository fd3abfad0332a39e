// A stand-in for torch's libc10_cuda, for kname's tests without torch: its caching allocator's
// trackers, called as torch calls them (record_trace: every tracker, under the allocator's
// recursive lock, on the calling thread), from this thread or from a thread started in C++ (as
// autograd's are), and a switch to refuse new trackers (torch throws where it cannot attach).
#include <c10/cuda/CUDACachingAllocator.h>

#include <chrono>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

namespace c10::cuda::CUDACachingAllocator {

namespace {
std::recursive_mutex mutex;
std::vector<AllocatorTraceTracker> trackers;
bool refusing = false;
}  // namespace

void attachAllocatorTraceTracker(AllocatorTraceTracker tracker) {
  if (refusing) {
    throw std::runtime_error("the stand-in allocator refuses trackers");
  }
  std::lock_guard<std::recursive_mutex> lock(mutex);
  trackers.push_back(std::move(tracker));
}

}  // namespace c10::cuda::CUDACachingAllocator

namespace allocator = c10::cuda::CUDACachingAllocator;

extern "C" {

// One trace entry (action: TraceEntry's number) given to every tracker, on this thread.
void stand_in_fire(int action, std::uint64_t address, std::uint64_t size) {
  std::lock_guard<std::recursive_mutex> lock(allocator::mutex);
  allocator::TraceEntry entry(static_cast<allocator::TraceEntry::Action>(action), address, size);
  for (const auto& tracker : allocator::trackers) {
    tracker(entry);
  }
}

// The same from a thread started here, which Python never ran on; joined.
void stand_in_fire_elsewhere(int action, std::uint64_t address, std::uint64_t size) {
  std::thread thread(stand_in_fire, action, address, size);
  thread.join();
}

// A thread started here holds the allocator's lock for `ms` milliseconds (a slow cudaMalloc
// under it), firing an allocation at `address` as it takes the lock and one at address + 512
// before it lets go; stand_in_join waits for it.
static std::thread holder;

void stand_in_hold(std::uint64_t address, int ms) {
  holder = std::thread([address, ms] {
    std::lock_guard<std::recursive_mutex> lock(allocator::mutex);
    stand_in_fire(allocator::TraceEntry::ALLOC, address, 512);
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    stand_in_fire(allocator::TraceEntry::ALLOC, address + 512, 512);
  });
}

void stand_in_join(void) {
  holder.join();
}

void stand_in_refuse(int refuse) {
  allocator::refusing = refuse != 0;
}

int stand_in_trackers(void) {
  std::lock_guard<std::recursive_mutex> lock(allocator::mutex);
  return static_cast<int>(allocator::trackers.size());
}

}  // extern "C"
