// A stand-in for torch's torch/csrc/autograd/function.h, for kname's tests without torch: the
// names kname's allocator tracker (kname/profiling/_torch_tracker/tracker.cpp) uses, as torch
// 2.11 declares them (Node's sequence_nr; get_current_node, the node running on this thread,
// in libtorch_cpu: torch_cpu.cpp here).
#pragma once

#include <cstdint>
#include <memory>

namespace torch::autograd {

struct Node {
  explicit Node(std::uint64_t sequence_nr) : sequence_nr_(sequence_nr) {}
  std::uint64_t sequence_nr() const noexcept {
    return sequence_nr_;
  }

 private:
  std::uint64_t sequence_nr_;
};

std::shared_ptr<Node> get_current_node();

}  // namespace torch::autograd
