// A stand-in for torch's libtorch_cpu, for kname's tests without torch: the autograd node
// running on this thread (torch's engine sets it around each node it runs on its threads).
#include <torch/csrc/autograd/function.h>

namespace torch::autograd {

namespace {
thread_local std::shared_ptr<Node> current;
}  // namespace

std::shared_ptr<Node> get_current_node() {
  return current;
}

}  // namespace torch::autograd

extern "C" {

// From now on this thread runs the node numbered `sequence_nr` (UINT64_MAX: AccumulateGrad's);
// stand_in_leave_node: none.
void stand_in_run_node(std::uint64_t sequence_nr) {
  torch::autograd::current = std::make_shared<torch::autograd::Node>(sequence_nr);
}

void stand_in_leave_node(void) {
  torch::autograd::current.reset();
}

}  // extern "C"
